"""Storing a large document: bounded batches in one transaction (issue 39)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from blockbatch.core.blocks import ParsedBlock
from blockbatch.store import repo

BLOCKS = 2 * repo.INSERT_BATCH_BLOCKS + 1


def _blocks(n: int, bad_at: int | None = None) -> list[ParsedBlock]:
    return [
        ParsedBlock(i, "paragraph", "bad \x00 text" if i == bad_at else f"paragraph {i}")
        for i in range(n)
    ]


async def test_a_large_document_is_stored_in_bounded_statements(pool: asyncpg.Pool) -> None:
    sizes: list[int] = []

    def log(query: Any) -> None:
        if "insert into blocks" in query.query:
            sizes.append(len(query.args[1]))

    async with pool.acquire() as conn:
        conn.add_query_logger(log)
        try:
            doc = await repo.save_document(conn, "big.md", "markdown", b"big", _blocks(BLOCKS))
        finally:
            conn.remove_query_logger(log)
    # Every block stored, in statements of at most INSERT_BATCH_BLOCKS blocks each.
    assert sizes == [repo.INSERT_BATCH_BLOCKS, repo.INSERT_BATCH_BLOCKS, 1]
    stored = await pool.fetchrow(
        "select count(*) as n, max(block_index) as last from blocks where document_id = $1", doc
    )
    assert (stored["n"], stored["last"]) == (BLOCKS, BLOCKS - 1)
    assert (
        await pool.fetchval(
            "select block_content from blocks where block_uid = $1", f"{doc}:{BLOCKS - 1}"
        )
        == f"paragraph {BLOCKS - 1}"
    )


async def test_a_failure_in_a_later_batch_leaves_nothing(pool: asyncpg.Pool) -> None:
    # A block Postgres refuses (a NUL character) in the last batch: the batches before it
    # were inserted in the same transaction and go with it.
    async with pool.acquire() as conn:
        with pytest.raises(asyncpg.PostgresError):
            await repo.save_document(
                conn, "big.md", "markdown", b"bad", _blocks(BLOCKS, bad_at=BLOCKS - 1)
            )
    assert await pool.fetchval("select count(*) from documents") == 0
    assert await pool.fetchval("select count(*) from blocks") == 0
