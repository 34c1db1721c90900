"""Small helpers every activity class uses: heartbeats and the ledger's record of origin."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio import activity

from store.ledger import Origin

_HEARTBEAT_EVERY_S = 5.0


@asynccontextmanager
async def heartbeating(first: str) -> AsyncIterator[list[str]]:
    """Heartbeat ``status[0]`` every few seconds while the body runs and updates it."""
    status = [first]
    task = asyncio.create_task(_heartbeat_forever(status))
    try:
        yield status
    finally:
        task.cancel()


async def _heartbeat_forever(status: list[str]) -> None:
    while True:
        activity.heartbeat(status[0])
        await asyncio.sleep(_HEARTBEAT_EVERY_S)


def origin() -> Origin:
    """The running activity as the ledger records it (workflow, run, activity, attempt)."""
    info = activity.info()
    return Origin(info.workflow_id, info.workflow_run_id, info.activity_id, info.attempt)
