"""Simulated latency: (ttft + per-token x output) x speed_factor, overlapping across requests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from blockbatch.simulator.scenario import Latency, Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import make_blocks, pack_params
from tests.waiting import until


class RecordingSleep:
    """Records the delays asked for and waits on an event instead of the wall clock."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await self.release.wait()


@pytest_asyncio.fixture
async def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest_asyncio.fixture
async def sim(sleep: RecordingSleep) -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(sleep=sleep) as server:
        yield server


async def test_speed_factor_zero_never_sleeps(client, sleep):
    await client.messages.create(**pack_params(make_blocks(3)))
    assert sleep.delays == []


async def test_latency_follows_output_tokens_and_speed_factor(sim, client, sleep):
    sim.scenario = Scenario(speed_factor=0.5, latency=Latency(ttft_ms=400, per_output_token_ms=10))
    message = await client.messages.create(**pack_params(make_blocks(3)))
    expected = (400 + 10 * message.usage.output_tokens) * 0.5 / 1000
    assert sleep.delays == [pytest.approx(expected)]


async def test_concurrent_requests_wait_at_the_same_time(sim, client, sleep):
    sim.scenario = Scenario(speed_factor=1.0)
    sleep.release.clear()
    calls = [
        asyncio.create_task(client.messages.create(**pack_params(make_blocks(1, start=i))))
        for i in range(5)
    ]
    await until(lambda: len(sleep.delays) == 5, "all five requests waiting together")
    sleep.release.set()
    messages = await asyncio.gather(*calls)
    assert all(m.stop_reason == "tool_use" for m in messages)


async def test_thinking_tokens_take_generation_time_too(sim, client, sleep):
    sim.scenario = Scenario(speed_factor=1.0, latency=Latency(ttft_ms=0, per_output_token_ms=10))
    params = pack_params(make_blocks(3), model="claude-opus-5-5")
    del params["tools"], params["tool_choice"]  # Opus 5.5 takes no forced tool; it thinks
    message = await client.messages.create(**params)
    thinking = message.usage.output_tokens_details.thinking_tokens
    assert 0 < thinking < message.usage.output_tokens
    assert sleep.delays == [pytest.approx(10 * message.usage.output_tokens / 1000)]
