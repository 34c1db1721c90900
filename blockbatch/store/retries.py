"""Retries of a finished run (``run_retries``) and the overlay change log (``overlay_changes``).

A retry is claimed by one RunWorkflow execution (its Temporal run id) in the same
transaction that resets the blocks it takes (``blockbatch.store.overlays.reset_for_retry``) and
reopens the run (``blockbatch.store.runs.reopen_for_retry``), under the run row's ``for update``
lock: a retried activity finds its own claim and gets the same plan back, and a second
retry finds the run running and is refused. ``overlay_changes`` is written by a trigger
(migration 005); this module only reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from blockbatch.core.retry import ASKED_BY_NAME, BlockState
from blockbatch.core.retry_types import RetryRequest
from blockbatch.core.views import OverlayChange, RetryRecord


async def block_counts(
    conn: asyncpg.Connection | asyncpg.Pool, run_id: str
) -> dict[BlockState, int]:
    """How many of the run's blocks are in each (status, reason code)."""
    rows = await conn.fetch(
        """select status, reason_code, count(*) as n from overlays where run_id = $1
           group by 1, 2""",
        run_id,
    )
    return {(r["status"], r["reason_code"]): r["n"] for r in rows}


async def block_states(
    conn: asyncpg.Connection | asyncpg.Pool, run_id: str, uids: list[str]
) -> dict[str, BlockState]:
    """The (status, reason code) of each of ``uids`` the run has."""
    rows = await conn.fetch(
        """select block_uid, status, reason_code from overlays
           where run_id = $1 and block_uid = any($2::text[])""",
        run_id,
        uids,
    )
    return {r["block_uid"]: (r["status"], r["reason_code"]) for r in rows}


async def retries_so_far(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> int:
    """How many retries of the run have been claimed."""
    return int(await conn.fetchval("select count(*) from run_retries where run_id = $1", run_id))


@dataclass(frozen=True)
class RetryBlock:
    """A block a retry takes, with what packing needs of it."""

    block_uid: str
    block_index: int
    est_tokens: int
    reason_code: str | None


async def blocks_to_retry(
    conn: asyncpg.Connection, run_id: str, request: RetryRequest
) -> list[RetryBlock]:
    """The run's blocks that ``request`` takes, in block order (blockbatch/core/retry.py's rules:
    a code in ``ASKED_BY_NAME`` only when named)."""
    rows = await conn.fetch(
        """select o.block_uid, o.block_index, b.est_tokens, o.reason_code
           from overlays o join blocks b using (block_uid)
           where o.run_id = $1 and o.status = any($2::text[])
             and (o.reason_code = any($3::text[])
                  or ($3::text[] is null
                      and not coalesce(o.reason_code, '') = any($5::text[])))
             and ($4::text[] is null or o.block_uid = any($4::text[]))
           order by o.block_index""",
        run_id,
        request.statuses(),
        request.reasons,
        request.blocks,
        list(ASKED_BY_NAME),
    )
    return [
        RetryBlock(r["block_uid"], r["block_index"], r["est_tokens"], r["reason_code"])
        for r in rows
    ]


_COLUMNS = """run_id, retry, workflow_run_id, selection, reasons, block_count, first_pack,
              pack_count, first_round, previous_status, previous_error, started_at,
              finished_at, final_status"""


async def claimed_by(
    conn: asyncpg.Connection | asyncpg.Pool, run_id: str, workflow_run_id: str
) -> RetryRecord | None:
    """The retry of the run that this RunWorkflow execution claimed, if any."""
    row = await conn.fetchrow(
        f"select {_COLUMNS} from run_retries where run_id = $1 and workflow_run_id = $2",
        run_id,
        workflow_run_id,
    )
    return None if row is None else RetryRecord.model_validate(dict(row))


async def record_claim(
    conn: asyncpg.Connection,
    *,
    run_id: str,
    workflow_run_id: str,
    request: RetryRequest,
    reasons: dict[str, int],
    block_count: int,
    first_pack: int,
    pack_count: int,
    first_round: int | None,
    previous_status: str,
    previous_error: str | None,
) -> RetryRecord:
    """Insert the run's next retry, claimed by ``workflow_run_id`` (call under the run lock)."""
    row = await conn.fetchrow(
        f"""insert into run_retries (run_id, retry, workflow_run_id, selection, reasons,
                block_count, first_pack, pack_count, first_round, previous_status,
                previous_error)
            select $1, coalesce(max(retry), 0) + 1, $2, $3, $4, $5, $6, $7, $8, $9, $10
            from run_retries where run_id = $1
            returning {_COLUMNS}""",
        run_id,
        workflow_run_id,
        request.model_dump(mode="json"),
        reasons,
        block_count,
        first_pack,
        pack_count,
        first_round,
        previous_status,
        previous_error,
    )
    return RetryRecord.model_validate(dict(row))


async def close_open(conn: asyncpg.Connection, run_id: str, status: str) -> None:
    """The run has finished: so has its retry under way, if any (idempotent)."""
    await conn.execute(
        """update run_retries set finished_at = now(), final_status = $2
           where run_id = $1 and finished_at is null""",
        run_id,
        status,
    )


async def history(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> list[RetryRecord]:
    """Every retry of the run, first first."""
    rows = await conn.fetch(
        f"select {_COLUMNS} from run_retries where run_id = $1 order by retry", run_id
    )
    return [RetryRecord.model_validate(dict(r)) for r in rows]


async def overlay_changes(
    conn: asyncpg.Connection | asyncpg.Pool,
    run_id: str,
    *,
    since: datetime | None = None,
    block_uids: list[str] | None = None,
) -> list[OverlayChange]:
    """The run's overlay changes (at or after ``since``; only of ``block_uids``), in order."""
    rows = await conn.fetch(
        """select id, block_uid, changed_at, old_status, new_status, reason_code, last_error,
                  attempt_count, pack_index, pack_path, call_id, value_changed
           from overlay_changes
           where run_id = $1 and ($2::timestamptz is null or changed_at >= $2)
             and ($3::text[] is null or block_uid = any($3::text[]))
           order by id""",
        run_id,
        since,
        block_uids,
    )
    return [OverlayChange.model_validate(dict(r)) for r in rows]
