"""Creating one provider batch exactly once, although the create call is not idempotent.

* a part's ``provider_batches`` row is written ``submitting`` (committed) before the
  call, and the batch id is recorded in the same transaction as the request mapping and
  the ledger rows, so a retry that finds an id returns it;
* ``submitted_at`` is set (committed) right before the call and cleared when the API
  answered with an error (nothing was created). If a retry finds it set without a batch
  id, an earlier attempt may have died between the provider creating the batch and our
  commit: it then looks for that orphan in ``batches.list`` (created since, same request
  count, not recorded by anyone) and adopts it instead of paying twice. custom_ids carry
  a tag of the run, so a wrongly adopted batch has no matching results and its requests
  are simply resubmitted next round;
* a transaction-scoped advisory lock per (run, round, part) keeps a zombie attempt and
  its retry from submitting at the same time, and a share lock on the run row makes
  ``mark_run_cancelling`` wait, so no batch is created once the run is cancelling.
"""

from __future__ import annotations

from contextlib import aclosing
from datetime import datetime, timedelta

import asyncpg
from temporalio import activity

from activities.errors import application_error
from activities.shared import origin
from blockbatch.core.batch_types import BatchRoundInput, ProviderBatchRef
from blockbatch.core.batching import Part
from blockbatch.core.bedrock_batch import is_sync_job
from blockbatch.core.context import RunContext
from blockbatch.core.endpoint import Endpoint
from blockbatch.core.prompt import request_prefix
from blockbatch.core.run_types import ACTIVE_STATUSES
from blockbatch.send.sender import NotSent, ProviderBatch, Sender
from blockbatch.store import provider_batches
from blockbatch.store.provider_batches import CreatedBatch, PartKey
from blockbatch.store.runs import status_for_share

#: Clock skew allowed between us and the provider when looking for an orphan batch.
_ORPHAN_SKEW = timedelta(minutes=2)
_ORPHAN_MAX_SCANNED = 2000


async def submit_part(
    pool: asyncpg.Pool,
    sender: Sender,
    ctx: RunContext,
    inp: BatchRoundInput,
    part: Part,
) -> ProviderBatchRef | None:
    """Create one provider batch, exactly once; ``None`` if the run stopped first."""
    key: PartKey = (inp.run_id, inp.round, part.index)
    async with pool.acquire() as guard, guard.transaction():
        # Held until the batch id is recorded: a zombie attempt and its retry queue
        # here, and mark_run_cancelling waits for the share lock on the run row.
        await provider_batches.lock_part(guard, key)
        run_status = await status_for_share(guard, inp.run_id)
        async with pool.acquire() as conn:
            row = await provider_batches.part_record(conn, key)
            if row is not None and row.provider_batch_id is not None:
                return ProviderBatchRef(
                    part=part.index,
                    requests=len(part.requests),
                    provider_batch_id=row.provider_batch_id,
                )
            active = run_status in ACTIVE_STATUSES
            await provider_batches.start_part(
                conn,
                key,
                "submitting" if active else "not_submitted",
                len(part.requests),
                part.nbytes,
            )
            if not active:
                return None
            batch, note = None, None
            if row is not None and row.submitted_at is not None:
                # An earlier attempt sent the create call and never recorded an answer.
                batch = await _find_orphan(
                    conn, sender, ctx, len(part.requests), row.submitted_at - _ORPHAN_SKEW
                )
                note = (
                    (
                        f"adopted {batch.id}, created by an earlier attempt that stopped "
                        "before recording it"
                    )
                    if batch
                    else None
                )
            if batch is None:
                batch = await _create(conn, sender, ctx, key, part)
            min_records = getattr(sender, "min_records", None)  # a Bedrock run's sender
            if min_records is not None and is_sync_job(batch.id):
                note = (
                    f"{len(part.requests)} requests, under Bedrock's minimum of "
                    f"{min_records} records per job: run sync, at on-demand prices"
                )
            await _record(conn, ctx, key, part, batch, note, await sender.endpoint(ctx.route))
    return ProviderBatchRef(
        part=part.index, provider_batch_id=batch.id, requests=len(part.requests)
    )


async def _create(
    conn: asyncpg.Connection, sender: Sender, ctx: RunContext, key: PartKey, part: Part
) -> ProviderBatch:
    # Committed before the call: if we die before recording the answer, the retry
    # knows a batch may exist and looks for it.
    await provider_batches.mark_sent(conn, key)
    try:
        return await sender.create_batch(part.requests, ctx.route)
    except NotSent as failed:
        status = failed.error.status
        if failed.answered and status not in (408, 504):
            # The API answered: no batch was created, nothing to look for on retry.
            await provider_batches.mark_refused(
                conn, key, f"create refused: {status} {failed.error.message}"
            )
        raise application_error(failed.error, "creating a message batch") from None


async def _find_orphan(
    conn: asyncpg.Connection, sender: Sender, ctx: RunContext, count: int, since: datetime
) -> ProviderBatch | None:
    """The one unrecorded batch of ``count`` requests created since ``since``, if any."""
    candidates: list[ProviderBatch] = []
    scanned = 0
    try:
        async with aclosing(sender.batches(ctx.route)) as listed:
            async for batch in listed:
                scanned += 1
                if batch.created_at < since or scanned > _ORPHAN_MAX_SCANNED:
                    break
                if batch.requests == count:
                    candidates.append(batch)
    except NotSent as failed:
        raise application_error(failed.error, "listing message batches") from None
    if not candidates:
        return None
    claimed = await provider_batches.claimed_ids(conn, [b.id for b in candidates])
    unclaimed = [b for b in candidates if b.id not in claimed]
    if len(unclaimed) != 1:
        activity.logger.warning("%d candidate orphan batches; submitting anew", len(unclaimed))
        return None
    activity.logger.warning("adopting orphan batch %s", unclaimed[0].id)
    return unclaimed[0]


async def _record(
    conn: asyncpg.Connection,
    ctx: RunContext,
    key: PartKey,
    part: Part,
    batch: ProviderBatch,
    note: str | None,
    endpoint: Endpoint,
) -> None:
    """Batch id, request mapping and ledger rows, in one transaction."""
    await provider_batches.record_created(
        conn,
        key,
        CreatedBatch(batch.id, batch.status, batch.expires_at, batch.counts.processing),
        note,
        prefix=request_prefix(part.requests[0]["params"]),
        model=ctx.model.id,
        origin=origin(),
        custom_ids=[q["custom_id"] for q in part.requests],
        stored=part.stored,
        aliases=part.aliases,
        endpoint=endpoint,
    )
