"""The ledger's running totals (migration 035) against the ledger itself, on real Postgres.

``ledger.budget_use`` and ``ledger.observed_output`` read one row of running totals kept by
the ledger's triggers, instead of summing the run's calls on every call: whatever the ledger
goes through (calls opened, answered, failed, lost with their worker, written in bulk by a
batch round), the row says what summing the ledger says.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from blockbatch.core.ingest import parse_document
from blockbatch.core.registry import Usage
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from blockbatch.store import ledger, repo
from tests.helpers import extract_schema, marked_document

ORIGIN = ledger.Origin("wf", "wf-run", "act", 1)
PREFIX: tuple[str, Any, Any] = ("sha", {"system": "x"}, [])


async def _run(pool: asyncpg.Pool, budget: float | None) -> str:
    raw = marked_document(4, set())
    async with pool.acquire() as conn:
        doc = await repo.save_document(
            conn, "doc.md", "markdown", raw, parse_document(raw, "markdown")
        )
        schema = await repo.save_schema(conn, load_schema(extract_schema(instruction_words=50)))
        run_id = await repo.create_run(conn, doc, schema, RunOptions(max_cost_usd=budget))
        await conn.execute("update runs set status = 'running' where run_id = $1", run_id)
    return run_id


async def _open(
    pool: asyncpg.Pool,
    run_id: str,
    path: str,
    *,
    worst_case_usd: float,
    reserve_usd: float,
    expected_usd: float | None = None,
) -> int:
    async with pool.acquire() as conn:
        call = await ledger.open_call(
            conn,
            run_id=run_id,
            pack_path=path,
            pack_attempt=1,
            block_uids=[f"d:{path}:0", f"d:{path}:1"],
            model="claude-haiku-5-5",
            prefix=PREFIX,
            request={"max_tokens": 100},
            origin=ORIGIN,
            est_output_tokens=100,
            worst_case_usd=worst_case_usd,
            reserve_usd=reserve_usd,
            expected_usd=expected_usd,
        )
    assert call is not None
    return call


async def _answer(
    pool: asyncpg.Pool, call: int, out: int, cost: float, stop: str = "end_turn"
) -> None:
    message = {
        "stop_reason": stop,
        "usage": {"input_tokens": 10, "output_tokens": out, "cache_read_input_tokens": 500},
    }
    async with pool.acquire() as conn:
        await ledger.record_answer(conn, call, message, None, Usage.from_message(message), cost, 5)


async def _summed(pool: asyncpg.Pool, run_id: str) -> tuple[float, float]:
    """What summing every call of the run gives (the reads before the running totals)."""
    row = await pool.fetchrow(
        """select coalesce(sum(case when status = 'abandoned'
                                    then greatest(cost_usd, coalesce(worst_usd, 0),
                                                  coalesce(reserved_usd, 0))
                                    else cost_usd end)
                           filter (where status <> 'started'), 0)::float8 as recorded,
                  coalesce(sum(coalesce(reserved_usd, 0)) filter (where status = 'started'),
                           0)::float8 as open_reserved
           from llm_calls where run_id = $1""",
        run_id,
    )
    return row["recorded"], row["open_reserved"]


async def _observed(pool: asyncpg.Pool, run_id: str) -> ledger.Observed | None:
    async with pool.acquire() as conn:
        return await ledger.observed_output(conn, run_id)


async def _use(pool: asyncpg.Pool, run_id: str) -> tuple[float, float]:
    async with pool.acquire() as conn, conn.transaction():
        return await ledger.budget_use(conn, run_id)


async def test_running_totals_say_what_summing_the_ledger_says(pool: asyncpg.Pool) -> None:
    run_id = await _run(pool, budget=10.0)
    a = await _open(pool, run_id, "0", worst_case_usd=0.5, expected_usd=0.1, reserve_usd=0.2)
    b = await _open(pool, run_id, "1", worst_case_usd=0.5, expected_usd=0.1, reserve_usd=0.2)
    await _open(pool, run_id, "2", worst_case_usd=0.5, expected_usd=0.1, reserve_usd=0.2)
    recorded, open_reserved = await _use(pool, run_id)
    assert (recorded, round(open_reserved, 6)) == (0.0, 0.6)  # what they reserved, not worst
    assert await _observed(pool, run_id) is None

    await _answer(pool, a, out=80, cost=0.09)
    await _answer(pool, b, out=100, cost=0.12, stop="max_tokens")  # truncated: no output ratio
    async with pool.acquire() as conn:
        # Lost with its worker: counts at the most it may have cost.
        await ledger.mark_abandoned(conn, run_id, "2", 1)
        await ledger.save_prefix(conn, *PREFIX)  # an update that changes no total
    recorded, open_reserved = await _use(pool, run_id)
    assert (round(recorded, 6), round(open_reserved, 6)) == (round(0.09 + 0.12 + 0.5, 6), 0.0)
    assert (recorded, open_reserved) == await _summed(pool, run_id)

    seen = await _observed(pool, run_id)
    assert seen is not None
    # One full answer (80 of 100 estimated), two answered calls, both with a cost spread.
    assert (seen.calls, seen.blocks, seen.ratio) == (1, 2, 0.8)
    assert seen.spread is not None and seen.spread.calls == 2
    assert round(seen.spread.mean, 6) == round((0.9 + 1.2) / 2, 6)
    async with pool.acquire() as conn:
        cached_s = await ledger.prefix_cached_s(conn, run_id)
    assert cached_s is not None and cached_s >= 0

    # Many calls opened and answered at once: the totals still match the ledger.
    calls = await asyncio.gather(
        *(_open(pool, run_id, f"p{i}", worst_case_usd=0.3, reserve_usd=0.05) for i in range(12))
    )
    await asyncio.gather(*(_answer(pool, call, 50, 0.01) for call in calls[:8]))
    assert await _use(pool, run_id) == await _summed(pool, run_id)
    # A statement that settles many rows at once (a batch round).
    await pool.execute(
        "update llm_calls set status = 'failed' where call_id = any($1::bigint[])", calls[8:]
    )
    recorded, open_reserved = await _use(pool, run_id)
    assert open_reserved == 0.0 and (recorded, open_reserved) == await _summed(pool, run_id)
