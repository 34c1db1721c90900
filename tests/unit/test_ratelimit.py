"""The fleet limiter's arithmetic: token buckets, settling, learning limits, AIMD."""

from __future__ import annotations

import pytest

from blockbatch.core.ratelimit import (
    ADMIT_MARGIN_S,
    CUT_COOLDOWN_S,
    DEFAULT_LIMITS,
    MIN_FACTOR,
    OUTPUT_HEADROOM,
    RAMP_GROWTH,
    RAMP_IDLE_S,
    RAMP_START,
    Buckets,
    Kind,
    LastSecond,
    Need,
    answered,
    expected,
    fresh,
    learn,
    learn_output,
    limiter_text,
    per_second,
    rate_class,
    reserve,
    settle,
    throttle_of,
    throttled,
)

LIMITS: dict[Kind, int] = {"requests": 6_000, "input": 60_000, "output": 6_000}


def full(limits: dict[Kind, int] | None = None, now: float = 0.0) -> Buckets:
    """Buckets full at their whole capacity (a limiter whose ramp is done)."""
    return fresh(limits or LIMITS, now, ramp=1.0)


def test_reservations_take_from_every_bucket_until_one_is_short() -> None:
    b = full()
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
    b = reserve(full(), Need(0, 0, 5_800), now=0.0).buckets
    assert b.levels["output"] == pytest.approx(200)
    last = reserve(b, Need(0, 0, 150), now=0.0)
    # 150 + a second's refill (100) is 50 more than the 200 left: half a second.
    assert not last.admitted and last.wait_s == pytest.approx(0.5)
    assert reserve(b, Need(0, 0, 150), now=0.5).admitted
    # What a call does not count against (no input here) needs no margin.
    assert reserve(full(), Need(1, 0, 6_000 - 100), now=0.0).admitted


def test_buckets_refill_continuously_not_per_minute() -> None:
    b = reserve(full(), Need(1, 0, 6_000), 0.0).buckets
    assert b.levels["output"] == 0
    assert b.refilled(15.0).levels["output"] == pytest.approx(1_500)
    half = reserve(full(), Need(1, 0, 3_000), 0.0).buckets
    assert half.refilled(40.0).levels["output"] == 6_000  # never above the limit


def test_a_need_larger_than_a_bucket_waits_for_a_full_one_then_goes_alone() -> None:
    b = reserve(full(), Need(1, 0, 3_000), 0.0).buckets
    big = Need(1, 0, 9_000)
    adm = reserve(b, big, 0.0)
    assert not adm.admitted and adm.wait_s == pytest.approx(30.0)
    assert reserve(b, big, 30.0).admitted


def test_settling_gives_back_unused_output_and_takes_unexpected_input() -> None:
    b = reserve(full(), Need(1, 1_000, 4_000), 0.0).buckets
    after = settle(b, Need(1, 1_000, 4_000), Need(1, 5_000, 500), 0.0)
    assert after.levels["output"] == pytest.approx(6_000 - 500)
    assert after.levels["input"] == pytest.approx(60_000 - 5_000)
    assert after.levels["tokens"] == pytest.approx(DEFAULT_LIMITS["tokens"] - 5_500)


def test_limits_are_learned_from_headers_and_remaining_caps_the_level() -> None:
    b = fresh(None, 0.0, ramp=1.0)  # generous defaults until an answer says otherwise
    learned = learn(
        b,
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "12",
            "anthropic-ratelimit-input-tokens-limit": "30000",
            "anthropic-ratelimit-output-tokens-limit": "8000",
            "anthropic-ratelimit-output-tokens-remaining": "not a number",
            "anthropic-ratelimit-tokens-limit": "20000",
            "anthropic-ratelimit-tokens-remaining": "19000",
        },
        0.0,
    )
    assert dict(learned.limits) == {
        "requests": 50,
        "input": 30_000,
        "output": 8_000,
        "tokens": 20_000,
    }
    assert learned.levels["requests"] == 12  # another client used the rest
    assert learned.levels["input"] == 30_000 and learned.levels["output"] == 8_000
    assert learned.levels["tokens"] == 19_000


@pytest.mark.parametrize("tokens", ["38000", "8000", "30000", "50000"])
def test_a_tokens_limit_that_repeats_the_input_or_output_limit_adds_none(tokens: str) -> None:
    # Read as their sum, or as the tighter of them: the input and output buckets hold it.
    learned = learn(
        full(),
        {
            "anthropic-ratelimit-input-tokens-limit": "30000",
            "anthropic-ratelimit-output-tokens-limit": "8000",
            "anthropic-ratelimit-tokens-limit": tokens,
            "anthropic-ratelimit-tokens-remaining": "0",
        },
        0.0,
    )
    assert learned.limits["tokens"] == 38_000 and learned.levels["tokens"] == 38_000


def test_the_most_restrictive_token_limit_binds_input_and_output_together() -> None:
    # A workspace limit of 12,000 tokens a minute under the account's 60,000 in / 6,000 out.
    b = learn(full(), {"anthropic-ratelimit-tokens-limit": "12000"}, 0.0)
    b = reserve(b, Need(1, 5_000, 1_000), 0.0).buckets
    refused = reserve(b, Need(1, 5_000, 1_000), 0.0)
    assert not refused.admitted and refused.binding == "tokens"
    # 6,000 + a second's refill (200) short by 200 at 200 a second: one second.
    assert refused.wait_s == pytest.approx(1.0)


def test_no_more_than_a_seconds_share_goes_out_in_any_second() -> None:
    # 600 requests and 60,000 input tokens a minute: ten requests, 1,000 tokens a second
    # (the minute before ran at full rate: no ramp).
    b = full({"requests": 600, "input": 60_000, "output": 60_000})
    steady = 600
    assert per_second(b, Need(1, 100, 0), LastSecond()) is None
    assert per_second(b, Need(1, 100, 0), LastSecond(9, 900, 0.4, steady)) is None
    tenth = per_second(b, Need(1, 100, 0), LastSecond(10, 900, 0.4, steady))
    assert tenth is not None and tenth.binding == "requests"
    assert tenth.wait_s == pytest.approx(0.6)  # when the oldest leaves the window
    heavy = per_second(b, Need(1, 200, 0), LastSecond(2, 900, 0.9, steady))
    assert heavy is not None and heavy.binding == "input"
    # The first admission of a second passes whatever its tokens.
    assert per_second(b, Need(1, 50_000, 0), LastSecond()) is None
    # At least one request a second under any limit; the ramp's share applies.
    slow = full({"requests": 30, "input": 600_000, "output": 60_000})
    assert per_second(slow, Need(1, 0, 0), LastSecond(1, 0, 0.5)) is not None
    ramping = fresh({"requests": 600, "input": 60_000, "output": 60_000}, 0.0)
    # (a quarter of ten a second: two and a half)
    assert per_second(ramping, Need(1, 0, 0), LastSecond(1, 0, 0.5)) is None
    assert per_second(ramping, Need(1, 0, 0), LastSecond(2, 0, 0.5)) is not None


def test_no_second_admits_more_than_twice_the_minute_befores_mean() -> None:
    b = full({"requests": 600, "input": 600_000, "output": 60_000})
    # From idle: the start share of ten a second (two and a half).
    assert per_second(b, Need(1, 0, 0), LastSecond(2, 0, 0.5, 0)) is not None
    # The minute before ran at 3 a second (180): up to 6 now, never over the limit's 10.
    assert per_second(b, Need(1, 0, 0), LastSecond(5, 0, 0.5, 180)) is None
    assert per_second(b, Need(1, 0, 0), LastSecond(6, 0, 0.5, 180)) is not None
    assert per_second(b, Need(1, 0, 0), LastSecond(10, 0, 0.5, 6_000)) is not None


def test_a_fresh_or_idle_limiter_ramps_up_from_a_start_share_with_its_answers() -> None:
    b = fresh(LIMITS, 0.0)
    assert b.ramp == RAMP_START
    # A quarter of a minute's output opens at once, not all of it.
    assert b.levels["output"] == pytest.approx(6_000 * RAMP_START)
    b = reserve(b, Need(1, 0, 1_000), 0.0).buckets
    assert not reserve(b, Need(1, 0, 1_000), 0.0).admitted
    grown = b
    for n in range(1, 9):
        grown = answered(grown, 1.0)
        assert grown.ramp == pytest.approx(min(1.0, RAMP_START * RAMP_GROWTH**n))
    assert grown.ramp == 1.0 and grown.factor == 1.0
    # A minute with nothing admitted: the next burst ramps up again.
    assert grown.refilled(RAMP_IDLE_S - 0.5).ramp == 1.0
    assert grown.refilled(RAMP_IDLE_S + 0.5).ramp == RAMP_START


def test_the_fleet_reserves_the_output_answers_write_not_all_of_max_tokens() -> None:
    b = full()
    # Until answers teach it, all of max_tokens.
    assert expected(b, Need(1, 100, 4_000)).output == 4_000
    for _ in range(30):
        reserved = expected(b, Need(1, 100, 4_000))
        b = learn_output(b, reserved, Need(1, 100, 400))  # answers write a tenth
    assert b.output_share == pytest.approx(0.1, rel=0.05)
    assert expected(b, Need(1, 100, 4_000)).output == pytest.approx(
        4_000 * 0.1 * OUTPUT_HEADROOM, rel=0.05
    )
    # A tiny reservation (a warm-up's one token) teaches nothing; nothing drops to zero.
    assert learn_output(b, Need(1, 0, 1), Need(1, 0, 1)) == b
    assert expected(b, Need(1, 0, 1)).output == 1
    # An answer longer than expected is taken back on settling, and the share rises.
    after = learn_output(b, expected(b, Need(1, 0, 4_000)), Need(1, 0, 4_000))
    assert after.output_share > b.output_share


def test_a_429_cuts_the_rate_once_per_burst_and_recovery_is_additive() -> None:
    b = full()
    cut = throttled(b, 10.0, retry_after_s=6)
    assert cut.factor == 0.5
    # Nothing goes out before retry-after, even one request.
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
        up = answered(up, 10.0 + CUT_COOLDOWN_S)
    assert up.factor == pytest.approx(0.45)
    for _ in range(100):
        up = answered(up, 10.0 + CUT_COOLDOWN_S)
    assert up.factor == 1.0


def test_a_ramp_limit_holds_without_a_cut_and_a_spend_cap_changes_nothing() -> None:
    b = full()
    held = throttled(b, 10.0, retry_after_s=4, throttle="hold")
    assert held.factor == 1.0
    assert not reserve(held, Need(1, 0, 0), 13.9).admitted
    assert reserve(held, Need(1, 0, 0), 14.0 + 1.0 + 0.1).admitted
    capped = throttled(b, 10.0, retry_after_s=None, throttle="none")
    assert capped.factor == 1.0 and capped.levels == b.refilled(10.0).levels
    assert throttle_of("enforced_spend_limit_reached", False) == "none"
    assert throttle_of("contract_spend_limit_reached", True) == "none"
    assert throttle_of("ramp_limit_exceeded", True) == "hold"
    assert throttle_of(None, True) == "cut"
    # A 429 without retry-after is a spend cap's (contract §6), whatever the caller knows.
    assert throttle_of(None, False) == "none"


@pytest.mark.parametrize(
    ("model", "bucket"),
    [
        ("claude-haiku-5-5", "haiku-5-5"),
        ("claude-sonnet-5-5", "sonnet-5-5"),
        ("claude-opus-5-5", "opus-5-5"),
        ("claude-sonnet-5", "sonnet-5"),
        ("claude-opus-5", "opus-5"),
        ("claude-fable-5-1", "fable-5"),
        ("claude-fable-5-2", "fable-5"),
        ("claude-sonnet-4-6", "sonnet-4"),
        ("claude-sonnet-4-5-20250929", "sonnet-4"),
        ("claude-opus-4-8", "opus-4"),
        ("claude-opus-4-5", "opus-4"),
        ("claude-haiku-4-5-20251001", "haiku-4-5"),
        ("my-configured-model", "my-configured-model"),
    ],
)
def test_limits_belong_to_a_model_class(model: str, bucket: str) -> None:
    assert rate_class(model) == bucket


def test_limiter_text_says_limits_rate_share_wait_and_429s() -> None:
    text = limiter_text(
        {"requests": 500, "input": 450_000, "output": 90_000},
        learned=True,
        rate=0.5,
        run_share=0.47,
        runs=3,
        run_throttled=2,
        wait_s=12.4,
        binding="output",
    )
    assert text == (
        "limiter 500 rpm · 450k in · 90k out /min (learned) · admitting 50% · "
        "this run 47% of calls (3 runs) · waited 12 s (last: output) · 2 429s"
    )
    alone = limiter_text(
        {"requests": 400_000, "input": 200_000_000, "output": 40_000_000},
        learned=False,
        rate=1.0,
        run_share=1.0,
        runs=1,
        run_throttled=0,
        wait_s=0,
        binding=None,
    )
    assert alone == (
        "limiter 400,000 rpm · 200M in · 40M out /min (assumed until an answer "
        "says) · admitting 100% · waited 0 s · 0 429s"
    )


def test_watch_shows_the_limiter_once_it_held_the_run_back() -> None:
    from datetime import UTC, datetime

    from blockbatch.cli.progress import describe, limiter_detail
    from blockbatch.core.call_types import LimiterNote
    from blockbatch.core.run_types import RunProgress

    base = {
        "run_id": "r",
        "status": "running",
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
    limits = {"requests": 500, "input": 450_000, "output": 90_000}
    at = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
    idle = RunProgress(
        **base, limiter=LimiterNote(at=at, limits=limits, learned=True, rate=1.0, run_share=1.0)
    )
    assert "rate-limited" not in describe(idle, None)  # it never held this run back
    held = RunProgress(
        **base,
        limiter_wait_s=41.5,
        limiter=LimiterNote(
            at=at,
            limits=limits,
            learned=True,
            rate=0.5,
            binding="output",
            run_share=0.3,
            runs=3,
            run_throttled=1,
        ),
    )
    # The progress line says so in a word; the figures are for `watch --verbose`.
    assert describe(held, None).endswith(" · rate-limited")
    assert limiter_detail(idle) is None
    assert limiter_detail(held) == (
        "limiter 500 rpm · 450k in · 90k out /min (learned) · admitting 50% · this run 30% "
        "of calls (3 runs) · waited 42 s (last: output) · 1 429s"
    )
