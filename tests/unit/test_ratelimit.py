"""The fleet limiter's arithmetic: token buckets, settling, learning limits, AIMD."""

from __future__ import annotations

import pytest

from core.ratelimit import (
    ADMIT_MARGIN_S,
    CUT_COOLDOWN_S,
    MIN_FACTOR,
    Need,
    answered,
    fresh,
    learn,
    limiter_text,
    reserve,
    settle,
    throttled,
)

LIMITS = {"requests": 60, "input": 60_000, "output": 6_000}


def test_reservations_take_from_every_bucket_until_one_is_short() -> None:
    b = fresh(LIMITS, now=0.0)
    need = Need(1, 10_000, 2_000)
    for _ in range(2):
        adm = reserve(b, need, now=0.0)
        assert adm.admitted
        b = adm.buckets
    # The 2,000 left would fit a third, but not with a second's refill (100) to spare.
    refused = reserve(b, need, now=0.0)
    assert not refused.admitted and refused.binding == "output"
    assert refused.wait_s == pytest.approx(ADMIT_MARGIN_S)
    adm = reserve(b, need, now=ADMIT_MARGIN_S)
    assert adm.admitted
    b = adm.buckets
    refused = reserve(b, need, now=ADMIT_MARGIN_S)
    assert not refused.admitted and refused.binding == "output"
    # 2,000 output tokens at 6,000 per minute: 20 s.
    assert refused.wait_s == pytest.approx(20.0)
    assert reserve(b, need, now=ADMIT_MARGIN_S + 20.0).admitted


def test_a_call_is_admitted_with_a_second_of_refill_to_spare() -> None:
    # The API counts a request when it arrives, a moment after the fleet admitted it: after
    # a burst from a full bucket its bucket refills from later on and is a little lower.
    b = fresh(LIMITS, now=0.0)
    for _ in range(59):
        b = reserve(b, Need(1, 0, 0), now=0.0).buckets
    assert b.levels["requests"] == pytest.approx(1.0)
    last = reserve(b, Need(1, 0, 0), now=0.0)
    assert not last.admitted and last.wait_s == pytest.approx(ADMIT_MARGIN_S)
    assert reserve(b, Need(1, 0, 0), now=ADMIT_MARGIN_S).admitted
    # What a call does not count against (no input here) needs no margin.
    assert reserve(fresh(LIMITS, 0.0), Need(1, 0, 6_000 - 100), now=0.0).admitted


def test_buckets_refill_continuously_not_per_minute() -> None:
    b = reserve(fresh(LIMITS, 0.0), Need(60, 0, 0), 0.0).buckets
    assert b.levels["requests"] == 0
    assert b.refilled(15.0).levels["requests"] == pytest.approx(15)
    assert b.refilled(600.0).levels["requests"] == 60  # never above the limit


def test_a_need_larger_than_a_bucket_waits_for_a_full_one_then_goes_alone() -> None:
    b = reserve(fresh(LIMITS, 0.0), Need(1, 0, 3_000), 0.0).buckets
    big = Need(1, 0, 9_000)
    adm = reserve(b, big, 0.0)
    assert not adm.admitted and adm.wait_s == pytest.approx(30.0)
    assert reserve(b, big, 30.0).admitted


def test_settling_gives_back_unused_output_and_takes_unexpected_input() -> None:
    b = reserve(fresh(LIMITS, 0.0), Need(1, 1_000, 4_000), 0.0).buckets
    after = settle(b, Need(1, 1_000, 4_000), Need(1, 5_000, 500), 0.0)
    assert after.levels["output"] == pytest.approx(6_000 - 500)
    assert after.levels["input"] == pytest.approx(60_000 - 5_000)


def test_limits_are_learned_from_headers_and_remaining_caps_the_level() -> None:
    b = fresh(None, 0.0)  # generous defaults until an answer says otherwise
    learned = learn(b, {"anthropic-ratelimit-requests-limit": "50",
                        "anthropic-ratelimit-requests-remaining": "12",
                        "anthropic-ratelimit-input-tokens-limit": "30000",
                        "anthropic-ratelimit-output-tokens-limit": "8000",
                        "anthropic-ratelimit-output-tokens-remaining": "not a number"}, 0.0)
    assert dict(learned.limits) == {"requests": 50, "input": 30_000, "output": 8_000}
    assert learned.levels["requests"] == 12  # another client used the rest
    assert learned.levels["input"] == 30_000 and learned.levels["output"] == 8_000


def test_a_429_cuts_the_rate_once_per_burst_and_recovery_is_additive() -> None:
    b = fresh(LIMITS, 0.0)
    cut = throttled(b, 10.0, retry_after_s=6)
    assert cut.factor == 0.5
    # Nothing goes out before retry-after, even one request (then with the admission margin:
    # half a request at the cut rate of 30 a minute, another second).
    assert not reserve(cut, Need(1, 0, 0), 15.9).admitted
    assert reserve(cut, Need(1, 0, 0), 16.0 + 2.0 + ADMIT_MARGIN_S + 0.1).admitted
    again = throttled(cut, 10.0 + CUT_COOLDOWN_S / 2, retry_after_s=1)
    assert again.factor == 0.5  # the same burst: no second cut
    later = throttled(cut, 10.0 + CUT_COOLDOWN_S, retry_after_s=1)
    assert later.factor == 0.25
    floor = b
    for i in range(20):
        floor = throttled(floor, 100.0 * i, None)
    assert floor.factor == MIN_FACTOR
    up = later
    for _ in range(10):
        up = answered(up, 100.0)
    assert up.factor == pytest.approx(0.45)
    for _ in range(100):
        up = answered(up, 100.0)
    assert up.factor == 1.0


def test_limiter_text_says_limits_rate_share_wait_and_429s() -> None:
    text = limiter_text({"requests": 500, "input": 450_000, "output": 90_000}, learned=True,
                        rate=0.5, run_share=0.47, runs=3, run_throttled=2, wait_s=12.4,
                        binding="output")
    assert text == ("limiter 500 rpm · 450k in · 90k out /min (learned) · admitting 50% · "
                    "this run 47% of calls (3 runs) · waited 12 s (last: output) · 2 429s")
    alone = limiter_text({"requests": 400_000, "input": 200_000_000, "output": 40_000_000},
                         learned=False, rate=1.0, run_share=1.0, runs=1, run_throttled=0,
                         wait_s=0, binding=None)
    assert alone == ("limiter 400,000 rpm · 200M in · 40M out /min (assumed until an answer "
                     "says) · admitting 100% · waited 0 s · 0 429s")


def test_watch_shows_the_limiter_once_it_held_the_run_back() -> None:
    from datetime import UTC, datetime

    from blockbatch.cli.progress import describe, limiter_detail
    from core.models import LimiterNote, RunProgress
    base = {"run_id": "r", "status": "running", "blocks_total": 500, "blocks_done": 210,
            "blocks_failed": 0, "blocks_pending": 290, "packs_total": 50, "packs_done": 21,
            "packs_running": 8, "calls": 29, "splits": 0, "input_tokens": 0,
            "output_tokens": 0, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "cost_usd": 0.5}
    limits = {"requests": 500, "input": 450_000, "output": 90_000}
    at = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
    idle = RunProgress(**base, limiter=LimiterNote(at=at, limits=limits, learned=True,
                                                   rate=1.0, run_share=1.0))
    assert "rate-limited" not in describe(idle, None)  # it never held this run back
    held = RunProgress(**base, limiter_wait_s=41.5, limiter=LimiterNote(
        at=at, limits=limits, learned=True, rate=0.5, binding="output", run_share=0.3,
        runs=3, run_throttled=1))
    # The progress line says so in a word; the figures are for `watch --verbose`.
    assert describe(held, None).endswith(" · rate-limited")
    assert limiter_detail(idle) is None
    assert limiter_detail(held) == (
        "limiter 500 rpm · 450k in · 90k out /min (learned) · admitting 50% · this run 30% "
        "of calls (3 runs) · waited 42 s (last: output) · 1 429s")
