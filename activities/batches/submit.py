"""Forming round 1 and submitting a round as provider batches (``open_batch_run``,
``submit_round``); requests are built from Postgres, never carried through Temporal."""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import asyncpg
from temporalio import activity

from activities.batches.base import heartbeating
from activities.batches.create import BatchCreation
from activities.batches.rounds import enqueue, round_size
from core.batching import BATCH_CACHE_TTL, PackAttempt, Part, PartCutter, batch_params
from core.context import RunContext
from core.models import (
    BatchOptions,
    BatchRoundInput,
    OpenBatchRunInput,
    OpenBatchRunOutput,
    ProviderBatchRef,
    SubmitRoundOutput,
)
from core.prompt import build_request

#: Pack attempts read per query while building a batch.
_PAGE_REQUESTS = 200


class SubmitActivities(BatchCreation):
    """``open_batch_run`` and ``submit_round``."""

    @activity.defn
    async def open_batch_run(self, inp: OpenBatchRunInput) -> OpenBatchRunOutput:
        """Form round 1 from the plan: one request per planned pack (idempotent)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("select 1 from runs where run_id = $1 for update", inp.run_id)
            ctx = await self._context(conn, inp.run_id)
            options = ctx.options.batch or BatchOptions()
            existing = await round_size(conn, inp.run_id, 1)
            if existing[0]:
                return OpenBatchRunOutput(options=options, requests=existing[0],
                                          blocks=existing[1])
            rows = await conn.fetch(
                """select block_uid, pack_index from overlays
                   where run_id = $1 and status = 'pending' order by pack_index, block_index""",
                inp.run_id,
            )
            packs: dict[int, list[str]] = {}
            for r in rows:
                packs.setdefault(r["pack_index"], []).append(r["block_uid"])
            failed = await enqueue(
                conn, ctx, 1, [PackAttempt(str(i), i, 1, 0, uids) for i, uids in packs.items()]
            )
            requests, blocks = await round_size(conn, inp.run_id, 1)
        return OpenBatchRunOutput(options=options, requests=requests, blocks=blocks,
                                  failed=failed)

    @activity.defn
    async def submit_round(self, inp: BatchRoundInput) -> SubmitRoundOutput:
        """Submit a round as provider batches; a retry returns the batches already made."""
        async with self.pool.acquire() as conn:
            ctx = await self._context(conn, inp.run_id)
            requests, _ = await round_size(conn, inp.run_id, inp.round)
            done = {
                r["part"]: ProviderBatchRef(part=r["part"], provider_batch_id=r["id"],
                                            requests=r["request_count"])
                for r in await conn.fetch(
                    """select part, provider_batch_id as id, request_count
                       from provider_batches where run_id = $1 and round = $2
                         and provider_batch_id is not null order by part""",
                    inp.run_id, inp.round,
                )
            }
        out = SubmitRoundOutput(requests=requests, batches=list(done.values()))
        if sum(b.requests for b in out.batches) == requests:
            return out  # every part is already submitted (or the round is empty)
        options = ctx.options.batch or BatchOptions()
        out.batches = []
        async with (
            heartbeating(f"round {inp.round}: building requests") as status,
            aclosing(self._parts(ctx, inp, options)) as parts,
        ):
            async for part in parts:
                status[0] = (f"round {inp.round} part {part.index}: "
                             f"{len(part.requests)} requests, {part.nbytes:,} bytes")
                ref = done.get(part.index) or await self._submit_part(ctx, inp, part)
                if ref is None:
                    out.refused = True
                    break
                out.batches.append(ref)
        return out

    async def _parts(
        self, ctx: RunContext, inp: BatchRoundInput, options: BatchOptions
    ) -> AsyncGenerator[Part, None]:
        """The round's requests, read from Postgres a page at a time, cut into parts.

        The order is fixed (pack_index, pack_path), so a retry cuts the same parts. No
        connection is held while a part is being submitted.
        """
        cutter = PartCutter(options)
        after: tuple[int, str] = (-1, "")
        while True:
            async with self.pool.acquire() as conn:
                rows = await conn.fetch(
                    """with page as (
                           select custom_id, pack_index, pack_path, max_tokens, block_uids
                           from batch_requests
                           where run_id = $1 and round = $2 and (pack_index, pack_path) > ($3, $4)
                           order by pack_index, pack_path limit $5)
                       select p.custom_id, p.pack_index, p.pack_path, p.max_tokens,
                              b.block_uid, b.block_type, b.block_content
                       from page p
                       cross join lateral unnest(p.block_uids) with ordinality as u(uid, ord)
                       join blocks b on b.block_uid = u.uid
                       order by p.pack_index, p.pack_path, u.ord""",
                    inp.run_id, inp.round, *after, _PAGE_REQUESTS,
                )
            if not rows:
                break
            for _, group in itertools.groupby(rows, key=lambda r: r["custom_id"]):
                closed = cutter.add(*self._request(ctx, list(group)))
                if closed is not None:
                    yield closed
            after = (rows[-1]["pack_index"], rows[-1]["pack_path"])
        last = cutter.last()
        if last is not None:
            yield last

    @staticmethod
    def _request(
        ctx: RunContext, pack: list[asyncpg.Record]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The batch request of one pack attempt, and what the ledger keeps of it."""
        request = build_request(
            ctx.spec,
            [{"block_uid": r["block_uid"], "block_type": r["block_type"],
              "block_content": r["block_content"]} for r in pack],
            max_tokens=pack[0]["max_tokens"],
            model=ctx.model.id,
            cache_ttl=BATCH_CACHE_TTL,
        )
        params = batch_params(request)
        stored = {k: v for k, v in params.items() if k not in ("system", "tools")}
        return {"custom_id": pack[0]["custom_id"], "params": params}, stored
