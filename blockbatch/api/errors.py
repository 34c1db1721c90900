"""Errors a user of the API (or the CLI) can hit, each with a message that says what to do.

The CLI maps them to exit codes: bad input 2, not found 3, stack unavailable 4.
"""

from __future__ import annotations

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


#: Errors caused by what the user asked for or gave (exit code 2 in the CLI).
BAD_INPUT: tuple[type[Exception], ...] = (BadRequest, SchemaError, IngestError, UnknownModelError)
#: Errors caused by a service being down or unconfigured (exit code 4 in the CLI).
UNAVAILABLE: tuple[type[Exception], ...] = (
    StackUnavailable, DatabaseUnavailable, TemporalUnavailable,
)

__all__ = [
    "BAD_INPUT", "UNAVAILABLE", "BadRequest", "DatabaseUnavailable", "IngestError",
    "NotFound", "SchemaError", "StackUnavailable", "TemporalUnavailable", "UnknownModelError",
]
