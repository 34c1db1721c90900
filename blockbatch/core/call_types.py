"""Processing one pack: the model call, its outcome and facts, and the blocks it settles."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from blockbatch.core.claude_errors import ClaudeError
from blockbatch.core.ratelimit import limiter_text
from blockbatch.core.registry import TokenCounts


class LimiterNote(BaseModel):
    """The fleet's rate limiter as one of a run's calls saw it (progress, Temporal UI)."""

    at: datetime
    #: Requests, input and output tokens per minute: learned from Claude's answers, or
    #: the assumed ones (far above any tier) until an answer taught them.
    limits: dict[str, int]
    learned: bool
    #: The share of the limits the fleet admits now (AIMD: cut on a 429, regained slowly).
    rate: float
    #: The limit this call waited for (``None``: admitted at once).
    binding: str | None = None
    #: This run's share of the fleet's calls in the last minute, and how many runs shared.
    run_share: float = 0.0
    runs: int = 1
    #: 429s this run's calls were answered with so far (Temporal retried them).
    run_throttled: int = 0

    def text(self, wait_s: float) -> str:
        """The one line progress and the Temporal UI show (:func:`limiter_text`)."""
        return limiter_text(
            self.limits,
            learned=self.learned,
            rate=self.rate,
            run_share=self.run_share,
            runs=self.runs,
            run_throttled=self.run_throttled,
            wait_s=wait_s,
            binding=self.binding,
        )


class Totals(TokenCounts):
    """Counters a pack reports up and the run sums; Postgres stays the source of truth."""

    blocks_done: int = 0
    blocks_failed: int = 0
    packs_done: int = 0
    calls: int = 0
    splits: int = 0
    cost_usd: float = 0.0
    #: Outages ridden out (sync mode): how many pauses, probes, and seconds paused.
    outages: int = 0
    probes: int = 0
    paused_s: float = 0.0
    #: Seconds the run's calls waited for the fleet's rate limiter, summed over calls.
    limiter_wait_s: float = 0.0
    #: Blocks answered at planning by an earlier run's answer (counted in ``blocks_done``),
    #: and their share of what the calls that answered them cost.
    blocks_reused: int = 0
    reuse_saved_usd: float = 0.0
    #: The quality probe (in ``calls`` and ``cost_usd`` too): blocks compared, how many of
    #: them agreed, and its calls and their cost.
    quality_sampled: int = 0
    quality_agreeing: int = 0
    quality_calls: int = 0
    quality_cost_usd: float = 0.0

    def add(self, other: Totals) -> None:
        for name in type(self).model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class WarmCacheInput(BaseModel):
    run_id: str
    #: The first pack this execution starts (0; a retry's first new pack): one warm-up each.
    first_pack: int = 0


class WarmCacheOutput(BaseModel):
    """The run's one warm-up call: it writes the prompt cache so every pack can start at
    once and read it (``called=False``: the prompt is too short to cache; nothing sent)."""

    called: bool
    call_id: int | None = None
    totals: Totals = Field(default_factory=lambda: Totals())
    #: The run's budget could not hold the warm-up: nothing was sent, the run stops.
    over_budget: bool = False
    #: Whether the warm-up's answer shows the prefix in the cache (written or read;
    #: ``None``: no warm-up answer). ``False``: the prefix is processed uncached (under the
    #: model's minimum), and the run's calls do not count on reading it.
    cached: bool | None = None
    #: The call this attempt made (``None``: none, or an earlier attempt's answer reused).
    call: CallFacts | None = None


class ProcessPackInput(BaseModel):
    run_id: str
    pack_path: str
    #: Blocks of a halved pack; ``None`` for a planned pack (its blocks are read by pack_index).
    block_uids: list[str] | None = None
    pack_index: int
    max_block_attempts: int = 3
    #: ``OutageOptions.failures_to_pause`` of the run: a call failing that often because
    #: Claude is down waits for the run to resume; ``None``: its blocks fail.
    failures_to_pause: int | None = None
    #: Once applied, probe the pack's sampled blocks alone (``probe_quality``), at least
    #: ``probe_at_least`` of them (the quality gate's per-pack samples).
    quality_probe: bool = False
    probe_at_least: int = 0
    #: The run's ``call_heartbeat_s``: the heartbeat timeout of the pack's model calls.
    call_heartbeat_s: float = 20
    #: The run's ``call_retry_s``: the first backoff of the pack's failed model calls.
    call_retry_s: float = 2
    #: The run's ``db_step_s``: the start-to-close timeout of the pack's database steps.
    db_step_s: float = 60


class PackOutcome(BaseModel):
    pack_path: str
    totals: Totals = Field(default_factory=Totals)
    #: The limiter as the pack's latest call saw it.
    limiter: LimiterNote | None = None
    cancelled: bool = False
    #: Set when the whole run must stop (the API key was rejected).
    fatal_error: str | None = None
    #: A call of this pack was refused by the run's budget (its blocks ended
    #: ``budget_exhausted``): the run starts no more packs.
    budget_exhausted: bool = False


CallOutcome = Literal[
    "answered",
    "overflow",
    "request_error",
    "oversized",
    "cancelled",
    "empty",
    "over_budget",
    "over_budget_split",
]


class CallModelInput(BaseModel):
    run_id: str
    pack_path: str
    pack_index: int
    pack_attempt: int = 1
    block_uids: list[str] | None = None
    #: After this many consecutive outage failures (5xx, 529, no answer) the activity stops
    #: retrying and reports ``ClaudeDown`` so the run can pause; ``None``: Temporal's
    #: retry policy alone decides (runs started before outages paused).
    outage_attempts: int | None = None


class CallModelOutput(TokenCounts):
    """Small summary of one call; the request and the raw response are in the ledger."""

    outcome: CallOutcome
    block_uids: list[str]
    call_id: int | None = None
    message: str | None = None
    stop_reason: str | None = None
    cost_usd: float = 0.0
    #: True when this answer was already in the ledger (pay once: no new call was made).
    reused: bool = False
    #: The classified Claude error of an ``overflow`` or ``request_error`` outcome.
    error: ClaudeError | None = None
    #: The fleet's limiter as this call saw it, and how long the call waited for it.
    limiter: LimiterNote | None = None
    limiter_wait_s: float = 0.0

    def totals(self) -> Totals:
        """What this call adds to a pack's totals: nothing unless a new call was made."""
        if self.call_id is None or self.reused:
            return Totals()
        return Totals(
            calls=1,
            limiter_wait_s=self.limiter_wait_s,
            **self.counts(),
            cost_usd=self.cost_usd,
        )


class CallFacts(TokenCounts):
    """One Claude call as its ledger row ends, reported by the activity that made it so
    that the worker's metrics count it where it is known (``blockbatch.runtime.metrics``)."""

    #: As the ledger records it.
    status: Literal["succeeded", "failed"]
    cost_usd: float = 0.0
    #: A failure the API answered with an error, or did not answer (a timeout, a lost
    #: connection); not one where another worker had recorded the same attempt first.
    api_error: bool = False
    #: The error answer's HTTP status (``None``: no answer).
    http_status: int | None = None

    @classmethod
    def of_output(cls, out: CallModelOutput) -> CallFacts | None:
        """The call a ``call_model``-shaped output reports; ``None`` when no new call was
        made (a reused answer, an oversized pack, a cancelling run, no blocks left)."""
        if out.call_id is None or out.reused:
            return None
        if out.outcome != "answered":  # overflow or request_error: an error answer, recorded
            return cls(
                status="failed",
                api_error=True,
                http_status=out.error.status if out.error else None,
            )
        return cls(status="succeeded", **out.counts(), cost_usd=out.cost_usd)


class ApplyResultsInput(BaseModel):
    run_id: str
    call_id: int
    pack_path: str
    max_block_attempts: int = 3


class ApplyResultsOutput(BaseModel):
    completed: int
    failed: list[str] = Field(default_factory=list)
    #: Blocks that still need work (in block order).
    remaining: list[str] = Field(default_factory=list)
    mapping_failed: bool = False
    reason: str = ""
    #: The model refused (``stop_reason`` ``refusal``): its category, or ``"unspecified"``
    #: (``blockbatch.core.results.PackResults.refusal``); the unfinished blocks' reason is ``refused``.
    refusal: str | None = None
    #: Of ``failed``, how many by reason code.
    failed_reasons: dict[str, int] = Field(default_factory=dict)


class FailBlocksInput(BaseModel):
    run_id: str
    #: ``None``: every still-pending block of ``pack_index``.
    block_uids: list[str] | None
    pack_index: int
    reason: str
    pack_path: str
    #: The reason code (blockbatch/core/reasons.py) the blocks fail with; optional so that histories
    #: recorded before codes existed still replay (``None``: derived from ``reason``).
    reason_code: str | None = None


class FailBlocksOutput(BaseModel):
    failed: int


class RecordSplitInput(BaseModel):
    run_id: str
    pack_path: str
    reason: str
    block_count: int
    child_paths: list[str]
