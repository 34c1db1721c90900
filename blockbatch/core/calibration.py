"""Calibration before a big run: which pack size keeps the answers a block gets alone?

The CLI's ``calibrate`` (``blockbatch/api/calibrate.py``) runs a deterministic sample of a
document's blocks alone (one block a call) and at each asked pack size, through the real
pipeline, and compares each size's answers with the alone answers (:mod:`blockbatch.core.agreement`).
This module holds the pure rules: checking what was asked (:func:`parse_sizes`,
:func:`parse_models`, :func:`check_request`), the result of one size (:class:`SizeResult`),
the recommendation (:func:`recommend`, across models :func:`cheapest_choice`) and the line
a quote prints (:class:`CalibrationNote`).

Across models (``calibrate --models``), the sample is asked alone on the **reference**
model only, and in packs on each candidate model at each size; each candidate's answers
are compared with the reference's alone answers, so a cheap model's agreement says how
often it gives the answer the strong model gives a block alone. Each candidate gets its own
recommended size by the rule below; the **choice** is the cheapest (model, size) pair,
priced by the quote of the whole document, among every candidate's sizes up to its
recommended one (each of them met the target with every smaller size). When none does,
the advice is the reference model alone.

With ``--escalation``, each candidate cheaper than the reference is also measured as an
escalated run would use it (``--escalate-to`` the reference, docs/ESCALATION.md): the
sample is asked a second time on the candidate at each size, in the second packing
(:func:`second_positions`, :func:`blockbatch.core.escalation.second_order`), and a block
whose two answers disagree (or that one of them lacks) takes the reference's alone answer,
which the calibration already has: no escalation call is made. :func:`escalated_result`
gives the agreement the escalated answers would have with the reference, the share sent
up, and the whole document's cost (two passes on the candidate, the share sent up alone
on the reference). On the real API this measures what the simulator can only assume:
whether the candidate's mistakes repeat across packings (escalation cannot see those).

The recommendation is the largest size such that it **and every smaller size measured**
reach the target agreement (the point estimate, the share of sampled blocks whose every
field agrees). A larger pack that passes after a smaller one failed is sampling noise, not
a model that gets better with more blocks, so it is not recommended. The interval printed
next to each rate says how much a sample of this size can tell; a target close to 100%
needs a larger sample to be met with confidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, Field

from blockbatch.core.agreement import AgreementSummary, Sample, compare_answers, percent, summarize
from blockbatch.core.escalation import escalation_reason, second_order
from blockbatch.core.schema import SchemaSpec

#: ``--sizes`` and ``--sample`` when not given.
DEFAULT_SIZES: tuple[int, ...] = (5, 10, 20, 40)
DEFAULT_SAMPLE = 40
#: ``--sample`` across models: a cheap model's errors grow steeply with the pack, and a
#: sample of 40 passes a size whose true agreement is far below the target too often
#: (``bench/models.py``: once in three seeds at 40, never at 100).
DEFAULT_MODELS_SAMPLE = 100
DEFAULT_TARGET = 0.95
#: The most sizes one calibration runs (each is a run of the whole sample).
MAX_SIZES = 8


class CalibrationError(ValueError):
    """What was asked of a calibration cannot be done; the message says what to change."""


#: The most candidate models one calibration compares.
MAX_MODELS = 4


def parse_models(text: str | Sequence[str]) -> list[str]:
    """``"claude-haiku-5-5,claude-sonnet-5-5"`` (or a list) as distinct names, in order.

    Raises:
        CalibrationError: none, or too many.
    """
    parts = text.split(",") if isinstance(text, str) else list(text)
    names = list(dict.fromkeys(p.strip() for p in parts if p.strip()))
    if not names:
        raise CalibrationError(
            "--models is empty: give candidate models such as claude-haiku-5-5,claude-sonnet-5-5"
        )
    if len(names) > MAX_MODELS:
        raise CalibrationError(
            f"--models: at most {MAX_MODELS} models, got {len(names)}; each model runs the "
            "sample at every size"
        )
    return names


def parse_sizes(text: str | Sequence[int]) -> list[int]:
    """``"5,10,20,40"`` (or a list) as sorted distinct pack sizes of 2 or more.

    Raises:
        CalibrationError: not whole numbers, a size below 2, none, or too many.
    """
    if isinstance(text, str):
        parts = [p.strip() for p in text.split(",") if p.strip()]
        try:
            sizes = [int(p) for p in parts]
        except ValueError:
            raise CalibrationError(
                f"--sizes {text!r}: give whole numbers separated by commas, e.g. 5,10,20,40"
            ) from None
    else:
        sizes = list(text)
    if not sizes:
        raise CalibrationError("--sizes is empty: give pack sizes such as 5,10,20,40")
    small = [s for s in sizes if s < 2]
    if small:
        raise CalibrationError(
            f"--sizes: {small[0]} is not a pack size to calibrate: every size is 2 or more "
            "(one block a call is the baseline calibrate always runs)"
        )
    distinct = sorted(set(sizes))
    if len(distinct) > MAX_SIZES:
        raise CalibrationError(
            f"--sizes: at most {MAX_SIZES} sizes, got {len(distinct)}; "
            "each size is a run of the whole sample"
        )
    return distinct


def check_request(
    sizes: Sequence[int], sample: int, blocks: int, target: float, max_batch_size: int | None = None
) -> None:
    """Refuse a calibration that cannot measure what it is asked to.

    Raises:
        CalibrationError: naming the bad value and what to give instead.
    """
    if not 0 < target <= 1:
        raise CalibrationError(
            f"--target {target}: give the agreement to reach as a share in (0, 1], e.g. 0.95"
        )
    if sample < 2:
        raise CalibrationError(f"--sample {sample}: sample at least 2 blocks (40 is the default)")
    if sample > blocks:
        raise CalibrationError(
            f"--sample {sample} is more than the document's {blocks} "
            f"blocks: give --sample {blocks} or fewer"
        )
    too_big = [s for s in sizes if s > sample]
    if too_big:
        raise CalibrationError(
            f"--sizes: {too_big[0]} is larger than the sample of {sample} "
            f"blocks; give sizes up to {sample} or a larger --sample"
        )
    if max_batch_size is not None and max(sizes) > max_batch_size:
        raise CalibrationError(
            f"--sizes: {max(sizes)} is above the schema's prompt_config.max_batch_size "
            f"({max_batch_size}), which caps every pack; give sizes up to {max_batch_size}"
        )


class SizeResult(BaseModel):
    """One pack size of a calibration: its run, what it cost, how well it agreed.

    ``size`` 1 is the baseline (every block alone): it has no agreement of its own.
    """

    size: int
    run_id: str
    status: str
    calls: int = 0
    cost_usd: float = 0.0
    #: Blocks this run answered.
    answered: int = 0
    #: Blocks answered in both this run and the alone run, and how many of them agreed
    #: on every field (``None`` for the baseline).
    compared: int = 0
    agreed: int | None = None
    #: Blocks without an answer in this run or in the alone run (left out of the rate).
    unanswered: int = 0
    rate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    #: The field that agreed least and its rate (``None``: no comparison).
    lowest_field: str | None = None
    lowest_rate: float | None = None
    #: The blocks per call the run really sent (a model's limits may lower a size).
    largest_call: int = 0
    #: Agreement per field.
    by_field: dict[str, float] = Field(default_factory=dict)
    #: What the whole document is expected to cost in a sync run on this calibration's
    #: model at this size (the quote's figure; ``None``: not quoted).
    whole_cost_usd: float | None = None
    #: Escalated (``--escalation``): the model the disagreeing blocks go up to, the
    #: second packing's run, and the sampled blocks sent up (``rate`` is then the
    #: escalated answers' agreement with the reference; ``calls`` and ``cost_usd`` both
    #: passes'; ``whole_cost_usd`` both passes and the share sent up alone on it).
    escalated_to: str | None = None
    second_run_id: str | None = None
    sent_up: int = 0

    def meets(self, target: float) -> bool:
        """The measured agreement reaches ``target``."""
        return self.rate is not None and self.rate >= target


def size_result(
    size: int,
    run_id: str,
    status: str,
    calls: int,
    cost_usd: float,
    samples: Sequence[Sample],
    *,
    answered: int,
    unanswered: int,
    largest_call: int,
) -> SizeResult:
    """A size's result from its compared blocks (:class:`~core.agreement.Sample`)."""
    summary: AgreementSummary = summarize(samples)
    tally = summary.blocks
    low, high = tally.interval() if tally.total else (None, None)
    lowest = summary.lowest_field
    return SizeResult(
        size=size,
        run_id=run_id,
        status=status,
        calls=calls,
        cost_usd=cost_usd,
        answered=answered,
        compared=tally.total,
        agreed=tally.agreed,
        unanswered=unanswered,
        rate=tally.rate,
        ci_low=low,
        ci_high=high,
        lowest_field=lowest,
        lowest_rate=summary.by_field[lowest].rate if lowest is not None else None,
        largest_call=largest_call,
        by_field={name: t.rate for name, t in summary.by_field.items() if t.rate is not None},
    )


def second_positions(count: int, size: int) -> list[int]:
    """The places (``0..count-1``) of a sample asked in packs of ``size``, in the order a
    second pass asks them (:func:`~blockbatch.core.escalation.second_order` of the first
    packing, taken as the sample cut in packs of ``size`` in order)."""
    packs = [[str(i) for i in range(a, min(count, a + size))] for a in range(0, count, size)]
    return [int(i) for i in second_order(packs)]


def escalated_result(
    spec: SchemaSpec,
    size: int,
    first: SizeResult,
    second: SizeResult,
    uids: Sequence[str],
    answers: Sequence[tuple[dict | None, dict | None, dict | None]],
    places: Sequence[tuple[int, int]],
    *,
    to: str,
) -> SizeResult:
    """A size escalated to ``to``: per sampled block its ``(first, second, reference)``
    answers (``None``: none) and its first answer's ``(call size, position)``. A block
    :func:`~blockbatch.core.escalation.escalation_reason` sends up takes the reference's
    answer; the rest keep the first, compared with the reference's. ``whole_cost_usd`` is
    left to the caller (it needs quotes)."""
    samples, unanswered, sent_up, answered = [], 0, 0, 0
    for uid, (one, two, ref), (call_size, position) in zip(uids, answers, places, strict=True):
        up = escalation_reason(spec, "ai_complete" if one else "failed", one, two) is not None
        sent_up += up
        final = ref if up else one
        answered += final is not None
        if ref is None or final is None:
            unanswered += 1
            continue
        samples.append(Sample(uid, call_size, position, compare_answers(spec, final, ref)))
    result = size_result(
        size,
        first.run_id,
        first.status if first.status == second.status else f"{first.status}/{second.status}",
        first.calls + second.calls,
        first.cost_usd + second.cost_usd,
        samples,
        answered=answered,
        unanswered=unanswered,
        largest_call=max(first.largest_call, second.largest_call),
    )
    return result.model_copy(
        update={"escalated_to": to, "second_run_id": second.run_id, "sent_up": sent_up}
    )


def recommend(results: Sequence[SizeResult], target: float) -> int | None:
    """The largest size that, with every smaller size measured, meets ``target``
    (``None``: the smallest size already misses it). See the module docstring."""
    best = None
    for result in sorted(results, key=lambda r: r.size):
        if result.size == 1:
            continue
        if not result.meets(target):
            break
        best = result.size
    return best


class Calibration(BaseModel):
    """A whole calibration, as ``calibrate`` prints it, ``--json`` writes it and the
    ``calibrations`` table keeps it."""

    calibration_id: str
    document: str
    document_id: str
    schema_name: str
    schema_id: str
    model: str
    sample: int
    seed: str
    target: float
    #: The alone run (size 1) first, then each size, ascending.
    sizes: list[SizeResult]
    recommended: int | None
    #: What the whole document is expected to cost in a sync run at the recommended size
    #: (at 1 when none meets the target) and at the default pack sizing (the quote's).
    cost_at_recommended_usd: float | None = None
    cost_at_default_usd: float | None = None
    default_blocks_per_pack: tuple[int, int] | None = None
    #: The calibration's own cost: every run's calls.
    cost_usd: float = 0.0
    created_at: datetime
    notes: list[str] = Field(default_factory=list)
    #: The model whose alone answers the sizes were compared with (``None``: ``model``
    #: itself). The alone run (size 1) ran on it.
    reference_model: str | None = None
    #: ``--escalation``: each size escalated to the reference (ascending), and the largest
    #: that meets the target with every smaller one (:func:`recommend`'s rule).
    escalation: list[SizeResult] = Field(default_factory=list)
    escalation_recommended: int | None = None

    def advice(self) -> str:
        """The recommendation in words."""
        if self.recommended is None:
            return (
                f"none meets the target of {percent(self.target)}: use --pack-size 1 "
                "or lower the target"
            )
        return (
            f"recommended pack size: {self.recommended} (the largest that meets "
            f"{percent(self.target)}, with every smaller size)"
        )


class ModelChoice(BaseModel):
    """One (model, size) pair of a calibration across models, with what it costs."""

    model: str
    size: int
    #: Agreement with the reference's alone answers (``None``: the reference alone).
    rate: float | None
    #: The whole document in a sync run at this pair (the quote's figure).
    whole_cost_usd: float | None
    #: Escalated to this model (``--escalate-to``); ``None``: the pair alone.
    escalate_to: str | None = None

    def flags(self) -> str:
        """The run options that use this pair."""
        flags = f"--model {self.model} --pack-size {self.size}"
        return flags + (f" --escalate-to {self.escalate_to}" if self.escalate_to else "")


def cheapest_choice(calibrations: Sequence[Calibration]) -> ModelChoice | None:
    """The cheapest (model, size), escalated or not, whose size is at most its model's
    recommended size of that kind (every such size met the target, with every smaller
    one); ties go to the pair without escalation, then the larger size. ``None``: no
    candidate meets the target at any size (see the module docstring)."""
    choices = [
        ModelChoice(
            model=c.model,
            size=r.size,
            rate=r.rate,
            whole_cost_usd=r.whole_cost_usd,
            escalate_to=r.escalated_to,
        )
        for c in calibrations
        for results, best in ((c.sizes, c.recommended), (c.escalation, c.escalation_recommended))
        if best is not None
        for r in results
        if 1 < r.size <= best and r.whole_cost_usd is not None
    ]
    return min(
        choices,
        key=lambda o: (o.whole_cost_usd or 0.0, o.escalate_to is not None, -o.size),
        default=None,
    )


class ModelCalibration(BaseModel):
    """A calibration across models, as ``calibrate --models`` prints it and ``--json``
    writes it. Each candidate's :class:`Calibration` is stored as one ``calibrations`` row
    (its id ``<calibration_id>:<model>``), so a quote of the schema on that model finds it."""

    calibration_id: str
    document: str
    schema_name: str
    reference_model: str
    sample: int
    target: float
    #: One per candidate model, in the order asked; each starts with the reference's
    #: alone run (size 1).
    calibrations: list[Calibration]
    #: The cheapest pair that meets the target (``None``: none does).
    choice: ModelChoice | None
    #: The reference model alone on the whole document: what the choice is measured against.
    reference_alone_usd: float | None = None
    #: The calibration's own cost: every run's calls (the alone run counted once).
    cost_usd: float = 0.0
    created_at: datetime
    notes: list[str] = Field(default_factory=list)

    def advice(self) -> str:
        """The choice in words."""
        if self.choice is None:
            return (
                f"no model meets the target of {percent(self.target)} at any pack size: use "
                f"{self.reference_model} alone (--model {self.reference_model} --pack-size 1) "
                "or lower the target"
            )
        escalated = f" escalated to {self.choice.escalate_to}" if self.choice.escalate_to else ""
        return (
            f"recommended: {self.choice.model} at pack size {self.choice.size}{escalated} "
            f"(the cheapest pair that meets {percent(self.target)} against "
            f"{self.reference_model} alone): {self.choice.flags()}"
        )


class CalibrationNote(BaseModel):
    """What a quote says of the latest calibration of its schema and model."""

    calibration_id: str
    recommended: int | None
    target: float
    created_at: datetime
    document: str
    #: The model it was compared against, when not the quoted model itself.
    reference_model: str | None = None

    def text(self) -> str:
        """``calibrated: size 20 meets 95.0% (calibration cal-… of 2026-11-23)``."""
        when = self.created_at.date().isoformat()
        which = f"(calibration {self.calibration_id} of {when})"
        against = f" against {self.reference_model} alone" if self.reference_model else ""
        if self.recommended is None:
            return (
                f"calibrated: no pack size met {percent(self.target)}{against} {which}: "
                "use 1 or lower the target"
            )
        return f"calibrated: size {self.recommended} meets {percent(self.target)}{against} {which}"
