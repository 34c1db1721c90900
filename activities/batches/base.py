"""What every batch-mode activity shares: the pool, the client, heartbeats, API errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anthropic
import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.db import DbActivities
from activities.llm import API_KEY_REJECTED, RETRYABLE
from core.context import RunContext

#: The create call was refused for a reason retrying cannot fix (400/413/404).
BATCH_REJECTED = "BatchRejected"
ACTIVE_STATUSES = ("created", "planning", "running")
_HEARTBEAT_EVERY_S = 5.0


class BatchBase:
    """One pool and one anthropic client per worker process (built in ``worker.py``)."""

    def __init__(self, pool: asyncpg.Pool, client: anthropic.AsyncAnthropic) -> None:
        self.pool = pool
        self.client = client
        self._db = DbActivities(pool)

    async def _context(self, conn: asyncpg.Connection, run_id: str) -> RunContext:
        return await self._db.context(conn, run_id)


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


def api_error(err: anthropic.APIError, doing: str) -> ApplicationError:
    """Map an API failure to the error Temporal retries (or does not)."""
    if isinstance(err, anthropic.APIStatusError):
        status = err.status_code
        body: dict[str, Any] = err.body if isinstance(err.body, dict) else {}
        raw = body.get("error")
        error: dict[str, Any] = raw if isinstance(raw, dict) else {}
        text = (f"{status} {error.get('type') or type(err).__name__}: "
                f"{error.get('message') or err.message}")
        if status in (401, 403):
            return ApplicationError(
                f"the API key was rejected by Claude while {doing} ({text}); set a valid "
                "ANTHROPIC_API_KEY for the workers and start a new run",
                type=API_KEY_REJECTED, non_retryable=True)
        if status in (408, 409, 429) or status >= 500:
            value = err.response.headers.get("retry-after")
            delay = None
            try:
                delay = timedelta(seconds=min(max(float(value), 0.5), 300)) if value else None
            except ValueError:
                pass
            return ApplicationError(f"Claude answered {text} while {doing}", type=RETRYABLE,
                                    next_retry_delay=delay)
        return ApplicationError(f"Claude refused {doing} ({text})", type=BATCH_REJECTED,
                                non_retryable=True)
    return ApplicationError(f"could not reach Claude while {doing} ({type(err).__name__}); "
                            "will retry", type=RETRYABLE)
