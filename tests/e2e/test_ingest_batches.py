"""Storing a large document: parsed and stored in bounded batches, in one transaction
(issue 39)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from blockbatch.core.blocks import IngestError, ParsedBlock
from blockbatch.core.ingest import stream_records
from blockbatch.store import repo

BLOCKS = 2 * repo.INSERT_BATCH_BLOCKS + 1


def _blocks(n: int, bad_at: int | None = None) -> list[ParsedBlock]:
    return [
        ParsedBlock(i, "paragraph", "bad \x00 text" if i == bad_at else f"paragraph {i}")
        for i in range(n)
    ]


async def test_a_large_document_is_stored_in_bounded_statements(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    copy = asyncpg.connection.Connection.copy_records_to_table

    async def logged(self: Any, table: str, *, records: Any, **kwargs: Any) -> Any:
        if table == "blocks":
            sizes.append(len(records))
        return await copy(self, table, records=records, **kwargs)

    monkeypatch.setattr(asyncpg.connection.Connection, "copy_records_to_table", logged)
    async with pool.acquire() as conn:
        doc = await repo.save_document(conn, "big.md", "markdown", b"big", _blocks(BLOCKS))
    # Every block stored, by COPYs of at most INSERT_BATCH_BLOCKS blocks each.
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


async def test_streamed_blocks_are_parsed_no_further_ahead_than_the_next_batch(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A parser handing blocks one at a time: while a batch is stored the next is parsed,
    # never more, so at most two batches are held, never the whole document.
    made = 0

    def parser() -> Iterator[ParsedBlock]:
        nonlocal made
        for block in _blocks(BLOCKS):
            made += 1
            yield block

    seen: list[tuple[int, int]] = []
    stored = 0
    insert = repo._insert_rows

    async def counted(conn: Any, rows: Any) -> None:
        nonlocal stored
        stored += len(rows)
        await insert(conn, rows)
        seen.append((made, stored))

    monkeypatch.setattr(repo, "_insert_rows", counted)
    async with pool.acquire() as conn:
        doc = await repo.save_document(conn, "big.md", "markdown", b"big", parser())
    assert [s for _, s in seen] == [5_000, 10_000, 10_001]
    assert all(m <= s + repo.INSERT_BATCH_BLOCKS for m, s in seen), seen
    assert await pool.fetchval("select block_count from documents where document_id = $1", doc) == (
        BLOCKS
    )


async def test_the_next_batch_is_parsed_while_one_is_stored(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first batch's COPY waits until the parser has made a block of the second batch:
    # done one after the other, the wait would end at its timeout, with nothing parsed.
    second_batch = threading.Event()

    def parser() -> Iterator[ParsedBlock]:
        for block in _blocks(BLOCKS):
            if block.block_index == repo.INSERT_BATCH_BLOCKS:
                second_batch.set()
            yield block

    parsed_while_storing: list[bool] = []
    insert = repo._insert_rows

    async def waiting(conn: Any, rows: Any) -> None:
        if not parsed_while_storing:
            parsed_while_storing.append(await asyncio.to_thread(second_batch.wait, 60))
        await insert(conn, rows)

    monkeypatch.setattr(repo, "_insert_rows", waiting)
    async with pool.acquire() as conn:
        doc = await repo.save_document(conn, "big.md", "markdown", b"big", parser())
    assert parsed_while_storing == [True]
    assert await pool.fetchval("select count(*) from blocks where document_id = $1", doc) == BLOCKS


def _jsonl(n: int, empty_at: int | None = None) -> bytes:
    lines = [
        json.dumps({"text": "" if i == empty_at else f"record {i}", "team": f"t{i % 3}"})
        for i in range(n)
    ]
    return ("\n".join(lines) + "\n").encode()


async def test_a_parse_error_met_after_batches_were_stored_leaves_nothing(
    pool: asyncpg.Pool,
) -> None:
    # The last record's text is empty: the parser says so only once it has read them all,
    # after two batches went to the database in the document's transaction.
    data = _jsonl(BLOCKS, empty_at=BLOCKS - 1)
    streamed = stream_records(data, "jsonl")
    async with pool.acquire() as conn:
        with pytest.raises(IngestError, match=f"line {BLOCKS} has an empty 'text'"):
            await repo.save_document(conn, "big.jsonl", "jsonl", data, streamed.blocks)
    assert await pool.fetchval("select count(*) from documents") == 0
    assert await pool.fetchval("select count(*) from blocks") == 0


async def test_a_streamed_records_file_keeps_its_columns(pool: asyncpg.Pool) -> None:
    data = _jsonl(BLOCKS)
    streamed = stream_records(data, "jsonl")
    async with pool.acquire() as conn:
        doc = await repo.save_document(
            conn,
            "big.jsonl",
            "jsonl",
            data,
            streamed.blocks,
            columns=lambda: streamed.columns(data, "jsonl", "text"),
            text_column="text",
        )
    row = await pool.fetchrow(
        "select block_count, record_columns, text_column from documents where document_id = $1",
        doc,
    )
    assert (row["block_count"], row["record_columns"], row["text_column"]) == (
        BLOCKS,
        ["text", "team"],
        "text",
    )
