"""Reads for a worker's metrics (``blockbatch/runtime/metrics.py``): what an activity's output leaves out.

Most metrics come straight from activity outputs; these few small reads fill the gaps, each
by primary key or one run's overlays, and only where the output is silent: a probe's or a
warm-up's ledger row, the reason codes of blocks that just failed, the blocks a closing run
is about to end, and a batch round's failures by reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True)
class CallRecord:
    """One ledger row as the metrics count it."""

    purpose: str
    #: started / succeeded / failed / abandoned
    status: str
    http_status: int | None
    error_type: str | None
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cost_usd: float


async def call_record(conn: asyncpg.Connection | asyncpg.Pool, call_id: int) -> CallRecord | None:
    """The ledger row ``call_id``, or ``None`` when there is none."""
    row = await conn.fetchrow(
        """select purpose, status, http_status, error_type, input_tokens, output_tokens,
                  cache_creation_input_tokens, cache_read_input_tokens,
                  cost_usd::float8 as cost_usd
           from llm_calls where call_id = $1""",
        call_id,
    )
    return None if row is None else CallRecord(**dict(row))


async def reasons_of(
    conn: asyncpg.Connection | asyncpg.Pool, run_id: str, uids: Sequence[str]
) -> dict[str, int]:
    """Failed blocks among ``uids`` by reason code (``unknown``: none set)."""
    rows = await conn.fetch(
        """select coalesce(reason_code, 'unknown') as code, count(*) as n
           from overlays where run_id = $1 and block_uid = any($2::text[])
             and status = 'failed'
           group by 1""",
        run_id,
        list(uids),
    )
    return {r["code"]: int(r["n"]) for r in rows}


async def pending_count(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> int:
    """How many of the run's blocks are still pending."""
    return int(
        await conn.fetchval(
            "select count(*) from overlays where run_id = $1 and status = 'pending'", run_id
        )
    )


async def failed_by_reason(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> dict[str, int]:
    """The run's failed blocks by reason code (``unknown``: none set)."""
    rows = await conn.fetch(
        """select coalesce(reason_code, 'unknown') as code, count(*) as n
           from overlays where run_id = $1 and status = 'failed' group by 1""",
        run_id,
    )
    return {r["code"]: int(r["n"]) for r in rows}
