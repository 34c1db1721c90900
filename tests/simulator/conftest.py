"""The simulator in-process, and the real anthropic SDK pointed at it.

A test file that needs another scenario, clock or sleep overrides ``sim``; ``client`` follows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import pytest_asyncio

from blockbatch.simulator.server import SimulatorServer
from tests.simulator.sdk import sdk_client


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer() as server:
        yield server


@pytest_asyncio.fixture
async def client(sim: SimulatorServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with sdk_client(sim.base_url) as sdk:
        yield sdk
