"""Activities that touch only Postgres: planning, applying results, failing, rolling up.

Every write is idempotent and conditional on state, so a retried activity (or a second
worker running a stale attempt) never writes a block twice.
"""

from __future__ import annotations

import asyncpg
from temporalio import activity

from core.context import RunContext
from core.models import (
    ApplyResultsInput,
    ApplyResultsOutput,
    FailBlocksInput,
    FailBlocksOutput,
    FinishRunInput,
    MarkCancellingInput,
    PlanRunInput,
    PlanRunOutput,
    RecordSplitInput,
    RunResult,
)
from core.planning import estimate_output_tokens, plan_packs
from core.results import parse_results
from store.runs import cached_run_context


class DbActivities:
    """Activities over one asyncpg pool (built in worker.py)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def context(self, conn: asyncpg.Connection, run_id: str) -> RunContext:
        return await cached_run_context(conn, run_id)

    @activity.defn
    async def plan_run(self, inp: PlanRunInput) -> PlanRunOutput:
        """Size the packs and persist each block's pack_index; the same plan on retry."""
        async with self.pool.acquire() as conn, conn.transaction():
            run = await conn.fetchrow(
                "select status, pack_count, blocks_total from runs where run_id = $1 for update",
                inp.run_id,
            )
            if run is None:
                raise ValueError(f"no run {inp.run_id!r}")
            ctx = await self.context(conn, inp.run_id)
            if run["pack_count"] > 0:
                return PlanRunOutput(pack_count=run["pack_count"],
                                     block_count=run["blocks_total"], mode=ctx.options.mode)
            blocks = await conn.fetch(
                """select block_uid, block_index, est_tokens from blocks
                   where document_id = $1 order by block_index""",
                ctx.document_id,
            )
            opts = ctx.options
            block_tokens = [b["est_tokens"] for b in blocks]
            output_tokens = [
                opts.estimated_output_per_block or estimate_output_tokens(ctx.spec, t)
                for t in block_tokens
            ]
            packs = plan_packs(block_tokens, output_tokens, ctx.plan_limits())
            pack_of = [0] * len(blocks)
            for pack_index, pack in enumerate(packs):
                for pos in pack.positions:
                    pack_of[pos] = pack_index
            await conn.execute(
                """insert into overlays (run_id, block_uid, block_index, pack_index)
                   select $1, u, i, p
                   from unnest($2::text[], $3::int[], $4::int[]) as t(u, i, p)
                   on conflict do nothing""",
                inp.run_id,
                [b["block_uid"] for b in blocks],
                [b["block_index"] for b in blocks],
                pack_of,
            )
            await conn.execute(
                """update runs set status = case when status in ('created', 'planning')
                       then 'running' else status end,
                       pack_count = $2, blocks_total = $3, started_at = coalesce(started_at, now())
                   where run_id = $1""",
                inp.run_id, len(packs), len(blocks),
            )
        activity.logger.info("run %s planned: %d blocks in %d packs", inp.run_id,
                             len(blocks), len(packs))
        return PlanRunOutput(pack_count=len(packs), block_count=len(blocks),
                             mode=opts.mode)

    @activity.defn
    async def apply_results(self, inp: ApplyResultsInput) -> ApplyResultsOutput:
        """Validate a ledger answer by block_uid and write the valid overlays to staging."""
        async with self.pool.acquire() as conn, conn.transaction():
            call = await conn.fetchrow(
                """select block_uids, response, stop_reason, apply_outcome, applied_at
                   from llm_calls where call_id = $1 and run_id = $2 for update""",
                inp.call_id, inp.run_id,
            )
            if call is None or call["response"] is None:
                raise ValueError(f"ledger call {inp.call_id} has no response to apply")
            if call["applied_at"] is not None:
                return ApplyResultsOutput.model_validate(call["apply_outcome"])
            ctx = await self.context(conn, inp.run_id)
            expected: list[str] = list(call["block_uids"])
            parsed = parse_results(call["response"], expected, ctx.spec)
            valid_uids = list(parsed.valid)
            completed = await conn.fetchval(
                """with v as (
                       select u, o from unnest($2::text[], $3::jsonb[]) as t(u, o))
                   , upd as (
                       update overlays set status = 'ai_complete', staging = v.o,
                              attempt_count = attempt_count + 1, last_error = null,
                              pack_path = $4, call_id = $5, updated_at = now()
                       from v where run_id = $1 and block_uid = v.u and status = 'pending'
                       returning 1)
                   select count(*) from upd""",
                inp.run_id, valid_uids, [parsed.valid[u] for u in valid_uids],
                inp.pack_path, inp.call_id,
            )
            # Per-block failures consume an attempt: an invalid result, or any failure of a
            # pack of one. Missing/duplicate results in a larger pack are split instead.
            charged: dict[str, str] = dict(parsed.invalid)
            if len(expected) == 1:
                for uid in parsed.unfinished:
                    charged.setdefault(uid, parsed.summary())
            failed: list[str] = []
            if charged:
                rows = await conn.fetch(
                    """with c as (select u, r from unnest($2::text[], $3::text[]) as t(u, r))
                       update overlays set attempt_count = attempt_count + 1,
                              last_error = c.r, pack_path = $4, call_id = $5,
                              status = case when attempt_count + 1 >= $6 then 'failed'
                                            else status end,
                              updated_at = now()
                       from c where run_id = $1 and block_uid = c.u and status = 'pending'
                       returning block_uid, status""",
                    inp.run_id, list(charged), list(charged.values()), inp.pack_path,
                    inp.call_id, inp.max_block_attempts,
                )
                failed = [r["block_uid"] for r in rows if r["status"] == "failed"]
            still_pending = set(
                await conn.fetchval(
                    """select coalesce(array_agg(block_uid), '{}') from overlays
                       where run_id = $1 and block_uid = any($2::text[]) and status = 'pending'""",
                    inp.run_id, parsed.unfinished,
                )
            )
            outcome = ApplyResultsOutput(
                completed=completed,
                failed=failed,
                remaining=[u for u in parsed.unfinished if u in still_pending],
                mapping_failed=parsed.mapping_failed,
                reason=parsed.summary(),
            )
            await conn.execute(
                "update llm_calls set apply_outcome = $2, applied_at = now() where call_id = $1",
                inp.call_id, outcome.model_dump(mode="json"),
            )
        return outcome

    @activity.defn
    async def fail_blocks(self, inp: FailBlocksInput) -> FailBlocksOutput:
        """End still-pending blocks as ``failed`` with a readable reason."""
        async with self.pool.acquire() as conn:
            if inp.block_uids is None:
                result = await conn.execute(
                    """update overlays set status = 'failed', last_error = $3, pack_path = $4,
                              attempt_count = attempt_count + 1, updated_at = now()
                       where run_id = $1 and pack_index = $2 and status = 'pending'""",
                    inp.run_id, inp.pack_index, inp.reason[:2000], inp.pack_path,
                )
            else:
                result = await conn.execute(
                    """update overlays set status = 'failed', last_error = $3, pack_path = $4,
                              attempt_count = attempt_count + 1, updated_at = now()
                       where run_id = $1 and block_uid = any($2::text[])
                         and status = 'pending'""",
                    inp.run_id, inp.block_uids, inp.reason[:2000], inp.pack_path,
                )
        return FailBlocksOutput(failed=int(result.split()[-1]))

    @activity.defn
    async def record_split(self, inp: RecordSplitInput) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(
                """insert into split_events (run_id, pack_path, reason, block_count, child_paths)
                   values ($1, $2, $3, $4, $5) on conflict do nothing""",
                inp.run_id, inp.pack_path, inp.reason[:1000], inp.block_count, inp.child_paths,
            )

    @activity.defn
    async def mark_run_cancelling(self, inp: MarkCancellingInput) -> None:
        """After this commits, ``call_model`` refuses to start a call for the run."""
        async with self.pool.acquire() as conn:
            await conn.execute(
                """update runs set status = 'cancelling', error = coalesce(error, $2),
                          cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp())
                   where run_id = $1 and status in ('created', 'planning', 'running')""",
                inp.run_id, inp.reason,
            )

    @activity.defn
    async def finish_run(self, inp: FinishRunInput) -> RunResult:
        """Close the run and recompute every counter from Postgres, the source of truth."""
        async with self.pool.acquire() as conn, conn.transaction():
            if inp.status == "completed":
                # A pending block here means a pack ended without finishing it: say so.
                await conn.execute(
                    """update overlays set status = 'failed', updated_at = now(),
                              last_error = coalesce(last_error || '; ', '')
                                           || 'no pack finished this block'
                       where run_id = $1 and status = 'pending'""",
                    inp.run_id,
                )
            else:
                await conn.execute(
                    """update overlays set status = 'cancelled', updated_at = now(),
                              last_error = coalesce(last_error, $2)
                       where run_id = $1 and status = 'pending'""",
                    inp.run_id, f"run {inp.status}: {inp.error}" if inp.error else None,
                )
            row = await conn.fetchrow(ROLLUP_SQL, inp.run_id, inp.status, inp.error)
        result = RunResult.model_validate({**dict(row), "cost_usd": float(row["cost_usd"])})
        return result


ROLLUP_SQL = """
with o as (
    select count(*) as total,
           count(*) filter (where status in ('ai_complete', 'confirmed')) as ok,
           count(*) filter (where status = 'failed') as failed,
           count(*) filter (where status = 'cancelled') as cancelled,
           count(*) filter (where status = 'confirmed') as confirmed
    from overlays where run_id = $1),
c as (
    -- A request the provider never processed (a cancelled or expired batch request) is not a call.
    select count(*) filter (where status <> 'started'
                            and coalesce(error_type, '') not in ('canceled', 'expired')) as calls,
           coalesce(sum(input_tokens), 0) as input_tokens,
           coalesce(sum(output_tokens), 0) as output_tokens,
           coalesce(sum(cache_creation_input_tokens), 0) as cache_creation_input_tokens,
           coalesce(sum(cache_read_input_tokens), 0) as cache_read_input_tokens,
           coalesce(sum(cost_usd), 0) as cost_usd
    from llm_calls where run_id = $1),
s as (select count(*) as splits from split_events where run_id = $1)
update runs r set
    status = $2, error = $3, finished_at = now(),
    blocks_total = o.total, blocks_ai_complete = o.ok, blocks_failed = o.failed,
    blocks_cancelled = o.cancelled, blocks_confirmed = o.confirmed,
    calls = c.calls, split_events = s.splits,
    input_tokens = c.input_tokens, output_tokens = c.output_tokens,
    cache_creation_input_tokens = c.cache_creation_input_tokens,
    cache_read_input_tokens = c.cache_read_input_tokens, cost_usd = c.cost_usd
from o, c, s
where r.run_id = $1
returning r.run_id, r.status, r.error, r.blocks_total, r.blocks_ai_complete, r.blocks_failed,
          r.blocks_cancelled, r.pack_count, r.calls, r.split_events, r.input_tokens,
          r.output_tokens, r.cache_creation_input_tokens, r.cache_read_input_tokens, r.cost_usd
"""
