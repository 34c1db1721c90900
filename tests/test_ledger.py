"""The ledger's own rules, on real Postgres: what ``started`` and ``abandoned`` mean."""

from __future__ import annotations

import asyncpg

from core.ingest import parse_document
from core.models import RunOptions
from core.schema import load_schema
from store import ledger, repo
from store.ledger import Origin
from tests.helpers import extract_schema, markdown_doc

PREFIX = ("0" * 64, [{"type": "text", "text": "system"}], [{"name": "tool"}])


async def _run(pool: asyncpg.Pool) -> str:
    data = markdown_doc(2)
    async with pool.acquire() as conn:
        doc = await repo.save_document(conn, "d.md", "markdown", data,
                                       parse_document(data, "markdown"))
        schema = await repo.save_schema(conn, load_schema(extract_schema(200)))
        return await repo.create_run(conn, doc, schema, RunOptions())


async def _open(pool: asyncpg.Pool, run_id: str, origin: Origin) -> int | None:
    async with pool.acquire() as conn:
        return await ledger.open_call(
            conn, run_id=run_id, pack_path="0", pack_attempt=1, block_uids=["a"], model="m",
            prefix=PREFIX, request={"messages": []}, origin=origin)


async def test_a_row_opened_again_by_the_same_activity_attempt_is_reused(
    pool: asyncpg.Pool,
) -> None:
    """Postgres dropped the connection before the insert was confirmed: nothing was sent."""
    run_id = await _run(pool)
    first = Origin(f"run-{run_id}/pack-0", "wf-run-1", "1", 1)
    call_id = await _open(pool, run_id, first)
    assert await _open(pool, run_id, first) == call_id
    statuses = await pool.fetch("select status from llm_calls where run_id = $1", run_id)
    assert [r["status"] for r in statuses] == ["started"]


async def test_a_row_left_by_an_earlier_activity_attempt_is_abandoned(
    pool: asyncpg.Pool,
) -> None:
    """The worker running attempt 1 was lost mid-call; attempt 2 calls again."""
    run_id = await _run(pool)
    lost = await _open(pool, run_id, Origin(f"run-{run_id}/pack-0", "wf-run-1", "1", 1))
    again = await _open(pool, run_id, Origin(f"run-{run_id}/pack-0", "wf-run-1", "1", 2))
    assert again != lost
    rows = dict(await pool.fetch(
        "select call_id, status from llm_calls where run_id = $1", run_id))
    assert rows == {lost: "abandoned", again: "started"}
