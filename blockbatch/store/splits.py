"""Split events: a pack halved into two children (sync ``ProcessPack`` and batch rounds)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg


async def record_split(
    conn: asyncpg.Connection,
    run_id: str,
    pack_path: str,
    reason: str,
    block_count: int,
    child_paths: Sequence[str],
) -> None:
    """Record that pack ``pack_path`` was halved into ``child_paths`` (idempotent).

    Args:
        conn: the connection (inside the caller's transaction, if any).
        run_id: the run.
        pack_path: the pack that was split, e.g. ``3.0``.
        reason: why (cut to 1,000 characters).
        block_count: how many unfinished blocks the halves share.
        child_paths: the children, e.g. ``["3.0.0", "3.0.1"]``.
    """
    await conn.execute(
        """insert into split_events (run_id, pack_path, reason, block_count, child_paths)
           values ($1, $2, $3, $4, $5) on conflict do nothing""",
        run_id,
        pack_path,
        reason[:1000],
        block_count,
        list(child_paths),
    )
