"""Rate limits as token buckets, like the API's: refill, reservations, headers, retry-after.

Every test drives the buckets with a fake clock, so nothing here depends on how fast the
machine is.
"""

from __future__ import annotations

import asyncio
import urllib.error
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
import pytest_asyncio

from blockbatch.simulator.clock import FakeClock
from blockbatch.simulator.limits import rfc3339
from blockbatch.simulator.scenario import Limits, Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import control, make_blocks, pack_params
from tests.helpers import error_body

START = 1_700_000_000.0


@pytest_asyncio.fixture
async def clock() -> FakeClock:
    return FakeClock(start=START)


@pytest_asyncio.fixture
async def sim(clock: FakeClock) -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(clock=clock) as server:
        yield server


async def create(client: anthropic.AsyncAnthropic, params: dict[str, Any]) -> Any:
    """One request; returns the raw response (headers; ``await .parse()`` for the message)."""
    return await client.messages.with_raw_response.create(**params)


async def refused(client: anthropic.AsyncAnthropic, params: dict[str, Any]) -> Any:
    """One request that must be answered 429; returns the SDK's error."""
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(**params)
    assert error_body(caught.value)["error"]["type"] == "rate_limit_error"
    return caught.value


async def prompt_tokens(client: anthropic.AsyncAnthropic, params: dict[str, Any]) -> int:
    counted = {k: v for k, v in params.items() if k != "max_tokens"}
    return (await client.messages.count_tokens(**counted)).input_tokens


async def test_requests_refill_continuously_not_at_a_window_edge(sim, client, clock):
    sim.scenario = Scenario(limits=Limits(rpm=6))
    params = pack_params(make_blocks(1))
    for left in range(5, -1, -1):
        raw = await create(client, params)
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == str(left)
    error = await refused(client, params)
    assert error.response.headers["retry-after"] == "10"  # one request every 10 s
    assert "6 requests per minute" in error_body(error)["error"]["message"]
    clock.advance(30)  # half a minute after draining, half the capacity is back
    for left in (2, 1, 0):
        raw = await create(client, params)
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == str(left)
    await refused(client, params)


async def test_input_tokens_refill_at_a_sixtieth_of_the_limit_per_second(sim, client, clock):
    params = pack_params(make_blocks(2), cache_ttl=None)
    prompt = await prompt_tokens(client, params)
    sim.scenario = Scenario(limits=Limits(input_tpm=prompt * 2))
    await create(client, params)
    await create(client, params)
    error = await refused(client, params)
    assert error.response.headers["retry-after"] == "30"  # half the limit comes back in 30 s
    assert f"{prompt * 2:,} input tokens per minute" in error_body(error)["error"]["message"]
    clock.advance(30)
    await create(client, params)
    await refused(client, params)


async def test_cache_writes_count_against_input_tokens_and_reads_do_not(sim, client):
    params = pack_params(make_blocks(1), system_repeat=300)
    prompt = await prompt_tokens(client, params)
    limit = prompt + 500
    sim.scenario = Scenario(limits=Limits(input_tpm=limit))
    first = await create(client, params)
    usage = (await first.parse()).usage
    assert usage.cache_creation_input_tokens > 0
    after_first = limit - usage.input_tokens - usage.cache_creation_input_tokens
    assert first.headers["anthropic-ratelimit-input-tokens-remaining"] == str(after_first)
    # The whole prompt no longer fits, but a cache hit costs only what follows the cache.
    assert after_first < prompt
    second = await create(client, params)
    usage = (await second.parse()).usage
    assert usage.cache_read_input_tokens > 0
    remaining = int(second.headers["anthropic-ratelimit-input-tokens-remaining"])
    assert remaining == after_first - usage.input_tokens


async def test_output_counts_the_actual_output_and_reserves_no_max_tokens(sim, client, clock):
    # Contract §3: OTPM counts actual output; max_tokens is not reserved.
    answer = await client.messages.create(**pack_params(make_blocks(3)))
    output = answer.usage.output_tokens
    limit = output + output // 2  # room for one and a half answers
    sim.scenario = Scenario(limits=Limits(output_tpm=limit))
    params = pack_params(make_blocks(3), max_tokens=8_000)  # above the whole limit
    first = await create(client, params)
    assert first.headers["anthropic-ratelimit-output-tokens-remaining"] == str(limit - output)
    # Something is left, so the next one is admitted, and its output takes the bucket
    # below zero.
    second = await create(client, params)
    assert second.headers["anthropic-ratelimit-output-tokens-remaining"] == "0"
    error = await refused(client, params)
    deficit = 2 * output - limit
    wait = -(-deficit * 60 // limit)  # ceil: until the bucket is back at zero
    assert error.response.headers["retry-after"] == str(wait)
    assert f"{limit:,} output tokens per minute" in error_body(error)["error"]["message"]
    # The binding limit reports nothing remaining, and tokens-* is that limit.
    assert error.response.headers["anthropic-ratelimit-output-tokens-remaining"] == "0"
    assert error.response.headers["anthropic-ratelimit-tokens-remaining"] == "0"
    assert error.response.headers["anthropic-ratelimit-tokens-limit"] == str(limit)
    clock.advance(wait - 1)
    await refused(client, params)
    clock.advance(1)
    await create(client, params)


async def test_retry_after_is_exact_refused_a_second_before_admitted_at_it(sim, client, clock):
    sim.scenario = Scenario(limits=Limits(rpm=2))
    params = pack_params(make_blocks(1))
    await create(client, params)
    await create(client, params)
    clock.advance(7)
    error = await refused(client, params)
    retry_after = int(error.response.headers["retry-after"])
    assert retry_after == 23  # one request per 30 s; 7 s of it are already back
    clock.advance(retry_after - 1)
    error = await refused(client, params)
    assert error.response.headers["retry-after"] == "1"
    clock.advance(1)
    await create(client, params)


async def test_the_429_names_the_limit_that_binds_longest(sim, client, clock):
    answer = await client.messages.create(**pack_params(make_blocks(1)))
    needed = answer.usage.output_tokens
    limit = needed // 2
    params = pack_params(make_blocks(1))
    # After one request, the requests bucket (2 per minute) needs 30 s for the next one,
    # while the output bucket needs what the answer took beyond the limit back: longer.
    sim.scenario = Scenario(limits=Limits(rpm=2, output_tpm=limit))
    await create(client, params)
    output_wait = -(-(needed - limit) * 60 // limit)  # ceil
    assert output_wait > 30
    error = await refused(client, params)
    assert f"{limit:,} output tokens per minute" in error_body(error)["error"]["message"]
    assert error.response.headers["retry-after"] == str(output_wait)
    assert error.response.headers["anthropic-ratelimit-output-tokens-remaining"] == "0"
    clock.advance(output_wait - 1)
    await refused(client, params)
    clock.advance(1)
    await create(client, params)

    # With 1 request per minute, the requests bucket binds longest instead.
    sim.state.reset()
    sim.scenario = Scenario(limits=Limits(rpm=1, output_tpm=100_000))
    await create(client, params)
    error = await refused(client, params)
    assert "1 requests per minute" in error_body(error)["error"]["message"]
    assert error.response.headers["retry-after"] == "60"
    assert error.response.headers["anthropic-ratelimit-requests-remaining"] == "0"


async def test_a_request_larger_than_the_whole_limit_is_refused_clearly(sim, client, clock):
    params = pack_params(make_blocks(2), max_tokens=4_000)
    prompt = await prompt_tokens(client, params)
    sim.scenario = Scenario(limits=Limits(input_tpm=prompt - 1))
    error = await refused(client, params)
    message = error_body(error)["error"]["message"]
    assert "input tokens per minute" in message
    assert "more than the limit can ever hold" in message
    assert error.response.headers["retry-after"] == "60"
    clock.advance(600)  # waiting does not help
    await refused(client, params)
    stats = sim.state.stats.snapshot()
    assert stats["requests"]["POST /v1/messages"] == {"429": 2}


async def test_every_answer_carries_the_buckets_in_headers(sim, client, clock):
    params = pack_params(make_blocks(2))
    plain = await create(client, params)
    assert not [h for h in plain.headers if h.startswith("anthropic-ratelimit-")]

    sim.scenario = Scenario(limits=Limits(rpm=100, input_tpm=60_000, output_tpm=12_000))
    raw = await create(client, params)
    usage = (await raw.parse()).usage
    uncached = usage.input_tokens + usage.cache_creation_input_tokens
    h = raw.headers
    expected = {
        # limit, remaining, seconds until full (refill: limit / 60 per second)
        "requests": (100, 99, 0.6),
        "input-tokens": (60_000, 60_000 - uncached, uncached / 1_000),
        "output-tokens": (12_000, 12_000 - usage.output_tokens, usage.output_tokens / 200),
    }
    for kind, (limit, remaining, full_in) in expected.items():
        assert h[f"anthropic-ratelimit-{kind}-limit"] == str(limit)
        assert h[f"anthropic-ratelimit-{kind}-remaining"] == str(remaining)
        assert h[f"anthropic-ratelimit-{kind}-reset"] == rfc3339(-(-(START + full_in) // 1))
    # tokens-*: the most restrictive of input and output, the smaller share left.
    tightest = min(("input-tokens", "output-tokens"), key=lambda k: expected[k][1] / expected[k][0])
    for part in ("limit", "remaining", "reset"):
        assert (
            h[f"anthropic-ratelimit-tokens-{part}"] == h[f"anthropic-ratelimit-{tightest}-{part}"]
        )

    clock.advance(60)  # a minute later every bucket is full again
    raw = await create(client, params)
    assert raw.headers["anthropic-ratelimit-requests-remaining"] == "99"


async def test_a_limit_change_mid_run_keeps_the_bucket_levels(sim, client, clock):
    params = pack_params(make_blocks(1))
    sim.scenario = Scenario(limits=Limits(rpm=10))
    for _ in range(10):
        await create(client, params)
    # The account is upgraded through the control API: the drained bucket stays drained
    # and refills at the new rate (20 per minute: one every 3 s).
    body = {"limits": {"rpm": 20}}
    await asyncio.to_thread(control, sim.base_url, "PUT", "/_sim/scenario", body)
    error = await refused(client, params)
    assert error.response.headers["retry-after"] == "3"
    assert error.response.headers["anthropic-ratelimit-requests-limit"] == "20"
    clock.advance(30)
    for _ in range(10):
        await create(client, params)
    await refused(client, params)

    # Halved: a full bucket is clamped to the new, smaller capacity.
    clock.advance(60)
    sim.scenario = Scenario(limits=Limits(rpm=4))
    for left in (3, 2, 1, 0):
        raw = await create(client, params)
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == str(left)
    await refused(client, params)


async def test_others_share_shrinks_capacity_and_refill_but_not_the_stated_limit(
    sim, client, clock
):
    params = pack_params(make_blocks(1))
    sim.scenario = Scenario(limits=Limits(rpm=10, others_share=0.5))
    for left in (4, 3, 2, 1, 0):
        raw = await create(client, params)
        assert raw.headers["anthropic-ratelimit-requests-limit"] == "10"
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == str(left)
    error = await refused(client, params)
    assert error.response.headers["retry-after"] == "12"  # 5 per minute are ours
    clock.advance(120)  # long enough to refill the whole account: half of it is ours
    for _ in range(5):
        await create(client, params)
    await refused(client, params)

    # The other client stops: our share grows, from the level we had.
    sim.scenario = Scenario(limits=Limits(rpm=10))
    error = await refused(client, params)
    assert error.response.headers["retry-after"] == "6"


async def test_others_share_must_leave_something(sim):
    with pytest.raises(urllib.error.HTTPError) as caught:
        await asyncio.to_thread(
            control,
            sim.base_url,
            "PUT",
            "/_sim/scenario",
            {"limits": {"rpm": 10, "others_share": 1.0}},
        )
    assert caught.value.code == 400


async def test_an_injected_429_takes_nothing_from_the_buckets(sim, client):
    params = pack_params(make_blocks(1))
    sim.scenario = Scenario(limits=Limits(rpm=2), errors={"rate_429": 1.0})
    error = await refused(client, params)
    assert error.response.headers["anthropic-ratelimit-requests-remaining"] == "2"
    sim.scenario = Scenario(limits=Limits(rpm=2))
    await create(client, params)
    await create(client, params)
    await refused(client, params)


async def test_reset_refills_every_bucket(sim, client):
    params = pack_params(make_blocks(1))
    sim.scenario = Scenario(limits=Limits(rpm=1))
    await create(client, params)
    await refused(client, params)
    sim.state.reset()
    raw = await create(client, params)
    assert raw.headers["anthropic-ratelimit-requests-remaining"] == "0"


async def test_refused_requests_are_not_answered_and_are_counted(sim, client):
    sim.scenario = Scenario(limits=Limits(rpm=1))
    params = pack_params(make_blocks(1))
    await client.messages.create(**params)
    with pytest.raises(anthropic.RateLimitError):
        await client.messages.create(**params)
    stats = sim.state.stats.snapshot()
    assert stats["requests"]["POST /v1/messages"] == {"200": 1, "429": 1}
    assert stats["stop_reasons"] == {"tool_use": 1}


async def test_per_second_enforces_a_sixtieth_of_each_limit_per_second(sim, client, clock):
    # Contract §6: "60 RPM may be enforced as 1 request per second".
    params = pack_params(make_blocks(1))
    sim.scenario = Scenario(limits=Limits(rpm=120, per_second=True))
    await create(client, params)
    await create(client, params)
    error = await refused(client, params)  # a third within the same second
    assert error.response.headers["retry-after"] == "1"
    assert "enforced as 2 per second" in error_body(error)["error"]["message"]
    assert error.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
    clock.advance(1)
    await create(client, params)
    # Off by default: the minute bucket alone allows a burst.
    sim.scenario = Scenario(limits=Limits(rpm=120))
    for _ in range(5):
        await create(client, params)


async def test_per_second_lets_the_first_request_of_a_second_through_whatever_its_size(
    sim, client, clock
):
    params = pack_params(make_blocks(2), cache_ttl=None)
    prompt = await prompt_tokens(client, params)
    sim.scenario = Scenario(limits=Limits(input_tpm=prompt * 3, per_second=True))
    await create(client, params)  # far more than a sixtieth of the limit, but first
    await refused(client, params)
    clock.advance(1)
    await create(client, params)


async def test_the_ramp_limit_refuses_a_sharp_rise_from_idle(sim, client, clock):
    params = pack_params(make_blocks(1))
    sim.scenario = Scenario(limits=Limits(ramp_floor_rps=2))
    await create(client, params)
    await create(client, params)
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(**params)
    assert caught.value.error_code == "ramp_limit_exceeded"
    assert caught.value.response.headers["retry-after"] == "1"
    clock.advance(1)
    await create(client, params)


async def test_the_ramp_limit_lets_a_gradual_ramp_grow(sim, client, clock):
    params = pack_params(make_blocks(1))
    sim.scenario = Scenario(limits=Limits(ramp_floor_rps=2, ramp_factor=2.0, ramp_baseline_s=10))
    # Ten seconds at 2 per second: the baseline is 2 per second, so 4 pass in the next.
    for _ in range(10):
        await create(client, params)
        await create(client, params)
        clock.advance(1)
    for _ in range(4):
        await create(client, params)
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(**params)
    assert caught.value.error_code == "ramp_limit_exceeded"


async def test_token_remaining_can_be_rounded_to_thousands(sim, client):
    params = pack_params(make_blocks(2))
    sim.scenario = Scenario(
        limits=Limits(input_tpm=60_000, output_tpm=12_000, round_token_remaining=True)
    )
    raw = await create(client, params)
    h = raw.headers
    for kind in ("input-tokens", "output-tokens", "tokens"):
        assert int(h[f"anthropic-ratelimit-{kind}-remaining"]) % 1000 == 0
    assert h["anthropic-ratelimit-input-tokens-remaining"] == "59000"
