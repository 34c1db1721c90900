"""The names a front door reaches blockbatch's workflows by: declared here, once.

Temporal registers workflows, Updates, signals and queries by name, so a client starts and
asks them by name (``client.start_workflow("RunWorkflow", arg, id=..., result_type=...)``)
and never imports a workflow class: the front doors (``blockbatch/api``) import these, the
workflows (``workflows/``) register under them. A name here is part of every recorded
history: changing one is a workflow change (docs/VERSIONING.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: Workflow types.
RUN_WORKFLOW = "RunWorkflow"
STREAM_WORKFLOW = "StreamWorkflow"
ESCALATE_WORKFLOW = "EscalateWorkflow"
PACK_WORKFLOW = "ProcessPack"

#: A run's (and a stream's) workflow: Updates, signals and the query a front door sends.
CANCEL = "cancel"
REQUEST_CANCEL = "request_cancel"
RETRY = "retry"
PROGRESS = "progress"
#: A stream's signals (blockbatch/api/streams.py).
ROWS_ADDED = "rows_added"
CLOSE_STREAM = "close_stream"
#: An escalation's signal to stop (its query is :data:`PROGRESS` too).
CANCEL_ESCALATION = "cancel"

#: Why an Update is refused (``ApplicationError.type``): a retry while the run's execution
#: runs a retry already; a cancel once the run is finishing; ``plan_retry``'s refusals (the
#: run has not finished and is not claimed by this execution, nothing it asked for is left
#: to retry, or there is no such run).
RETRY_UNDER_WAY = "RetryUnderWay"
RUN_ENDING = "RunEnding"
RUN_NOT_FINISHED = "RunNotFinished"
NOTHING_TO_RETRY = "NothingToRetry"
RETRY_REFUSED = "RetryRefused"

#: The search attributes blockbatch sets on its workflows (all ``Keyword``): run,
#: document, schema and model on a run; run and pack on every pack.
RUN_ID_ATTRIBUTE = "BlockbatchRunId"
DOCUMENT_ATTRIBUTE = "BlockbatchDocument"
SCHEMA_ATTRIBUTE = "BlockbatchSchema"
MODEL_ATTRIBUTE = "BlockbatchModel"
PACK_ATTRIBUTE = "BlockbatchPack"
#: Name -> type, as ``temporal operator search-attribute create`` takes them.
SEARCH_ATTRIBUTES: Mapping[str, str] = MappingProxyType(
    dict.fromkeys(
        (RUN_ID_ATTRIBUTE, DOCUMENT_ATTRIBUTE, SCHEMA_ATTRIBUTE, MODEL_ATTRIBUTE, PACK_ATTRIBUTE),
        "Keyword",
    )
)


def run_workflow_id(run_id: str) -> str:
    """A run's (or a stream's) workflow id: every execution of the run shares it."""
    return f"run-{run_id}"


def escalate_workflow_id(run_id: str) -> str:
    """One escalation of a run at a time: the id says whose."""
    return f"run-{run_id}/escalate"
