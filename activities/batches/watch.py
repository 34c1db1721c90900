"""Looking at and canceling a round's provider batches (``poll_round``, ``cancel_round``).

Both are harmless to repeat and retried until they work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg

from activities.bedrock_jobs import BedrockBatches
from activities.errors import application_error, from_api_error
from activities.sdk import anthropic
from blockbatch.core.batch_types import BatchCounts, BatchRoundInput, PollRoundOutput
from blockbatch.store import provider_batches
from blockbatch.store.provider_batches import BatchState

if TYPE_CHECKING:
    from anthropic.types.messages import MessageBatch


async def poll_round(
    pool: asyncpg.Pool, client: anthropic.AsyncAnthropic | BedrockBatches, inp: BatchRoundInput
) -> PollRoundOutput:
    """Look at the round's provider batches and record their state."""
    async with pool.acquire() as conn:
        for p in await provider_batches.submitted_parts(conn, inp.run_id, inp.round):
            if p.status == "ended":
                continue
            try:
                batch = await client.messages.batches.retrieve(p.provider_batch_id)
            except anthropic.APIError as err:
                raise application_error(
                    from_api_error(err), f"looking at batch {p.provider_batch_id}"
                ) from None
            await provider_batches.save_state(conn, (inp.run_id, inp.round, p.part), _state(batch))
        return await provider_batches.round_state(conn, inp.run_id, inp.round)


async def cancel_round(
    pool: asyncpg.Pool, client: anthropic.AsyncAnthropic | BedrockBatches, inp: BatchRoundInput
) -> PollRoundOutput:
    """Cancel the round's unfinished provider batches; what already ran is kept."""
    async with pool.acquire() as conn:
        for p in await provider_batches.parts_to_cancel(conn, inp.run_id, inp.round):
            try:
                batch = await client.messages.batches.cancel(p.provider_batch_id)
            except anthropic.APIError as err:
                raise application_error(
                    from_api_error(err), f"canceling batch {p.provider_batch_id}"
                ) from None
            key = (inp.run_id, inp.round, p.part)
            await provider_batches.mark_cancel_requested(conn, key)
            await provider_batches.save_state(conn, key, _state(batch))
        return await provider_batches.round_state(conn, inp.run_id, inp.round)


def _state(batch: MessageBatch) -> BatchState:
    c = batch.request_counts
    return BatchState(
        batch.processing_status,
        BatchCounts(
            processing=c.processing,
            succeeded=c.succeeded,
            errored=c.errored,
            canceled=c.canceled,
            expired=c.expired,
        ),
        batch.ended_at,
    )
