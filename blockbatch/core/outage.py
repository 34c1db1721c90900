"""Riding out an outage of the API: when to probe, and what a paused run says.

A pack whose call keeps failing because Claude is down (5xx, 529, no answer:
``blockbatch.core.claude_errors.is_outage``; a 504 or a client read-timeout is a slow call, not an
outage, and is only retried) stops retrying on its own after
``OutageOptions.failures_to_pause`` attempts and reports to its run. The run then pauses:
it starts no pack, holds every pack that reported, and probes the API with one small call,
first after ``probe_initial_s`` and then at doubling intervals up to ``probe_max_s``. The
first probe Claude answers resumes every held pack, which makes its call again. No block
fails because the provider was down, and no block is charged an attempt for it.

No pause waits without end (:func:`pause_end`):

- **Unreachable.** A probe that reaches no server at all (DNS, refused, TLS, proxy:
  ``claude_errors.is_unreachable``) while the endpoint never answered the run is a network or
  settings fault, not Claude being down. Once the pause has lasted
  ``OutageOptions.unreachable_after_s`` since the first failed call, the run ends ``failed``,
  its blocks not done with reason ``unreachable``, naming the host, the cause and what to
  check. The probes come sooner to meet that moment (:func:`next_probe_in_s`).
- **Too long.** A pause after answers did come (Claude was there, now it is not) lasts at
  most ``OutageOptions.max_pause_s``; then the run ends ``failed``, its blocks not done with
  reason ``api_unavailable``, to be retried later.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from blockbatch.core.claude_errors import FATAL_OPENING
from blockbatch.core.outage_types import OutageOptions, OutageProgress, ProbeApiOutput

#: What to check when no connection reaches the endpoint.
CHECK_NETWORK = (
    "check the workers' network, HTTPS_PROXY and ANTHROPIC_BASE_URL (a worker says at its "
    "start whether it reached the endpoint), then retry the run's cancelled blocks"
)
#: A probe is never scheduled sooner than this after the last (seconds).
MIN_PROBE_WAIT_S = 1.0


def probe_delay_s(probes_made: int, options: OutageOptions) -> float:
    """Seconds to wait before the next probe, after ``probes_made`` failed ones."""
    return min(options.probe_initial_s * 2 ** min(probes_made, 30), options.probe_max_s)


def next_probe_in_s(
    outage: OutageProgress,
    options: OutageOptions,
    *,
    paused_at: datetime,
    now: datetime,
    unreachable: bool,
) -> float:
    """Seconds until the next probe: the doubling interval, or sooner when a limit of
    :func:`pause_end` falls before it (``unreachable``: the last probe reached no server)."""
    ends = [paused_at + timedelta(seconds=options.max_pause_s)]
    if unreachable:
        ends.append(outage.since + timedelta(seconds=options.unreachable_after_s))
    until_end = min((end - now).total_seconds() for end in ends)
    return max(min(probe_delay_s(outage.probes, options), until_end), MIN_PROBE_WAIT_S)


def pause_end(
    outage: OutageProgress,
    options: OutageOptions,
    probe: ProbeApiOutput,
    *,
    paused_at: datetime,
    now: datetime,
) -> str | None:
    """Why the run ends after ``probe`` went unanswered (``None``: the pause goes on).

    The text begins as ``claude_errors.FATAL_OPENING`` has it, so the run's blocks not done
    end with its reason code (``unreachable`` or ``api_unavailable``).
    """
    failing_s = (now - outage.since).total_seconds()
    if probe.unreachable is not None and failing_s >= options.unreachable_after_s:
        return (
            f"{FATAL_OPENING['unreachable']} {probe.unreachable}: no connection for "
            f"{paused_text(failing_s)}, and it never answered this run; {CHECK_NETWORK}"
        )
    paused_s = (now - paused_at).total_seconds()
    if paused_s >= options.max_pause_s:
        return (
            f"{FATAL_OPENING['api_unavailable']} {paused_text(paused_s)}, the run's longest "
            f"pause (outage.max_pause_s {options.max_pause_s:g} s; last: {outage.last_error}); "
            "retry the run's cancelled blocks once it answers"
        )
    return None


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
