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

from datetime import datetime, timedelta

import anthropic
import asyncpg
from anthropic.types.messages import MessageBatch
from temporalio import activity

from activities.batches.base import ACTIVE_STATUSES, BatchBase, api_error
from core.batching import Part
from core.context import RunContext
from core.models import BatchRoundInput, ProviderBatchRef
from core.prompt import prefix_sha256

#: Clock skew allowed between us and the provider when looking for an orphan batch.
_ORPHAN_SKEW = timedelta(minutes=2)
_ORPHAN_MAX_SCANNED = 2000
_Key = tuple[str, int, int]


class BatchCreation(BatchBase):
    """Create a part's provider batch, or return (or adopt) the one already made."""

    async def _submit_part(
        self, ctx: RunContext, inp: BatchRoundInput, part: Part
    ) -> ProviderBatchRef | None:
        """Create one provider batch, exactly once; ``None`` if the run stopped first."""
        key = (inp.run_id, inp.round, part.index)
        async with self.pool.acquire() as guard, guard.transaction():
            # Held until the batch id is recorded: a zombie attempt and its retry queue
            # here, and mark_run_cancelling waits for the share lock on the run row.
            await guard.execute("select pg_advisory_xact_lock(hashtextextended($1, 0))",
                                f"blockbatch-batch:{inp.run_id}:{inp.round}:{part.index}")
            run_status = await guard.fetchval(
                "select status from runs where run_id = $1 for share", inp.run_id
            )
            async with self.pool.acquire() as conn:
                row = await conn.fetchrow(
                    """select provider_batch_id, submitted_at from provider_batches
                       where run_id = $1 and round = $2 and part = $3""", *key,
                )
                if row is not None and row["provider_batch_id"] is not None:
                    return ProviderBatchRef(part=part.index, requests=len(part.requests),
                                            provider_batch_id=row["provider_batch_id"])
                await conn.execute(
                    """insert into provider_batches (run_id, round, part, status,
                           request_count, request_bytes)
                       values ($1, $2, $3, $4, $5, $6)
                       on conflict (run_id, round, part) do update set status = $4,
                           submit_attempts = provider_batches.submit_attempts + 1""",
                    *key, "submitting" if run_status in ACTIVE_STATUSES else "not_submitted",
                    len(part.requests), part.nbytes,
                )
                if run_status not in ACTIVE_STATUSES:
                    return None
                batch, note = None, None
                if row is not None and row["submitted_at"] is not None:
                    # An earlier attempt sent the create call and never recorded an answer.
                    batch = await self._find_orphan(conn, len(part.requests),
                                                    row["submitted_at"] - _ORPHAN_SKEW)
                    note = (f"adopted {batch.id}, created by an earlier attempt that stopped "
                            "before recording it") if batch else None
                if batch is None:
                    batch = await self._create(conn, key, part)
                await self._record(conn, ctx, key, part, batch, note)
        return ProviderBatchRef(part=part.index, provider_batch_id=batch.id,
                                requests=len(part.requests))

    async def _create(self, conn: asyncpg.Connection, key: _Key, part: Part) -> MessageBatch:
        # Committed before the call: if we die before recording the answer, the retry
        # knows a batch may exist and looks for it.
        await conn.execute(
            """update provider_batches set submitted_at = clock_timestamp()
               where run_id = $1 and round = $2 and part = $3""", *key,
        )
        try:
            return await self.client.messages.batches.create(
                requests=part.requests  # type: ignore[arg-type]
            )
        except anthropic.APIStatusError as err:
            if err.status_code not in (408, 504):
                # The API answered: no batch was created, nothing to look for on retry.
                await conn.execute(
                    """update provider_batches set submitted_at = null, note = $4
                       where run_id = $1 and round = $2 and part = $3""",
                    *key, f"create refused: {err.status_code} {err.message}"[:1000],
                )
            raise api_error(err, "creating a message batch") from None
        except anthropic.APIConnectionError as err:
            raise api_error(err, "creating a message batch") from None

    async def _find_orphan(
        self, conn: asyncpg.Connection, count: int, since: datetime
    ) -> MessageBatch | None:
        """The one unrecorded batch of ``count`` requests created since ``since``, if any."""
        candidates: list[MessageBatch] = []
        scanned = 0
        try:
            async for batch in self.client.messages.batches.list(limit=100):
                scanned += 1
                if batch.created_at < since or scanned > _ORPHAN_MAX_SCANNED:
                    break
                c = batch.request_counts
                total = c.processing + c.succeeded + c.errored + c.canceled + c.expired
                if total == count:
                    candidates.append(batch)
        except anthropic.APIError as err:
            raise api_error(err, "listing message batches") from None
        if not candidates:
            return None
        claimed = {r["provider_batch_id"] for r in await conn.fetch(
            "select provider_batch_id from provider_batches where provider_batch_id = any($1)",
            [b.id for b in candidates],
        )}
        unclaimed = [b for b in candidates if b.id not in claimed]
        if len(unclaimed) != 1:
            activity.logger.warning("%d candidate orphan batches; submitting anew",
                                    len(unclaimed))
            return None
        activity.logger.warning("adopting orphan batch %s", unclaimed[0].id)
        return unclaimed[0]

    @staticmethod
    async def _record(
        conn: asyncpg.Connection, ctx: RunContext, key: _Key, part: Part, batch: MessageBatch,
        note: str | None,
    ) -> None:
        """Batch id, request mapping and ledger rows, in one transaction."""
        info = activity.info()
        system, tools = part.requests[0]["params"]["system"], part.requests[0]["params"]["tools"]
        prefix_sha = prefix_sha256(system, tools)
        async with conn.transaction():
            await conn.execute(
                """update provider_batches set provider_batch_id = $4, status = $5,
                          expires_at = $6, processing = $7, note = coalesce($8, note),
                          submitted_at = coalesce(submitted_at, clock_timestamp())
                   where run_id = $1 and round = $2 and part = $3""",
                *key, batch.id, batch.processing_status, batch.expires_at,
                batch.request_counts.processing, note,
            )
            await conn.execute(
                """insert into prompt_prefixes (sha256, system, tools) values ($1, $2, $3)
                   on conflict do nothing""",
                prefix_sha, system, tools,
            )
            for start in range(0, len(part.requests), 500):
                chunk = slice(start, start + 500)
                await conn.execute(
                    """with ins as (
                           insert into llm_calls (run_id, pack_path, pack_attempt, block_uids,
                               model, prefix_sha256, request, status, workflow_id,
                               workflow_run_id, activity_id, activity_attempt,
                               provider_batch_id, custom_id)
                           select r.run_id, r.pack_path, r.pack_attempt, r.block_uids, $4, $5,
                                  t.req, 'started', $6, $7, $8, $9, $10, r.custom_id
                           from unnest($2::text[], $3::jsonb[]) as t(cid, req)
                           join batch_requests r on r.run_id = $1 and r.custom_id = t.cid
                           returning call_id, custom_id)
                       update batch_requests r set call_id = ins.call_id, part = $11,
                              provider_batch_id = $10
                       from ins where r.run_id = $1 and r.custom_id = ins.custom_id""",
                    ctx.run_id, [q["custom_id"] for q in part.requests[chunk]],
                    part.stored[chunk], ctx.model.id, prefix_sha, info.workflow_id,
                    info.workflow_run_id, info.activity_id, info.attempt, batch.id, key[2],
                )
