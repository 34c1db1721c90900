"""Typed inputs and outputs of every workflow and activity.

Everything that crosses Temporal is small: ids, counts and short lists of block_uids.
Block content, prompts and responses stay in Postgres.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from blockbatch.core.claude_errors import ClaudeError
from blockbatch.core.providers import DEFAULT_PROVIDER, ProviderName, batch_refused
from blockbatch.core.ratelimit import limiter_text
from blockbatch.core.registry import DEFAULT_MODEL, Effort, TokenCounts
from blockbatch.core.streams import Buffered, StreamTriggers, TriggerReason

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
        "aws (Claude Platform on AWS) or foundry; each worker reads the provider's "
        "credentials from its own environment (docs/providers.md)",
    )
    provider_model: str | None = Field(
        default=None,
        description="the model as the provider knows it (a Bedrock id or inference profile, "
        "a Vertex id, a Foundry deployment); none: the model's own id",
    )

    @model_validator(mode="after")
    def _provider_serves_mode(self) -> RunOptions:
        refused = batch_refused(self.provider, self.mode)
        if refused is not None:
            raise ValueError(refused)
        return self


class QualityOptions(BaseModel):
    """The quality probe of a run (``RunOptions.quality``): packed against single answers."""

    probe_rate: float = Field(
        default=0.03,
        ge=0,
        le=1,
        description="the share of blocks also asked alone, one block per call, and compared "
        "with their packed answers (0: no probe; sync mode only)",
    )
    probe_minimum: int = Field(
        default=5,
        ge=0,
        description="at least this many blocks are probed when the probe is on "
        "(capped at the run's blocks)",
    )
    min_agreement: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="the quality gate: when the probe's agreement is below this (e.g. 0.95) "
        "with enough samples to say so, the packs not started yet are re-planned at half "
        "the size (none: no gate)",
    )
    probe_max_share: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="the most the probe's sample may cost, as a share of the run's expected "
        "cost; wins over probe_rate and probe_minimum (a gate's own samples are not capped)",
    )
    reask: bool = Field(
        default=True,
        description="when the gate trips, ask again at the new size the blocks already "
        "answered in larger packs",
    )
    probe_model: str | None = Field(
        default=None,
        description="ask the probe's sampled blocks alone on this (stronger) model, at its "
        "default effort, so the agreement a run reports is against the model you would "
        "otherwise pay for; the gate acts on it unchanged (none: the run's model)",
    )


class OutageOptions(BaseModel):
    """How a run rides out an outage of the API (``RunOptions.outage``): when a pack's calls
    keep failing with 5xx, 529 or no answer, the run pauses and probes the API, first after
    ``probe_initial_s``, then at doubling intervals up to ``probe_max_s``, and resumes when
    a probe is answered."""

    failures_to_pause: int = Field(
        default=4,
        ge=1,
        le=12,
        description="consecutive 5xx/529/no-answer failures of one pack call before the run "
        "pauses (Temporal's backoff: about 14 s for 4)",
    )
    probe_initial_s: float = Field(
        default=5.0, gt=0, le=3600, description="seconds before the first probe of a pause"
    )
    probe_max_s: float = Field(
        default=30.0, gt=0, le=3600, description="the longest wait between probes, in seconds"
    )
    unreachable_after_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="seconds a pause may last while no connection reaches the endpoint (DNS, "
        "refused, TLS, proxy) and it never answered the run, before the run ends failed, "
        "reason unreachable, naming the host and the cause",
    )
    max_pause_s: float = Field(
        default=3 * 3600.0,
        gt=0,
        le=7 * 24 * 3600,
        description="the longest one pause may last, in seconds; then the run ends failed, "
        "its blocks not done cancelled with reason api_unavailable (retry them later)",
    )


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


class QualityRunState(BaseModel):
    """A run's quality probe and gate (``RunInput.quality``), carried across continue-as-new.

    The gate (``min_agreement``) counts the samples of packs from ``since_pack`` on: the
    first pack of its latest re-plan, so that only packs at the current size count.
    """

    probe: bool = True
    min_agreement: float | None = None
    since_pack: int = 0
    sampled: int = 0
    agreeing: int = 0
    #: The pack size the gate set last (``None``: the plan's).
    pack_size: int | None = None
    #: What the gate did last, as the UI says it.
    text: str | None = None
    #: The gate re-asks the blocks answered in larger packs (``QualityOptions.reask``).
    reask: bool = True


class StreamInput(RunInput):
    """Input of StreamWorkflow (a run whose document grows); its state across
    continue-as-new. ``pack_count`` is the packs formed so far (``next_pack`` too)."""

    triggers: StreamTriggers = Field(default_factory=StreamTriggers)
    #: Looks at the buffer (``poll_stream``) per execution before continuing as new: an
    #: idle stream that runs for days keeps a small history too.
    polls_per_history: int = 500


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
    )


def stream_input(
    run_id: str, options: RunOptions, triggers: StreamTriggers, *, packs_per_history: int = 400
) -> StreamInput:
    """The input that starts a stream's StreamWorkflow: :func:`run_input` with the stream's
    triggers, no packs formed yet and no quality probe (a stream plans no sample)."""
    base = run_input(run_id, options, packs_per_history=packs_per_history)
    return StreamInput(**{**dict(base), "quality": None, "pack_count": 0, "triggers": triggers})


def quality_state(options: RunOptions) -> QualityRunState | None:
    """The run's quality probe and gate as its workflow carries them (``None``: no probe:
    ``probe_rate`` 0 without a gate, or batch mode, which the probe does not cover). A gate
    probes every pack's own samples even at ``probe_rate`` 0."""
    q = options.quality or QualityOptions()
    if options.mode != "sync" or (q.probe_rate <= 0 and q.min_agreement is None):
        return None
    return QualityRunState(min_agreement=q.min_agreement, reask=q.reask)


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


class AgreementRate(BaseModel):
    """How often packed and single answers agreed over some samples, with its 95% Wilson
    interval (``rate``, ``low``, ``high`` are ``None`` without samples)."""

    samples: int = 0
    agreeing: int = 0
    rate: float | None = None
    low: float | None = None
    high: float | None = None


class GroundingResult(BaseModel):
    """How many of a run's answered values were grounded by their quotes (a schema asking
    for evidence; blockbatch/core/evidence.py): ``rate`` is grounded per value, with its 95%
    Wilson interval (``samples``: values, ``agreeing``: grounded)."""

    rate: AgreementRate = Field(default_factory=AgreementRate)
    exact: int = 0
    normalised: int = 0
    missing: int = 0
    #: Blocks with at least one ungrounded value (reason code ``ungrounded``).
    blocks_ungrounded: int = 0
    by_field: dict[str, AgreementRate] = Field(default_factory=dict)
    #: The quality probe's compared blocks: their values grounded in the packed answer and in
    #: the answer alone (``None``: nothing compared with evidence).
    sampled_packed: AgreementRate | None = None
    sampled_alone: AgreementRate | None = None
    #: ``grounding 99.4% of 1,234 values (1,200 exact, 27 normalised); 7 ungrounded in 5
    #: blocks; sampled: packed 97.5%, alone 100.0%``.
    text: str = ""


class QualityResult(BaseModel):
    """What a run's quality probe found (``RunResult.quality``; blockbatch/core/quality.py)."""

    #: Blocks compared (their packed and single answers); samples whose probe failed.
    sampled: int = 0
    failed: int = 0
    #: Block-level agreement: every field agreed.
    agreement: AgreementRate = Field(default_factory=AgreementRate)
    by_field: dict[str, AgreementRate] = Field(default_factory=dict)
    #: By pack-size bucket (``1-5``, ``6-10``, ...) and position bucket (``first 5``, ...).
    by_pack_size: dict[str, AgreementRate] = Field(default_factory=dict)
    by_position: dict[str, AgreementRate] = Field(default_factory=dict)
    #: The field that agreed least (``None``: no samples).
    lowest_field: str | None = None
    #: ``agreement 98.6% on 40 sampled blocks; lowest: summary 92%`` (with `` (alone on
    #: MODEL)`` when the probe asked another model).
    text: str = ""
    #: The model the sampled blocks were asked alone on (``None``: the run's).
    probe_model: str | None = None
    #: The probe's calls (ledger purpose ``quality_probe``), their cost and the run's.
    probe_calls: int = 0
    probe_cost_usd: float = 0.0
    run_cost_usd: float = 0.0
    #: The pack size the run settled on: the quality gate's last, else the plan's largest.
    pack_size: int | None = None
    #: The gate's target, and what it did (each re-plan's text).
    min_agreement: float | None = None
    gate: list[str] = Field(default_factory=list)
    #: How the planned sample was sized (``None``: a run planned before the cost cap):
    #: the blocks the rate and minimum wanted, those planned, the effective rate (planned
    #: per block called), the cost cap's share, and whether it cut the sample.
    sample_wanted: int | None = None
    sample_planned: int | None = None
    probe_rate: float | None = None
    probe_max_share: float | None = None
    sample_capped: bool = False
    #: The probe cost more than ``probe_max_share`` of the run (a gate's per-pack samples).
    probe_over_share: bool = False
    #: Blocks the quality gate re-asked at a smaller pack size.
    blocks_reasked: int = 0
    #: Whether the run probed at all (False: only ``grounding`` has something to say).
    probed: bool = True
    #: The grounding of the run's answers, beside their agreement (``None``: the schema
    #: asks for no evidence).
    grounding: GroundingResult | None = None


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
    #: The largest reservation a call of the run made: the room its calls need.
    largest_call_usd: float = 0.0


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


class QualityProbeInput(BaseModel):
    run_id: str
    pack_index: int
    #: Probe at least this many of the pack's answered blocks (the quality gate's per-pack
    #: samples), besides the run's planned sample.
    at_least: int = 0


class QualityProbeOutput(BaseModel):
    """The probe of one pack's sampled blocks: compared, agreeing, failed (calls and cost,
    also under ``quality_*``, in ``totals``)."""

    sampled: int = 0
    agreeing: int = 0
    failed: int = 0
    totals: Totals = Field(default_factory=lambda: Totals())
    #: The calls this attempt made (the worker's metrics count them).
    calls: list[CallFacts] = Field(default_factory=list)


class ApiDownReport(BaseModel):
    """What a pack tells its run when its call kept failing because Claude is down."""

    pack_workflow_id: str
    pack_path: str
    #: Consecutive failed attempts of the pack's call, the first of them at ``since``.
    failures: int
    since: datetime
    error: str


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


class ProbeApiInput(BaseModel):
    run_id: str


class ProbeApiOutput(BaseModel):
    """One probe of the API: ``up`` once Claude answers anything but 5xx/529/no answer."""

    up: bool
    message: str
    call_id: int | None = None
    cost_usd: float = 0.0
    #: The run's budget could not hold the probe: nothing was sent, the run stops.
    over_budget: bool = False
    #: The call this probe made (``None``: none).
    call: CallFacts | None = None
    #: The probe reached no server (DNS, refused, TLS, proxy) and the endpoint never
    #: answered this run: where and why (``127.0.0.1:9: connection refused (...)``).
    unreachable: str | None = None


class OutageProgress(BaseModel):
    """A paused run's outage, as ``progress`` and the Temporal UI show it."""

    since: datetime
    failures: int
    probes: int
    last_error: str
    next_probe_at: datetime | None = None


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


class MarkCancellingInput(BaseModel):
    run_id: str
    reason: str = "cancel requested"


class FinishRunInput(BaseModel):
    run_id: str
    status: Literal["completed", "cancelled", "failed", "budget_exhausted"]
    error: str | None = None


# ---------------------------------------------------------------- escalation


class EscalationOptions(BaseModel):
    """How a finished run is escalated (``run --escalate-to``, ``escalate --to``)."""

    model: str | None = Field(
        default=None,
        description="after the run, ask every block a second time in a second packing on "
        "the run's model, and ask those whose two answers disagree, that failed or were "
        "refused alone on this stronger model, whose answer becomes their overlay "
        "(docs/ESCALATION.md)",
    )
    second_pack_size: int | None = Field(
        default=None,
        ge=1,
        description="blocks per call in the second pass (1: each block alone, a second "
        "opinion that shares no neighbour, at the price of a call per block; none: the "
        "run's own sizing)",
    )


class EscalateInput(BaseModel):
    """Input of EscalateWorkflow (``run-<run_id>/escalate``, docs/ESCALATION.md)."""

    run_id: str
    #: The escalation model's API id (``EscalationOptions.model``, resolved).
    model: str
    #: ``EscalationOptions.second_pack_size``.
    second_pack_size: int | None = None
    #: Second packs (and escalation parts) in flight at once.
    max_concurrent_packs: int = 32
    #: Second packs and escalation parts started in one workflow history: past them (or
    #: sooner, when Temporal suggests it) those started end and it continues as new.
    activities_per_history: int = Field(default=500, ge=1)
    #: Where the escalation is when this execution continues an earlier one (``None``: a
    #: new escalation, which plans first).
    resume: EscalationState | None = None


class PlanEscalationOutput(BaseModel):
    second_packs: int
    #: Blocks the escalation took, and of them those that go up at once (failed, refused,
    #: or disagreeing with the quality probe's answer alone on the run's model).
    blocks: int
    up_at_once: int
    #: Blocks whose second answer is the quality probe's alone on the run's model: in no
    #: second pack (``store.escalations.record_second`` in the plan).
    by_probe: int = 0


class SecondPassInput(BaseModel):
    run_id: str
    second_pack: int


class EscalationPartInput(BaseModel):
    run_id: str
    #: The part of the blocks to escalate (in block order, :data:`ESCALATION_PART` a part).
    part: int


class EscalationStepOutput(BaseModel):
    """What one second pack or escalation part did (counts; the rows are in Postgres)."""

    blocks: int = 0
    to_escalate: int = 0
    escalated: int = 0
    calls: int = 0
    cost_usd: float = 0.0


#: Blocks one ``escalate_blocks`` activity asks (each alone, a few at once).
ESCALATION_PART = 20
#: How a run's error begins when its escalation failed for good (an activity's retries
#: spent): the run is closed all the same (``EscalationResult.status`` ``failed``).
ESCALATION_FAILED = "escalation failed"


class EscalationState(BaseModel):
    """Where an escalation is, carried across continue-as-new (``EscalateInput.resume``)."""

    #: ``plan_escalation``'s plan, kept: it is made once (the rows are in Postgres).
    plan: PlanEscalationOutput
    phase: Literal["second_pass", "escalation"] = "second_pass"
    #: The next second pack (in the second pass) or part (in the escalation) to start.
    next: int = 0
    #: Blocks that go up, counted once when the second pass ended: the parts index them.
    up: int = 0
    #: What the second packs and parts done so far did (the ``progress`` query's counts).
    done: EscalationStepOutput = Field(default_factory=EscalationStepOutput)


# EscalateInput names EscalationState before it is defined.
EscalateInput.model_rebuild()


class EscalationResult(BaseModel):
    """What an escalation did: read from its rows and from the ledger by purpose."""

    model: str
    #: ``cancelled``: it stopped with blocks not compared or not asked (first answers kept);
    #: ``failed``: the same, because an activity failed for good (the run's error says
    #: which, after :data:`ESCALATION_FAILED`).
    status: Literal["running", "done", "cancelled", "failed"] = "done"
    #: Blocks the escalation had not compared or asked when it stopped (or yet).
    left: int = 0
    #: Blocks taken (answered or failed in the first pass), compared in a second pack, and
    #: kept.
    blocks: int = 0
    compared: int = 0
    kept: int = 0
    #: Blocks compared with the quality probe's answer alone on the run's own model
    #: instead of a second pack (its call, no second-pass call: paid once per purpose).
    compared_with_probe: int = 0
    #: Blocks asked on the escalation model, by reason (``disagrees``, ``failed``...).
    escalated_by_reason: dict[str, int] = Field(default_factory=dict)
    #: Of them: answered (the overlay now), failed, and skipped (reviewed meanwhile).
    escalated: int = 0
    escalation_failed: int = 0
    skipped: int = 0
    #: Of ``escalated``: answered by the quality probe's own call alone on the escalation
    #: model (the run's ``probe_model``), reused with no new call (paid once per model).
    reused_from_probe: int = 0
    second_pass_calls: int = 0
    second_pass_cost_usd: float = 0.0
    escalation_calls: int = 0
    escalation_cost_usd: float = 0.0
    #: The final answers against the probe's answers alone on the probe's sample (``None``:
    #: the run compared no sample).
    vs_probe: EscalationVsProbe | None = None

    @property
    def sent_up(self) -> int:
        return sum(self.escalated_by_reason.values())


class EscalationVsProbe(BaseModel):
    """An escalation checked on the run's own documents: on each block the quality probe
    compared, its answer against the probe's answer alone (``quality_samples.single``),
    with ``blockbatch/core/agreement.py``'s rules, before the escalation (the probe's own
    figure: the packed answer) and after it (the block's answer now)."""

    #: The model the probe asked the blocks alone on.
    probe_model: str
    #: The probe asked the run's own (cheap) model: the figure is agreement with it alone,
    #: which cannot see the mistakes it makes alone too.
    run_model: bool = False
    before: AgreementRate = Field(default_factory=AgreementRate)
    after: AgreementRate = Field(default_factory=AgreementRate)


# RunResult names EscalationResult, and it EscalationVsProbe, before they are defined.
EscalationResult.model_rebuild()
RunResult.model_rebuild()


#: Where an escalation is (:class:`EscalationProgress`): ``planning`` (no rows yet),
#: ``second pass``, ``escalating`` (every block compared, those sent up being asked),
#: ``finishing`` (every block done, the run being closed), ``cancelling``; once it ended,
#: ``done`` or ``cancelled``.
EscalationPhase = Literal[
    "planning",
    "second pass",
    "escalating",
    "finishing",
    "cancelling",
    "done",
    "cancelled",
    "failed",
]


class EscalationProgress(BaseModel):
    """An escalation as it goes (``watch``, the run page): its rows and the ledger by
    purpose, read from Postgres, so the figures are the final summary's as they grow."""

    run_id: str
    phase: EscalationPhase
    #: Second packs planned, and those with no block left waiting for its second answer.
    second_packs: int = 0
    second_packs_done: int = 0
    #: Blocks in a second pack (those the first pass failed go up without one).
    second_blocks: int = 0
    #: The counts so far (``None`` while planning: no row yet).
    escalation: EscalationResult | None = None

    @property
    def cost_usd(self) -> float:
        e = self.escalation
        return e.second_pass_cost_usd + e.escalation_cost_usd if e is not None else 0.0


# ---------------------------------------------------------------- provider batch mode


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


# ---------------------------------------------------------------- retry


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


RunOptions.model_rebuild()
RunInput.model_rebuild()
RunProgress.model_rebuild()
ReplanInput.model_rebuild()
