"""Errors a user of the API (or the CLI) can hit, each with a message that says what to do.

The CLI maps them to exit codes: bad input 2, not found 3, stack unavailable 4; a refused
retry: run still active 6, nothing to retry 7, a block that cannot be retried 8.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from blockbatch.core.answer import EffortError
from blockbatch.core.budget import BudgetError
from blockbatch.core.calibration import CalibrationError
from blockbatch.core.commands import CONSOLE_SCRIPT, render
from blockbatch.core.convert.limits import check_size
from blockbatch.core.ingest import ConvertOptions, IngestError, ParsedBlock, parse_records
from blockbatch.core.reasons import counts_text
from blockbatch.core.registry import UnknownModelError
from blockbatch.core.review import EditError
from blockbatch.core.schema import SchemaError
from blockbatch.runtime.connect import TemporalUnavailable
from blockbatch.store.db import DatabaseUnavailable
from blockbatch.store.repo import NotFound


def for_python(text: str) -> str:
    """A message for a caller of the Python API: the next command as the console script's
    (``blockbatch list``), options as the API's parameters (``text_field='body'``)."""
    return render(text, CONSOLE_SCRIPT, "python")


def reword(exc: BaseException) -> None:
    """Write ``exc``'s message (its first argument) for a caller of the Python API."""
    if exc.args and isinstance(exc.args[0], str) and "{" in exc.args[0]:
        exc.args = (for_python(exc.args[0]), *exc.args[1:])


_C = TypeVar("_C", bound=type)


def speaks_python(cls: _C) -> _C:
    """Class decorator: an error any public coroutine method of ``cls`` raises reaches the
    caller with its advice in the Python API's words (:func:`reword`), unless the instance's
    ``renders_errors`` is false (a front door that words them itself, like the CLI)."""
    for name, method in list(vars(cls).items()):
        if name.startswith("_") or not inspect.iscoroutinefunction(method):
            continue
        setattr(cls, name, _speaking(method))
    return cls


def _speaking(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def speaking(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await method(self, *args, **kwargs)
        except Exception as exc:
            if getattr(self, "renders_errors", True):
                reword(exc)
            raise

    return speaking


class EmptyRecordsSkipped(UserWarning):
    """Records without text were left out, as asked (``skip_empty``); the message lists
    their lines (a warning)."""


def parse_checked(
    data: bytes,
    fmt: str,
    *,
    text_field: str = "text",
    skip_empty: bool = False,
    options: ConvertOptions | None = None,
    notices: list[str] | None = None,
) -> list[ParsedBlock]:
    """A document's blocks (:func:`blockbatch.core.ingest.parse_records`); the records
    ``skip_empty`` left out are told with an :class:`EmptyRecordsSkipped` warning.
    A document past blockbatch/core/convert/limits.py ``MAX_FILE_BYTES`` is refused first,
    whatever its format."""
    check_size(data, f"{fmt} document")
    parsed = parse_records(
        data, fmt, text_field=text_field, skip_empty=skip_empty, options=options, notices=notices
    )
    if (skipped := parsed.skipped_text()) is not None:
        warnings.warn(EmptyRecordsSkipped(skipped), stacklevel=3)
    return parsed.blocks


class BadRequest(ValueError):
    """A request that cannot be carried out as asked (e.g. confirming a failed block)."""


class StackUnavailable(RuntimeError):
    """A service the request needs is not reachable or not configured (e.g. Claude)."""


class ModelRetiring(UserWarning):
    """A run was started on a model that is at or near its end-of-life (a warning)."""


class UnknownReason(BadRequest):
    """A reason code that is not one of blockbatch/core/reasons.py; the message lists the codes."""


class RetryRefused(BadRequest):
    """A retry that cannot start as asked; nothing was changed."""


class RunStillActive(RetryRefused):
    """The run has not finished (created, planning, running or cancelling)."""


class RetryUnderWay(RunStillActive):
    """Another retry of the run is already running (its workflow id is taken)."""


class NothingToRetry(RetryRefused):
    """The run has no failed (or, when asked, cancelled) block that the selection takes."""


class BlockNotRetryable(RetryRefused):
    """A block asked for by name did not fail (or is not in the selection)."""


class UnknownBlock(NotFound):
    """A block asked for by name is not a block of the run."""


class StreamClosed(BadRequest):
    """A put to a stream that accepts no more rows (closed, cancelled or finished)."""


class InvalidRow(BadRequest):
    """A stream row that cannot be accepted (not an object with text, ...); nothing of the
    call was stored. ``reason`` is its reason code (``invalid_row``), ``position`` its place
    in the call's rows."""

    def __init__(self, message: str, reason: str = "invalid_row", position: int = 0) -> None:
        super().__init__(message)
        self.reason = reason
        self.position = position


class NoWorker(UserWarning):
    """A run was started on a task queue no worker polls: it waits until one does."""


class SimulatedAnswers(UserWarning):
    """``llm_batch``/``allm_batch``: some answers are the local simulator's, not Claude's
    (no ``ANTHROPIC_API_KEY`` where the worker runs, or answers reused from a simulated
    run). Warned once per call; ``BatchResult.simulated`` says the same."""


class RunTimedOut(TimeoutError):
    """``llm_batch``/``allm_batch``: the run did not finish within ``timeout`` seconds.

    Attributes:
        run_id: the run; without ``with_worker`` it keeps going (follow or cancel it by id),
            with it the run was cancelled (its private task queue had no other worker).
        status: the run's status when the wait ended.
    """

    def __init__(self, message: str, run_id: str, status: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.status = status


class AllItemsFailed(RuntimeError):
    """``llm_batch``/``allm_batch``: no item got a result (every item failed or was skipped).

    Attributes:
        result: the whole :class:`~blockbatch.api.items.BatchResult` (run id, figures, items).
        errors: the per-item results (``ItemResult``), each with ``error`` and ``reason``.
        reasons: reason code -> how many items failed for it.
    """

    def __init__(self, result: Any) -> None:
        self.result = result
        self.errors: list[Any] = list(result.errors)
        self.reasons: dict[str, int] = {
            code: len(items) for code, items in result.errors_by_reason().items()
        }
        grouped = counts_text(self.reasons)
        super().__init__(
            f"every item failed in run {result.run_id} ({result.run.status}): "
            f"{len(self.errors)} item{'s' if len(self.errors) != 1 else ''} ({grouped}); "
            f"first error: {self.errors[0].error if self.errors else '-'}"
        )


#: Errors caused by what the user asked for or gave (exit code 2 in the CLI).
BAD_INPUT: tuple[type[Exception], ...] = (
    BadRequest,
    SchemaError,
    IngestError,
    UnknownModelError,
    EditError,
    BudgetError,
    CalibrationError,
    EffortError,
)
#: Errors caused by a service being down or unconfigured (exit code 4 in the CLI).
UNAVAILABLE: tuple[type[Exception], ...] = (
    StackUnavailable,
    DatabaseUnavailable,
    TemporalUnavailable,
)

__all__ = [
    "BAD_INPUT",
    "UNAVAILABLE",
    "AllItemsFailed",
    "BadRequest",
    "BlockNotRetryable",
    "BudgetError",
    "CalibrationError",
    "DatabaseUnavailable",
    "EditError",
    "EmptyRecordsSkipped",
    "IngestError",
    "InvalidRow",
    "ModelRetiring",
    "NoWorker",
    "NotFound",
    "NothingToRetry",
    "RetryRefused",
    "RetryUnderWay",
    "RunStillActive",
    "RunTimedOut",
    "SchemaError",
    "StackUnavailable",
    "StreamClosed",
    "TemporalUnavailable",
    "UnknownBlock",
    "UnknownModelError",
    "UnknownReason",
]
