"""Streams: when a stream's buffered rows become a pack, and what a row is.

A stream is a run whose document grows while it runs (``Blockbatch.open_stream``,
the CLI's ``stream``). Rows wait, buffered, until one trigger fires; then the oldest of
them become one pack, sized by the run's own pack rules (``blockbatch.core.context.RunContext.plan``:
context window, max output, hard cap, the schema's ``max_batch_size``). :func:`due` is the
whole rule and :func:`next_check` says how long the workflow may sleep before it could be
due; both are pure, so the workflow and its tests share them.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

#: Why a pack formed: enough rows, enough estimated tokens, a full pack by the model's
#: rules, the oldest row waited ``max_wait_s``, or the stream is closed (drain).
TriggerReason = Literal["rows", "tokens", "pack_full", "wait", "closed"]

#: While nothing is buffered the workflow looks at Postgres at least this often, even
#: without a ``rows_added`` signal (a producer that died between commit and signal).
IDLE_RECHECK_S = 10.0
#: A look at the buffer is this much after the oldest row's wait runs out, so that the
#: database clock (which measures the wait) agrees it has.
NEXT_LOOK_MARGIN_S = 0.05


class StreamTriggers(BaseModel):
    """When buffered rows become a pack, and how much a stream may hold before ``put`` waits."""

    max_rows: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="form a pack once this many rows are buffered (none: a full pack by the "
        "model's rules, at most RunOptions.hard_cap blocks)",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="... or once the buffered rows' estimated tokens reach this "
        "(none: no token trigger)",
    )
    max_wait_s: float = Field(
        default=2.0,
        gt=0,
        le=86_400,
        description="... or once the oldest buffered row waited this long, in seconds",
    )
    max_buffered: int = Field(
        default=5000,
        ge=1,
        description="backpressure: puts wait while more rows than this are buffered or in flight",
    )

    @model_validator(mode="after")
    def _room_for_a_pack(self) -> StreamTriggers:
        if self.max_rows is not None and self.max_rows > self.max_buffered:
            raise ValueError(
                f"max_rows ({self.max_rows}) cannot exceed max_buffered "
                f"({self.max_buffered}): a pack would never fill"
            )
        return self


class Buffered(BaseModel):
    """What a stream holds that is in no pack yet, as one read of Postgres saw it."""

    rows: int = 0
    tokens: int = 0
    #: Seconds the oldest buffered row has waited (database clock).
    oldest_wait_s: float = 0.0
    #: The buffered rows fill at least one pack by the run's pack rules.
    full_pack: bool = False
    #: No row will be accepted any more: what is buffered drains now.
    closed: bool = False
    #: Rows accepted so far (the stream's document's blocks).
    accepted: int = 0


def due(buffered: Buffered, triggers: StreamTriggers) -> TriggerReason | None:
    """Why a pack should form now, or ``None`` (nothing buffered, no trigger fired)."""
    if buffered.rows <= 0:
        return None
    if buffered.closed:
        return "closed"
    if triggers.max_rows is not None and buffered.rows >= triggers.max_rows:
        return "rows"
    if triggers.max_tokens is not None and buffered.tokens >= triggers.max_tokens:
        return "tokens"
    if buffered.full_pack:
        return "pack_full"
    if buffered.oldest_wait_s >= triggers.max_wait_s:
        return "wait"
    return None


def next_check(buffered: Buffered, triggers: StreamTriggers) -> float:
    """Seconds until the stream could be due without another row: the oldest row's
    remaining wait, or :data:`IDLE_RECHECK_S` (at least) when nothing is buffered."""
    if buffered.rows <= 0:
        return max(IDLE_RECHECK_S, triggers.max_wait_s)
    return max(triggers.max_wait_s - buffered.oldest_wait_s, 0.0) + NEXT_LOOK_MARGIN_S


class RowError(ValueError):
    """A stream row that cannot be accepted; ``reason`` is its reason code."""

    def __init__(self, reason: str, message: str, row: Any = None) -> None:
        super().__init__(message)
        self.reason = reason
        #: The row as parsed (``None``: not JSON).
        self.row = row


def row_text(row: Any, text_field: str) -> str:
    """The text of one stream row: a JSON object's ``text_field`` (a string, or any JSON
    value, written as JSON), or a bare string.

    Raises:
        RowError: ``invalid_row``: not an object, no such field, or empty text.
    """
    if isinstance(row, str):
        text = row
    elif isinstance(row, dict):
        if text_field not in row:
            raise RowError(
                "invalid_row",
                f"row has no {text_field!r} field (keys: "
                f"{', '.join(sorted(map(str, row))[:8]) or 'none'}); set "
                "--text-field to the field that holds the text",
            )
        value = row[text_field]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    else:
        raise RowError(
            "invalid_row", f"a row must be a JSON object (or a string), got {type(row).__name__}"
        )
    if not text.strip():
        raise RowError("invalid_row", f"row's {text_field!r} is empty")
    if "\x00" in text:
        raise RowError(
            "invalid_row",
            "row's text holds a NUL character (Postgres text "
            "cannot store it); remove it at the source",
        )
    return text


def row_metadata(row: Any, text_field: str) -> dict[str, Any]:
    """What a row keeps besides its text (a JSON object's other fields), for export."""
    if not isinstance(row, dict):
        return {}
    rest = {str(k): v for k, v in row.items() if k != text_field}
    return rest if "\\u0000" not in json.dumps(rest) else {}


def parse_line(line: str, text_field: str) -> tuple[Any, str]:
    """One JSONL line as (row, text).

    Raises:
        RowError: ``invalid_row``: not JSON, or no text (see :func:`row_text`).
    """
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise RowError(
            "invalid_row", f"not a JSON line ({err.msg} at column {err.colno})"
        ) from None
    try:
        return row, row_text(row, text_field)
    except RowError as err:
        raise RowError(err.reason, str(err), row) from None


def stream_document_id(run_id: str) -> str:
    """The id of a stream's document (its rows are its blocks)."""
    return f"doc-stream-{run_id}"
