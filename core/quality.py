"""The quality probe and the quality gate of a run: pure rules over core/agreement.py.

**The probe.** A run samples its blocks once, when it is planned: ``sample_blocks`` over the
blocks it will call (not those reused from an earlier run), seeded with the run id, at
``QualityOptions.probe_rate`` (default 3%) with ``probe_minimum`` (5), capped at the number
of blocks (:func:`planned_sample`). Once a pack has applied its answer, its sampled blocks
that were answered (not failed) are asked again alone, one block per call, with the pack's
own system prompt and tool (so the call reads the cached prefix), and each packed answer is
compared field by field with the single one (``compare_answers``). The packed answer stays
the overlay. A block answered in a call of one block (``--no-batching``, ``--pack-size 1``,
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
Packs answered before a re-plan are not asked again at the smaller size.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.agreement import AgreementSummary, Tally, agreement_text, sample_blocks
from core.models import AgreementRate, GateReading, QualityResult

#: Attempts of one probe call (429, 529, 5xx, no answer: after the retry-after); then its
#: sample is recorded ``failed`` (the run never fails for its probe).
PROBE_ATTEMPTS = 3
#: The gate decides on no fewer samples than this (at the current pack size).
GATE_MIN_SAMPLES = 10
#: A gated run probes at least this many blocks of every pack.
GATE_SAMPLES_PER_PACK = 2
#: Until the gate has GATE_MIN_SAMPLES at the current size, at most this many packs run.
GATE_PROBATION_PACKS = 5


def planned_sample(uids: Sequence[str], rate: float, minimum: int, seed: str) -> list[str]:
    """The run's sample of the blocks it will call (none when ``rate`` is 0: probe off)."""
    if rate <= 0 or not uids:
        return []
    return list(sample_blocks(list(uids), rate, minimum, seed))


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
    return AgreementRate(samples=samples, agreeing=agreeing, rate=agreeing / samples,
                         low=low, high=high)


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


def halved(size: int) -> int:
    """The pack size the gate re-plans at: half, never below 1."""
    return max(1, size // 2)


def _pct(x: float) -> str:
    """``88%``, ``98.6%``: one decimal, none when it is 0."""
    return f"{100 * x:.1f}".removesuffix(".0") + "%"


def reading_text(r: GateReading) -> str:
    """``agreement 88% (CI 80-93%) < 95% on 25 samples``."""
    return (f"agreement {_pct(r.agreeing / r.samples)} (CI {100 * r.low:.0f}-"
            f"{100 * r.high:.0f}%) < {_pct(r.target)} on {r.samples} samples")


def gate_text(r: GateReading, first_pack: int, packs_after: int, size: int, was: int) -> str:
    """``quality gate: agreement 88% (CI 80-93%) < 95% on 25 samples: packs 12-30
    re-planned at 10 blocks (was 40)``."""
    span = (f"pack {first_pack}" if packs_after - 1 == first_pack
            else f"packs {first_pack}-{packs_after - 1}")
    return (f"quality gate: {reading_text(r)}: {span} re-planned at {size} block"
            f"{'s' if size != 1 else ''} (was {was})")


def running_text(agreeing: int, samples: int) -> str:
    """``agreement 97% on 12 sampled blocks so far`` (progress, the Temporal UI)."""
    if not samples:
        return "no block compared yet"
    return f"agreement {_pct(agreeing / samples)} on {samples} sampled blocks so far"


def probe_cost_text(calls: int, cost_usd: float, run_cost_usd: float) -> str:
    """``quality probe: 12 calls, $0.0123 (2.1% of the run)``."""
    share = f" ({100 * cost_usd / run_cost_usd:.1f}% of the run)" if run_cost_usd else ""
    return f"quality probe: {calls} call{'s' if calls != 1 else ''}, ${cost_usd:.4f}{share}"


def _rates(tallies: dict[str, Tally]) -> dict[str, AgreementRate]:
    return {key: rate(t.agreed, t.total) for key, t in tallies.items()}


def quality_result(summary: AgreementSummary, *, failed: int, probe_calls: int,
                   probe_cost_usd: float, run_cost_usd: float, pack_size: int | None,
                   min_agreement: float | None, gate: Sequence[str]) -> QualityResult:
    """The run's :class:`~core.models.QualityResult` from its samples' summary."""
    blocks = summary.blocks
    return QualityResult(
        sampled=blocks.total, failed=failed,
        agreement=rate(blocks.agreed, blocks.total),
        by_field=_rates(summary.by_field), by_pack_size=_rates(summary.by_pack_size),
        by_position=_rates(summary.by_position), lowest_field=summary.lowest_field,
        text=agreement_text(summary), probe_calls=probe_calls,
        probe_cost_usd=round(probe_cost_usd, 6), run_cost_usd=round(run_cost_usd, 6),
        pack_size=pack_size, min_agreement=min_agreement, gate=list(gate))
