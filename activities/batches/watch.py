"""Looking at and canceling a round's provider batches (``poll_round``, ``cancel_round``)."""

from __future__ import annotations

import anthropic
import asyncpg
from anthropic.types.messages import MessageBatch
from temporalio import activity

from activities.batches.base import BatchBase, api_error
from core.models import BatchCounts, BatchRoundInput, PollRoundOutput


class WatchActivities(BatchBase):
    """``poll_round`` and ``cancel_round``: harmless to repeat, retried until they work."""

    @activity.defn
    async def poll_round(self, inp: BatchRoundInput) -> PollRoundOutput:
        """Look at the round's provider batches and record their state."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                """select part, provider_batch_id, status from provider_batches
                   where run_id = $1 and round = $2 and provider_batch_id is not null
                   order by part""",
                inp.run_id, inp.round,
            )
            for r in rows:
                if r["status"] == "ended":
                    continue
                try:
                    batch = await self.client.messages.batches.retrieve(r["provider_batch_id"])
                except anthropic.APIError as err:
                    raise api_error(err, f"looking at batch {r['provider_batch_id']}") from None
                await _save_state(conn, inp, r["part"], batch)
            return await _round_state(conn, inp)

    @activity.defn
    async def cancel_round(self, inp: BatchRoundInput) -> PollRoundOutput:
        """Cancel the round's unfinished provider batches; what already ran is kept."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                """select part, provider_batch_id from provider_batches
                   where run_id = $1 and round = $2 and provider_batch_id is not null
                     and status not in ('ended', 'canceling')""",
                inp.run_id, inp.round,
            )
            for r in rows:
                try:
                    batch = await self.client.messages.batches.cancel(r["provider_batch_id"])
                except anthropic.APIError as err:
                    raise api_error(err, f"canceling batch {r['provider_batch_id']}") from None
                await conn.execute(
                    """update provider_batches set cancel_requested_at = coalesce(
                           cancel_requested_at, clock_timestamp())
                       where run_id = $1 and round = $2 and part = $3""",
                    inp.run_id, inp.round, r["part"],
                )
                await _save_state(conn, inp, r["part"], batch)
            return await _round_state(conn, inp)


async def _save_state(
    conn: asyncpg.Connection, inp: BatchRoundInput, part: int, batch: MessageBatch
) -> None:
    c = batch.request_counts
    await conn.execute(
        """update provider_batches set status = $4, processing = $5, succeeded = $6,
                  errored = $7, canceled = $8, expired = $9, ended_at = $10
           where run_id = $1 and round = $2 and part = $3""",
        inp.run_id, inp.round, part, batch.processing_status, c.processing, c.succeeded,
        c.errored, c.canceled, c.expired, batch.ended_at,
    )


async def _round_state(conn: asyncpg.Connection, inp: BatchRoundInput) -> PollRoundOutput:
    rows = await conn.fetch(
        """select status, processing, succeeded, errored, canceled, expired
           from provider_batches
           where run_id = $1 and round = $2 and provider_batch_id is not null
           order by part""",
        inp.run_id, inp.round,
    )
    counts = BatchCounts(**{k: sum(r[k] for r in rows) for k in BatchCounts.model_fields})
    statuses = [r["status"] for r in rows]
    return PollRoundOutput(counts=counts, statuses=statuses,
                           ended=all(s == "ended" for s in statuses))
