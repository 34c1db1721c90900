"""Applying a collected round (``apply_round``): overlays via the same ``apply_results`` as
sync mode, then whatever is unfinished becomes round n + 1 (see ``batching.decide``)."""

from __future__ import annotations

import asyncpg
from temporalio import activity

from activities.batches.base import BatchBase, heartbeating
from activities.batches.rounds import enqueue, fail_blocks, round_size
from core.batching import PackAttempt, decide, split_pack
from core.context import RunContext
from core.models import ApplyResultsInput, ApplyRoundInput, ApplyRoundOutput


class ApplyActivities(BatchBase):
    """``apply_round``."""

    @activity.defn
    async def apply_round(self, inp: ApplyRoundInput) -> ApplyRoundOutput:
        """Apply each answer (``apply_results``), then schedule round n + 1 from the rest."""
        out = ApplyRoundOutput()
        async with (
            heartbeating(f"round {inp.round}: applying") as status,
            self.pool.acquire() as conn,
        ):
            ctx = await self._context(conn, inp.run_id)
            todo = await conn.fetch(
                """select r.custom_id, r.pack_path, r.pack_index, r.pack_attempt,
                          r.resubmits, r.block_uids, r.call_id, r.result_type,
                          c.error_type, c.error_message
                   from batch_requests r left join llm_calls c using (call_id)
                   where r.run_id = $1 and r.round = $2 and r.handled_at is null
                     and r.result_type is not null
                   order by r.pack_index, r.pack_path""",
                inp.run_id, inp.round,
            )
            for n, r in enumerate(todo):
                status[0] = f"round {inp.round}: applied {n} of {len(todo)}"
                await self._handle(conn, ctx, inp, r, out)
            out.next_requests, out.next_blocks = await round_size(
                conn, inp.run_id, inp.round + 1)
            out.packs_done = await conn.fetchval(
                """select count(*) from (select pack_index from overlays where run_id = $1
                   group by pack_index having bool_and(status <> 'pending')) d""",
                inp.run_id,
            )
        return out

    async def _handle(
        self, conn: asyncpg.Connection, ctx: RunContext, inp: ApplyRoundInput,
        r: asyncpg.Record, out: ApplyRoundOutput,
    ) -> None:
        uids: list[str] = list(r["block_uids"])
        remaining, reason = uids, ""
        if r["result_type"] == "succeeded":
            applied = await self._db.apply_results(ApplyResultsInput(
                run_id=inp.run_id, call_id=r["call_id"], pack_path=r["pack_path"],
                max_block_attempts=inp.max_block_attempts,
            ))
            out.completed += applied.completed
            out.failed += len(applied.failed)
            remaining, reason = applied.remaining, applied.reason
        decision = decide(
            r["result_type"], blocks=len(uids), remaining=len(remaining), reason=reason,
            error_type=r["error_type"], error_message=r["error_message"],
            resubmits=r["resubmits"], max_resubmits=inp.max_resubmits,
            stopping=not inp.schedule_next,
        )
        path, index, nxt = r["pack_path"], r["pack_index"], inp.round + 1
        async with conn.transaction():
            if decision.step == "retry":
                out.failed += await enqueue(conn, ctx, nxt, [
                    PackAttempt(path, index, r["pack_attempt"] + 1, r["resubmits"], remaining)])
            elif decision.step == "resubmit":
                still = await conn.fetchval(
                    """select coalesce(array_agg(block_uid order by block_index), '{}')
                       from overlays where run_id = $1 and block_uid = any($2::text[])
                         and status = 'pending'""",
                    inp.run_id, uids,
                )
                if still:
                    out.resubmitted += 1
                    out.failed += await enqueue(conn, ctx, nxt, [
                        PackAttempt(path, index, r["pack_attempt"] + 1, r["resubmits"] + 1,
                                    list(still))])
            elif decision.step == "split":
                halves = split_pack(path, remaining)
                await conn.execute(
                    """insert into split_events (run_id, pack_path, reason, block_count,
                           child_paths) values ($1, $2, $3, $4, $5) on conflict do nothing""",
                    inp.run_id, path, decision.reason[:1000], len(remaining),
                    [child for child, _ in halves],
                )
                out.splits += 1
                out.failed += await enqueue(conn, ctx, nxt, [
                    PackAttempt(child, index, 1, 0, h) for child, h in halves])
            elif decision.step == "fail":
                out.failed += await fail_blocks(conn, inp.run_id, remaining, path,
                                                decision.reason)
            elif decision.step == "fatal":
                out.fatal_error = out.fatal_error or decision.reason
            await conn.execute(
                """update batch_requests set handled_at = clock_timestamp(), outcome = $3
                   where run_id = $1 and custom_id = $2""",
                inp.run_id, r["custom_id"],
                f"{decision.step}: {decision.reason}"[:1000] if decision.reason
                else decision.step,
            )
