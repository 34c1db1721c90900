"""Per-pack reads stay proportional to the pack on a large run (issue 39).

A run of :data:`BLOCKS` blocks is made in SQL (no model calls): its overlays in packs of
:data:`PACK` blocks, half answered (one ledger row per answered pack), and a quality sample
of every third block, compared in its pack for the answered half. Each read the pack path
makes is captured as it runs (asyncpg's query logger) and its plan asked of Postgres
(``EXPLAIN``): none may read a whole big table (a ``Seq Scan`` on blocks, overlays,
llm_calls or quality_samples). Nothing is timed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from blockbatch.devtools import stack
from blockbatch.store import ledger, overlays, quality, reads, replans
from blockbatch.store.db import create_pool
from blockbatch.store.runs import BlockSize
from tests.conftest import TEMPLATE_DB

BLOCKS = 60_000
PACK = 50
RUN = "big-run"
OTHER = "other-run"
FRESH = "fresh-run"  # a run added after the seed's analyze
BIG_TABLES = {"blocks", "overlays", "llm_calls", "quality_samples"}
# The seed is made once per module (``big_template``): keep the module on one worker.
pytestmark = pytest.mark.xdist_group("pack_scale")

SEED = f"""
insert into documents (document_id, name, format, content_sha256, block_count)
values ('doc', 'big.md', 'markdown', 'sha', {BLOCKS});
insert into blocks (block_uid, document_id, block_index, block_type, block_content,
                    est_tokens, content_sha256)
select 'doc:' || i, 'doc', i, 'paragraph', 'block ' || i, 10, md5(i::text)
from generate_series(0, {BLOCKS} - 1) i;
insert into schemas (schema_id, name, definition, content_sha256)
values ('schema', 's', '{{}}', 'schema-sha');
insert into runs (run_id, document_id, schema_id, model, status)
values ('{RUN}', 'doc', 'schema', 'claude-haiku-4-5', 'running'),
       ('{OTHER}', 'doc', 'schema', 'claude-haiku-4-5', 'completed');
-- One answered call per pack of the first half, for both runs.
insert into llm_calls (run_id, pack_path, pack_attempt, block_uids, model, request, status,
                       cost_usd)
select r, p::text, 0, array(select 'doc:' || i
                             from generate_series(p * {PACK}, p * {PACK} + {PACK} - 1) i),
       'claude-haiku-4-5', '{{}}', 'succeeded', 0.001
from unnest(array['{RUN}', '{OTHER}']) r, generate_series(0, {BLOCKS} / {PACK} / 2 - 1) p;
insert into overlays (run_id, block_uid, block_index, pack_index, status, staging, call_id)
select r, 'doc:' || i, i, i / {PACK},
       case when i < {BLOCKS} / 2 then 'ai_complete' else 'pending' end,
       case when i < {BLOCKS} / 2 then '{{"a": 1}}'::jsonb end,
       (select c.call_id from llm_calls c where c.run_id = r
          and c.pack_path = (i / {PACK})::text)
from unnest(array['{RUN}', '{OTHER}']) r, generate_series(0, {BLOCKS} - 1) i;
insert into quality_samples (run_id, block_uid, status, agrees, pack_index, pack_size,
                             position, fields)
select r, 'doc:' || i,
       case when i < {BLOCKS} / 2 then 'compared' else 'planned' end,
       case when i < {BLOCKS} / 2 then i % 60 <> 0 end,
       case when i < {BLOCKS} / 2 then i / {PACK} end,
       case when i < {BLOCKS} / 2 then {PACK} end,
       case when i < {BLOCKS} / 2 then i % {PACK} + 1 end,
       case when i < {BLOCKS} / 2 then '[]'::jsonb end
from unnest(array['{RUN}', '{OTHER}']) r, generate_series(0, {BLOCKS} - 1, 3) i;
analyze;
"""


@pytest_asyncio.fixture(scope="module")
async def big_template(pg: stack.PostgresInstance) -> AsyncIterator[str]:
    """A database seeded once for the module (the seed is most of this file's time: about
    20 s of Postgres work under load), which each test clones as its own, so a test's
    changes stay its own. The clone carries the seed's planner statistics (``analyze``)."""
    name = f"pack_scale_{os.getpid()}"
    async with _connected(pg.url("postgres")) as conn:
        await conn.execute(f'create database "{name}" template "{TEMPLATE_DB}"')
    async with _connected(pg.url(name)) as conn:
        await conn.execute(SEED)
    yield name
    async with _connected(pg.url("postgres")) as conn:
        await conn.execute(f'drop database "{name}"')


@pytest_asyncio.fixture
async def big(pg: stack.PostgresInstance, big_template: str) -> AsyncIterator[asyncpg.Pool]:
    name = f"{big_template}_{next(_clones)}"
    async with _connected(pg.url("postgres")) as conn:
        await conn.execute(f'create database "{name}" template "{big_template}"')
    pool = await create_pool(pg.url(name), max_size=4)
    yield pool
    await pool.close()
    async with _connected(pg.url("postgres")) as conn:
        await conn.execute(f'drop database "{name}"')


_clones = itertools.count()


@contextlib.asynccontextmanager
async def _connected(url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(url)
    try:
        yield conn
    finally:
        await conn.close()


def _seq_scans(plan: dict[str, Any]) -> list[str]:
    found = []
    if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") in BIG_TABLES:
        found.append(plan["Relation Name"])
    for child in plan.get("Plans", []):
        found += _seq_scans(child)
    return found


def _relations(plan: dict[str, Any]) -> set[str]:
    """Every table a plan reads, by any scan."""
    found = {plan["Relation Name"]} if "Relation Name" in plan else set()
    for child in plan.get("Plans", []):
        found |= _relations(child)
    return found


async def plans_of(
    pool: asyncpg.Pool,
    read: Callable[[asyncpg.Connection], Awaitable[Any]],
    found: Callable[[dict[str, Any]], Any] = _seq_scans,
) -> tuple[Any, list[tuple[str, Any]]]:
    """``read``'s result, and each statement it ran with what ``found`` finds in its plan
    (by default: the big tables it scanned whole)."""
    logged: list[tuple[str, tuple[Any, ...]]] = []
    async with pool.acquire() as conn:

        def log(query: Any) -> None:
            logged.append((query.query, tuple(query.args)))

        conn.add_query_logger(log)
        try:
            result = await read(conn)
        finally:
            conn.remove_query_logger(log)
    out = []
    async with pool.acquire() as conn:
        for query, args in logged:
            if not query.lstrip().lower().startswith(("select", "with", "update", "insert")):
                continue
            raw = await conn.fetchval(f"explain (format json) {query}", *args)
            plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
            out.append((" ".join(query.split())[:90], found(plan)))
    assert out, "the read ran no statement"
    return result, out


def _no_seq_scans(plans: list[tuple[str, list[str]]]) -> None:
    scanned = [(q, s) for q, s in plans if s]
    assert not scanned, f"statements reading a whole big table: {scanned}"


PACK_DONE = 100  # a pack of the answered half: its samples compared
PACK_OPEN = 900  # a pack of the pending half: its samples planned


async def test_a_packs_quality_tally_reads_only_the_pack(big: asyncpg.Pool) -> None:
    tally, plans = await plans_of(big, lambda c: quality.pack_tally(c, RUN, PACK_DONE))
    _no_seq_scans(plans)
    # Pack 100 holds blocks 5000-5049: 17 samples (5001, 5004, ..., 5049), compared, all
    # agreeing but the multiple of 60 (5040).
    assert tally == (17, 16, 0)
    tally, plans = await plans_of(big, lambda c: quality.pack_tally(c, RUN, PACK_OPEN))
    _no_seq_scans(plans)
    assert tally == (0, 0, 0)


async def test_a_sample_not_yet_recorded_counts_in_the_pack_that_holds_its_block(
    big: asyncpg.Pool,
) -> None:
    # A failed probe recorded without its pack: the pack whose overlay holds it counts it.
    await big.execute(
        """update quality_samples set status = 'failed', pack_index = null
           where run_id = $1 and block_uid = 'doc:5010'""",
        RUN,
    )
    tally, plans = await plans_of(big, lambda c: quality.pack_tally(c, RUN, PACK_DONE))
    _no_seq_scans(plans)
    assert tally == (16, 15, 1)


async def test_the_pack_path_reads_use_indexes(big: asyncpg.Pool) -> None:
    reads: list[Callable[[asyncpg.Connection], Awaitable[Any]]] = [
        lambda c: quality.to_probe(c, RUN, PACK_DONE),
        lambda c: quality.answered_uids(c, RUN, PACK_DONE),
        lambda c: overlays.pending_blocks(c, RUN, PACK_OPEN, None),
        lambda c: ledger.recorded_answer(c, RUN, str(PACK_DONE), 0),
    ]
    for read in reads:
        _, plans = await plans_of(big, read)
        _no_seq_scans(plans)


async def _rows_read(conn: asyncpg.Connection, table: str) -> tuple[int, int]:
    """``(rows read by sequential scans, rows fetched through indexes)`` of ``table`` in
    the current transaction (``pg_stat_xact_user_tables``: counted as they happen)."""
    row = await conn.fetchrow(
        """select seq_tup_read, idx_tup_fetch from pg_stat_xact_user_tables
           where relname = $1""",
        table,
    )
    return int(row["seq_tup_read"]), int(row["idx_tup_fetch"])


async def test_answering_a_pack_reads_its_blocks_and_their_copies_not_the_run(
    big: asyncpg.Pool,
) -> None:
    uids = [f"doc:{i}" for i in range(PACK_OPEN * PACK, PACK_OPEN * PACK + PACK)]
    # Two later blocks are copies of the pack's first block: they wait in no pack.
    copies = ["doc:59990", "doc:59991"]
    await big.execute(
        """update overlays set same_as = $2, pack_index = null
           where run_id = $1 and block_uid = any($3::text[])""",
        RUN,
        uids[0],
        copies,
    )
    async with big.acquire() as conn, conn.transaction():
        before = await _rows_read(conn, "overlays")
        moved = await overlays.stage_valid(conn, RUN, {u: {"a": 2} for u in uids}, "p", 1)
        after = await _rows_read(conn, "overlays")
    assert moved == PACK
    seq, fetched = after[0] - before[0], after[1] - before[1]
    # The pack's 50 rows and their 2 copies, each found by key: not the run's 30,000
    # pending overlays once per answered block.
    assert seq == 0
    assert fetched < 4 * PACK, fetched
    taken = await big.fetch(
        "select status, staging from overlays where run_id = $1 and block_uid = any($2::text[])",
        RUN,
        copies,
    )
    assert [(r["status"], r["staging"]) for r in taken] == [("ai_complete", {"a": 2})] * 2


async def _counted(pool: asyncpg.Pool, run_id: str) -> dict[str, int]:
    """The run's overlays per status, counted the slow way."""
    rows = await pool.fetch(
        "select status, count(*) as n from overlays where run_id = $1 group by 1", run_id
    )
    return {r["status"]: r["n"] for r in rows}


def _shown(info: reads.RunInfo) -> dict[str, int]:
    return {status: n for status, n in info.blocks.items() if n}


async def test_status_reads_the_runs_counts_not_its_blocks(big: asyncpg.Pool) -> None:
    # `status`, `watch` and the summary read the run through get_run: on a run of any size
    # it reads the run's counts row, not one row per block.
    info, touched = await plans_of(big, lambda c: reads.get_run(c, RUN), _relations)
    per_block = [(q, r & {"blocks", "overlays", "quality_samples"}) for q, r in touched]
    assert not [x for x in per_block if x[1]], per_block
    assert _shown(info) == {"ai_complete": BLOCKS // 2, "pending": BLOCKS // 2}
    assert info.blocks_total == BLOCKS


async def test_a_runs_counts_follow_its_overlays_in_their_transaction(big: asyncpg.Pool) -> None:
    pack = [f"doc:{i}" for i in range(PACK_OPEN * PACK, PACK_OPEN * PACK + PACK)]
    # A pack's answers committed: its counts move with them.
    await big.execute(
        """update overlays set status = case when block_index % 2 = 0 then 'ai_complete'
                                            else 'failed' end
           where run_id = $1 and block_uid = any($2::text[])""",
        RUN,
        pack,
    )
    # A pack rolled back: neither its overlays nor its counts move.
    with pytest.raises(RuntimeError):
        async with big.acquire() as conn, conn.transaction():
            await conn.execute(
                "update overlays set status = 'failed' where run_id = $1 and pack_index = $2",
                RUN,
                PACK_OPEN + 1,
            )
            raise RuntimeError("the pack's activity failed")
    # A change of answer, not of status, and overlays deleted.
    await big.execute(
        "update overlays set staging = '{\"a\": 3}' where run_id = $1 and pack_index = 0", RUN
    )
    await big.execute("delete from overlays where run_id = $1 and pack_index = 1", RUN)
    for run in (RUN, OTHER):
        assert _shown(await reads.get_run(big, run)) == await _counted(big, run)
    assert _shown(await reads.get_run(big, RUN)) == {
        "ai_complete": BLOCKS // 2 + PACK // 2 - PACK,
        "failed": PACK // 2,
        "pending": BLOCKS // 2 - PACK,
    }


async def test_status_quality_section_reads_no_overlay_and_no_whole_ledger(
    big: asyncpg.Pool,
) -> None:
    # The run summary's quality section (`status`, the summary, the review page) counts the
    # samples in Postgres and reads the run's packs and ledger through indexes: on a
    # million-block run it read every sample row by row and every overlay of the run
    # (5.7 s of `status`'s 7.8 s median, docs/benchmarks.md section 3.5).
    async with big.acquire() as conn, conn.transaction():
        before = {t: await _rows_read(conn, t) for t in ("overlays", "blocks")}
        result = await quality.result(conn, RUN)
        after = {t: await _rows_read(conn, t) for t in ("overlays", "blocks")}
    read = {t: (after[t][0] - before[t][0], after[t][1] - before[t][1]) for t in after}
    # No overlay of the run has evidence: grounding reads none (migration 037's partial
    # index); the pack size and the planned blocks come from run_packs. (The ledger's sums
    # read migration 037's covering index on a large run; this one's 1,200 calls are read
    # whole, the planner's choice at this size.)
    assert read == {"overlays": (0, 0), "blocks": (0, 0)}, read
    assert result is not None
    # Samples every third block; the answered half compared (10,000), all agreeing but the
    # multiples of 60 (500 of them: 0, 60, ..., 29,940 are all multiples of 3).
    compared = len(range(0, BLOCKS // 2, 3))
    assert (result.sampled, result.agreement.agreeing) == (compared, compared - BLOCKS // 2 // 60)
    assert result.pack_size == PACK


async def _packs_counted(pool: asyncpg.Pool, run_id: str) -> dict[int, int]:
    """The run's blocks per planned pack, counted the slow way."""
    rows = await pool.fetch(
        """select pack_index, count(*) as n from overlays
           where run_id = $1 and pack_index is not null group by 1""",
        run_id,
    )
    return {r["pack_index"]: r["n"] for r in rows}


async def _packs_kept(pool: asyncpg.Pool, run_id: str) -> dict[int, int]:
    rows = await pool.fetch("select pack_index, blocks from run_packs where run_id = $1", run_id)
    return {r["pack_index"]: r["blocks"] for r in rows}


async def test_a_runs_pack_sizes_follow_its_overlays(big: asyncpg.Pool) -> None:
    # A re-plan moves unstarted blocks into fewer, larger packs; a retry takes blocks out
    # of their pack; overlays are deleted; a rolled-back move changes nothing.
    await big.execute(
        """update overlays set pack_index = 600 + (block_index - 30000) / 120
           where run_id = $1 and block_index >= 30000""",
        RUN,
    )
    await big.execute(
        "update overlays set pack_index = null where run_id = $1 and pack_index = 3", RUN
    )
    await big.execute("delete from overlays where run_id = $1 and pack_index = 1", RUN)
    with pytest.raises(RuntimeError):
        async with big.acquire() as conn, conn.transaction():
            await conn.execute("update overlays set pack_index = 0 where run_id = $1", RUN)
            raise RuntimeError("the re-plan's activity failed")
    for run in (RUN, OTHER):
        assert await _packs_kept(big, run) == await _packs_counted(big, run)
    kept = await _packs_kept(big, RUN)
    assert max(kept.values()) == 120 and 1 not in kept and 3 not in kept
    assert await quality.planned_pack_size(big, RUN) == 120


def _range_rereads(plan: dict[str, Any]) -> list[str]:
    """What in a re-plan's move reads the run again for each pack's range: a join filter on
    ``block_index`` (every pending block against every range) or a sequential scan of
    overlays."""
    found = []
    if "block_index" in plan.get("Join Filter", ""):
        found.append(f"join filter {plan['Join Filter']}")
    if plan.get("Relation Name") == "overlays" and plan.get("Node Type") == "Seq Scan":
        found.append("seq scan of overlays")
    for child in plan.get("Plans", []):
        found += _range_rereads(child)
    return found


@pytest.mark.parametrize("run", [RUN, FRESH])
async def test_a_large_plan_is_analysed_so_its_replan_reads_each_range_by_index(
    big: asyncpg.Pool, run: str
) -> None:
    """A run's first re-plan comes moments after its plan wrote its overlays, before
    autovacuum would have analysed them (``FRESH``: planned after the seed's ``analyze``,
    autovacuum off on the clone; ``store.overlays.insert_plan`` analyses a large plan).
    Planned as a run of a few rows, the move joined every pending block of the run against
    every range of the statement: 54 s of a 100,000-block run's start (bench/scale.py,
    issue 39). Each range is read through an index, once."""
    await big.execute("alter table overlays set (autovacuum_enabled = false)")
    if run == FRESH:
        await big.execute(
            f"""insert into runs (run_id, document_id, schema_id, model, status)
                values ('{FRESH}', 'doc', 'schema', 'claude-haiku-4-5', 'running')"""
        )
        sizes = [BlockSize(f"doc:{i}", i, 10) for i in range(BLOCKS)]
        async with big.acquire() as conn, conn.transaction():
            await overlays.insert_plan(conn, FRESH, sizes, [i // PACK for i in range(BLOCKS)])
    first = BLOCKS // PACK // 2  # the pending half of RUN; FRESH is all pending
    rows = await big.fetch(
        """select block_uid, block_index from overlays
           where run_id = $1 and status = 'pending' and pack_index >= $2
           order by block_index""",
        run,
        first,
    )
    blocks = [(r["block_uid"], r["block_index"]) for r in rows]
    packs = [first + k // (2 * PACK) for k in range(len(blocks))]  # twice as large
    change = replans.PlanChange(first, BLOCKS // PACK, packs[-1] + 1, {})

    async def replan(conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            await replans.repack(conn, run, blocks, packs, change)

    _, plans = await plans_of(big, replan, _range_rereads)
    moves = [(q, found) for q, found in plans if q.startswith("update overlays")]
    new_packs = packs[-1] + 1 - first
    assert len(moves) == -(-new_packs // replans.REPACK_PACKS_PER_STATEMENT)  # ceil
    assert all(not found for _, found in moves), moves
    kept = await _packs_kept(big, run)
    assert {p: n for p, n in kept.items() if p >= first} == dict.fromkeys(
        range(first, packs[-1] + 1), 2 * PACK
    )
