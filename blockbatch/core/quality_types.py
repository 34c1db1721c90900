"""The quality probe: its options, its state in a run, its calls and its result."""

from __future__ import annotations

from pydantic import BaseModel, Field

from blockbatch.core.call_types import CallFacts, Totals


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
    probe_maximum: int = Field(
        default=2000,
        ge=0,
        description="at most this many blocks are probed (wins over probe_rate; "
        "probe_minimum wins over it): the agreement's precision depends on the sample's "
        "size, not the document's, and 2,000 samples measure an agreement near 95% "
        "within about a point (95% interval), where 3% of a million blocks would be "
        "30,000 more calls",
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
