"""Escalation: a second pass of weak answers on a stronger model, its state and result."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from blockbatch.core.quality_types import AgreementRate


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


# Resolve the names these models use before (or away from) their definition.
EscalateInput.model_rebuild()
EscalationResult.model_rebuild()
