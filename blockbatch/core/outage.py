"""Riding out an outage of the API: when to probe, and what a paused run says.

A pack whose call keeps failing because Claude is down (5xx, 529, no answer:
``blockbatch.core.claude_errors.is_outage``; a 504 or a client read-timeout is a slow call, not an
outage, and is only retried) stops retrying on its own after
``OutageOptions.failures_to_pause`` attempts and reports to its run. The run then pauses:
it starts no pack, holds every pack that reported, and probes the API with one small call,
first after ``probe_initial_s`` and then at doubling intervals up to ``probe_max_s``. The
first probe Claude answers resumes every held pack, which makes its call again. No block
fails because the provider was down, and no block is charged an attempt for it.
"""

from __future__ import annotations

from datetime import datetime

from blockbatch.core.models import OutageOptions, OutageProgress


def probe_delay_s(probes_made: int, options: OutageOptions) -> float:
    """Seconds to wait before the next probe, after ``probes_made`` failed ones."""
    return min(options.probe_initial_s * 2 ** min(probes_made, 30), options.probe_max_s)


def waiting_text(outage: OutageProgress, now: datetime) -> str:
    """One line for the run's status: ``waiting for the API: 14 consecutive failures ...``."""
    failures = f"{outage.failures} consecutive failure{'s' if outage.failures != 1 else ''}"
    text = f"waiting for the API: {failures} since {outage.since:%H:%M:%S} UTC"
    if outage.probes:
        text += f", {outage.probes} probe{'s' if outage.probes != 1 else ''} unanswered"
    if outage.next_probe_at is not None:
        wait_s = max((outage.next_probe_at - now).total_seconds(), 0)
        text += f"; next probe in {wait_s:.0f} s"
    return f"{text} (last: {outage.last_error})"


def paused_text(seconds: float) -> str:
    """A pause's length for people: ``45 s``, ``3 min 12 s``, ``1 h 2 min``."""
    total = round(seconds)
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
