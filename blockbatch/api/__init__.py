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

Each name is imported from its module when it is first read (:func:`__getattr__`), so a
program that reads one (the CLI's ``status`` reads ``Blockbatch``) loads its module and what
that needs, not every part of the API (tests/unit/test_cli_imports.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Where each public name is defined: read from there on first use.
_HOME = {
    "AllItemsFailed": "blockbatch.api.errors",
    "BadRequest": "blockbatch.api.errors",
    "BatchResult": "blockbatch.api.items",
    "BlockNotRetryable": "blockbatch.api.errors",
    "BlockProvenance": "blockbatch.core.views",
    "Blockbatch": "blockbatch.api.client",
    "Calibration": "blockbatch.core.calibration",
    "CalibrationError": "blockbatch.core.calibration",
    "CallDetail": "blockbatch.core.views",
    "CallRow": "blockbatch.core.views",
    "ConfirmOutcome": "blockbatch.api.review",
    "EditError": "blockbatch.core.review",
    "EditOutcome": "blockbatch.api.review",
    "EmptyRecordsSkipped": "blockbatch.api.errors",
    "ExportSummary": "blockbatch.api.export",
    "GridPage": "blockbatch.core.views",
    "GridRow": "blockbatch.core.views",
    "InvalidRow": "blockbatch.api.errors",
    "ItemResult": "blockbatch.api.items",
    "ItemUsage": "blockbatch.core.views",
    "ModeQuote": "blockbatch.core.quote_pricing",
    "NoWorker": "blockbatch.api.errors",
    "NotFound": "blockbatch.api.errors",
    "NothingToRetry": "blockbatch.api.errors",
    "Quote": "blockbatch.core.quote",
    "RejectOutcome": "blockbatch.api.review",
    "RetryRecord": "blockbatch.core.views",
    "RetryRefused": "blockbatch.api.errors",
    "RetryStarted": "blockbatch.api.retry",
    "RetryUnderWay": "blockbatch.api.errors",
    "RunInfo": "blockbatch.core.views",
    "RunOptions": "blockbatch.core.run_types",
    "RunResult": "blockbatch.core.run_types",
    "RunStillActive": "blockbatch.api.errors",
    "RunTimedOut": "blockbatch.api.errors",
    "SchemaSource": "blockbatch.api.inputs",
    "SimulatedAnswers": "blockbatch.api.errors",
    "StackUnavailable": "blockbatch.api.errors",
    "Stream": "blockbatch.api.streams",
    "StreamClosed": "blockbatch.api.errors",
    "StreamRow": "blockbatch.api.streams",
    "UnknownBlock": "blockbatch.api.errors",
    "UnknownReason": "blockbatch.api.errors",
    "allm_batch": "blockbatch.api.items",
    "as_schema": "blockbatch.api.inputs",
    "estimate": "blockbatch.api.quote",
    "llm_batch": "blockbatch.api.items",
    "llm_query_batched": "blockbatch.api.items",
    "open_default": "blockbatch.api.client",
}


def __getattr__(name: str) -> Any:
    """``name`` from its module (:data:`_HOME`), imported now and kept here."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
