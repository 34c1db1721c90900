"""Looking at and canceling a round's provider batches (``poll_round``, ``cancel_round``).

Both are harmless to repeat and retried until they work.
"""

from __future__ import annotations

import asyncpg

from activities.errors import application_error
from blockbatch.core.batch_types import BatchRoundInput, PollRoundOutput
from blockbatch.send.sender import NotSent, ProviderBatch, Sender
from blockbatch.store import provider_batches
from blockbatch.store.provider_batches import BatchState
from blockbatch.store.runs import cached_run_context


async def poll_round(pool: asyncpg.Pool, sender: Sender, inp: BatchRoundInput) -> PollRoundOutput:
    """Look at the round's provider batches and record their state."""
    async with pool.acquire() as conn:
        route = (await cached_run_context(conn, inp.run_id)).route
        for p in await provider_batches.submitted_parts(conn, inp.run_id, inp.round):
            if p.status == "ended":
                continue
            try:
                batch = await sender.batch(p.provider_batch_id, route)
            except NotSent as err:
                raise application_error(
                    err.error, f"looking at batch {p.provider_batch_id}"
                ) from None
            await provider_batches.save_state(conn, (inp.run_id, inp.round, p.part), _state(batch))
        return await provider_batches.round_state(conn, inp.run_id, inp.round)


async def cancel_round(pool: asyncpg.Pool, sender: Sender, inp: BatchRoundInput) -> PollRoundOutput:
    """Cancel the round's unfinished provider batches; what already ran is kept."""
    async with pool.acquire() as conn:
        route = (await cached_run_context(conn, inp.run_id)).route
        for p in await provider_batches.parts_to_cancel(conn, inp.run_id, inp.round):
            try:
                batch = await sender.cancel_batch(p.provider_batch_id, route)
            except NotSent as err:
                raise application_error(
                    err.error, f"canceling batch {p.provider_batch_id}"
                ) from None
            key = (inp.run_id, inp.round, p.part)
            await provider_batches.mark_cancel_requested(conn, key)
            await provider_batches.save_state(conn, key, _state(batch))
        return await provider_batches.round_state(conn, inp.run_id, inp.round)


def _state(batch: ProviderBatch) -> BatchState:
    return BatchState(batch.status, batch.counts, batch.ended_at)
