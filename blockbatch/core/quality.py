"""The quality probe and the quality gate of a run: pure rules over blockbatch/core/agreement.py.

**The probe.** A run samples its blocks once, when it is planned: ``sample_blocks`` over the
blocks it will call (not those reused from an earlier run), seeded with the run id, at
``QualityOptions.probe_rate`` (default 3%) with ``probe_minimum`` (5), capped at
``probe_maximum`` (2,000: the sample's precision depends on its size, not the document's)
and at the number of blocks (:func:`planned_sample`), and capped again by cost (:func:`probe_plan`): the sample's
expected probe calls stay within ``QualityOptions.probe_max_share`` (default 5%) of the
run's expected pack calls. **The cap wins** over the rate and the minimum: a run whose
probe calls would cost more than that share probes fewer blocks (even none). A probe call
is priced as the plan of its one block (``RunContext.plan``, with the output ratios the
run's plan used: what earlier runs of the schema wrote, when there are some): its prefix at
the cache-read price only when the prefix is cached (what earlier calls of the prefix on the
model showed, else :func:`prefix_expected_cached` of the estimate), else at the input price,
since every call then pays it again; the block's input and its output estimate; the run as
its planned packs priced the same way. The summary says when the sample was capped. Once a pack has applied its answer, its sampled blocks
that were answered (not failed) are asked again alone, one block per call, with the pack's
own system prompt and tool (so the call reads the cached prefix), and each packed answer is
compared field by field with the single one (``compare_answers``). The packed answer stays
the overlay. A block answered in a call of one block (``--pack-size 1``, ``batching_enabled=False``,
or halved down to one) already has a single answer: it is not compared. Sync mode only: a
batch-mode run samples nothing.

**The gate** (``QualityOptions.min_agreement``). It counts block-level agreement (every
field agreed) over the samples of the packs at the run's current pack size. When it has at
least :data:`GATE_MIN_SAMPLES` of them and the upper end of their 95% Wilson interval is
below the target (:func:`gate_reading`), the agreement is below the target "with enough
samples to say so": the run re-plans the packs it has not started at half the largest
one's size (never below 1; :func:`halved`) and counts again from the first re-planned pack,
so the gate can halve again. To have samples early, a gated run probes at least
:data:`GATE_SAMPLES_PER_PACK` blocks of every pack (:func:`pack_sample`), and until the
gate has its :data:`GATE_MIN_SAMPLES` at the current size, and while their agreement is below
the target without enough samples to say so, at most :data:`GATE_PROBATION_PACKS` packs are
in flight (:func:`on_probation`): the packs a trip would make smaller have not started yet.
With a gate, its per-pack samples are not capped: the gate's sampling needs win over
``probe_max_share``, and the summary says when the probe cost more than that share.

**Re-asks** (``QualityOptions.reask``, on by default). When the gate trips, the run first
lets its packs in flight end, then re-plans, together with its unstarted packs and at the
new size, the blocks its earlier packs answered in calls larger than that size: their
model answers go back to ``pending`` (blockbatch/store/overlays.py: only ``ai_complete`` answers no
person edited; never confirmed, rejected or edited ones, never reused ones), in new packs,
so that the run ends answered at the size it settled on. A re-asked block's earlier
comparison stays in its pack size's tally. ``reask=False``: packs
answered before a re-plan are not asked again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from blockbatch.core.agreement import (
    AgreementSummary,
    Tally,
    agreement_text,
    sample_blocks,
    sample_size,
)
from blockbatch.core.context import RunContext
from blockbatch.core.evidence import GroundingCount, grounding_text
from blockbatch.core.planning import OutputRatios, Pack
from blockbatch.core.quality_types import (
    AgreementRate,
    GroundingResult,
    QualityOptions,
    QualityResult,
    QualityRunState,
)
from blockbatch.core.registry import Usage, cost_usd
from blockbatch.core.run_types import GateReading

#: Attempts of one probe call (429, 529, 5xx, no answer: after the retry-after); then its
#: sample is recorded ``failed`` (the run never fails for its probe).
PROBE_ATTEMPTS = 3
#: The gate decides on no fewer samples than this (at the current pack size).
GATE_MIN_SAMPLES = 10
#: A gated run probes at least this many blocks of every pack.
GATE_SAMPLES_PER_PACK = 2
#: Until the gate has GATE_MIN_SAMPLES at the current size, at most this many packs run.
GATE_PROBATION_PACKS = 5


def probe_size(count: int, q: QualityOptions) -> int:
    """How many of ``count`` blocks the probe asks for before its cost cap: ``probe_rate``
    of them with ``probe_minimum``, at most ``probe_maximum`` (the minimum wins over it), at
    most ``count`` (0: probe off)."""
    if q.probe_rate <= 0 or count <= 0:
        return 0
    size = sample_size(count, q.probe_rate, q.probe_minimum)
    return min(size, max(q.probe_maximum, q.probe_minimum), count)


def planned_sample(uids: Sequence[str], q: QualityOptions, seed: str) -> list[str]:
    """The run's sample of the blocks it will call (:func:`probe_size` of them, none when
    the probe is off): the same seed's lowest ranks, so a capped sample is part of the
    uncapped one."""
    size = probe_size(len(uids), q)
    return list(sample_blocks(list(uids), 0.0, size, seed)) if size else []


#: The planner's estimate of a prompt prefix leans high (a ticket schema's: 1,217
#: estimated, 779 counted): without a count or an earlier call that says so, a
#: prefix is expected cached only when its estimate reaches this multiple of the model's
#: minimum. Nearer the minimum it is priced as input, which keeps a probe within its share
#: whichever way the API decides.
CACHED_ESTIMATE_MARGIN = 1.6


def prefix_expected_cached(ctx: RunContext, seen: bool | None = None) -> bool:
    """Whether a run's calls are expected to read their prefix from the cache.

    ``seen``: what the API did with this very prefix before (an earlier call of it read or
    wrote the cache, or answered without either), or a count against the model's minimum;
    ``None``: nothing known, the planner's estimate with :data:`CACHED_ESTIMATE_MARGIN`.
    """
    if seen is not None:
        return seen
    return ctx.fixed_prompt_tokens >= CACHED_ESTIMATE_MARGIN * ctx.model.min_cacheable_tokens


def expected_call_usd(ctx: RunContext, pack: Pack, *, cached: bool | None = None) -> float:
    """A sync call's expected cost: its input (``pack.est_input_tokens``) and its output
    estimate at the model's prices, with the thinking a call of the run is expected to
    write (``RunContext.thinking_per_call``: paid per call, so a probe's one-block call pays
    as much of it as a pack), its prefix at the cache-read price only when the prefix is
    cached (``cached``; ``None``: :func:`prefix_expected_cached` of the estimate), else at
    the input price like the rest."""
    if cached is None:
        cached = prefix_expected_cached(ctx)
    prefix = min(ctx.fixed_prompt_tokens, pack.est_input_tokens) if cached else 0
    return cost_usd(
        ctx.model,
        Usage(
            input_tokens=max(0, pack.est_input_tokens - prefix),
            output_tokens=pack.est_output_tokens + ctx.thinking_per_call(),
            cache_read_input_tokens=prefix,
        ),
    )


@dataclass(frozen=True)
class ProbePlan:
    """How a run's probe sample was sized (:func:`probe_plan`; stored in quality_plans).

    Attributes:
        wanted: the blocks ``probe_rate``, ``probe_minimum`` and ``probe_maximum`` ask for
            (:func:`probe_size`).
        planned: the blocks sampled once capped (at most ``wanted``).
        max_share: ``QualityOptions.probe_max_share``.
        est_probe_usd: the expected cost of the planned sample's probe calls.
        est_run_usd: the expected cost of the run's planned pack calls.
    """

    wanted: int
    planned: int
    max_share: float
    est_probe_usd: float
    est_run_usd: float

    @property
    def capped(self) -> bool:
        return self.planned < self.wanted

    @property
    def rate(self) -> float:
        """The effective probe rate: planned blocks per block called."""
        return self.planned / self.blocks if self.blocks else 0.0

    blocks: int = 0


def probe_plan(
    ctx: RunContext,
    uids: Sequence[str],
    block_tokens: Sequence[int],
    packs: Sequence[Pack],
    q: QualityOptions,
    seed: str,
    ratios: OutputRatios | None = None,
    block_types: Sequence[str] | None = None,
    *,
    cached: bool | None = None,
    probe_ctx: RunContext | None = None,
) -> tuple[list[str], ProbePlan]:
    """The run's probe sample (``uids[i]`` has ``block_tokens[i]``; ``packs`` their plan, as
    ``ctx.plan`` made it with ``ratios``) and how it was sized: :func:`planned_sample`'s,
    then as many of its blocks (in their sampling order, so a smaller sample is part of the
    larger one) as keep the sample's expected cost within ``q.probe_max_share`` of the
    run's expected pack calls. A probe call is priced as ``ctx.plan`` would plan its one
    block, with the same ``ratios`` (what earlier runs of the schema wrote), so both sides
    use the same output estimate. ``cached``: whether the prefix is read from the cache
    (:func:`expected_call_usd`); a probe call of an uncached prefix pays all of it again.
    ``probe_ctx``: the context the probe calls with (``QualityOptions.probe_model``; default
    ``ctx``): its calls are planned and priced on that model, and ``cached`` is then its
    prefix's."""
    probe = probe_ctx or ctx
    cached = prefix_expected_cached(probe, cached)
    # The run's own prefix, when the probe's is another model's: the estimate decides.
    run_cached = cached if probe_ctx is None else None
    run_usd = sum(expected_call_usd(ctx, p, cached=run_cached) for p in packs)
    wanted = probe_size(len(uids), q)
    if not wanted:
        return [], ProbePlan(0, 0, q.probe_max_share, 0.0, round(run_usd, 6), len(uids))
    types: list[str | None] = list(block_types) if block_types is not None else [None] * len(uids)
    shape = {u: (t, k) for u, t, k in zip(uids, block_tokens, types, strict=True)}
    full = planned_sample(uids, q, seed)
    costs = {
        u: expected_call_usd(
            probe,
            probe.plan([shape[u][0]], ratios, [kind] if (kind := shape[u][1]) else None)[0],
            cached=cached,
        )
        for u in full
    }
    mean = sum(costs.values()) / len(costs)
    room = q.probe_max_share * run_usd
    # round first: 0.05 * 1.0 / 0.0125 must not become 3.9999999
    fits = math.floor(round(room / mean, 9)) if mean > 0 else wanted
    planned = full if fits >= wanted else list(sample_blocks(list(uids), 0.0, fits, seed))
    return planned, ProbePlan(
        wanted,
        len(planned),
        q.probe_max_share,
        round(sum(costs[u] for u in planned), 6),
        round(run_usd, 6),
        len(uids),
    )


def pack_sample(uids: Sequence[str], at_least: int, seed: str) -> list[str]:
    """``at_least`` of a pack's answered blocks (all when fewer), chosen by ``seed``."""
    if at_least <= 0 or not uids:
        return []
    return list(sample_blocks(list(uids), 0.0, at_least, seed))


def interval(agreeing: int, samples: int) -> tuple[float, float]:
    """The 95% Wilson interval of ``agreeing`` out of ``samples`` (``Tally.interval``)."""
    return Tally(agreed=agreeing, total=samples).interval()


def rate(agreeing: int, samples: int) -> AgreementRate:
    if not samples:
        return AgreementRate()
    low, high = interval(agreeing, samples)
    return AgreementRate(
        samples=samples, agreeing=agreeing, rate=agreeing / samples, low=low, high=high
    )


def gate_reading(agreeing: int, samples: int, target: float) -> GateReading | None:
    """What the gate saw when the agreement is below ``target`` with enough samples to say
    so (at least :data:`GATE_MIN_SAMPLES`, the interval's upper end below it); else ``None``."""
    if samples < GATE_MIN_SAMPLES:
        return None
    low, high = interval(agreeing, samples)
    if high >= target:
        return None
    return GateReading(samples=samples, agreeing=agreeing, low=low, high=high, target=target)


def on_probation(agreeing: int, samples: int, target: float) -> bool:
    """Whether a gated run keeps few packs in flight at its current size: it has fewer than
    :data:`GATE_MIN_SAMPLES` samples there, or their agreement is below the target without
    enough of them yet to say so (the gate has not tripped). Packs started meanwhile are
    the ones a trip would make smaller."""
    return samples < GATE_MIN_SAMPLES or agreeing < target * samples


def gate_trips(q: QualityRunState | None) -> GateReading | None:
    """What a run's quality gate saw, when it trips now (``None``: no gate, packs of one
    block, which are not compared, or no trip)."""
    if q is None or q.min_agreement is None or q.pack_size == 1:
        return None
    return gate_reading(q.agreeing, q.sampled, q.min_agreement)


def gate_window(q: QualityRunState | None, max_concurrent_packs: int) -> int:
    """Packs a run keeps in flight: :data:`GATE_PROBATION_PACKS` at most while its gate
    lacks samples at the current size (:func:`on_probation`), else all it may."""
    if q is None or q.min_agreement is None or q.pack_size == 1:
        return max_concurrent_packs
    if on_probation(q.agreeing, q.sampled, q.min_agreement):
        return min(max_concurrent_packs, GATE_PROBATION_PACKS)
    return max_concurrent_packs


def halved(size: int) -> int:
    """The pack size the gate re-plans at: half, never below 1."""
    return max(1, size // 2)


def _pct(x: float) -> str:
    """``88%``, ``98.6%``: one decimal, none when it is 0."""
    return f"{100 * x:.1f}".removesuffix(".0") + "%"


def reading_text(r: GateReading) -> str:
    """``agreement 88% (CI 80-93%) < 95% on 25 samples``."""
    return (
        f"agreement {_pct(r.agreeing / r.samples)} (CI {100 * r.low:.0f}-"
        f"{100 * r.high:.0f}%) < {_pct(r.target)} on {r.samples} samples"
    )


def gate_text(
    r: GateReading,
    first_pack: int,
    packs_after: int,
    size: int,
    was: int,
    reasked: int = 0,
    reasked_sizes: tuple[int, int] | None = None,
) -> str:
    """``quality gate: agreement 88% (CI 80-93%) < 95% on 25 samples: packs 12-30
    re-planned at 10 blocks (was 40); 320 blocks answered in packs of 40 re-asked``."""
    span = (
        f"pack {first_pack}"
        if packs_after - 1 == first_pack
        else f"packs {first_pack}-{packs_after - 1}"
    )
    text = (
        f"quality gate: {reading_text(r)}: {span} re-planned at {size} block"
        f"{'s' if size != 1 else ''} (was {was})"
    )
    if reasked:
        low, high = reasked_sizes or (0, 0)
        sizes = f"{high}" if low == high else f"{low}-{high}"
        text += (
            f"; {reasked} block{'s' if reasked != 1 else ''} answered in packs of {sizes} re-asked"
        )
    return text


def running_text(agreeing: int, samples: int) -> str:
    """``agreement 97% on 12 sampled blocks so far`` (progress, the Temporal UI)."""
    if not samples:
        return "no block compared yet"
    return f"agreement {_pct(agreeing / samples)} on {samples} sampled blocks so far"


def probe_cost_text(
    calls: int,
    cost_usd: float,
    run_cost_usd: float,
    *,
    max_share: float | None = None,
    capped: bool = False,
    gated: bool = False,
) -> str:
    """``quality probe: 3 calls, $0.0120 (4.1% of the run's cost; sample capped at 5% of
    the run's expected cost)``; a capped sample that came out above the cap says why (``5.2%
    of the run's cost; the sample was sized to 5% of what the run was expected to cost, and
    the run cost less``); a gated run whose per-pack samples cost more than the share:
    ``(7.2% of the run's cost; above its 5% share: the quality gate samples every pack)``."""
    notes = []
    over = max_share is not None and run_cost_usd > 0 and cost_usd > max_share * run_cost_usd
    if run_cost_usd:
        notes.append(f"{100 * cost_usd / run_cost_usd:.1f}% of the run's cost")
        if max_share is not None and over and (gated or not capped):
            notes.append(
                f"above its {_pct(max_share)} share"
                + (": the quality gate samples every pack" if gated else "")
            )
    if capped and max_share is not None:
        # A capped sample was sized on the run's expected cost: over the cap at the actual
        # cost is the estimate's error, and the line says so instead of contradicting itself.
        if over and not gated:
            notes.append(
                f"the sample was sized to {_pct(max_share)} of what the run was expected to "
                "cost, and the run cost less"
            )
        else:
            notes.append(f"sample capped at {_pct(max_share)} of the run's expected cost")
    share = f" ({'; '.join(notes)})" if notes else ""
    return f"quality probe: {calls} call{'s' if calls != 1 else ''}, ${cost_usd:.4f}{share}"


def _rates(tallies: dict[str, Tally]) -> dict[str, AgreementRate]:
    return {key: rate(t.agreed, t.total) for key, t in tallies.items()}


def grounding_result(
    by_field: dict[str, GroundingCount],
    blocks_ungrounded: int,
    *,
    sampled: tuple[GroundingCount, GroundingCount] | None = None,
) -> GroundingResult | None:
    """A run's grounding from its values' matches counted per field (``None``: no value
    was grounded, the schema asks for no evidence); ``sampled``: the probe's compared blocks'
    values counted in their packed answers and in their answers alone (does packing cost
    grounding, as :mod:`blockbatch.core.agreement` asks of the values)."""
    total = GroundingCount()
    for count in by_field.values():
        total.values += count.values
        total.exact += count.exact
        total.normalised += count.normalised
        total.missing += count.missing
    if not total.values:
        return None
    return GroundingResult(
        rate=rate(total.grounded, total.values),
        exact=total.exact,
        normalised=total.normalised,
        missing=total.missing,
        blocks_ungrounded=blocks_ungrounded,
        by_field={name: rate(c.grounded, c.values) for name, c in sorted(by_field.items())},
        sampled_packed=rate(sampled[0].grounded, sampled[0].values) if sampled else None,
        sampled_alone=rate(sampled[1].grounded, sampled[1].values) if sampled else None,
        text=grounding_text(total, blocks_ungrounded, sampled),
    )


def quality_result(
    summary: AgreementSummary,
    *,
    failed: int,
    probe_calls: int,
    probe_cost_usd: float,
    run_cost_usd: float,
    pack_size: int | None,
    min_agreement: float | None,
    gate: Sequence[str],
    plan: ProbePlan | None = None,
    reasked: int = 0,
    probe_model: str | None = None,
    grounding: GroundingResult | None = None,
    probed: bool = True,
) -> QualityResult:
    """The run's :class:`~core.quality_types.QualityResult` from its samples' summary, with the
    grounding of its answers (:func:`grounding_result`) beside their agreement
    (``probe_model``: the model the samples were asked alone on, when not the run's)."""
    blocks = summary.blocks
    against = f" (alone on {probe_model})" if probe_model and blocks.total else ""
    return QualityResult(
        probed=probed,
        grounding=grounding,
        sampled=blocks.total,
        failed=failed,
        agreement=rate(blocks.agreed, blocks.total),
        by_field=_rates(summary.by_field),
        by_pack_size=_rates(summary.by_pack_size),
        by_position=_rates(summary.by_position),
        lowest_field=summary.lowest_field,
        text=agreement_text(summary) + against,
        probe_calls=probe_calls,
        probe_cost_usd=round(probe_cost_usd, 6),
        run_cost_usd=round(run_cost_usd, 6),
        pack_size=pack_size,
        min_agreement=min_agreement,
        gate=list(gate),
        sample_wanted=plan.wanted if plan is not None else None,
        sample_planned=plan.planned if plan is not None else None,
        probe_rate=round(plan.rate, 6) if plan is not None else None,
        probe_max_share=plan.max_share if plan is not None else None,
        sample_capped=plan is not None and plan.capped,
        probe_over_share=(
            plan is not None and run_cost_usd > 0 and probe_cost_usd > plan.max_share * run_cost_usd
        ),
        blocks_reasked=reasked,
        probe_model=probe_model,
    )


#: The ledger's purpose of a probe call (``probe`` is the outage probe).
QUALITY_PROBE = "quality_probe"


def probe_path(block_index: int) -> str:
    """The ledger pack path of a block's probe call (``quality-17``); attempt 1 (pay once)."""
    return f"quality-{block_index}"
