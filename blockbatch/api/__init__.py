"""The Python API: ingest, start, follow, review, confirm and export runs.

The CLI is built on it and so can any program::

    async with await Blockbatch.connect() as bb:
        quote = await bb.estimate("handbook.md", "extract.json")  # calls, tokens, $ first
        doc = await bb.ingest_file("handbook.md")
        schema = await bb.add_schema("extract.json")
        run_id = await bb.start_run(doc, schema, RunOptions())
        result = await bb.wait(run_id)
        cal = await bb.calibrate("handbook.md", "extract.json")  # which pack size keeps quality
        await bb.edit(run_id, "7", "summary", "A better summary")  # one staged value
        await bb.reject(run_id, ["12"])  # refuse a staged result
        await bb.confirm(run_id)  # confirm the rest (each act recorded: who, when)
        await bb.export(run_id, "handbook.jsonl")
        await bb.retry(run_id)  # a finished run's failed blocks, again, in the run

For many questions (plain-text answers) or a list of items under a schema in one call,
see :func:`llm_batch` / :func:`allm_batch` (alias :func:`llm_query_batched`).
For rows that arrive over time, :meth:`Blockbatch.open_stream` (:mod:`blockbatch.api.streams`).
"""

from __future__ import annotations

from blockbatch.api.client import Blockbatch, open_default
from blockbatch.api.errors import (
    AllItemsFailed,
    BadRequest,
    BlockNotRetryable,
    EmptyRecordsSkipped,
    InvalidRow,
    NotFound,
    NothingToRetry,
    NoWorker,
    RetryRefused,
    RetryUnderWay,
    RunStillActive,
    RunTimedOut,
    SimulatedAnswers,
    StackUnavailable,
    StreamClosed,
    UnknownBlock,
    UnknownReason,
)
from blockbatch.api.export import ExportSummary
from blockbatch.api.inputs import SchemaSource, as_schema
from blockbatch.api.items import (
    BatchResult,
    ItemResult,
    allm_batch,
    llm_batch,
    llm_query_batched,
)
from blockbatch.api.quote import estimate
from blockbatch.api.retry import RetryStarted
from blockbatch.api.review import ConfirmOutcome, EditOutcome, RejectOutcome
from blockbatch.api.streams import Stream, StreamRow
from blockbatch.core.calibration import Calibration, CalibrationError
from blockbatch.core.quote import Quote
from blockbatch.core.quote_pricing import ModeQuote
from blockbatch.core.review import EditError
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.core.views import (
    BlockProvenance,
    CallDetail,
    CallRow,
    GridPage,
    GridRow,
    ItemUsage,
    RetryRecord,
    RunInfo,
)

__all__ = [
    "AllItemsFailed",
    "BadRequest",
    "BatchResult",
    "BlockNotRetryable",
    "BlockProvenance",
    "Blockbatch",
    "Calibration",
    "CalibrationError",
    "CallDetail",
    "CallRow",
    "ConfirmOutcome",
    "EditError",
    "EditOutcome",
    "EmptyRecordsSkipped",
    "ExportSummary",
    "GridPage",
    "GridRow",
    "InvalidRow",
    "ItemResult",
    "ItemUsage",
    "ModeQuote",
    "NoWorker",
    "NotFound",
    "NothingToRetry",
    "Quote",
    "RejectOutcome",
    "RetryRecord",
    "RetryRefused",
    "RetryStarted",
    "RetryUnderWay",
    "RunInfo",
    "RunOptions",
    "RunResult",
    "RunStillActive",
    "RunTimedOut",
    "SchemaSource",
    "SimulatedAnswers",
    "StackUnavailable",
    "Stream",
    "StreamClosed",
    "StreamRow",
    "UnknownBlock",
    "UnknownReason",
    "allm_batch",
    "as_schema",
    "estimate",
    "llm_batch",
    "llm_query_batched",
    "open_default",
]
