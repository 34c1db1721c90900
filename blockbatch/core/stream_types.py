"""Stream runs: a stream's workflow input, its polls and the packs it forms."""

from __future__ import annotations

from pydantic import BaseModel, Field

from blockbatch.core.run_types import RunInput, RunOptions, run_input
from blockbatch.core.streams import Buffered, StreamTriggers, TriggerReason


class StreamInput(RunInput):
    """Input of StreamWorkflow (a run whose document grows); its state across
    continue-as-new. ``pack_count`` is the packs formed so far (``next_pack`` too)."""

    triggers: StreamTriggers = Field(default_factory=StreamTriggers)
    #: Looks at the buffer (``poll_stream``) per execution before continuing as new: an
    #: idle stream that runs for days keeps a small history too.
    polls_per_history: int = 500


def stream_input(
    run_id: str, options: RunOptions, triggers: StreamTriggers, *, packs_per_history: int = 400
) -> StreamInput:
    """The input that starts a stream's StreamWorkflow: :func:`run_input` with the stream's
    triggers, no packs formed yet and no quality probe (a stream plans no sample)."""
    base = run_input(run_id, options, packs_per_history=packs_per_history)
    return StreamInput(**{**dict(base), "quality": None, "pack_count": 0, "triggers": triggers})


class PollStreamInput(BaseModel):
    run_id: str


class PollStreamOutput(BaseModel):
    buffered: Buffered


class FormPackInput(BaseModel):
    """Give the oldest buffered rows pack ``pack_index`` (the workflow's next pack)."""

    run_id: str
    pack_index: int
    reason: TriggerReason
    #: At most this many rows (``None``: the run's pack rules alone).
    max_rows: int | None = None
    #: At most this many estimated input tokens of rows (at least one row).
    max_tokens: int | None = None


class FormPackOutput(BaseModel):
    pack_index: int
    #: Rows in the pack (0: nothing was buffered; the pack number is not used).
    blocks: int
    #: Rows accepted by the stream so far.
    accepted: int
