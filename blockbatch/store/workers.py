"""The endpoint each live worker calls (``worker_endpoints``, migration 020): written by the
worker at start-up, refreshed while it runs, deleted when it stops; read by a starter that
compares it with its own Claude settings (blockbatch/core/endpoint.py). No secrets: a host and a short
key digest."""

from __future__ import annotations

import asyncpg

from blockbatch.core.endpoint import Endpoint

#: A worker that has not refreshed its row for this long is taken as gone (killed, say).
LIVE_WITHIN_S = 90


async def register(pool: asyncpg.Pool, worker_id: str, task_queue: str, endpoint: Endpoint) -> None:
    """Say which endpoint this worker calls (again after a restart with the same id)."""
    await pool.execute(
        """insert into worker_endpoints (worker_id, task_queue, provider, endpoint_host,
                                         key_sha256)
           values ($1, $2, $3, $4, $5)
           on conflict (worker_id) do update set task_queue = $2, provider = $3,
               endpoint_host = $4, key_sha256 = $5, started_at = now(), seen_at = now()""",
        worker_id,
        task_queue,
        endpoint.provider,
        endpoint.host,
        endpoint.key_sha256,
    )


async def still_here(pool: asyncpg.Pool, worker_id: str) -> None:
    """Refresh the worker's row (it is live)."""
    await pool.execute(
        "update worker_endpoints set seen_at = now() where worker_id = $1", worker_id
    )


async def unregister(pool: asyncpg.Pool, worker_id: str) -> None:
    await pool.execute("delete from worker_endpoints where worker_id = $1", worker_id)


async def live(
    pool: asyncpg.Pool | asyncpg.Connection, task_queue: str, within_s: int = LIVE_WITHIN_S
) -> list[Endpoint]:
    """The distinct endpoints of the workers on ``task_queue`` seen in the last
    ``within_s`` seconds."""
    rows = await pool.fetch(
        """select distinct provider, endpoint_host, key_sha256 from worker_endpoints
           where task_queue = $1 and seen_at > now() - make_interval(secs => $2)""",
        task_queue,
        float(within_s),
    )
    return [
        Endpoint(provider=r["provider"], host=r["endpoint_host"], key_sha256=r["key_sha256"])
        for r in rows
    ]
