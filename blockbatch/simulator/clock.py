"""Injectable wall clocks, so tests can expire caches and rate-limit buckets without sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable

#: A clock returns the current time in unix seconds.
Clock = Callable[[], float]


def system_clock() -> float:
    """The real wall clock."""
    return time.time()


class FakeClock:
    """A clock that only moves when told to.

    Example:
        clock = FakeClock()
        async with SimulatorServer(clock=clock) as sim: ...
        clock.advance(301)  # the 5-minute cache entries are now expired
    """

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self.now += seconds
