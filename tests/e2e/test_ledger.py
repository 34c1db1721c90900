"""The ledger's own rules, on real Postgres: what ``started`` and ``abandoned`` mean."""

from __future__ import annotations

from typing import Any

import asyncpg

from blockbatch.core.ingest import parse_document
from blockbatch.core.prompt import TOOL_NAME
from blockbatch.core.registry import Usage
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from blockbatch.store import ledger, overlays, repo
from blockbatch.store.ledger import Origin
from blockbatch.store.runs import BlockSize
from tests.helpers import extract_schema, markdown_doc

PREFIX = ("0" * 64, [{"type": "text", "text": "system"}], [{"name": "tool"}])


async def _run(pool: asyncpg.Pool, blocks: int = 2) -> str:
    data = markdown_doc(blocks)
    async with pool.acquire() as conn:
        doc = await repo.save_document(
            conn, "d.md", "markdown", data, parse_document(data, "markdown")
        )
        schema = await repo.save_schema(conn, load_schema(extract_schema(200)))
        return await repo.create_run(conn, doc, schema, RunOptions())


async def _open(pool: asyncpg.Pool, run_id: str, origin: Origin) -> int | None:
    async with pool.acquire() as conn:
        return await ledger.open_call(
            conn,
            run_id=run_id,
            pack_path="0",
            pack_attempt=1,
            block_uids=["a"],
            model="m",
            prefix=PREFIX,
            request={"messages": []},
            origin=origin,
        )


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
    rows = dict(await pool.fetch("select call_id, status from llm_calls where run_id = $1", run_id))
    assert rows == {lost: "abandoned", again: "started"}


def _result(block_id: str, summary: str) -> dict[str, Any]:
    return {
        "block_uid": block_id,
        "word_count": 1,
        "char_count": 1,
        "first_40_chars": "x",
        "block_type": "paragraph",
        "summary": summary,
    }


def _answer(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "content": [
            {"type": "tool_use", "id": "t", "name": TOOL_NAME, "input": {"results": results}}
        ],
    }


async def _answered_call(
    conn: asyncpg.Connection,
    run_id: str,
    pack: str,
    uids: list[str],
    aliases: dict[str, str] | None,
    results: list[dict[str, Any]],
) -> int:
    call_id = await ledger.open_call(
        conn,
        run_id=run_id,
        pack_path=pack,
        pack_attempt=1,
        block_uids=uids,
        model="m",
        prefix=PREFIX,
        request={"messages": []},
        block_aliases=aliases,
        origin=Origin(f"run-{run_id}/pack-{pack}", "wf-run-1", pack, 1),
    )
    assert call_id is not None
    await ledger.record_answer(
        conn, call_id, _answer(results), None, Usage(input_tokens=10, output_tokens=5), 0.0, 1
    )
    return call_id


async def test_a_recorded_answer_maps_short_ids_back_through_its_own_ledger_row(
    pool: asyncpg.Pool,
) -> None:
    """Pay once: a worker recorded the answer and died; the next attempt re-parses it from the
    ledger. The aliases are mapped through the map recorded with that call (here b1 is the
    second block: recomputing the map or going by position would swap the two results),
    and a row without a map (full uids in the answer) parses by block_uid."""
    run_id = await _run(pool, blocks=4)
    spec = load_schema(extract_schema(200))
    async with pool.acquire() as conn:
        u = [
            r["block_uid"]
            for r in await conn.fetch(
                """select b.block_uid from blocks b join runs r using (document_id)
               where r.run_id = $1 order by b.block_index""",
                run_id,
            )
        ]
        await overlays.insert_plan(
            conn, run_id, [BlockSize(x, i, 10) for i, x in enumerate(u)], [0, 0, 1, 1]
        )
        await _answered_call(
            conn,
            run_id,
            "0",
            u[:2],
            {"b1": u[1], "b2": u[0]},
            [_result("b1", "one"), _result("b2", "zero")],
        )
        # An answer recorded before the upgrade: full block_uids, no alias map on the row.
        await _answered_call(
            conn,
            run_id,
            "1",
            u[2:],
            None,
            [_result(u[2], "two"), _result("b2", "an alias is unknown here")],
        )
        for pack in ("0", "1"):
            reused = await ledger.recorded_answer(conn, run_id, pack, 1)
            assert reused is not None
            outcome = await overlays.apply_answer(conn, run_id, reused.call_id, pack, 3, spec)
            assert outcome.mapping_failed == (pack == "1")
        staged = dict(
            await conn.fetch(
                "select block_uid, staging->>'summary' from overlays where run_id = $1", run_id
            )
        )
    assert staged == {u[0]: "zero", u[1]: "one", u[2]: "two", u[3]: None}
