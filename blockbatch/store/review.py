"""The one review pager (the CLI's ``review``, the web app's grid, ``Blockbatch.review``):
a run's blocks next to their overlays, paged by keyset; the filters' choices, and the
review acts recorded against a block, one by one or as they were done.

A page follows ``block_index`` (``after`` / ``before`` a block, never an offset), and each
filter has an index that keeps it a range scan (migration 009): a page of a 100,000-block
run reads about one page of index entries, wherever it is (``bench/review_page.py``
measures it; ``EXPLAIN`` shows the plans). The count beside it is the run's live counts
when only statuses filter, else a count that stops at :data:`COUNT_CAP`.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from blockbatch.core.reasons import REASONS, REVIEW_FLAGS
from blockbatch.core.schema import load_schema, schema_fields
from blockbatch.core.views import (
    GridFilter,
    GridPage,
    GridRow,
    ReviewAction,
    ReviewActivity,
    RunInfo,
)
from blockbatch.store.reads import get_run

#: The most blocks one grid page may hold.
MAX_PAGE = 500


def _grid_query(document_id: str, flt: GridFilter) -> tuple[list[str], list[Any], str]:
    """(conditions, arguments after run_id, the ordering column) of a filter.

    Each condition is present only when its filter is, so the planner sees a plain range
    on one index (a ``$n is null or ...`` form would defeat it in a generic plan).
    """
    conds: list[str] = ["o.run_id = $1"]
    args: list[Any] = []
    order = "o.block_index"

    def one_of(column: str, values: list[str]) -> None:
        # One value is a plain equality (an ordered range on its index); several are a list.
        if len(values) == 1:
            args.append(values[0])
            conds.append(f"{column} = ${len(args) + 1}")
        else:
            args.append(values)
            conds.append(f"{column} = any(${len(args) + 1}::text[])")

    if flt.statuses:
        one_of("o.status", flt.statuses)
    if flt.reasons:
        one_of("o.reason_code", flt.reasons)
    if flt.block_uids:
        one_of("o.block_uid", flt.block_uids)
    if flt.block_type is not None:
        args.append(flt.block_type)
        conds.append(f"b.block_type = ${len(args) + 1}")
        if not flt.statuses and not flt.reasons and not flt.block_uids:
            # Type alone: driven by blocks (document_id, block_type, block_index). With a
            # status or reason the overlays index drives and the type is checked per row.
            args.append(document_id)
            conds += [f"b.document_id = ${len(args) + 1}", "b.block_index = o.block_index"]
            order = "b.block_index"
    if flt.disagreeing:
        conds.append(
            "exists (select 1 from quality_samples q where q.run_id = o.run_id "
            "and q.block_uid = o.block_uid and q.agrees = false)"
        )
    return conds, args, order


#: A filtered count stops here ("1,000+"): counting every match of a broad filter over a
#: large run would cost more than the page itself.
COUNT_CAP = 1_000


async def _total(
    conn: asyncpg.Connection, run: RunInfo, flt: GridFilter, where: str, args: list[Any]
) -> tuple[int, bool]:
    """(matches, whether the count stopped at COUNT_CAP)."""
    if not (flt.reasons or flt.block_uids or flt.block_type or flt.disagreeing):
        # The run's live counts by status already say it.
        wanted = flt.statuses or list(run.blocks)
        return sum(run.blocks.get(status, 0) for status in set(wanted)), False
    n = await conn.fetchval(
        f"select count(*) from (select 1 from overlays o join blocks b "
        f"on b.block_uid = o.block_uid where {where} limit {COUNT_CAP + 1}) m",
        run.run_id,
        *args,
    )
    return min(n, COUNT_CAP), n > COUNT_CAP


_ROW_SQL = """
select o.block_uid, o.block_index, b.block_type, b.block_content, b.metadata, o.status,
       o.staging,
       o.confirmed, o.model_answer, o.attempt_count, o.last_error, o.reason_code, o.pack_path,
       o.reused_from_run_id, o.reused_from_call_id, o.evidence, b.provenance,
       coalesce(b.provenance ? 'bbox', false)
         and exists (select 1 from document_files f where f.document_id = b.document_id)
         as page_picture,
       (select jsonb_build_object('action', a.action, 'reviewer', a.reviewer, 'at', a.at)
        from review_actions a where a.run_id = o.run_id and a.block_uid = o.block_uid
        order by a.id desc limit 1) as last_action,
       (select jsonb_build_object('status', e.status, 'reason', e.reason, 'model', e.model,
                                  'first', e.first_answer, 'second', e.second_answer,
                                  'escalated', e.escalation_answer)
        from escalations e where e.run_id = o.run_id and e.block_uid = o.block_uid
          and e.reason is not null) as escalation
from overlays o join blocks b on b.block_uid = o.block_uid
"""


async def grid_page(
    pool: asyncpg.Pool,
    run_id: str,
    flt: GridFilter,
    *,
    limit: int = 50,
    after: int | None = None,
    before: int | None = None,
) -> GridPage:
    """A page of ``limit`` blocks matching ``flt``: the first, the one after block index
    ``after``, or the one before block index ``before``.

    Raises:
        NotFound: no run has this id.
        ValueError: ``limit`` outside 1..MAX_PAGE, both ``after`` and ``before``, or a
            reason that is not a code of blockbatch/core/reasons.py.
    """
    unknown = [r for r in flt.reasons if r not in REASONS]
    if unknown:
        raise ValueError(
            f"unknown reason code {', '.join(unknown)}; the codes are: " + ", ".join(REASONS)
        )
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"a page holds 1 to {MAX_PAGE} blocks, not {limit}")
    if after is not None and before is not None:
        raise ValueError("page either after a block or before one, not both")
    async with pool.acquire() as conn:
        run = await get_run(conn, run_id)
        schema = await conn.fetchrow(
            "select definition, name from schemas where schema_id = $1", run.schema_id
        )
        conds, args, order = _grid_query(run.document_id, flt)
        where = " and ".join(conds)
        total, capped = await _total(conn, run, flt, where, args)
        key = len(args) + 2
        if before is not None:
            sql = (
                f"{_ROW_SQL} where {where} and {order} < ${key} "
                f"order by {order} desc limit ${key + 1}"
            )
            rows = list(reversed(await conn.fetch(sql, run_id, *args, before, limit + 1)))
            more_before, more_after = len(rows) > limit, True
            rows = rows[-limit:]
        else:
            start = after if after is not None else -1
            sql = f"{_ROW_SQL} where {where} and {order} > ${key} order by {order} limit ${key + 1}"
            rows = await conn.fetch(sql, run_id, *args, start, limit + 1)
            more_before, more_after = after is not None, len(rows) > limit
            rows = rows[:limit]
    items = [GridRow.model_validate(dict(r)) for r in rows]
    return GridPage(
        run=run,
        fields=schema_fields(schema["definition"]),
        spec=load_schema(schema["definition"], name=schema["name"]),
        rows=items,
        total=total,
        capped=capped,
        next_after=items[-1].block_index if items and more_after else None,
        prev_before=items[0].block_index if items and more_before else None,
    )


async def explain_grid(
    pool: asyncpg.Pool,
    run_id: str,
    flt: GridFilter,
    *,
    limit: int = 50,
    after: int | None = None,
) -> list[str]:
    """The plan Postgres runs for a grid page (``EXPLAIN ANALYZE``), for the benchmark."""
    async with pool.acquire() as conn:
        run = await get_run(conn, run_id)
        conds, args, order = _grid_query(run.document_id, flt)
        key = len(args) + 2
        sql = (
            f"explain (analyze, costs off, timing off) {_ROW_SQL} "
            f"where {' and '.join(conds)} and {order} > ${key} "
            f"order by {order} limit ${key + 1}"
        )
        rows = await conn.fetch(sql, run_id, *args, -1 if after is None else after, limit + 1)
    return [r[0] for r in rows]


async def block_types(pool: asyncpg.Pool, document_id: str) -> list[str]:
    """The distinct block types of a document, by a loose index scan (one probe a type)."""
    rows = await pool.fetch(
        """with recursive t(block_type) as (
               (select block_type from blocks where document_id = $1
                order by block_type limit 1)
               union all
               select (select b.block_type from blocks b
                       where b.document_id = $1 and b.block_type > t.block_type
                       order by b.block_type limit 1)
               from t where t.block_type is not null)
           select block_type from t where block_type is not null""",
        document_id,
    )
    return [r["block_type"] for r in rows]


async def review_actions(
    pool: asyncpg.Pool,
    run_id: str,
    block_uid: str | None = None,
    *,
    limit: int = 200,
) -> list[ReviewAction]:
    """The run's review acts (or one block's), newest first."""
    # Two statements, each one index range (a "$2 is null or" form would defeat both).
    columns = """select id, block_uid, action, reviewer, at, field, before, after,
                        old_status, new_status from review_actions"""
    if block_uid is None:
        rows = await pool.fetch(
            f"{columns} where run_id = $1 order by id desc limit $2", run_id, limit
        )
    else:
        rows = await pool.fetch(
            f"{columns} where run_id = $1 and block_uid = $2 order by id desc limit $3",
            run_id,
            block_uid,
            limit,
        )
    return [ReviewAction.model_validate(dict(r)) for r in rows]


async def review_activity(
    pool: asyncpg.Pool, run_id: str, *, limit: int = 20
) -> list[ReviewActivity]:
    """The run's latest ``limit`` review acts as they were done, newest first.

    Acts done in one transaction share its time (``now()``), so a bulk confirm of 10,000
    blocks is one entry and the edits before it stay in view. Read off the index
    ``review_actions_run_at`` (migration 022): the groups come in order, and the values
    are read for one act a group, never for the whole of a bulk act.
    """
    rows = await pool.fetch(
        """with acts as (
               select at, action, reviewer, count(*) as blocks, min(id) as first_id,
                      max(id) as last_id
               from review_actions where run_id = $1
               group by at, action, reviewer
               order by at desc, action, reviewer limit $2)
           select acts.action, acts.reviewer, acts.at, acts.blocks,
                  f.block_uid as first_block, l.block_uid as last_block, f.field,
                  f.before, f.after
           from acts join review_actions f on f.id = acts.first_id
                     join review_actions l on l.id = acts.last_id
           order by acts.at desc, acts.last_id desc""",
        run_id,
        limit,
    )
    return [ReviewActivity.model_validate(dict(r)) for r in rows]


async def live_costs(pool: asyncpg.Pool, run_ids: list[str]) -> dict[str, float]:
    """Cost so far of runs still going, from their ledgers (the run row's cost is
    recomputed only when a run finishes)."""
    rows = await pool.fetch(
        """select run_id, coalesce(sum(cost_usd), 0)::float8 as cost from llm_calls
           where run_id = any($1::text[]) group by run_id""",
        run_ids,
    )
    return {r["run_id"]: r["cost"] for r in rows}


async def refresh_statistics(pool: asyncpg.Pool) -> None:
    """``VACUUM ANALYZE`` the tables the grid reads, after a bulk load.

    Autovacuum does the same within a minute or so of a large change; the benchmark does
    it at once so that its figures do not depend on when autovacuum got there.
    """
    for table in ("blocks", "overlays", "review_actions"):
        await pool.execute(f"vacuum analyze {table}")


async def review_flags(pool: asyncpg.Pool, run_id: str) -> dict[str, int]:
    """How many answered blocks carry each review flag (``ungrounded``: some value's quote is
    not in its block), for the grid's reason filter beside the failures' codes."""
    rows = await pool.fetch(
        """select reason_code, count(*) as n from overlays
           where run_id = $1 and reason_code = any($2::text[])
             and status in ('ai_complete', 'confirmed', 'rejected')
           group by 1 order by 2 desc, 1""",
        run_id,
        sorted(REVIEW_FLAGS),
    )
    return {r["reason_code"]: int(r["n"]) for r in rows}
