"""Streaming an ended round's results into the ledger (``collect_round``).

Resumable: a line already recorded is skipped, a batch already read is not read again,
and a request with no result line is recorded as ``missing`` (resubmitted next round).
"""

from __future__ import annotations

import anthropic
import asyncpg
from temporalio import activity

from activities.batches.base import BatchBase, api_error, heartbeating
from core.batching import ResultRow, result_row
from core.context import RunContext
from core.models import BatchCounts, BatchRoundInput, CollectRoundOutput, Totals

_FLUSH_EVERY = 200


class CollectActivities(BatchBase):
    """``collect_round``."""

    @activity.defn
    async def collect_round(self, inp: BatchRoundInput) -> CollectRoundOutput:
        """Stream the ended batches' results into the ledger (resumes where it stopped)."""
        async with (
            heartbeating(f"round {inp.round}: collecting") as status,
            self.pool.acquire() as conn,
        ):
            ctx = await self._context(conn, inp.run_id)
            parts = await conn.fetch(
                """select part, provider_batch_id, submitted_at, ended_at
                   from provider_batches
                   where run_id = $1 and round = $2 and status = 'ended'
                     and collected_at is null order by part""",
                inp.run_id, inp.round,
            )
            for p in parts:
                await self._collect_part(conn, ctx, inp, p, status)
            return await _round_totals(conn, inp)

    async def _collect_part(
        self, conn: asyncpg.Connection, ctx: RunContext, inp: BatchRoundInput,
        p: asyncpg.Record, status: list[str],
    ) -> None:
        batch_id = p["provider_batch_id"]
        pending: dict[str, int] = dict(await conn.fetch(
            """select custom_id, call_id from batch_requests
               where run_id = $1 and provider_batch_id = $2 and result_type is null""",
            inp.run_id, batch_id,
        ))
        latency_ms = None
        if p["submitted_at"] and p["ended_at"]:
            latency_ms = int((p["ended_at"] - p["submitted_at"]).total_seconds() * 1000)
        rows: list[ResultRow] = []
        seen = foreign = 0
        try:
            async for line in await self.client.messages.batches.results(batch_id):
                call_id = pending.pop(line.custom_id, None)
                if call_id is None:
                    foreign += 1  # already recorded by an earlier attempt, or not ours
                    continue
                rows.append(result_row(call_id, line.custom_id,
                                       line.result.model_dump(mode="json"), ctx.model,
                                       latency_ms))
                seen += 1
                if len(rows) >= _FLUSH_EVERY:
                    await _flush(conn, inp.run_id, rows)
                    status[0] = f"round {inp.round}: {seen} results of {batch_id} recorded"
        except anthropic.APIError as err:
            await _flush(conn, inp.run_id, rows)
            raise api_error(err, f"reading the results of {batch_id}") from None
        for custom_id, call_id in pending.items():
            rows.append(result_row(call_id, custom_id, {"type": "missing"}, ctx.model, None))
        await _flush(conn, inp.run_id, rows)
        if foreign:
            activity.logger.info("%s: %d result lines skipped", batch_id, foreign)
        await conn.execute(
            """update provider_batches set collected_at = clock_timestamp()
               where run_id = $1 and provider_batch_id = $2""",
            inp.run_id, batch_id,
        )


async def _flush(conn: asyncpg.Connection, run_id: str, rows: list[ResultRow]) -> None:
    if not rows:
        return
    async with conn.transaction():
        await conn.executemany(
            """update llm_calls set status = $2, response = $3, http_status = $4,
                      error_type = $5, error_message = $6, request_id = $7,
                      stop_reason = $8, input_tokens = $9, output_tokens = $10,
                      cache_creation_input_tokens = $11, cache_read_input_tokens = $12,
                      cache_creation_1h_tokens = $13, cost_usd = $14, latency_ms = $15,
                      finished_at = clock_timestamp()
               where call_id = $1 and status = 'started'""",
            [(r.call_id, *r[3:]) for r in rows],
        )
        await conn.executemany(
            """update batch_requests set result_type = $3
               where run_id = $1 and custom_id = $2 and result_type is null""",
            [(run_id, r.custom_id, r.result_type) for r in rows],
        )
    rows.clear()


async def _round_totals(conn: asyncpg.Connection, inp: BatchRoundInput) -> CollectRoundOutput:
    row = await conn.fetchrow(
        """select count(*) filter (where c.status <> 'started') as calls,
                  coalesce(sum(c.input_tokens), 0) as input_tokens,
                  coalesce(sum(c.output_tokens), 0) as output_tokens,
                  coalesce(sum(c.cache_creation_input_tokens), 0)
                      as cache_creation_input_tokens,
                  coalesce(sum(c.cache_read_input_tokens), 0) as cache_read_input_tokens,
                  coalesce(sum(c.cost_usd), 0)::float8 as cost_usd,
                  count(*) filter (where r.result_type = 'succeeded') as succeeded,
                  count(*) filter (where r.result_type = 'errored') as errored,
                  count(*) filter (where r.result_type = 'canceled') as canceled,
                  count(*) filter (where r.result_type in ('expired', 'missing'))
                      as expired
           from batch_requests r join llm_calls c using (call_id)
           where r.run_id = $1 and r.round = $2""",
        inp.run_id, inp.round,
    )
    totals = Totals(**{k: row[k] for k in (
        "calls", "input_tokens", "output_tokens", "cache_creation_input_tokens",
        "cache_read_input_tokens", "cost_usd")})
    counts = BatchCounts(**{k: row[k] for k in ("succeeded", "errored", "canceled",
                                                 "expired")})
    return CollectRoundOutput(counts=counts, totals=totals)
