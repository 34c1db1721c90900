"""A worker says which Claude endpoint it calls, in Postgres, for as long as it runs
(blockbatch/store/workers.py): a starter set for another endpoint or key warns before it starts a run
(blockbatch/core/endpoint.py ``mismatch_text``)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import asyncpg

from activities.endpoint import check_endpoint
from activities.sdk import anthropic
from blockbatch.core.endpoint import Endpoint
from blockbatch.store import workers

log = logging.getLogger("blockbatch.worker")

#: How often a running worker refreshes its row (well within ``workers.LIVE_WITHIN_S``).
REFRESH_S = 30.0


@asynccontextmanager
async def announced(
    pool: asyncpg.Pool, task_queue: str, client: anthropic.AsyncAnthropic
) -> AsyncIterator[Endpoint]:
    """Register this worker's endpoint on ``task_queue`` until the block ends; say in one
    line whether it is reachable and accepts the key (asked once, at the start)."""
    endpoint, problem = await check_endpoint(client)
    if problem is None:
        log.info("Claude endpoint check: %s answered, the API key is accepted", endpoint.text())
    else:
        log.warning("Claude endpoint check: %s %s", endpoint.text(), problem)
    worker_id = f"{socket.gethostname()}:{os.getpid()}"
    await workers.register(pool, worker_id, task_queue, endpoint)

    async def refresh() -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await workers.still_here(pool, worker_id)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("could not refresh this worker's endpoint row (%s)", type(exc).__name__)

    task = asyncio.create_task(refresh())
    try:
        yield endpoint
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        with suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            await workers.unregister(pool, worker_id)
