"""Batch mode: the options, a run's batch state, and each round's inputs and outputs."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

from blockbatch.core.call_types import Totals


class BatchOptions(BaseModel):
    """Provider batch mode (``RunOptions(mode="batch")``): polling and batch limits.

    The defaults suit real runs; tests shorten the polling interval.
    """

    poll_initial_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="seconds before the first look at a submitted batch; doubles up to poll_max_s",
    )
    poll_max_s: float = Field(
        default=300.0, gt=0, le=3600, description="the longest wait between looks, in seconds"
    )
    #: The API takes at most 100,000 requests and 256 MB per batch; the byte limit keeps a
    #: margin for the JSON framing.
    max_requests_per_batch: int = Field(
        default=100_000,
        ge=1,
        le=100_000,
        description="requests per provider batch; a larger round is submitted as several",
    )
    max_batch_bytes: int = Field(
        default=250_000_000,
        ge=10_000,
        le=256_000_000,
        description="bytes per provider batch; a larger round is submitted as several",
    )
    max_resubmits: int = Field(
        default=5,
        ge=0,
        le=50,
        description="resubmissions of one pack after an errored (not invalid_request), "
        "expired or externally canceled result before its blocks fail",
    )


class BatchRunState(BaseModel):
    """RunWorkflow's batch-mode state, carried across continue-as-new."""

    round: int = 1
    opened: bool = False
    options: BatchOptions = Field(default_factory=BatchOptions)


class BatchCounts(BaseModel):
    """Request counts of the provider batches of a round, as the API reports them."""

    processing: int = 0
    succeeded: int = 0
    errored: int = 0
    canceled: int = 0
    expired: int = 0


class BatchProgress(BaseModel):
    """The batch part of the ``progress`` query."""

    round: int
    #: opening / submitting / processing / canceling / collecting / applying / done
    phase: str
    provider_batch_ids: list[str] = Field(default_factory=list)
    requests: int = 0
    counts: BatchCounts = Field(default_factory=BatchCounts)
    #: Seconds until the next look at the batch, while waiting.
    next_poll_s: float | None = None


class OpenBatchRunInput(BaseModel):
    run_id: str


class OpenBatchRunOutput(BaseModel):
    options: BatchOptions
    requests: int
    blocks: int
    #: Blocks failed at once because they cannot fit the model's context window.
    failed: int = 0
    #: Of ``failed``, how many by reason code.
    failed_reasons: dict[str, int] = Field(default_factory=dict)


class BatchRoundInput(BaseModel):
    run_id: str
    round: int


class ProviderBatchRef(BaseModel):
    part: int
    provider_batch_id: str
    requests: int


class SubmitRoundOutput(BaseModel):
    batches: list[ProviderBatchRef] = Field(default_factory=list)
    requests: int = 0
    #: The run stopped (cancel) before every part was submitted.
    refused: bool = False
    #: Blocks the round could not take within the run's budget (they ended
    #: ``budget_exhausted``); the run stops after this round.
    over_budget: int = 0


class PollRoundOutput(BaseModel):
    counts: BatchCounts
    statuses: list[str]
    ended: bool


class CollectRoundOutput(BaseModel):
    counts: BatchCounts
    #: Calls, tokens and cost (batch prices) of the round, from the ledger.
    totals: Totals


class ApplyRoundInput(BaseModel):
    run_id: str
    round: int
    max_block_attempts: int = 3
    max_resubmits: int = 5
    #: False once the run is stopping: apply what arrived, schedule nothing more.
    schedule_next: bool = True


class ApplyRoundOutput(BaseModel):
    completed: int = 0
    failed: int = 0
    splits: int = 0
    resubmitted: int = 0
    next_requests: int = 0
    next_blocks: int = 0
    packs_done: int = 0
    fatal_error: str | None = None
    #: Of ``failed``, how many by reason code.
    failed_reasons: dict[str, int] = Field(default_factory=dict)

    def count_failed(self, reasons: Mapping[str, int]) -> None:
        """Count blocks this round failed, by reason code."""
        for code, n in reasons.items():
            if n:
                self.failed += n
                self.failed_reasons[code] = self.failed_reasons.get(code, 0) + n
