"""Streaming an ended round's results into the ledger (``collect_round``).

Resumable: a line already recorded is skipped, a batch already read is not read again,
and a request with no result line is recorded as ``missing`` (resubmitted next round).
"""

from __future__ import annotations

import asyncpg
from temporalio import activity

from activities.errors import application_error
from activities.shared import heartbeating
from blockbatch.core.batch_types import BatchRoundInput, CollectRoundOutput
from blockbatch.core.batching import ResultRow, result_row
from blockbatch.core.bedrock_batch import is_sync_job
from blockbatch.core.context import RunContext
from blockbatch.send.sender import NotSent, Sender
from blockbatch.store import batches, provider_batches
from blockbatch.store.runs import cached_run_context

_FLUSH_EVERY = 200


async def collect_round(
    pool: asyncpg.Pool, sender: Sender, inp: BatchRoundInput
) -> CollectRoundOutput:
    """Stream the ended batches' results into the ledger (resumes where it stopped)."""
    async with (
        heartbeating(f"round {inp.round}: collecting") as status,
        pool.acquire() as conn,
    ):
        ctx = await cached_run_context(conn, inp.run_id)
        for p in await provider_batches.parts_to_collect(conn, inp.run_id, inp.round):
            await _collect_part(conn, sender, ctx, p, status, inp.round)
        return await batches.round_totals(conn, inp.run_id, inp.round)


async def _collect_part(
    conn: asyncpg.Connection,
    sender: Sender,
    ctx: RunContext,
    p: provider_batches.EndedPart,
    status: list[str],
    round_: int,
) -> None:
    batch_id = p.provider_batch_id
    pending = await batches.uncollected_requests(conn, ctx.run_id, batch_id)
    latency_ms = None
    if p.submitted_at and p.ended_at:
        latency_ms = int((p.ended_at - p.submitted_at).total_seconds() * 1000)
    rows: list[ResultRow] = []
    seen = foreign = 0
    # A Bedrock part under a job's minimum runs sync as its results are read: only the
    # requests not yet recorded are sent, each recorded as soon as it is answered, at the
    # on-demand price (activities/bedrock_jobs.py).
    sync = is_sync_job(batch_id)
    flush_every = 1 if sync else _FLUSH_EVERY
    try:
        lines = sender.batch_results(batch_id, ctx.route, wanted=set(pending))
        async for custom_id, result in lines:
            call_id = pending.pop(custom_id, None)
            if call_id is None:
                foreign += 1  # already recorded by an earlier attempt, or not ours
                continue
            rows.append(
                result_row(
                    call_id,
                    custom_id,
                    result,
                    ctx.model,
                    latency_ms,
                    batch=not sync,
                )
            )
            seen += 1
            if len(rows) >= flush_every:
                await _flush(conn, ctx.run_id, rows)
                status[0] = f"round {round_}: {seen} results of {batch_id} recorded"
    except NotSent as err:
        await _flush(conn, ctx.run_id, rows)
        raise application_error(err.error, f"reading the results of {batch_id}") from None
    for custom_id, call_id in pending.items():
        rows.append(result_row(call_id, custom_id, {"type": "missing"}, ctx.model, None))
    await _flush(conn, ctx.run_id, rows)
    if foreign:
        activity.logger.info("%s: %d result lines skipped", batch_id, foreign)
    async with conn.transaction():
        if await provider_batches.mark_collected(conn, ctx.run_id, batch_id):
            await batches.count_cache_hits(conn, ctx.run_id, batch_id, ctx.model.id)


async def _flush(conn: asyncpg.Connection, run_id: str, rows: list[ResultRow]) -> None:
    await batches.record_results(conn, run_id, rows)
    rows.clear()
