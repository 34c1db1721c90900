"""A run: its status, options, workflow input, planning, progress and result.

Everything that crosses Temporal is small: ids, counts and short lists of block_uids.
Block content, prompts and responses stay in Postgres.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from blockbatch.core.batch_types import BatchOptions, BatchProgress, BatchRunState
from blockbatch.core.call_types import LimiterNote, Totals
from blockbatch.core.escalation_types import EscalationResult
from blockbatch.core.outage_types import OutageOptions, OutageProgress
from blockbatch.core.providers import DEFAULT_PROVIDER, ProviderName, batch_refused
from blockbatch.core.quality_types import QualityOptions, QualityResult, QualityRunState
from blockbatch.core.registry import DEFAULT_MODEL, Effort, TokenCounts
from blockbatch.core.retry_types import RetryRequest

#: A finished run is ``completed`` (every block done), ``completed_with_failures`` (some
#: blocks done, some failed), ``failed`` (nothing done, or a fatal error), ``cancelled`` or
#: ``budget_exhausted`` (its ``max_cost_usd`` ran out before every block was done).
RunStatus = Literal[
    "created",
    "planning",
    "running",
    "cancelling",
    "completed",
    "completed_with_failures",
    "cancelled",
    "failed",
    "budget_exhausted",
]


#: A run in one of these states may still start work (a call, a batch); once it is
#: ``cancelling`` (or finished) nothing new starts.
ACTIVE_STATUSES = ("created", "planning", "running")


CacheTtl = Literal["5m", "1h"]


class RunOptions(BaseModel):
    """How a run is planned and executed; stored in ``runs.settings``.

    Each field's description is its help on the command line (``--pack-size``, or
    ``--set KEY=VALUE`` for the rarer ones: blockbatch/cli/options.py), so say it there.
    """

    model: str = Field(
        default=DEFAULT_MODEL,
        description="the Claude model (id or alias) every call of the run uses",
    )
    pack_size: int | None = Field(
        default=None,
        ge=1,
        description="blocks per call (none: sized from the blocks, the schema and the model)",
    )
    batching_enabled: bool = Field(
        default=True,
        description="false: one block per call, the baseline, through the same code path",
    )
    estimated_output_per_block: int | None = Field(
        default=None,
        ge=1,
        description="output tokens a block's answer is planned at (none: estimated from the "
        "schema and the block, then learned from the run's answers)",
    )
    max_concurrent_packs: int = Field(
        default=32,
        ge=1,
        le=1000,
        description="packs in flight at once, at most (the fleet's rate limiter may admit fewer)",
    )
    max_block_attempts: int = Field(
        default=3,
        ge=1,
        le=20,
        description="calls a block's own failure may take before the block fails "
        "(halving a pack takes none)",
    )
    output_budget: int = Field(
        default=8192,
        ge=256,
        description="max_tokens of a normal pack call (capped at the model's max output)",
    )
    safety_margin: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="packs are filled to this share of the context and output budgets, by estimate",
    )
    hard_cap: int = Field(default=50, ge=1, description="the most blocks in one pack")
    cache_ttl: CacheTtl = Field(
        default="5m", description="lifetime of the cached prompt prefix in sync mode"
    )
    mode: Literal["sync", "batch"] = Field(
        default="sync",
        description="sync: one Messages call per pack; batch: the Message Batches API, "
        "not urgent, at half the price of input, output and cache tokens (its cache hits are "
        "best effort)",
    )
    batch: BatchOptions | None = Field(
        default=None, description="batch mode's polling and batch limits (none: the defaults)"
    )
    weight: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description="the run's share of the fleet's rate limits against other runs on the "
        "same API key (2 gets twice the calls of a run at 1 while both wait)",
    )
    outage: OutageOptions | None = Field(
        default=None,
        description="how a sync run rides out an outage of the API (none: the defaults)",
    )
    reuse_answers: bool = Field(
        default=True,
        description="answer a block from an earlier run with the same content, prompt and "
        "model instead of a call (blockbatch/core/reuse.py); false sends every block",
    )
    include_boilerplate: bool = Field(
        default=False,
        description="send the blocks ingest sets aside (running headers and footers, page "
        "numbers, off-page and invisible text, a web page's navigation) to the model too; "
        "false keeps them in the run as set_aside, unsent",
    )
    short_ids: bool = Field(
        default=True,
        description="name blocks b1, b2, ... per call on the wire (fewer output tokens, "
        "mapped back through the call's ledger row); false sends full block_uids",
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="the most the run may spend, in US dollars: each call reserves its "
        "expected cost plus a margin against it before the call (its max_tokens held to "
        "that); when the next call cannot fit, the run stops starting calls and ends "
        "budget_exhausted, saying what is left (none: no limit)",
    )
    quality: QualityOptions | None = Field(
        default=None,
        description="the quality probe and gate: a sample of blocks also asked alone and "
        "compared with their packed answers (none: the defaults)",
    )
    effort: Effort | None = Field(
        default=None,
        description="the model's effort for the whole run, part of the cached prefix "
        "(none: low where the model thinks anyway, else the model's own)",
    )
    provider: ProviderName = Field(
        default=DEFAULT_PROVIDER,
        description="where the run's calls go: anthropic (the Claude API), bedrock, vertex, "
        "aws (Claude Platform on AWS), foundry or gateway (an OpenAI-compatible gateway such "
        "as OpenRouter); each worker reads the provider's "
        "credentials from its own environment (docs/providers.md)",
    )
    call_heartbeat_s: float = Field(
        default=20,
        ge=2,
        le=600,
        allow_inf_nan=False,
        description="seconds a model call may go without a heartbeat before Temporal takes "
        "its worker for lost (killed, cut off) and gives the call to another worker",
    )
    db_step_s: float = Field(
        default=60,
        ge=5,
        le=600,
        allow_inf_nan=False,
        description="seconds a pack's database step (applying an answer, recording a split "
        "or a failure) may take before Temporal takes its worker for lost and gives the step "
        "to another worker",
    )
    call_retry_s: float = Field(
        default=2,
        ge=0.1,
        le=60,
        allow_inf_nan=False,
        description="seconds before a failed model call's first retry when Claude's answer "
        "names no retry-after; each next retry waits twice as long, at most a minute",
    )
    provider_model: str | None = Field(
        default=None,
        description="the model as the provider knows it (a Bedrock id or inference profile, "
        "a Vertex id, a Foundry deployment, a gateway id such as anthropic/claude-haiku-5.5); "
        "none: the model's own id",
    )

    @model_validator(mode="after")
    def _provider_serves_mode(self) -> RunOptions:
        refused = batch_refused(self.provider, self.mode)
        if refused is not None:
            raise ValueError(refused)
        return self


class RunInput(BaseModel):
    """Input of RunWorkflow; also its state carried across continue-as-new."""

    run_id: str
    max_concurrent_packs: int = 32
    max_block_attempts: int = 3
    #: Packs started per workflow run before continuing as new (keeps history small).
    packs_per_history: int = 400
    pack_count: int | None = None
    block_count: int = 0
    next_pack: int = 0
    totals: Totals = Field(default_factory=Totals)
    #: Set in batch mode (``RunOptions.mode == "batch"``): the round reached.
    batch: BatchRunState | None = None
    #: How the run rides out an outage of the API (sync mode).
    outage: OutageOptions = Field(default_factory=lambda: OutageOptions())
    #: Set when this execution retries what failed in a finished run (the CLI's ``retry``).
    retry: RetryRequest | None = None
    #: The window: packs started and not yet reported. Each reports its outcome by signal
    #: (``pack_done``) to whichever execution is current; one not in this set is counted.
    running: set[int] = Field(default_factory=set)
    #: The run re-plans its unstarted packs from its answers at each continue-as-new.
    replans: bool = False
    #: A call was refused because the run's budget could not hold it: no pack starts.
    budget_exhausted: bool = False
    #: The quality probe and gate (sync mode); ``None``: no probe (older runs too).
    quality: QualityRunState | None = None
    #: ``RunOptions.call_heartbeat_s``: how soon a lost worker's model call moves on.
    call_heartbeat_s: float = 20
    #: ``RunOptions.call_retry_s``: the first backoff of a failed model call (and warm-up).
    call_retry_s: float = 2
    #: ``RunOptions.db_step_s``: how soon a lost worker's database step of a pack moves on.
    db_step_s: float = 60


def run_input(
    run_id: str,
    options: RunOptions,
    *,
    packs_per_history: int = 400,
    retry: RetryRequest | None = None,
) -> RunInput:
    """The input that starts (or retries) a run's RunWorkflow: the one place where the
    run's stored options become its workflow input."""
    return RunInput(
        run_id=run_id,
        max_concurrent_packs=options.max_concurrent_packs,
        max_block_attempts=options.max_block_attempts,
        packs_per_history=packs_per_history,
        outage=options.outage or OutageOptions(),
        retry=retry,
        quality=quality_state(options),
        call_heartbeat_s=options.call_heartbeat_s,
        call_retry_s=options.call_retry_s,
        db_step_s=options.db_step_s,
    )


def quality_state(options: RunOptions) -> QualityRunState | None:
    """The run's quality probe and gate as its workflow carries them (``None``: no probe:
    ``probe_rate`` 0 without a gate, or batch mode, which the probe does not cover). A gate
    probes every pack's own samples even at ``probe_rate`` 0."""
    q = options.quality or QualityOptions()
    if options.mode != "sync" or (q.probe_rate <= 0 and q.min_agreement is None):
        return None
    return QualityRunState(min_agreement=q.min_agreement, reask=q.reask)


class RunProgress(BaseModel):
    """Answer of the ``progress`` query."""

    run_id: str
    status: str
    blocks_total: int
    blocks_done: int
    blocks_failed: int
    blocks_pending: int
    packs_total: int
    packs_done: int
    packs_running: int
    calls: int
    splits: int
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cost_usd: float
    error: str | None = None
    #: Batch mode only: round, provider batches and their request counts.
    batch: BatchProgress | None = None
    #: Set while the run is paused because Claude is down (status ``waiting_for_api``).
    outage: OutageProgress | None = None
    #: Sync mode: the fleet's rate limiter as the run's latest answered call saw it, and
    #: the seconds its calls waited for it, summed.
    limiter: LimiterNote | None = None
    limiter_wait_s: float = 0.0
    #: Blocks answered by an earlier run's answer (in ``blocks_done``), and what that saved.
    blocks_reused: int = 0
    reuse_saved_usd: float = 0.0
    #: The quality probe so far: blocks compared, agreeing, its calls and their cost; what
    #: the quality gate did last.
    quality_sampled: int = 0
    quality_agreeing: int = 0
    quality_calls: int = 0
    quality_cost_usd: float = 0.0
    quality_gate: str | None = None


class BudgetLeft(BaseModel):
    """What a run stopped by its budget has left to do, and what finishing would cost."""

    max_cost_usd: float
    spent_usd: float
    blocks_done: int
    blocks_left: int
    #: The run's own cost per block done so far (``None``: no block done yet).
    cost_per_block_usd: float | None = None
    #: ``cost_per_block_usd`` times ``blocks_left``, plus one warm-up (``None`` without a
    #: rate yet).
    to_finish_usd: float | None = None
    #: The largest reservation a call of the run made (its first calls reserve their worst
    #: case).
    largest_call_usd: float = 0.0
    #: What a pack call of the run reserves from what it learned (its answered calls' cost
    #: spread): the room its last call needs (``None``: nothing learned).
    next_call_usd: float | None = None


class RunResult(TokenCounts):
    """What a finished run reports; recomputed from Postgres by ``finish_run``."""

    run_id: str
    status: RunStatus
    error: str | None = None
    #: The model the run used (its API id).
    model: str | None = None
    #: The run's prices came from configuration (``BLOCKBATCH_MODEL_PRICES``), not from the
    #: registry: a model the Models API describes but blockbatch does not price.
    priced_from_configuration: bool = False
    blocks_total: int = 0
    blocks_ai_complete: int = 0
    blocks_failed: int = 0
    blocks_cancelled: int = 0
    pack_count: int = 0
    calls: int = 0
    split_events: int = 0
    cost_usd: float = 0.0
    #: Reason code -> how many failed or cancelled blocks carry it (``unknown``: no code).
    failure_reasons: dict[str, int] = Field(default_factory=dict)
    #: Blocks still pending that this finish ended (``failed`` or ``cancelled``, with
    #: ``blockbatch.core.outcome.end_code``): what the worker's metrics count of it.
    blocks_ended: int = 0
    #: Outages of the API this run paused for (sync mode; this execution of the run).
    outages: int = 0
    paused_s: float = 0.0
    #: What the run's re-plans changed, in order (packs that learn from their answers).
    plan_changes: list[str] = Field(default_factory=list)
    #: Blocks whose earlier answer was reused instead of a call (in ``blocks_ai_complete``),
    #: and the reused blocks' share of what their source calls cost.
    blocks_reused: int = 0
    reuse_saved_usd: float = 0.0
    #: Blocks of a set-aside type (``blockbatch.core.blocks.SET_ASIDE_TYPES``) the run kept
    #: but did not send (not in ``blocks_total``), and what sending them was estimated to
    #: cost (each block's input and expected answer at the model's prices).
    blocks_set_aside: int = 0
    set_aside_usd: float = 0.0
    #: Set when the run ended ``budget_exhausted``: what is left and what it would cost.
    budget: BudgetLeft | None = None
    #: What the quality probe found (``None``: the run probed nothing).
    quality: QualityResult | None = None
    #: Who answered the run's calls (``blockbatch.core.endpoint.Endpoint.label``: ``anthropic``,
    #: ``simulator 127.0.0.1:8765``); read from the ledger by the front doors.
    endpoints: list[str] = Field(default_factory=list)
    #: What an escalation of the run did (``None``: never escalated).
    escalation: EscalationResult | None = None

    @property
    def simulated(self) -> bool:
        """Whether the simulator answered any of the run's calls (its answers are not
        Claude's)."""
        return any(e.split(" ", 1)[0] == "simulator" for e in self.endpoints)


class PlanRunInput(BaseModel):
    run_id: str


class PlanRunOutput(BaseModel):
    pack_count: int
    block_count: int
    mode: Literal["sync", "batch"] = "sync"
    #: Pack 0 is a learning pack: sent alone first, then the rest is re-planned from its
    #: answer (``replan_run``).
    learning: bool = False
    #: The run's packs are sized from its answers: its unstarted packs are re-planned at
    #: each continue-as-new (sync mode, no fixed pack size or output per block).
    replans: bool = False
    #: Blocks answered at planning by an earlier run's answer (not packed), and the reused
    #: blocks' share of what their source calls cost.
    reused: int = 0
    reuse_saved_usd: float = 0.0


class ReplanInput(BaseModel):
    run_id: str
    #: The first pack to re-plan; it and every pack after it have not started.
    first_pack: int
    #: Set by the quality gate: re-plan at half the largest unstarted pack's size (instead of
    #: from what the answers wrote), because the agreement it saw is below its target.
    gate: GateReading | None = None
    #: With ``gate``: also re-ask the blocks earlier packs answered in larger calls (the
    #: workflow let its packs in flight end first).
    reask: bool = False


class GateReading(BaseModel):
    """What the quality gate saw when it tripped: block-level agreement over ``samples``
    (packs at the current size), its 95% Wilson interval and the target."""

    samples: int
    agreeing: int
    low: float
    high: float
    target: float


class ReplanOutput(BaseModel):
    """The run's packs after a re-plan (``text``: what changed; ``None``: nothing did)."""

    pack_count: int
    text: str | None = None
    #: A quality gate re-plan: the pack size it set (``None``: unchanged, or not the gate).
    pack_size: int | None = None


class MarkCancellingInput(BaseModel):
    run_id: str
    reason: str = "cancel requested"


class FinishRunInput(BaseModel):
    run_id: str
    status: Literal["completed", "cancelled", "failed", "budget_exhausted"]
    error: str | None = None


# Resolve the names these models use before (or away from) their definition.
RunResult.model_rebuild()
RunOptions.model_rebuild()
RunInput.model_rebuild()
RunProgress.model_rebuild()
ReplanInput.model_rebuild()
