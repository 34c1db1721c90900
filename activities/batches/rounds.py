"""A round's membership in Postgres: the pack attempts (``batch_requests``) it holds.

Called inside the activities' transactions, on their connection; every write is
idempotent (``on conflict do nothing``, ``status = 'pending'``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from core.batching import PackAttempt, custom_id_for
from core.context import RunContext
from core.planning import describe_pack, estimate_output_tokens


async def enqueue(
    conn: asyncpg.Connection, ctx: RunContext, round_: int, packs: Sequence[PackAttempt]
) -> int:
    """Add pack attempts to a round; a lone block too large for the model fails now.

    Returns:
        How many blocks failed as oversized.
    """
    uids = [u for p in packs for u in p.uids]
    est = dict(await conn.fetch(
        "select block_uid, est_tokens from blocks where block_uid = any($1::text[])", uids
    )) if uids else {}
    rows: list[tuple[Any, ...]] = []
    failed = 0
    for p in packs:
        tokens = [est[u] for u in p.uids]
        outputs = [ctx.options.estimated_output_per_block
                   or estimate_output_tokens(ctx.spec, t) for t in tokens]
        pack = describe_pack(range(len(tokens)), tokens, outputs, ctx.plan_limits())
        if len(p.uids) == 1 and pack.oversized:
            failed += await fail_blocks(conn, ctx.run_id, p.uids, p.path, (
                f"block is too large for {ctx.model.id}: about {pack.est_input_tokens:,} "
                f"input tokens + {pack.max_tokens:,} output tokens exceed the "
                f"{ctx.model.context_window:,}-token context window; split the block "
                "in the source document"))
            continue
        rows.append((custom_id_for(ctx.run_id, p.path, p.attempt), p.path, p.index,
                     p.attempt, p.resubmits, p.uids, pack.max_tokens))
    if not rows:
        return failed
    await conn.executemany(
        """insert into batch_requests (run_id, round, custom_id, pack_path, pack_index,
               pack_attempt, resubmits, block_uids, max_tokens)
           values ($1, $2, $3, $4, $5, $6, $7, $8, $9) on conflict do nothing""",
        [(ctx.run_id, round_, *r) for r in rows],
    )
    return failed


async def fail_blocks(
    conn: asyncpg.Connection, run_id: str, uids: list[str], pack_path: str, reason: str
) -> int:
    """End still-pending blocks as ``failed``; returns how many there were."""
    result = await conn.execute(
        """update overlays set status = 'failed', last_error = $3, pack_path = $4,
                  attempt_count = attempt_count + 1, updated_at = now()
           where run_id = $1 and block_uid = any($2::text[]) and status = 'pending'""",
        run_id, uids, reason[:2000], pack_path,
    )
    return int(result.split()[-1])


async def round_size(conn: asyncpg.Connection, run_id: str, round_: int) -> tuple[int, int]:
    """How many requests and blocks a round holds."""
    row = await conn.fetchrow(
        """select count(*) as n, coalesce(sum(cardinality(block_uids)), 0) as blocks
           from batch_requests where run_id = $1 and round = $2""",
        run_id, round_,
    )
    return int(row["n"]), int(row["blocks"])
