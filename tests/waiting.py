"""Waiting for an event in a test, never racing the clock.

A test that must see something happen (a row, a log line, the simulator holding answers)
polls for it with :func:`until`. The deadline only turns a hang into a failure: it is far
beyond what the slowest machine takes (docs/testing.md, "No test depends on the machine's
speed"), so a loaded machine gives the same verdict as an idle one, only later.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

#: Seconds before a wait gives up: a hang, not a slow machine.
DEADLINE_S = 120.0


async def until(
    check: Callable[[], Any],
    what: str,
    *,
    timeout: float = DEADLINE_S,
    interval: float = 0.05,
) -> Any:
    """Call ``check`` (plain or async) until it returns something truthy; return that.

    Fails with ``never <what>`` (and the last value seen) after ``timeout`` seconds of the
    event loop's clock.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"never {what} (last seen: {value!r})")
        await asyncio.sleep(interval)
