"""Riding out an API outage: the options, the down report, the probe and its progress."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from blockbatch.core.call_types import CallFacts


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


class ApiDownReport(BaseModel):
    """What a pack tells its run when its call kept failing because Claude is down."""

    pack_workflow_id: str
    pack_path: str
    #: Consecutive failed attempts of the pack's call, the first of them at ``since``.
    failures: int
    since: datetime
    error: str


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
