"""The pure side of riding out an outage: what counts as down, probe timing, the texts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from blockbatch.core.claude_errors import classify, fatal_code_of, is_outage
from blockbatch.core.outage import (
    next_probe_in_s,
    pause_end,
    paused_text,
    probe_delay_s,
    waiting_text,
)
from blockbatch.core.outage_types import OutageOptions, OutageProgress, ProbeApiOutput
from blockbatch.core.outcome import end_code


def test_down_is_5xx_529_408_and_no_answer_not_rate_limits_refusals_or_slow_calls() -> None:
    down = [
        classify(500, "api_error"),
        classify(503, "api_error"),
        classify(529, "overloaded_error"),
        classify(408, "timeout"),
        classify(None, "APIConnectionError"),
        classify(None, "api_error"),
    ]
    up = [
        classify(429, "rate_limit_error"),
        classify(409, "conflict"),
        classify(400, "invalid_request_error"),
        classify(401, "authentication_error"),
        classify(413, "request_too_large"),
        classify(402, "billing_error"),
        # A slow call is no outage: a gateway or client timeout (contract §6, §8).
        classify(504, "timeout_error"),
        classify(None, "timeout_error"),
        classify(None, "APITimeoutError"),
    ]
    assert all(is_outage(e) for e in down)
    assert not any(is_outage(e) for e in up)


def test_probes_come_at_doubling_intervals_up_to_the_cap() -> None:
    options = OutageOptions(probe_initial_s=5, probe_max_s=30)
    assert [probe_delay_s(n, options) for n in range(6)] == [5, 10, 20, 30, 30, 30]
    assert probe_delay_s(10_000, options) == 30  # no overflow after days of probing


def test_waiting_text_says_how_long_how_often_and_what_next() -> None:
    since = datetime(2026, 11, 23, 10, 2, 7, tzinfo=UTC)
    outage = OutageProgress(
        since=since,
        failures=14,
        probes=2,
        last_error="Claude answered 503 api_error: unavailable",
        next_probe_at=since + timedelta(seconds=100),
    )
    text = waiting_text(outage, since + timedelta(seconds=60))
    assert text == (
        "waiting for the API: 14 consecutive failures since 10:02:07 UTC, "
        "2 probes unanswered; next probe in 40 s "
        "(last: Claude answered 503 api_error: unavailable)"
    )
    one = outage.model_copy(update={"failures": 1, "probes": 0, "next_probe_at": None})
    assert waiting_text(one, since) == (
        "waiting for the API: 1 consecutive failure since "
        "10:02:07 UTC (last: Claude answered 503 api_error: "
        "unavailable)"
    )


def test_paused_text_reads_like_a_person_wrote_it() -> None:
    assert [paused_text(s) for s in (0, 44.6, 192, 3725)] == [
        "0 s",
        "45 s",
        "3 min 12 s",
        "1 h 2 min",
    ]


def test_watch_and_status_lead_with_the_outage_while_paused() -> None:
    from blockbatch.cli.progress import describe
    from blockbatch.core.run_types import RunProgress

    since = datetime(2026, 11, 23, 10, 2, 7, tzinfo=UTC)
    base = {
        "run_id": "r",
        "status": "waiting_for_api",
        "blocks_total": 500,
        "blocks_done": 210,
        "blocks_failed": 0,
        "blocks_pending": 290,
        "packs_total": 50,
        "packs_done": 21,
        "packs_running": 8,
        "calls": 29,
        "splits": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cost_usd": 0.5,
    }
    paused = RunProgress(
        **base,
        outage=OutageProgress(
            since=since, failures=32, probes=3, last_error="Claude answered 503 api_error: x"
        ),
    )
    line = describe(paused, None)
    assert line.startswith("waiting for the API: 32 consecutive failures since 10:02:07 UTC")
    assert line.endswith("210/500 blocks · 0 failed")
    running = RunProgress(**{**base, "status": "running"})
    assert "waiting" not in describe(running, None)


T0 = datetime(2026, 11, 28, 3, 0, tzinfo=UTC)
WHERE = "api.anthropic.com: connection refused ([Errno 111])"


def _outage(probes: int = 0) -> OutageProgress:
    return OutageProgress(since=T0, failures=4, probes=probes, last_error="503 api_error")


def test_an_endpoint_never_reached_ends_the_run_once_the_limit_passed() -> None:
    options = OutageOptions(unreachable_after_s=60)
    probe = ProbeApiOutput(up=False, message="could not reach", unreachable=WHERE)
    paused_at = T0 + timedelta(seconds=14)
    early = pause_end(
        _outage(), options, probe, paused_at=paused_at, now=T0 + timedelta(seconds=59)
    )
    assert early is None
    why = pause_end(_outage(), options, probe, paused_at=paused_at, now=T0 + timedelta(seconds=61))
    assert why is not None and why.startswith(f"could not connect to Claude's endpoint {WHERE}")
    assert "HTTPS_PROXY" in why and "ANTHROPIC_BASE_URL" in why and "1 min 1 s" in why
    assert fatal_code_of(why) == "unreachable"
    assert end_code("failed", why) == "unreachable"  # the blocks not done say why


def test_an_answered_endpoint_that_stops_answering_pauses_until_the_pause_limit() -> None:
    options = OutageOptions(unreachable_after_s=60, max_pause_s=3 * 3600)
    probe = ProbeApiOutput(up=False, message="503 api_error")  # Claude answered before
    hour = T0 + timedelta(hours=1)
    assert pause_end(_outage(), options, probe, paused_at=T0, now=hour) is None
    why = pause_end(_outage(), options, probe, paused_at=T0, now=T0 + timedelta(hours=3))
    assert why is not None and why.startswith("Claude did not answer for 3 h 0 min")
    assert "503 api_error" in why
    assert end_code("failed", why) == "api_unavailable"


def test_probes_come_sooner_to_meet_a_limit() -> None:
    options = OutageOptions(probe_initial_s=5, probe_max_s=30, unreachable_after_s=60)
    late = T0 + timedelta(seconds=50)
    # 30 s would be the next interval; the unreachable limit is 10 s away.
    assert next_probe_in_s(_outage(5), options, paused_at=T0, now=late, unreachable=True) == 10
    assert next_probe_in_s(_outage(5), options, paused_at=T0, now=late, unreachable=False) == 30
    # The pause limit as well, and never sooner than a second.
    short = OutageOptions(probe_max_s=30, max_pause_s=100)
    at = T0 + timedelta(seconds=99.9)
    assert next_probe_in_s(_outage(5), short, paused_at=T0, now=at, unreachable=False) == 1
