"""Escalation (``--escalate-to MODEL``): pay the strong model only where the cheap one is unsure.

Every block a run answered in packs is asked a second time by the run's model, in a
**second packing**, and the two answers are compared with :mod:`blockbatch.core.agreement`'s
rules; a block is **escalated** (asked alone on the escalation model, whose answer becomes
its overlay) when :func:`escalation_reason` says so. The pure rules live here:

| rule | what |
|---|---|
| :func:`second_order` | the order the second pass plans its packs in: the first pass's blocks dealt round-robin over as many hands as it had packs (at least 3), then reversed, so no two blocks that were neighbours in a first-pass pack are neighbours again, and few blocks keep their place (with even packs, those that shared a place in the first pass are spread over every place of a second pack) |
| :func:`escalation_reason` | ``failed`` (the first pass failed the block), ``refused`` (it was refused), ``no_second_answer``, ``disagrees`` (a field differs), or ``None``: the two answers agree and the first stays |
| :func:`vs_probe` | the escalation checked on the quality probe's sample: each sampled block's answer before (the probe's verdict on the packed answer) and after the escalation against its answer alone, with the probe's own comparison (``compare_answers``) |

The second pass is planned with the run's own :meth:`RunContext.plan` over
:func:`second_order`, so its packs obey the same token limits; its calls carry the run's
system prompt and tool unchanged, so they read the prefix the first pass cached (same
model, same bytes up to the last breakpoint).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from blockbatch.core.agreement import Tally, compare_answers
from blockbatch.core.escalation_types import EscalationVsProbe
from blockbatch.core.quality import rate
from blockbatch.core.schema import SchemaSpec

#: A run is escalated once it ran to its end: a cancelled, failed or budget-stopped run
#: is retried first (its escalation would end it as if it had completed).
ESCALATED_STATUSES = ("completed", "completed_with_failures")

EscalationReason = Literal["failed", "refused", "no_second_answer", "disagrees"]


def second_order(packs: Sequence[Sequence[str]]) -> list[str]:
    """The blocks of the first pass's ``packs`` (each a list of block uids, in pack order),
    in the order the second pass plans them (see the module docstring).

    Dealt round-robin over ``h = max(3, len(packs))`` hands in first-pass order, the hands
    concatenated and the whole reversed. Inside a hand, next blocks were ``h`` places apart;
    where one hand ends and the next begins, ``k * h - 1`` places (``k >= 1`` whenever the
    first pass has at least ``2 * h`` blocks, e.g. packs of 2 or more); so no two blocks
    next to each other were neighbours in a first-pass pack. A very small first pass (fewer
    than ``2 * h`` blocks) may keep a pair.
    """
    flat = [uid for pack in packs for uid in pack]
    hands = max(3, len(packs))
    dealt = [flat[start::hands] for start in range(hands)]
    return [uid for hand in dealt for uid in hand][::-1]


def escalation_reason(
    spec: SchemaSpec,
    first_status: str,
    first: Mapping[str, Any] | None,
    second: Mapping[str, Any] | None,
    *,
    first_reason: str | None = None,
) -> EscalationReason | None:
    """Why a block goes to the escalation model, or ``None`` when its first answer stays.

    Args:
        first_status: the block's overlay status after the first pass.
        first: its first answer (``None``: none).
        second: its second-pass answer (``None``: none usable).
        first_reason: the first pass's reason code when it failed (``refused``...).
    """
    if first_status == "failed" or first is None:
        return "refused" if first_reason == "refused" else "failed"
    if second is None:
        return "no_second_answer"
    if not all(f.agree for f in compare_answers(spec, first, second)):
        return "disagrees"
    return None


@dataclass(frozen=True)
class ProbedBlock:
    """A block the quality probe compared, as the escalation left it."""

    #: Its answer alone on the probe's model (``quality_samples.single``).
    single: Mapping[str, Any]
    #: The probe's verdict: did its packed answer agree with ``single``?
    agreed: bool
    #: Its model answer now, after the escalation (``None``: none).
    answer: Mapping[str, Any] | None


def vs_probe(
    spec: SchemaSpec, blocks: Iterable[ProbedBlock], *, probe_model: str, run_model: bool
) -> EscalationVsProbe | None:
    """How many of the probe's compared ``blocks`` agree with their answer alone, before
    the escalation (the probe's own verdict) and after it (their answer now, compared as
    the probe compares: :func:`~blockbatch.core.agreement.compare_answers`, every field
    agreeing); ``None`` without blocks. ``run_model``: the probe asked the run's own model.
    """
    before, after = Tally(), Tally()
    for b in blocks:
        before.add(b.agreed)
        after.add(
            b.answer is not None and all(f.agree for f in compare_answers(spec, b.answer, b.single))
        )
    if not before.total:
        return None
    return EscalationVsProbe(
        probe_model=probe_model,
        run_model=run_model,
        before=rate(before.agreed, before.total),
        after=rate(after.agreed, after.total),
    )
