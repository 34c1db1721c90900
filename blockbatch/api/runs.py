"""Starting runs and streams, following them, cancelling them (part of
:class:`~blockbatch.api.client.Blockbatch`).

A run's workflow is started, asked and signalled by its registered names
(blockbatch/core/workflow_names.py): the front door imports no workflow class. Temporal's
client is imported by the methods that talk to it: reading a run's state does not.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from blockbatch.api.documents import Documents
from blockbatch.api.errors import (
    BadRequest,
    ModelRetiring,
    TemporalUnavailable,
    speaks_python,
)
from blockbatch.api.escalation import Escalations
from blockbatch.api.inputs import SchemaSource, with_schema_model
from blockbatch.core import workflow_names as names
from blockbatch.core.answer import check_effort
from blockbatch.core.registry import ModelInfo, retirement_warning
from blockbatch.core.run_types import RunOptions, RunProgress, RunResult, run_input
from blockbatch.core.views import RunInfo
from blockbatch.core.workflow_names import (
    CANCEL,
    PROGRESS,
    REQUEST_CANCEL,
    RUN_WORKFLOW,
    STREAM_WORKFLOW,
    run_workflow_id,
)
from blockbatch.store import repo, runs

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle
    from temporalio.common import TypedSearchAttributes

    from blockbatch.api.streams import Stream

#: How long a cancel waits for a polling worker to take its Update before it records the
#: request as a signal instead (seconds).
CANCEL_UPDATE_WAIT_S = 10.0


@dataclass(frozen=True)
class CancelRequest:
    """A cancel asked of a run: the run as it was, and whether the request waits for a worker.

    Attributes:
        info: the run as it was when asked.
        waits_for_worker: no worker took it: it is recorded in the run's workflow and is
            carried out when a worker polls ``task_queue``.
        task_queue: the run's task queue.
        worker_polling: a worker polls ``task_queue`` but did not take the request within
            :data:`CANCEL_UPDATE_WAIT_S` (busy, or stopping): it carries it out when it
            next works on the run. ``False`` with ``waits_for_worker``: none polls.
    """

    info: RunInfo
    waits_for_worker: bool = False
    task_queue: str | None = None
    worker_polling: bool = False


@speaks_python
class Runs(Documents, Escalations):
    """Start a run or a stream, follow it, cancel it (a run being escalated: its escalation)."""

    async def start_run(
        self,
        document_id: str,
        schema_id: str,
        options: RunOptions | None = None,
        *,
        run_id: str | None = None,
        packs_per_history: int = 400,
        task_queue: str | None = None,
        model: ModelInfo | None = None,
    ) -> str:
        """Create the run row and start its RunWorkflow; return the run id.

        ``options.model`` left at the default takes the schema's ``prompt_config.model``.
        A run whose workflow cannot be started is deleted again. A model near its
        end-of-life is started all the same, with a :class:`ModelRetiring` warning; a
        retired one is refused. The Models API is read first where it answers
        (:meth:`run_model`); ``model``: the run's model as :meth:`run_model` gave it already
        (a front door that checks it before storing the document), used as it is when it
        is the model the run names.

        Raises:
            RetiredModelError: the model is retired (the message names the one to move
                to); nothing is created.
            UnknownModelError: neither the registry nor configuration prices the model.
            BudgetError: ``options.max_cost_usd`` cannot pay for the run's first call (the
                message names the smallest budget that can); nothing is created.
        """
        from blockbatch.api.budget import check_start_budget
        from blockbatch.runtime.connect import ensure_search_attributes

        options = options or RunOptions()
        client = await self.temporal()
        async with self.pool.acquire() as conn:
            names = await repo.run_inputs(conn, document_id, schema_id)
            options = with_schema_model(options, names.definition["prompt_config"].get("model"))
            if model is None or options.model not in (model.id, *model.aliases):
                model = await self.run_model(options.model)
            check_effort(model, options.effort)
            options = options.model_copy(update={"model": model.id})
            used = [model]
            if options.quality is not None and options.quality.probe_model is not None:
                # Checked like the run's model, and kept by its id.
                probe = await self.run_model(options.quality.probe_model)
                quality = options.quality.model_copy(update={"probe_model": probe.id})
                options = options.model_copy(update={"quality": quality})
                used.append(probe)
            await check_start_budget(conn, document_id, schema_id, names.definition, options, model)
            retiring = retirement_warning(model, date.today())
            if retiring:
                warnings.warn(retiring, ModelRetiring, stacklevel=2)
            async with conn.transaction():
                run_id = await repo.create_run(conn, document_id, schema_id, options, run_id=run_id)
                # Resolved here, once: the workers read these, never the Models API.
                await runs.save_models(conn, run_id, used)
        try:
            await ensure_search_attributes(client, self.settings.temporal_namespace)
            await client.start_workflow(
                RUN_WORKFLOW,
                run_input(run_id, options, packs_per_history=packs_per_history),
                id=run_workflow_id(run_id),
                result_type=RunResult,
                task_queue=task_queue or self.settings.temporal_task_queue,
                task_timeout=self.settings.workflow_task_timeout,
                static_summary=f"run {run_id}: {names.document_name} × {names.schema_name} "
                f"({options.model})",
                static_details=run_details(run_id, document_id, schema_id, options),
                search_attributes=run_attributes(run_id, document_id, schema_id, options.model),
            )
        except Exception:
            # Leave no half-created run behind: a run row without a workflow is removed.
            async with self.pool.acquire() as conn:
                await repo.delete_run(conn, run_id)
            raise
        return run_id

    async def open_stream(
        self,
        schema: SchemaSource,
        *,
        max_rows: int | None = None,
        max_tokens: int | None = None,
        max_wait_s: float = 2.0,
        max_buffered: int = 5000,
        text_field: str = "text",
        options: RunOptions | None = None,
        name: str | None = None,
        run_id: str | None = None,
        packs_per_history: int = 400,
        task_queue: str | None = None,
    ) -> Stream:
        """Open a stream: a run whose rows are put while it runs (see
        :mod:`blockbatch.api.streams`); its StreamWorkflow is started at once.

        A pack forms when ``max_rows`` rows are buffered (``None``: a full pack by the
        model's rules), their estimated tokens reach ``max_tokens``, or the oldest has
        waited ``max_wait_s``; ``put`` waits while more than ``max_buffered`` rows are not
        done. Everything else is the run's ``options``, as for :meth:`start_run`.

        Raises:
            BadRequest: triggers that cannot hold (``max_rows`` above ``max_buffered``).
        """
        from blockbatch.api.streams import load_stream
        from blockbatch.core.stream_types import stream_input
        from blockbatch.core.streams import StreamTriggers
        from blockbatch.runtime.connect import ensure_search_attributes
        from blockbatch.store import streams as stream_store

        try:
            triggers = StreamTriggers(
                max_rows=max_rows,
                max_tokens=max_tokens,
                max_wait_s=max_wait_s,
                max_buffered=max_buffered,
            )
        except ValidationError as err:
            raise BadRequest(f"stream triggers: {err.errors()[0]['msg']}") from None
        schema_id = await self.add_schema(schema)
        client = await self.temporal()
        run_id = run_id or repo.new_run_id()
        async with self.pool.acquire() as conn:
            definition = await repo.schema_definition(conn, schema_id)
            options = with_schema_model(
                options or RunOptions(), definition["prompt_config"].get("model")
            )
            model = await self.run_model(options.model)
            options = options.model_copy(update={"model": model.id})
            retiring = retirement_warning(model, date.today())
            if retiring:
                warnings.warn(retiring, ModelRetiring, stacklevel=2)
            async with conn.transaction():
                document_id = await stream_store.create_stream(
                    conn, run_id, schema_id, options, triggers, text_field=text_field, name=name
                )
                await runs.save_models(conn, run_id, [model])
        try:
            await ensure_search_attributes(client, self.settings.temporal_namespace)
            await client.start_workflow(
                STREAM_WORKFLOW,
                stream_input(run_id, options, triggers, packs_per_history=packs_per_history),
                id=run_workflow_id(run_id),
                result_type=RunResult,
                task_queue=task_queue or self.settings.temporal_task_queue,
                task_timeout=self.settings.workflow_task_timeout,
                static_summary=f"stream {run_id}: rows × {schema_id} ({options.model})",
                static_details=run_details(run_id, document_id, schema_id, options)
                + f"\n\nstream triggers: `{triggers.model_dump_json(exclude_none=True)}`",
                search_attributes=run_attributes(run_id, document_id, schema_id, options.model),
            )
        except Exception:
            async with self.pool.acquire() as conn:
                await stream_store.delete_stream(conn, run_id)
            raise
        return await load_stream(self, run_id)

    async def stream(self, run_id: str) -> Stream:
        """An existing stream (e.g. after the producing process restarted): put more rows
        (re-putting a row under its key stores nothing twice), close it, read results.

        Raises:
            NotFound: no stream with this run id.
        """
        from blockbatch.api.streams import load_stream

        return await load_stream(self, run_id)

    async def workflow_running(self, run_id: str) -> bool:
        """Whether the run's workflow (its latest execution) is running, e.g. a retry that
        has started but not yet claimed the run."""
        from temporalio.client import WorkflowExecutionStatus
        from temporalio.service import RPCError, RPCStatusCode

        await self.temporal()
        try:
            described = await self.handle(run_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status == WorkflowExecutionStatus.RUNNING

    def handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        """The Temporal handle of a run's RunWorkflow (its result a :class:`RunResult`)."""
        return self.client.get_workflow_handle(run_workflow_id(run_id), result_type=RunResult)

    async def progress(self, run_id: str, *, timeout_s: float = 5.0) -> RunProgress:
        """Live counters from the running workflow (needs a worker to answer)."""
        await self.temporal()
        progress: RunProgress = await self.handle(run_id).query(
            PROGRESS, result_type=RunProgress, rpc_timeout=timedelta(seconds=timeout_s)
        )
        return progress

    async def wait(self, run_id: str) -> RunResult:
        """Wait for a run's workflow to end and return its result."""
        await self.temporal()
        result: RunResult = await self.handle(run_id).result()
        return result

    async def cancel(self, run_id: str) -> RunInfo:
        """Ask a run to stop (no new Claude call starts); return the run as it was
        (:meth:`request_cancel` says whether a worker took the request yet)."""
        return (await self.request_cancel(run_id)).info

    async def request_cancel(self, run_id: str) -> CancelRequest:
        """Ask a run to stop (no new Claude call starts), with or without a worker.

        With a worker polling the run's task queue, the ``cancel`` Update returns once the
        run's workflow took it, or says why it refused. An Update waits for a worker to
        accept it (docs.temporal.io, "Workflow message passing": unlike Signals, Updates
        must wait for the Worker running the Workflow to acknowledge the request), so with
        none, or none taking it within :data:`CANCEL_UPDATE_WAIT_S`, the request goes as the
        ``request_cancel`` signal instead: the server records a Signal in the workflow's
        history before it answers, and the next worker carries it out
        (``CancelRequest.waits_for_worker``). A run being escalated: its escalation is
        signalled instead, also while it is queued or planning, when the run is still as
        it ended (:meth:`escalation_running` says whether one runs).

        Raises:
            BadRequest: the run is finishing already (the workflow's reason), or its
                workflow is not running.
        """
        from temporalio.client import (
            WorkflowUpdateFailedError,
            WorkflowUpdateRPCTimeoutOrCancelledError,
        )
        from temporalio.service import RPCError, RPCStatusCode

        info = await self.run(run_id)
        if not info.active:
            # Temporal down: no escalation could run either; the run is as it ended.
            with contextlib.suppress(TemporalUnavailable):
                await self._cancel_escalation(run_id)
            return CancelRequest(info=info)
        await self.temporal()
        if await self._cancel_escalation(run_id):
            return CancelRequest(info=info)
        handle = self.handle(run_id)
        queue = self.settings.temporal_task_queue
        try:
            queue = (await handle.describe()).task_queue
            if await self.workers_polling(queue):
                await handle.execute_update(
                    CANCEL, rpc_timeout=timedelta(seconds=CANCEL_UPDATE_WAIT_S)
                )
                return CancelRequest(info=info)
            await handle.signal(REQUEST_CANCEL)
            return CancelRequest(info=info, waits_for_worker=True, task_queue=queue)
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            # A worker polled a moment ago but none took the Update: record it as a signal.
            await handle.signal(REQUEST_CANCEL)
            return CancelRequest(
                info=info, waits_for_worker=True, task_queue=queue, worker_polling=True
            )
        except WorkflowUpdateFailedError as err:
            # The run is finishing: its workflow says so, and why.
            cause = err.cause
            raise BadRequest(getattr(cause, "message", None) or str(cause)) from None
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            raise BadRequest(
                f"run {run_id} is {info.status} but its workflow is not running "
                f"(terminated in the Temporal UI?): nothing to cancel"
            ) from None


def run_attributes(
    run_id: str, document_id: str, schema_id: str, model: str
) -> TypedSearchAttributes:
    """The search attributes of a run's (or stream's) workflow: its packs carry the same
    (their keys named in blockbatch/core/workflow_names.py)."""
    from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

    values = {
        names.RUN_ID_ATTRIBUTE: run_id,
        names.DOCUMENT_ATTRIBUTE: document_id,
        names.SCHEMA_ATTRIBUTE: schema_id,
        names.MODEL_ATTRIBUTE: model,
    }
    return TypedSearchAttributes(
        [SearchAttributePair(SearchAttributeKey.for_keyword(k), v) for k, v in values.items()]
    )


def run_details(run_id: str, document_id: str, schema_id: str, options: RunOptions) -> str:
    """A run's workflow details as the Temporal UI shows them: its inputs, options, packs."""
    opts = json.dumps(options.model_dump(mode="json", exclude_defaults=True)) or "{}"
    return (
        f"document `{document_id}` · schema `{schema_id}` · model `{options.model}`\n\n"
        f"options: `{opts}`\n\n"
        f'packs: list filter `BlockbatchRunId = "{run_id}"`, or workflow ids '
        f"`run-{run_id}/pack-<n>` (halves: `.../pack-<n>.0`, `.1`)"
    )
