"""A quote before running: the calls, tokens and cost of a run, sync and batch side by side.

Pure: the front door (``blockbatch/api/quote.py``) parses the document, counts tokens with
the API when it can, reads what earlier runs wrote, and hands the figures here. Nothing is
stored and no run is created.

What the quote is made of, and why each part can be trusted:

* **The packs** are the run's own: :meth:`RunContext.plan` over the blocks' planner
  estimates, exactly what ``plan_run`` computes, so the number of calls is the run's.
* **Input tokens** come from the Messages token-counting endpoint when a Claude endpoint
  is configured (:func:`count_plan`: the warm-up request with and without its system prompt
  and tool, which isolates the cacheable prefix; one pack message with no block; and the
  document's blocks in a few large pack messages: a handful of requests, not one a block),
  else from the planner's estimates (the ones the run sizes its packs with).
* **Output tokens** cannot be counted before they are written. The expectation is the
  planner's estimate the run plans with, or, when earlier runs of the same schema content
  and model are in the ledger, its shape estimate scaled by what those runs' answers wrote
  against it (:class:`OutputHistory`). The quote says which.
* **Caching** follows the run: in sync mode a warm-up call writes the prompt cache (when
  the run's estimate of the prefix reaches the model's minimum) and every pack reads it;
  in batch mode the cheapest of the ways ``blockbatch.core.batching.round_cache`` weighs
  writes it with the 1-hour TTL (a lead request at the batch price, whose round goes
  first; a sync pre-warm; the batch's own first request) and each other request reads it
  best effort (the ledger's measured hit rate of the model's warm batches, else
  ``BATCH_WARM_HIT_RATE``; a miss writes it again), or no request carries
  ``cache_control``. A prefix below the model's ``min_cacheable_tokens`` is not cached by
  the API, silently: the quote prices every call uncached and says so. Batch figures come
  with their spread: every request reading (``min_cost_usd``) or writing
  (``max_cost_usd``).
* **Thinking** (where the run's calls think, ``RunContext.shape.thinks``): every call is
  expected to think :meth:`RunContext.thinking_per_call` tokens, billed as output; earlier
  runs of the schema on the model at the same effort replace the planner's assumption
  (:class:`OutputHistory`). Thinking is paid per call, not per block: the quote says what
  one call per block would think (:attr:`Quote.thinking_per_call`,
  :attr:`Quote.thinking_unpacked_tokens`).
* **Tokens and prices**: the planner's estimates are scaled for the model's tokenizer, and
  every call is priced on its own (a long prompt pays its tier on every line; a sum of
  calls is never priced as one request).
* **Truncation**: a pack expected to write more than the ``max_tokens`` it asks for is
  quoted as the run will handle it: a truncated answer, paid, then its blocks in halves
  (:func:`expected_attempts`).
* **The quality probe** (sync only): its sample sized by the run's own rule
  (:func:`blockbatch.core.quality.probe_plan`: ``probe_rate``, ``probe_minimum``, capped at
  ``probe_max_share`` of the run's expected cost), each sampled block a call of its own,
  in the sync figures and apart as ``probe_calls`` / ``probe_cost_usd``
  (:func:`probe_attempts`). Which blocks a run samples is its own (seeded with its id).
* **The range**: the expected cost, and the most the expected calls can cost: every call
  writing its whole ``max_tokens`` (and in batch mode, every request missing the cache).
  Retries and halvings that no estimate foresees are in neither figure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from blockbatch.core.batching import (
    BATCH_WARM_HIT_RATE,
    MIN_MEASURED_REQUESTS,
)
from blockbatch.core.calibration import CalibrationNote
from blockbatch.core.context import RunContext
from blockbatch.core.evidence import evidence_text
from blockbatch.core.planning import (
    PACK_OUTPUT_OVERHEAD_TOKENS,
    OutputRatios,
    Pack,
    evidence_output_tokens,
)
from blockbatch.core.quality import GATE_SAMPLES_PER_PACK, ProbePlan, probe_plan
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.quote_pricing import Attempt, BlockShare, Mode, ModeQuote, mode_quote, usd
from blockbatch.core.quote_tokens import PromptTokens
from blockbatch.core.registry import ModelInfo, Usage, cost_usd, scaled_tokens
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import SchemaSpec

__all__ = [
    "MIN_HISTORY_CALLS",
    "PROBE_SEED",
    "EscalationQuote",
    "OutputHistory",
    "Quote",
    "expected_attempts",
    "probe_attempts",
    "quote",
    "quote_context",
]

#: How the batch's first round writes the prefix, by its cache plan, in words.
BATCH_WRITES = {
    "lead": (
        "one request goes ahead alone and writes the prefix for an hour (at the batch "
        "price), the others follow in a second round (one more wait) and read it"
    ),
    "pre-warm": (
        "one sync max_tokens: 0 call writes the prefix for an hour (at sync prices) before "
        "the batch"
    ),
    "write": "the batch's first request writes the prefix, the others read it",
    "read": "the prefix is still cached",
}
#: Earlier answers needed before their ratio replaces the planner's output estimate.
MIN_HISTORY_CALLS = 3
#: The seed of the quote's probe sample (a run seeds its own with its run id: the same
#: size, other blocks).
PROBE_SEED = "quote"


def quote_context(options: RunOptions, spec: SchemaSpec, model: ModelInfo) -> RunContext:
    """The :class:`RunContext` a run with these options would have, without a run."""
    return RunContext(
        run_id="", document_id="", schema_id="", options=options, spec=spec, model=model
    )


@dataclass(frozen=True)
class OutputHistory:
    """What earlier runs' answers wrote against the planner's shape estimate.

    Read from the ledger (``blockbatch.store.quotes.output_history``): runs of the same schema
    content and model, pack calls answered in full (a truncated answer only says "more").
    """

    runs: int
    calls: int
    estimated: int
    written: int
    #: Thinking tokens per call of those runs' calls at the quoted run's effort (``None``:
    #: none of them thought, or none ran at that effort).
    thinking_per_call: float | None = None
    #: Whose answers: ``schema`` (this schema on this model: the run plans with them too),
    #: ``model`` (other schemas on this model) or ``any`` (other schemas, other models): a
    #: first run's expectation only (:func:`quote`'s ``prior``).
    scope: Literal["schema", "model", "any"] = "schema"

    @property
    def ratio(self) -> float:
        return self.written / self.estimated if self.estimated else 1.0


# ------------------------------------------------------------------ the quote


class Quote(BaseModel):
    """What a run would do and cost, before it runs."""

    document: str
    blocks: int
    schema_name: str
    model: str
    #: The mode the options ask for; both are quoted.
    mode: Mode
    packs: int
    blocks_per_pack: tuple[int, int]
    input_source: Literal["count_tokens", "planner"]
    count_requests: int = 0
    #: The simulator counted the input (``count_tokens`` answered by it, not by Claude).
    counted_by_simulator: bool = False
    #: ``ledger``: this schema's earlier answers; ``other_schemas``: a first run's, from
    #: what other schemas' answers wrote against their shape estimate; ``planner``: none.
    output_source: Literal["ledger", "other_schemas", "planner"]
    #: Unless ``planner``: runs and calls it came from, written / estimated.
    output_history: dict[str, float] | None = None
    #: With ``other_schemas``: ``model`` (on this model) or ``any`` (on other models).
    output_scope: str | None = None
    prefix_tokens: int
    min_cacheable_tokens: int
    block_tokens: int
    oversized_blocks: int = 0
    #: Calls expected to stop at max_tokens (and be halved): counted in the figures.
    truncations: int = 0
    #: Thinking tokens one call is expected to write (0: the run's calls do not think),
    #: and where the figure comes from: ``planner`` (an assumption by effort) or ``ledger``.
    thinking_per_call: int = 0
    thinking_source: Literal["ledger", "planner"] = "planner"
    #: What the chosen mode's blocks would think at one block per call: thinking is paid
    #: per call, so packing divides it (compare ``chosen().thinking_tokens``).
    thinking_unpacked_tokens: int = 0
    sync: ModeQuote
    batch: ModeQuote
    #: Where the batch hit rate (``batch.cache_hit_rate``) comes from, in words.
    batch_hit_source: str | None = None
    notes: list[str] = Field(default_factory=list)
    #: What the schema's evidence (a quote per field) adds to the figures: its expected output
    #: tokens over the document, and their price in the chosen mode (0: no evidence asked).
    evidence_output_tokens: int = 0
    evidence_cost_usd: float = 0.0
    #: The latest calibration of this schema and model (the CLI's ``calibrate``), if any.
    calibration: CalibrationNote | None = None
    #: What ``--escalate-to`` adds (``None``: not asked).
    escalation: EscalationQuote | None = None

    def chosen(self) -> ModeQuote:
        """The quote of the mode the options ask for."""
        return self.sync if self.mode == "sync" else self.batch


class EscalationQuote(BaseModel):
    """What escalating the run to ``to`` adds to its quote (docs/ESCALATION.md): a second
    pass on the run's model, and each block sent up asked alone on ``to``. How many go up
    is known only from a measurement: ``share`` is the latest ``calibrate --escalation`` of
    the schema and model, else what earlier escalations of it sent up, else ``None`` (the
    quote then gives the price of each percent)."""

    to: str
    #: The second pass: the run's sync calls again, without the probe (at most: its prefix
    #: is read from the cache the first pass wrote).
    second_pass_usd: float
    #: Every block of the document alone on ``to`` (the escalation's price at 100%).
    alone_usd: float
    share: float | None = None
    #: Where ``share`` comes from, in words (``calibration cal-…``, ``3 earlier escalations``).
    share_source: str | None = None

    @property
    def per_percent_usd(self) -> float:
        """What each percent of the blocks sent up costs."""
        return self.alone_usd / 100

    @property
    def expected_usd(self) -> float | None:
        """The second pass and the expected share sent up (``None``: no share known)."""
        if self.share is None:
            return None
        return self.second_pass_usd + self.share * self.alone_usd


def expected_attempts(
    ctx: RunContext,
    block_tokens: Sequence[int],
    history: OutputHistory | None = None,
    packs: Sequence[Pack] | None = None,
) -> list[Attempt]:
    """The calls a run of ``ctx`` is expected to make, in plan order, with their output.

    Each planned pack sized as ``call_model`` sizes it (``ctx.pack``; with ``history``, as
    a run that has seen such answers: ``observed`` is their ratio). Its expected output is
    the planner's estimate, or, with ``history``, its shape estimate times what earlier
    answers wrote against it. A pack expected to write more than its ``max_tokens`` (the
    budget caps it) is truncated: it pays ``max_tokens``, the results that fit are kept,
    and the rest are halved as ``blockbatch.core.policy.split_pack`` does; a lone block asks for the
    whole budget. A thinking call also writes its expected thinking
    (:meth:`RunContext.thinking_per_call`), which its ``max_tokens`` holds.
    """
    ratio = history.ratio if history is not None else None
    seen_thinking = history.thinking_per_call if history is not None else None
    thinking = ctx.thinking_per_call(seen_thinking)
    # Only the schema's own answers size max_tokens (the run observes them); another
    # schema's say what to expect, not what a first run asks for.
    observed = ratio if history is not None and history.scope == "schema" else None

    def block_output(i: int) -> float:
        assert ratio is not None
        alone = ctx.pack([block_tokens[i]])
        return (alone.learn_output_tokens - PACK_OUTPUT_OVERHEAD_TOKENS) * ratio

    def attempts(positions: tuple[int, ...]) -> list[Attempt]:
        sizes = [block_tokens[i] for i in positions]
        pack = ctx.pack(sizes, observed=observed, thinking=seen_thinking)
        want = (
            math.ceil(pack.learn_output_tokens * ratio)
            if ratio is not None
            else pack.est_output_tokens
        ) + thinking
        if len(positions) == 1 and want > pack.max_tokens:
            pack = ctx.pack(sizes, attempt=2, thinking=seen_thinking)
        if want <= pack.max_tokens or len(positions) == 1:
            return [
                Attempt(
                    positions,
                    min(want, pack.max_tokens),
                    pack.max_tokens,
                    thinking=min(thinking, pack.max_tokens),
                )
            ]
        kept, written = 0, float(PACK_OUTPUT_OVERHEAD_TOKENS + thinking)
        while kept < len(positions) and written + block_output(positions[kept]) <= pack.max_tokens:
            written += block_output(positions[kept])
            kept += 1
        rest = positions[kept:]
        half = (len(rest) + 1) // 2
        return [
            Attempt(
                positions,
                pack.max_tokens,
                pack.max_tokens,
                truncated=True,
                thinking=min(thinking, pack.max_tokens),
            ),
            *(a for part in (rest[:half], rest[half:]) if part for a in attempts(part)),
        ]

    planned = ctx.plan(block_tokens) if packs is None else packs
    return [a for p in planned for a in attempts(p.positions)]


def quote(
    ctx: RunContext,
    block_tokens: Sequence[int],
    tokens: PromptTokens,
    *,
    document: str,
    history: OutputHistory | None = None,
    notes: Sequence[str] = (),
    prefix_seen: bool | None = None,
    prior: OutputHistory | None = None,
    batch_hits: tuple[int, int] | None = None,
) -> Quote:
    """Quote a run of ``ctx`` over blocks with these planner estimates.

    Args:
        ctx: the run's context (:func:`quote_context`).
        block_tokens: each block's planner estimate, in block order (as ``plan_run`` reads
            them from ``blocks.est_tokens``).
        tokens: the input, counted or estimated.
        document: the document's name, for the reader.
        history: earlier runs' output against the planner's shape estimate, if any (used
            from :data:`MIN_HISTORY_CALLS` answers on).
        notes: what the caller has to say (why tokens were not counted, say).
        prefix_seen: what the API did with the run's prefix on this model before (cached
            or not; ``None``: no call yet): the probe's sample is sized as the run sizes
            it (:func:`blockbatch.core.quality.prefix_expected_cached`), its calls priced as counted.
        prior: what other schemas' answers wrote against their shape estimate (used from
            :data:`MIN_HISTORY_CALLS` answers on, when ``history`` is not): the planner's
            shape estimate leans high on purpose, so a schema's first quote expects what
            answers write against it. The run's plan is not changed by it (it plans its
            learning pack from the estimate and learns its own ratio).
        batch_hits: the model's earlier batch requests on a cached prefix, and how many of
            them read it (``blockbatch.store.batches.batch_cache_hits``): the batch quote's
            hit rate from :data:`~blockbatch.core.batching.MIN_MEASURED_REQUESTS` on.
    """
    if not block_tokens:
        raise ValueError("a quote needs at least one block")
    model = ctx.model
    said = list(notes)
    learned = history if history is not None and history.calls >= MIN_HISTORY_CALLS else None
    # What the calls are expected to write: the schema's own answers, else other schemas'.
    expected = learned or (
        prior if prior is not None and prior.calls >= MIN_HISTORY_CALLS else None
    )
    ratios = (
        OutputRatios(
            overall=round(learned.ratio, 4), by_type={}, blocks=learned.calls, source="earlier runs"
        )
        if learned
        else None
    )
    # Each mode planned as plan_run plans it: sync sizes from earlier runs' answers when
    # there are any, else it sends a learning pack first; batch plans from the estimate.
    plans: dict[Mode, tuple[RunContext, list[Pack], bool]] = {}
    for mode in ("sync", "batch"):
        mctx = dataclasses.replace(ctx, options=ctx.options.model_copy(update={"mode": mode}))
        mode_ratios = ratios if mctx.learns_output() else None
        learning = mctx.learns_output() and mode_ratios is None
        packs = mctx.plan(block_tokens, mode_ratios, learning=learning)
        plans[mode] = (mctx, packs, learning and len(packs) > 1)
    cached = tokens.prefix >= model.min_cacheable_tokens
    if not cached:
        said.append(
            f"the cacheable prefix (system prompt and tool) is {tokens.prefix:,} tokens, "
            f"below {model.id}'s minimum of {model.min_cacheable_tokens:,}: the API skips "
            "caching without saying so, so every call is priced with the whole prompt at the "
            "input price"
        )
    # The run's own rule (RunWorkflow._run_packs): a warm-up call when its estimate of the
    # prefix can be cached and more than one pack would read it, unless a learning pack
    # goes first (it writes the cache).
    sync_ctx, sync_packs, learning_pack = plans["sync"]
    batch_ctx, batch_packs, _ = plans["batch"]
    warm_up = ctx.cacheable_prefix_tokens > 0 and len(sync_packs) > 1 and not learning_pack
    share = BlockShare(block_tokens, tokens.blocks)
    sync_attempts = expected_attempts(sync_ctx, block_tokens, expected, sync_packs)
    batch_attempts = expected_attempts(batch_ctx, block_tokens, expected, batch_packs)
    probe, sizing = probe_attempts(
        sync_ctx,
        block_tokens,
        sync_packs,
        ratios if sync_ctx.learns_output() else None,
        expected,
        cached=prefix_seen,
    )
    without = mode_quote(
        "sync",
        ctx,
        sync_attempts,
        tokens,
        share,
        cached=cached,
        warm_up=warm_up,
        packs=len(sync_packs),
    )
    sync = mode_quote(
        "sync",
        ctx,
        [*sync_attempts, *probe],
        tokens,
        share,
        cached=cached,
        warm_up=warm_up,
        packs=len(sync_packs),
    )
    sync = sync.model_copy(
        update={
            "probe_calls": len(probe),
            "probe_cost_usd": round(sync.cost_usd - without.cost_usd, 6),
        }
    )
    if batch_hits is not None and batch_hits[1] >= MIN_MEASURED_REQUESTS:
        hit_rate = batch_hits[0] / batch_hits[1]
        hit_source = f"measured: {batch_hits[0]:,} of {batch_hits[1]:,} earlier batch requests"
    else:
        hit_rate, hit_source = BATCH_WARM_HIT_RATE, "assumed until measured"
    batch = mode_quote(
        "batch",
        ctx,
        batch_attempts,
        tokens,
        share,
        cached=cached,
        warm_up=False,
        packs=len(batch_packs),
        hit_rate=hit_rate,
    )
    if learning_pack:
        said.append(
            "sync: the schema's first run on this model sends a learning pack "
            f"({len(sync_packs[0].positions)} blocks) first, which writes the cache, "
            "and plans the rest again from its answer; the quote plans the rest from "
            "the schema's estimate"
        )
    if warm_up and not cached:
        said.append(
            "sync: the run still makes its warm-up call (its own estimate of the "
            "prefix reaches the minimum); it writes nothing to the cache"
        )
    if cached and not warm_up and not learning_pack and len(sync_packs) > 1:
        said.append(
            "sync: no warm-up call (the run's estimate of the prefix is below the "
            "minimum); the first pack writes the cache and runs alone first"
        )
    if sizing is not None and sizing.wanted:
        capped = (
            f"; capped from {sizing.wanted} at {sizing.max_share:.0%} of the run's expected cost"
            if sizing.capped
            else ""
        )
        said.append(
            f"sync: the quality probe asks {sizing.planned} of the blocks again alone, "
            f"one a call (counted in the sync figures){capped}; the run draws its own "
            "sample, of the same size"
        )
    quality = ctx.options.quality or QualityOptions()
    if sizing is not None and quality.min_agreement is not None:
        said.append(
            f"sync: the quality gate also probes at least {GATE_SAMPLES_PER_PACK} "
            "blocks of every pack, whatever its cost: those calls are not in the "
            "figures"
        )
    _, packs, _ = plans[ctx.options.mode]
    attempts = sync_attempts if ctx.options.mode == "sync" else batch_attempts
    truncated = sum(1 for a in attempts if a.truncated)
    if truncated:
        said.append(
            f"{truncated} call{'s are' if truncated != 1 else ' is'} expected to "
            "write more than its max_tokens: quoted as a truncated answer (paid, the "
            "results that fit kept) and the rest of its blocks sent again in halves"
        )
    if cached and batch.cache_control:
        said.append(
            f"batch: {BATCH_WRITES[batch.cache_plan or 'pre-warm']}; Message Batches read "
            "the cache best effort (30-98% of requests, per Anthropic): expected as "
            f"{batch.cache_hit_rate or 0:.0%} reading it "
            f"({hit_source if batch.cache_plan != 'write' else 'assumed'}) and the rest "
            f"writing it again; {usd(batch.min_cost_usd)} if every request reads it, "
            f"{usd(batch.likely_max_usd)} with {batch.likely_misses} "
            f"miss{'es' if batch.likely_misses != 1 else ''} (9 runs in 10 miss no more), "
            f"{usd(batch.max_cost_usd)} at most"
        )
    elif cached:
        said.append(
            f"batch: {len(batch_attempts)} request{'s' if len(batch_attempts) != 1 else ''} "
            "would not repay writing the prefix: sent without cache_control, each paying "
            "its prefix as input (at half price)"
        )
    if batch.cost_usd > sync.cost_usd:
        said.append(
            f"batch is expected to cost MORE than sync here ({usd(batch.cost_usd)} against "
            f"{usd(sync.cost_usd)}): half price covers input, output and cache prices, "
            "but not the cache hits sync mode gets every call"
        )
    chosen_attempts = sync_attempts if ctx.options.mode == "sync" else batch_attempts
    per_call = max((a.thinking for a in chosen_attempts), default=0)
    thinking_source: Literal["ledger", "planner"] = (
        "ledger" if learned is not None and learned.thinking_per_call is not None else "planner"
    )
    unpacked = per_call * len(block_tokens)
    if per_call:
        packed = sum(a.thinking for a in chosen_attempts)
        where = (
            "earlier runs of this schema at this effort"
            if thinking_source == "ledger"
            else f"our assumption for effort {ctx.shape.effort or 'high'}: the API "
            "publishes no figures"
        )
        said.append(
            f"{model.id} thinks on these calls: about {per_call:,} thinking tokens a call "
            f"({where}), billed as output and held in every call's max_tokens; thinking is "
            f"paid per call: {len(chosen_attempts)} calls think about {packed:,} tokens, one "
            f"block per call would think about {unpacked:,}"
        )
    long_prompt = sum(1 for p in packs if p.over_price_line)
    if long_prompt:
        said.append(
            f"{long_prompt} block{'s' if long_prompt != 1 else ''} alone cross "
            f"{model.id}'s long-prompt line of {model.long_prompt_threshold:,} "
            f"tokens: priced at {model.long_prompt_multiplier:g}x on every line"
        )
    if not model.priced:
        said.append(
            f"{model.id} is not in blockbatch's registry: priced from configuration "
            "(BLOCKBATCH_MODEL_PRICES), its limits from the Models API"
        )
    evidence_tokens = evidence_output(ctx, block_tokens, expected.ratio if expected else None)
    evidence_usd = 0.0
    if evidence_tokens:
        chosen = sync if ctx.options.mode == "sync" else batch
        evidence_usd = cost_usd(
            model, Usage(output_tokens=evidence_tokens), batch=ctx.options.mode == "batch"
        )
        said.append(
            evidence_text(evidence_tokens, len(block_tokens), evidence_usd, chosen.cost_usd)
        )
    said.append("retries and halvings nobody can foresee are in neither figure")
    oversized = sum(1 for p in packs if p.oversized)
    if oversized:
        said.append(
            f"{oversized} block{'s' if oversized != 1 else ''} cannot fit "
            f"{model.id}'s context window: the run will fail "
            f"{'them' if oversized != 1 else 'it'} without a call"
        )
    sizes = [len(p.positions) for p in packs]
    return Quote(
        document=document,
        blocks=len(block_tokens),
        schema_name=ctx.spec.name,
        model=model.id,
        mode=ctx.options.mode,
        packs=len(packs),
        blocks_per_pack=(min(sizes), max(sizes)),
        input_source=tokens.source,
        count_requests=tokens.requests,
        counted_by_simulator=tokens.simulated,
        output_source="ledger" if learned else "other_schemas" if expected else "planner",
        output_history=(
            {"runs": expected.runs, "calls": expected.calls, "ratio": round(expected.ratio, 4)}
            if expected
            else None
        ),
        output_scope=expected.scope if expected is not None and not learned else None,
        prefix_tokens=tokens.prefix,
        min_cacheable_tokens=model.min_cacheable_tokens,
        block_tokens=tokens.blocks,
        oversized_blocks=oversized,
        truncations=truncated,
        thinking_per_call=per_call,
        thinking_source=thinking_source,
        thinking_unpacked_tokens=unpacked,
        sync=sync,
        batch=batch,
        batch_hit_source=hit_source if batch.cache_control else None,
        notes=said,
        evidence_output_tokens=evidence_tokens,
        evidence_cost_usd=round(evidence_usd, 6),
    )


def evidence_output(ctx: RunContext, block_tokens: Sequence[int], ratio: float | None) -> int:
    """The output tokens a run's quotes are expected to write (0: no evidence asked), in the
    run model's tokens: each block's :func:`~blockbatch.core.planning.evidence_output_tokens`,
    times what answers write against the shape estimate when earlier runs say so."""
    if not ctx.spec.prompt_config.evidence:
        return 0
    total = sum(evidence_output_tokens(ctx.spec, t) for t in block_tokens)
    return math.ceil(total * ratio) if ratio is not None else scaled_tokens(ctx.model, total)


def probe_attempts(
    ctx: RunContext,
    block_tokens: Sequence[int],
    packs: Sequence[Pack],
    ratios: OutputRatios | None,
    history: OutputHistory | None = None,
    *,
    cached: bool | None = None,
) -> tuple[list[Attempt], ProbePlan | None]:
    """The quality probe's calls a sync run of ``ctx`` is expected to make, and how its
    sample was sized: ``plan_run``'s rule (:func:`blockbatch.core.quality.probe_plan`: the rate, the
    minimum and the cost cap over ``packs`` planned with ``ratios``), the sample drawn with
    :data:`PROBE_SEED`; each sampled block a call of its own, planned and expected to
    write as :func:`expected_attempts` has it. None in batch mode, with the probe off, or
    when every pack is one block (``None`` then: no sample is planned). ``cached``: whether
    the run takes its prefix as cached when it sizes the sample (``None``: what the run
    decides without a call of it: :func:`blockbatch.core.quality.prefix_expected_cached`)."""
    if ctx.options.mode != "sync" or ctx.plan_limits().size_cap <= 1:
        return [], None
    q = ctx.options.quality or QualityOptions()
    sample, sizing = probe_plan(
        ctx,
        [str(i) for i in range(len(block_tokens))],
        block_tokens,
        packs,
        q,
        PROBE_SEED,
        ratios,
        cached=cached,
    )
    alone = [
        dataclasses.replace(ctx.plan([block_tokens[int(u)]], ratios)[0], positions=(int(u),))
        for u in sample
    ]
    return expected_attempts(ctx, block_tokens, history, alone), sizing
