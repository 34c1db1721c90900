"""Retrying a finished run's failed blocks: the request and its plan."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from blockbatch.core.batch_types import BatchOptions
from blockbatch.core.call_types import Totals


class RetryRequest(BaseModel):
    """Which blocks of a finished run a retry runs again (``RunInput.retry``).

    Criteria, not a list of every uid, so that a retry of 100,000 failed blocks stays a
    small workflow input. Each criterion narrows the selection.
    """

    #: Only blocks that failed (or were cancelled) with one of these reason codes
    #: (blockbatch/core/reasons.py); ``None``: whatever the reason.
    reasons: list[str] | None = None
    #: Only these blocks (block_uids); ``None``: any block of the run.
    blocks: list[str] | None = None
    #: Cancelled blocks too; by default only failed ones.
    include_cancelled: bool = False
    #: A new budget for the run, in US dollars (its whole cost, earlier executions
    #: included); ``None``: the run keeps the budget it had.
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    def statuses(self) -> list[str]:
        """The overlay statuses a block may be retried from."""
        return ["failed", "cancelled"] if self.include_cancelled else ["failed"]


class PlanRetryInput(BaseModel):
    run_id: str
    retry: RetryRequest


class PlanRetryOutput(BaseModel):
    """A claimed retry: its blocks are packed as packs ``first_pack .. pack_count - 1``."""

    #: The retry's number in the run (1 for the first retry).
    retry: int
    #: Blocks retried.
    blocks: int
    first_pack: int
    #: The run's pack count with the retry's packs.
    pack_count: int
    #: Every block of the run.
    block_count: int
    mode: Literal["sync", "batch"] = "sync"
    #: Batch mode: the retry's first round (its requests are already in it) and options.
    first_round: int | None = None
    batch_options: BatchOptions | None = None
    #: The run's counters when the retry began (the live view starts from them).
    totals: Totals = Field(default_factory=Totals)
