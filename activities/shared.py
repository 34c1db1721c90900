"""Small helpers every activity class uses: heartbeats, the ledger's record of origin, and
per-run values read from Postgres at most every few seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

from temporalio import activity

from blockbatch.store.ledger import Origin

#: Heartbeats go out at least this often, and at least four times a heartbeat timeout.
_HEARTBEAT_EVERY_S = 5.0
#: Past this many runs a :class:`PerRun` forgets every value at once (runs come and go).
_PER_RUN_KEPT = 1000

T = TypeVar("T")


@asynccontextmanager
async def heartbeating(first: str) -> AsyncIterator[list[str]]:
    """Heartbeat ``status[0]`` every few seconds while the body runs and updates it."""
    status = [first]
    task = asyncio.create_task(_heartbeat_forever(status))
    try:
        yield status
    finally:
        task.cancel()


def heartbeat_every_s() -> float:
    """How often the running activity heartbeats: every few seconds, and often enough for
    the heartbeat timeout its workflow gave it (``RunOptions.call_heartbeat_s``)."""
    timeout = activity.info().heartbeat_timeout
    if timeout is None:
        return _HEARTBEAT_EVERY_S
    return min(_HEARTBEAT_EVERY_S, timeout.total_seconds() / 4)


async def _heartbeat_forever(status: list[str]) -> None:
    every = heartbeat_every_s()
    while True:
        activity.heartbeat(status[0])
        await asyncio.sleep(every)


def origin() -> Origin:
    """The running activity as the ledger records it (workflow, run, activity, attempt)."""
    info = activity.info()
    return Origin(info.workflow_id, info.workflow_run_id, info.activity_id, info.attempt)


class PerRun(Generic[T]):
    """A value per run that a worker reads from Postgres at most every ``every_s`` seconds.

    ``None`` (nothing to say yet) is not kept: the next caller reads again.
    """

    def __init__(self) -> None:
        self._values: dict[str, tuple[float, T]] = {}

    async def get(
        self, run_id: str, every_s: float, read: Callable[[], Awaitable[T | None]]
    ) -> T | None:
        now = time.monotonic()
        kept = self._values.get(run_id)
        if kept is not None and now - kept[0] < every_s:
            return kept[1]
        value = await read()
        if value is None:
            return None
        if len(self._values) > _PER_RUN_KEPT:
            self._values.clear()
        self._values[run_id] = (now, value)
        return value
