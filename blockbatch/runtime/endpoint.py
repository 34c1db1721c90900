"""Which Claude endpoint answers: a worker says which one it calls, in Postgres, for as long
as it runs (blockbatch/store/workers.py), and a front door set for another endpoint or key
warns before it starts a run (blockbatch/core/endpoint.py ``mismatch_text``).

:func:`answering_endpoint` is the endpoint that would answer a run started from this
process, the one whose earlier answers the run may reuse (blockbatch/store/overlays.py
``reusable_answers``): the live workers on the task queue say which endpoint they call
(``worker_endpoints``); when none has said (a fleet still starting, workers built
in-process), the endpoint this process's settings point at, asked as a worker asks it
(blockbatch/send/endpoint.py: one Models API request, no prompt, no cost).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import asyncpg

from blockbatch.core.endpoint import Endpoint, answering, key_digest
from blockbatch.runtime.claude import anthropic_client
from blockbatch.runtime.settings import Settings
from blockbatch.send.endpoint import ask_endpoint, check_endpoint
from blockbatch.send.sdk import anthropic
from blockbatch.store import workers

log = logging.getLogger("blockbatch.worker")

#: How often a running worker refreshes its row (well within ``workers.LIVE_WITHIN_S``).
REFRESH_S = 30.0
#: The endpoint a base URL and key answer as, once it answered (by base URL and key digest).
_own: dict[tuple[str | None, str | None], Endpoint] = {}


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


async def answering_endpoint(
    db: asyncpg.Pool | asyncpg.Connection, settings: Settings, task_queue: str | None = None
) -> Endpoint | None:
    """The endpoint (provider and host) a run on ``task_queue`` would be answered by;
    ``None`` when the live workers call different ones or no key is configured."""
    live = await workers.live(db, task_queue or settings.temporal_task_queue)
    if live:
        return answering(live)
    try:
        llm = anthropic_client(settings)
    except RuntimeError:  # a base URL without a key: nothing would answer
        return None
    which = (settings.resolved_anthropic_base_url, key_digest(llm.api_key))
    try:
        known = _own.get(which) or await ask_endpoint(llm)
    finally:
        await llm.close()
    if known is not None:
        _own[which] = known
    return known
