"""A round's membership: which pack attempts (``batch_requests``) it holds.

Called inside the activities' transactions, on their connection; every write is
idempotent (``on conflict do nothing``, ``status = 'pending'``).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from blockbatch.core.batching import PackAttempt, custom_id_for
from blockbatch.core.context import RunContext
from blockbatch.store import batches, overlays


async def enqueue(
    conn: asyncpg.Connection, ctx: RunContext, round_: int, packs: Sequence[PackAttempt]
) -> dict[str, int]:
    """Add pack attempts to a round; a lone block too large for the model fails now.

    Returns:
        The blocks that failed, by reason code (``oversized``; empty when none did).
    """
    est = await batches.block_tokens(conn, [u for p in packs for u in p.uids])
    requests: list[batches.NewRequest] = []
    failed = 0
    for p in packs:
        pack = ctx.pack([est[u] for u in p.uids], p.attempt)
        too_large = ctx.too_large(pack, len(p.uids))
        if too_large is not None:
            failed += await overlays.fail_pending(
                conn, ctx.run_id, too_large, p.path, reason_code="oversized", block_uids=p.uids
            )
            continue
        requests.append(
            batches.NewRequest(
                custom_id_for(ctx.run_id, p.path, p.attempt),
                p.path,
                p.index,
                p.attempt,
                p.resubmits,
                p.uids,
                pack.max_tokens,
            )
        )
    if requests:
        await batches.add_requests(conn, ctx.run_id, round_, requests)
    return {"oversized": failed} if failed else {}
