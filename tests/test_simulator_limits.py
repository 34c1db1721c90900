"""Rate limits over a sliding 60 s window, with a correct retry-after."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import pytest
import pytest_asyncio

from simulator.clock import FakeClock
from simulator.scenario import Limits, Scenario
from simulator.server import SimulatorServer
from simulator.testing import make_blocks, pack_params


@pytest_asyncio.fixture
async def clock() -> FakeClock:
    return FakeClock()


@pytest_asyncio.fixture
async def sim(clock: FakeClock) -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(clock=clock) as server:
        yield server


@pytest_asyncio.fixture
async def client(sim: SimulatorServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=sim.base_url, api_key="k", max_retries=0)


async def test_requests_per_minute_are_enforced(sim, client, clock):
    sim.scenario = Scenario(limits=Limits(rpm=3))
    params = pack_params(make_blocks(1))
    for second in range(3):
        raw = await client.messages.with_raw_response.create(**params)
        assert raw.headers["anthropic-ratelimit-requests-limit"] == "3"
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == str(2 - second)
        clock.advance(10)
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(**params)
    # The first request (t=0) leaves the window at t=60; now is t=30.
    assert caught.value.response.headers["retry-after"] == "30"
    assert caught.value.body["error"]["type"] == "rate_limit_error"
    clock.advance(30)
    await client.messages.create(**params)


async def test_input_tokens_per_minute_are_enforced(sim, client, clock):
    params = pack_params(make_blocks(2), cache_ttl=None)
    prompt = (
        await client.messages.count_tokens(**{k: v for k, v in params.items() if k != "max_tokens"})
    ).input_tokens
    sim.scenario = Scenario(limits=Limits(input_tpm=prompt * 2 + 1))
    await client.messages.create(**params)
    clock.advance(5)
    await client.messages.create(**params)
    clock.advance(5)
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(**params)
    assert caught.value.response.headers["retry-after"] == "50"
    assert "input tokens per minute" in caught.value.body["error"]["message"]
    clock.advance(50)
    await client.messages.create(**params)


async def test_output_tokens_per_minute_are_enforced(sim, client, clock):
    sim.scenario = Scenario(limits=Limits(output_tpm=50))
    params = pack_params(make_blocks(3))
    first = await client.messages.create(**params)
    assert first.usage.output_tokens > 50
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(**params)
    assert caught.value.response.headers["retry-after"] == "60"
    clock.advance(60)
    await client.messages.create(**params)


async def test_cache_reads_do_not_count_against_input_tokens(sim, client):
    params = pack_params(make_blocks(1), system_repeat=300)
    first = await client.messages.create(**params)
    uncached = first.usage.input_tokens + first.usage.cache_creation_input_tokens
    sim.scenario = Scenario(limits=Limits(input_tpm=uncached + first.usage.input_tokens + 1))
    second = await client.messages.create(**params)
    assert second.usage.cache_read_input_tokens > 0


async def test_refused_requests_are_not_answered_and_are_counted(sim, client):
    sim.scenario = Scenario(limits=Limits(rpm=1))
    params = pack_params(make_blocks(1))
    await client.messages.create(**params)
    with pytest.raises(anthropic.RateLimitError):
        await client.messages.create(**params)
    stats = sim.state.stats.snapshot()
    assert stats["requests"]["POST /v1/messages"] == {"200": 1, "429": 1}
    assert stats["stop_reasons"] == {"tool_use": 1}
