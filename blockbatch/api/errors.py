"""Errors a user of the API (or the CLI) can hit, each with a message that says what to do.

The CLI maps them to exit codes: bad input 2, not found 3, stack unavailable 4.
"""

from __future__ import annotations

from typing import Any

from core.ingest import IngestError
from core.registry import UnknownModelError
from core.schema import SchemaError
from runtime.temporal import TemporalUnavailable
from store.db import DatabaseUnavailable
from store.repo import NotFound


class BadRequest(ValueError):
    """A request that cannot be carried out as asked (e.g. confirming a failed block)."""


class StackUnavailable(RuntimeError):
    """A service the request needs is not reachable or not configured (e.g. Claude)."""


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
            code: len(items) for code, items in result.errors_by_reason().items()}
        grouped = ", ".join(f"{n} {code}" for code, n in self.reasons.items())
        super().__init__(
            f"every item failed in run {result.run_id} ({result.run.status}): "
            f"{len(self.errors)} item{'s' if len(self.errors) != 1 else ''} ({grouped}); "
            f"first error: {self.errors[0].error if self.errors else '-'}"
        )


#: Errors caused by what the user asked for or gave (exit code 2 in the CLI).
BAD_INPUT: tuple[type[Exception], ...] = (BadRequest, SchemaError, IngestError, UnknownModelError)
#: Errors caused by a service being down or unconfigured (exit code 4 in the CLI).
UNAVAILABLE: tuple[type[Exception], ...] = (
    StackUnavailable, DatabaseUnavailable, TemporalUnavailable,
)

__all__ = [
    "BAD_INPUT", "UNAVAILABLE", "AllItemsFailed", "BadRequest", "DatabaseUnavailable",
    "IngestError", "NotFound", "SchemaError", "StackUnavailable", "TemporalUnavailable", "UnknownModelError",
]
