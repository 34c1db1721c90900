"""Everything one simulator instance holds: scenario, engine, limits, stats, batches."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from blockbatch.simulator.batches import BatchStore
from blockbatch.simulator.clock import Clock, system_clock
from blockbatch.simulator.engine import Engine
from blockbatch.simulator.limits import RateLimiter
from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.stats import Stats

#: How simulated latency is waited for; tests may inject one that only records.
Sleep = Callable[[float], Awaitable[None]]


class SimState:
    """The mutable state of one simulator; the scenario survives :meth:`reset`."""

    def __init__(
        self,
        scenario: Scenario | None = None,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        self.clock: Clock = clock or system_clock
        self.sleep: Sleep = sleep or asyncio.sleep
        self.engine = Engine(scenario or Scenario(), self.clock)
        self.limiter = RateLimiter(self.clock, self.engine.scenario.limits)
        self.stats = Stats()
        #: Open unless a test holds answers back (``POST /_sim/hold``); no batch ends
        #: while it is closed.
        self.gate = asyncio.Event()
        self.gate.set()
        self.batches = BatchStore(self.engine, self.stats, held=lambda: not self.gate.is_set())
        #: Answers ready and waiting at the closed gate.
        self.held = 0

    async def pass_gate(self) -> None:
        """Wait while answers are held; count the ones waiting."""
        if self.gate.is_set():
            return
        self.held += 1
        try:
            await self.gate.wait()
        finally:
            self.held -= 1

    @property
    def scenario(self) -> Scenario:
        return self.engine.scenario

    @scenario.setter
    def scenario(self, scenario: Scenario) -> None:
        """Replace the scenario; the rate-limit buckets keep their levels (see ``limits``)."""
        self.engine.scenario = scenario
        self.limiter.configure(scenario.limits)

    def reset(self) -> None:
        """Clear stats, the prompt cache and batches; refill the rate-limit buckets."""
        self.stats.reset()
        self.engine.reset()
        self.limiter.clear()
        self.batches.clear()
        self.gate.set()


#: Where an app keeps its :class:`SimState`.
STATE: web.AppKey[SimState] = web.AppKey("simulator_state", SimState)


def state_of(request: web.Request) -> SimState:
    """The simulator state of the app serving ``request``."""
    return request.app[STATE]
