"""The scenario: every knob of the simulator's latency, faults and limits.

A scenario is plain JSON (``--scenario FILE.json`` or ``PUT /_sim/scenario``); every field
is optional and unknown keys are rejected, so a typo fails loudly instead of silently
doing nothing.
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from blockbatch.core.registry import Effort, known_model_names

Rate = float  # a probability in [0, 1]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Latency(_Strict):
    """Simulated generation speed, before ``speed_factor``."""

    ttft_ms: float = Field(default=500, ge=0)
    per_output_token_ms: float = Field(default=12, ge=0)


#: Account-level refusals (contract §6 and api_findings.md §3): ``billing_error`` (402),
#: the tier cap ``enforced_spend_limit_reached`` (429, no retry-after), the contract cap
#: ``contract_spend_limit_reached`` (429), the linked organisation's cap
#: ``linked_organization_spend_limit_reached`` (402), a self-set spend limit
#: ``self_spend_limit`` (400 invalid_request_error, no error_code).
AccountError = Literal[
    "billing_error",
    "enforced_spend_limit_reached",
    "contract_spend_limit_reached",
    "linked_organization_spend_limit_reached",
    "self_spend_limit",
]


class Errors(_Strict):
    """Per-request probabilities of whole-request failures."""

    rate_429: Rate = Field(default=0.0, ge=0, le=1)
    rate_529: Rate = Field(default=0.0, ge=0, le=1)
    rate_500: Rate = Field(default=0.0, ge=0, le=1)
    retry_after_s: int = Field(default=1, ge=0)
    rate_timeout: Rate = Field(default=0.0, ge=0, le=1)
    timeout_s: float = Field(default=30, ge=0)
    #: An outage: every Messages request is answered with this status (500, 502, 503,
    #: 504 as ``api_error``, 529 as ``overloaded_error``) until the scenario changes.
    outage_status: int | None = Field(default=None, ge=500, le=599)
    # sim-a:
    #: The account's state: every Messages request and batch creation is refused with
    #: it until the scenario changes (contract §6, "Spend limits"; :mod:`blockbatch.simulator.errors`).
    account_error: AccountError | None = None
    #: Per-request probability of a 504 ``timeout_error`` (contract §6).
    rate_504: Rate = Field(default=0.0, ge=0, le=1)
    #: Per-request probability of an injected 429 ``ramp_limit_exceeded`` (contract §6).
    rate_ramp: Rate = Field(default=0.0, ge=0, le=1)


class Faults(_Strict):
    """Probabilities of model misbehaviour: per block, except where noted."""

    skip_block: Rate = Field(default=0.0, ge=0, le=1)
    duplicate_uid: Rate = Field(default=0.0, ge=0, le=1)
    unknown_uid: Rate = Field(default=0.0, ge=0, le=1)
    bleed: Rate = Field(default=0.0, ge=0, le=1)
    #: Per request.
    malformed_tool_input: Rate = Field(default=0.0, ge=0, le=1)
    #: Per request.
    truncate: Rate = Field(default=0.0, ge=0, le=1)
    # sim-b:
    #: Per request: with ``tool_choice: auto`` the model answers in text instead of
    #: calling the tool (contract §2: only a forced tool guarantees the call).
    auto_tool_text_rate: Rate = Field(default=0.0, ge=0, le=1)
    #: Per quoted value, when the request asks for evidence: the quote is words the block
    #: does not hold (a model citing what is not there; structured outputs cannot prevent
    #: it, contract §2: the grammar holds the shape, not the truth). Counted ``bad_quote``.
    bad_quote: Rate = Field(default=0.0, ge=0, le=1)


class ModelQuality(_Strict):
    """How often one model answers a block wrongly (``Quality.models``): assumptions, not
    measurements of the real model.

    A block asked alone is wrong with probability ``wrong_alone``; in a call of ``n >= 2``
    blocks the block at position ``k`` is wrong with probability ``p = min(wrong_max,
    wrong_alone + wrong_base + wrong_per_extra_block * max(0, n - free_blocks) +
    wrong_per_position * (k - 1))`` (``free_blocks``: ``Quality.free_blocks`` when
    ``None``). A share ``wrong_repeat`` of ``p`` is the block's own die, and the rate only
    grows with the pack, so a block a model gets wrong alone that way it also gets wrong in
    every pack; the rest of ``p`` is drawn per call (:meth:`split`).
    """

    wrong_alone: Rate = Field(default=0.0, ge=0, le=1)
    wrong_base: Rate = Field(default=0.0, ge=0, le=1)
    wrong_per_extra_block: Rate = Field(default=0.0, ge=0, le=1)
    wrong_per_position: Rate = Field(default=0.0, ge=0, le=1)
    wrong_max: Rate = Field(default=1.0, ge=0, le=1)
    free_blocks: int | None = Field(default=None, ge=0)
    #: The share of the model's mistakes that are the block's own and repeat in every call
    #: (1: a model deterministic in its mistakes; 0: each call draws afresh). The rest are
    #: drawn per call, as a model that samples may be wrong in one call and right in the
    #: next (contract §4: sampling parameters are removed and the models sample; Haiku 5.5
    #: takes only ``temperature=1``). An assumption: how much of a real model's mistakes
    #: repeat is not known here.
    wrong_repeat: Rate = Field(default=1.0, ge=0, le=1)

    def wrong_rate(self, size: int, position: int, free_blocks: int) -> float:
        """The chance that the block at ``position`` (1-based) of a call of ``size``
        blocks is answered wrongly by this model."""
        p = self.wrong_alone
        if size >= 2:
            free = self.free_blocks if self.free_blocks is not None else free_blocks
            p += (
                self.wrong_base
                + self.wrong_per_extra_block * max(0, size - free)
                + self.wrong_per_position * max(0, position - 1)
            )
        return min(self.wrong_max, p)

    def split(self, p: float) -> tuple[float, float]:
        """``(own, per_call)``: the block's own die is wrong below ``own = p *
        wrong_repeat``; above it, a call's own die is wrong below ``per_call``, so that a
        block is wrong with probability ``p`` in all."""
        own = p * self.wrong_repeat
        per_call = 0.0 if own >= 1 else (p - own) / (1 - own)
        return own, per_call


#: Per-model rates for comparing models on the simulator (``Quality(enabled=True,
#: models=ASSUMED_MODEL_QUALITY)``; ``bench/models.py``, ``calibrate --models``). Assumed,
#: not measured: the cheap model is wrong about 1% of blocks alone and much more often in
#: packs beyond ``free_blocks`` (about 2.5% at 20 blocks, 13% at 40); the strong model
#: about 0.3% alone and about 1% at 40 blocks. Only their order and shape are meant to
#: resemble real models (a small model loses more in long prompts); the figures are not.
#: Every mistake repeats (``wrong_repeat`` 1), the pessimistic end for comparing a model
#: with itself (``bench/models.py --repeat`` measures escalation at other shares).
ASSUMED_MODEL_QUALITY: dict[str, ModelQuality] = {
    "claude-haiku-5-5": ModelQuality(
        wrong_alone=0.01,
        wrong_base=0.01,
        wrong_per_extra_block=0.005,
        wrong_per_position=0.0005,
        wrong_max=0.5,
    ),
    "claude-sonnet-5-5": ModelQuality(
        wrong_alone=0.003,
        wrong_base=0.002,
        wrong_per_extra_block=0.0002,
        wrong_per_position=0.0001,
        wrong_max=0.2,
    ),
}


class Quality(_Strict):
    """Quality that degrades with pack size, when ``enabled``.

    Two effects, each off unless its rates are set:

    - skips and whole-result bleeds: their per-block probabilities grow by
      ``*_per_extra_block`` for each block beyond ``free_blocks`` (drawn per request);
    - wrong answers, a model that is wrong like a model: in a call of ``n >= 2`` blocks,
      the block at position ``k`` (1 for the first) gets one plausible, valid, wrong field
      with probability ``p = min(wrong_max, wrong_base + wrong_per_extra_block *
      max(0, n - free_blocks) + wrong_per_position * (k - 1))``. The die is the block's
      own (seed, type and content), not the request's, so a block is wrong at every
      (size, position) whose ``p`` exceeds its die: the same block in the same place gets
      the same verdict whatever else the request holds, and a call of one block is
      always right. A share ``wrong_bleed_share`` of the wrong fields is the value the
      neighbouring block of the pack has (bleed); the rest are another valid value.

    ``models`` gives a model (by id, as the registry or the scenario's ``models`` names
    it) rates of its own (:class:`ModelQuality`), replacing the ``wrong_*`` rates above
    for its requests: a model may then be wrong alone too, and its dice are its own
    (another model is wrong about other blocks). The truth stays the block's computed
    answer (:func:`blockbatch.simulator.content.block_result`), whatever the model.
    """

    enabled: bool = False
    free_blocks: int = Field(default=20, ge=0)
    skip_per_extra_block: Rate = Field(default=0.002, ge=0, le=1)
    bleed_per_extra_block: Rate = Field(default=0.001, ge=0, le=1)
    wrong_base: Rate = Field(default=0.0, ge=0, le=1)
    wrong_per_extra_block: Rate = Field(default=0.0, ge=0, le=1)
    wrong_per_position: Rate = Field(default=0.0, ge=0, le=1)
    wrong_max: Rate = Field(default=1.0, ge=0, le=1)
    wrong_bleed_share: Rate = Field(default=0.5, ge=0, le=1)
    models: dict[str, ModelQuality] = Field(default_factory=dict)

    def wrong_rate(self, size: int, position: int, model: str | None = None) -> float:
        """The chance that the block at ``position`` (1-based) of a call of ``size``
        blocks is answered wrongly by ``model`` (0 when disabled; without rates of the
        model's own, 0 for a call of one block)."""
        if not self.enabled:
            return 0.0
        own = self.models.get(model) if model is not None else None
        if own is not None:
            return own.wrong_rate(size, position, self.free_blocks)
        if size < 2:
            return 0.0
        p = (
            self.wrong_base
            + self.wrong_per_extra_block * max(0, size - self.free_blocks)
            + self.wrong_per_position * max(0, position - 1)
        )
        return min(self.wrong_max, p)

    def wrong_split(
        self, size: int, position: int, model: str | None = None
    ) -> tuple[float, float]:
        """``(own, per_call)`` of :meth:`wrong_rate`: below ``own`` the block's own die
        says wrong (in every call); above it, the call's die says wrong below ``per_call``
        (:meth:`ModelQuality.split`; without rates of the model's own, every mistake is
        the block's own)."""
        p = self.wrong_rate(size, position, model)
        own = self.models.get(model) if model is not None and self.enabled else None
        return own.split(p) if own is not None else (p, 0.0)


class Limits(_Strict):
    """Per-minute rate limits, enforced as token buckets like the API's; ``None`` is unlimited."""

    rpm: int | None = Field(default=None, ge=1)
    input_tpm: int | None = Field(default=None, ge=1)
    output_tpm: int | None = Field(default=None, ge=1)
    #: The share of every limit used by another client of the same account: the buckets'
    #: capacity and refill rate shrink by it (the headers still give the account's limit).
    others_share: float = Field(default=0.0, ge=0, lt=1)
    # sim-a:
    #: Enforce each limit also per second, as ``limit / 60`` per 1-second window (at
    #: least 1): "60 RPM may be enforced as 1 request per second" (contract §6).
    per_second: bool = False
    #: The acceleration (ramp) limit, off when ``None``: see :mod:`blockbatch.simulator.limits`.
    ramp_floor_rps: int | None = Field(default=None, ge=1)
    ramp_factor: float = Field(default=2.0, gt=1)
    ramp_baseline_s: float = Field(default=60.0, gt=1)
    #: Round ``anthropic-ratelimit-*tokens-remaining`` down to a multiple of 1,000, as
    #: the API does (contract §6); off so tests can check exact bucket levels.
    round_token_remaining: bool = False


class Auth(_Strict):
    """Which API keys are accepted; ``valid_keys=None`` accepts any non-empty key."""

    valid_keys: list[str] | None = None
    forbidden_keys: list[str] = Field(default_factory=list)


class Batch(_Strict):
    """Message Batches behaviour."""

    processing_delay_s: float = Field(default=2.0, ge=0)
    errored_rate: Rate = Field(default=0.0, ge=0, le=1)
    expired_rate: Rate = Field(default=0.0, ge=0, le=1)
    # sim-a:
    #: The share of batch requests that read the cache when they could, for a prefix first
    #: written inside the same batch: hits in a batch are best-effort, "30% to 98%"
    #: (contract §5, "Batches"), and its requests run concurrently, so many start before the
    #: first one's entry is readable ("an entry becomes readable only once the first
    #: response starts", contract §5). The others write and pay the prefix instead.
    cache_hit_rate: Rate = Field(default=0.7, ge=0, le=1)
    #: The same share for a prefix already cached when the batch starts processing (a
    #: sync pre-warm, or an earlier batch): near the top of the documented range (98%),
    #: since the cold start is what writing the prefix first removes (the prompt-caching
    #: FAQ's advice; conformance audit row 5). Still best effort: each request draws on its
    #: own, and one that misses writes the prefix again (contract §5, "Batches"). The
    #: contract gives no figure for a warm prefix: 0.95 is an assumption, not a measurement.
    warm_cache_hit_rate: Rate = Field(default=0.95, ge=0, le=1)


class BedrockBatch(_Strict):
    """Amazon Bedrock's model invocation jobs (``blockbatch/simulator/bedrock_jobs.py``)."""

    #: The local S3-compatible server the jobs' files are in (``Services.start_s3``).
    s3_endpoint_url: str | None = None
    #: The per-model quotas "Minimum number of records per batch inference job" and
    #: "Records per batch inference job" (100 and 50,000 per third-party sources; the
    #: official values are the account's, docs/platforms-checked.md §2).
    min_records: int = Field(default=100, ge=1)
    max_records: int = Field(default=50_000, ge=1)
    #: Jobs in progress at once before a create is refused (the account's quota; its
    #: default was not found in an official page).
    max_jobs_in_progress: int = Field(default=20, ge=1)
    #: The first this many jobs expire unprocessed (past ``timeoutDurationInHours``).
    expire_jobs: int = Field(default=0, ge=0)


class VertexBatch(_Strict):
    """Google Vertex AI's batch prediction jobs (``blockbatch/simulator/vertex_jobs.py``)."""

    #: The local Cloud Storage stand-in the jobs' files are in (``Services.start_gcs``).
    gcs_endpoint_url: str | None = None
    #: "By default, the number of concurrent batch requests that you can make in a single
    #: project is 4" (Google Cloud, Batch predictions with Anthropic Claude models).
    max_concurrent_jobs: int = Field(default=4, ge=1)
    #: The first this many jobs end ``JOB_STATE_EXPIRED`` unprocessed.
    expire_jobs: int = Field(default=0, ge=0)


class ModelFacts(_Strict):
    """What the simulator says of one model, over the registry's entry (or for a model the
    registry does not know): served by ``/v1/models`` and enforced by ``/v1/messages``.

    ``based_on`` names the registry entry the rest starts from (default: the entry of the
    same id, else a careful guess, :func:`blockbatch.core.registry.configured_model`); every other
    field left ``None`` keeps that entry's value.
    """

    based_on: str | None = None
    display_name: str | None = None
    max_input_tokens: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    structured_outputs: bool | None = None
    forced_tool: bool | None = None
    prefill: bool | None = None
    thinking_types: list[Literal["adaptive", "between_tools", "disabled", "enabled"]] | None = None
    default_effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    batch: bool | None = None
    end_of_life: date | None = None
    released: date | None = None

    @field_validator("based_on")
    @classmethod
    def _known(cls, name: str | None) -> str | None:
        if name is not None and name not in known_model_names():
            raise ValueError(f"unknown model {name!r}; known: {', '.join(known_model_names())}")
        return name


# sim-b:
RefusalCategory = Literal["cyber", "bio", "frontier_llm", "reasoning_extraction", "general_harms"]


#: The defaults of :class:`Thinking`'s ``base`` and ``per_block`` (its docstring says why).
_BASE_THINKING: dict[Effort, int] = {
    "low": 700,
    "medium": 1500,
    "high": 3000,
    "xhigh": 6000,
    "max": 12000,
}
_PER_BLOCK_THINKING: dict[Effort, int] = {
    "low": 10,
    "medium": 20,
    "high": 40,
    "xhigh": 80,
    "max": 160,
}


class Thinking(_Strict):
    """How many thinking tokens a thinking answer spends (contract §3).

    Assumptions, not measurements: no numeric effort figures are published. A call thinks
    ``base[effort] + per_block[effort] * blocks`` tokens, times a jitter in
    ``[1 - jitter, 1 + jitter]`` drawn from the request's hash (the same request thinks
    the same amount), at least one token. The defaults sit near the planner's own guess
    (``blockbatch.core.planning.EXPECTED_THINKING_TOKENS``, also an assumption) so that a quote is
    tested against a model that thinks about as much per call as the planner expects. Adaptive thinking at effort ``low`` skips
    thinking on a request of at most one block with probability ``low_effort_skip``.
    """

    base: dict[Effort, int] = Field(default_factory=lambda: _BASE_THINKING.copy())
    per_block: dict[Effort, int] = Field(default_factory=lambda: _PER_BLOCK_THINKING.copy())
    jitter: float = Field(default=0.2, ge=0, lt=1)
    low_effort_skip: Rate = Field(default=0.5, ge=0, le=1)


class Scenario(_Strict):
    """Everything configurable about the simulator; the defaults are a well-behaved API."""

    seed: int = 0
    #: Multiplies every latency; 0 never sleeps (tests).
    speed_factor: float = Field(default=0.0, ge=0)
    latency: Latency = Field(default_factory=Latency)
    errors: Errors = Field(default_factory=Errors)
    faults: Faults = Field(default_factory=Faults)
    quality: Quality = Field(default_factory=Quality)
    truncation_mode: Literal["partial", "empty"] = "partial"
    #: Blocks by the id the request names them with (a block_uid, or a short id such as
    #: ``b3`` when the request uses those; the simulator only echoes what it is sent).
    always_skip_uids: list[str] = Field(default_factory=list)
    always_malformed_uids: list[str] = Field(default_factory=list)
    #: Blocks by their exact ``block_content``, whatever id a request gives them.
    always_skip_contents: list[str] = Field(default_factory=list)
    always_malformed_contents: list[str] = Field(default_factory=list)
    #: A request with a block containing this text is refused with a 400, as the API
    #: refuses a request for one block's content (``None``: never).
    reject_marker: str | None = None
    limits: Limits = Field(default_factory=Limits)
    auth: Auth = Field(default_factory=Auth)
    batch: Batch = Field(default_factory=Batch)
    bedrock_batch: BedrockBatch = Field(default_factory=BedrockBatch)
    vertex_batch: VertexBatch = Field(default_factory=VertexBatch)
    # sim-b:
    #: A request holding a block whose content is one of these, or contains
    #: ``refuse_marker``, is refused like the API's streaming classifiers refuse: HTTP 200,
    #: ``stop_reason: "refusal"`` with ``stop_details`` (contract §2 failure modes).
    refuse_contents: list[str] = Field(default_factory=list)
    refuse_marker: str | None = None
    refusal_category: RefusalCategory | None = "cyber"
    refusal_explanation: str | None = (
        "The request was declined because it may enable harm in this category."
    )
    thinking: Thinking = Field(default_factory=Thinking)
    # sim-a:
    #: The simulator's today, for retirement (``end_of_life``); ``None``: the real UTC date.
    today: date | None = None
    #: Models by id: overrides of registry facts, or models the registry does not know.
    models: dict[str, ModelFacts] = Field(default_factory=dict)
