"""Activities that touch only Postgres: planning, applying results, failing, rolling up.

They compose the persistence layer (``store/``), which owns every statement and every
overlay state transition; each write there is idempotent and conditional on state, so a
retried activity (or a second worker running a stale attempt) never writes a block twice.
"""

from __future__ import annotations

import asyncpg
from temporalio import activity

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
from core.policy import code_of_failure
from core.reasons import REASONS, ReasonCode
from store import overlays, runs, splits
from store.runs import cached_run_context


class DbActivities:
    """Activities over one asyncpg pool (built in worker.py)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @activity.defn
    async def plan_run(self, inp: PlanRunInput) -> PlanRunOutput:
        """Size the packs and persist each block's pack_index; the same plan on retry."""
        async with self.pool.acquire() as conn, conn.transaction():
            state = await runs.lock_for_planning(conn, inp.run_id)
            if state is None:
                raise ValueError(f"no run {inp.run_id!r}")
            ctx = await cached_run_context(conn, inp.run_id)
            if state.pack_count > 0:
                return PlanRunOutput(pack_count=state.pack_count,
                                     block_count=state.blocks_total, mode=ctx.options.mode)
            blocks = await runs.document_blocks(conn, ctx.document_id)
            packs = ctx.plan([b.est_tokens for b in blocks])
            pack_of = [0] * len(blocks)
            for pack_index, pack in enumerate(packs):
                for pos in pack.positions:
                    pack_of[pos] = pack_index
            await overlays.insert_plan(conn, inp.run_id, blocks, pack_of)
            await runs.save_plan(conn, inp.run_id, len(packs), len(blocks))
        activity.logger.info("run %s planned: %d blocks in %d packs", inp.run_id,
                             len(blocks), len(packs))
        return PlanRunOutput(pack_count=len(packs), block_count=len(blocks),
                             mode=ctx.options.mode)

    @activity.defn
    async def apply_results(self, inp: ApplyResultsInput) -> ApplyResultsOutput:
        """Validate a ledger answer by block_uid and write the valid overlays to staging."""
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, inp.run_id)
            return await overlays.apply_answer(conn, inp.run_id, inp.call_id, inp.pack_path,
                                               inp.max_block_attempts, ctx.spec)

    @activity.defn
    async def fail_blocks(self, inp: FailBlocksInput) -> FailBlocksOutput:
        """End still-pending blocks as ``failed`` with a readable reason and its code."""
        async with self.pool.acquire() as conn:
            failed = await overlays.fail_pending(
                conn, inp.run_id, inp.reason, inp.pack_path,
                reason_code=_code(inp.reason_code) or code_of_failure(inp.reason),
                block_uids=inp.block_uids, pack_index=inp.pack_index,
            )
        return FailBlocksOutput(failed=failed)

    @activity.defn
    async def record_split(self, inp: RecordSplitInput) -> None:
        """Record that a pack was halved (once per pack path)."""
        async with self.pool.acquire() as conn:
            await splits.record_split(conn, inp.run_id, inp.pack_path, inp.reason,
                                      inp.block_count, inp.child_paths)

    @activity.defn
    async def mark_run_cancelling(self, inp: MarkCancellingInput) -> None:
        """After this commits, ``call_model`` refuses to start a call for the run."""
        async with self.pool.acquire() as conn:
            await runs.mark_cancelling(conn, inp.run_id, inp.reason)

    @activity.defn
    async def finish_run(self, inp: FinishRunInput) -> RunResult:
        """Close the run and recompute every counter from Postgres, the source of truth."""
        async with self.pool.acquire() as conn, conn.transaction():
            await overlays.end_pending(conn, inp.run_id, inp.status, inp.error)
            return await runs.close_run(conn, inp.run_id, inp.status, inp.error)


def _code(code: str | None) -> ReasonCode | None:
    """A reason code from an activity input (``None``, or unknown: derive it instead)."""
    return code if code in REASONS else None  # type: ignore[return-value]
