"""Activities of a stream (workflows/stream.py): look at what is buffered, form a pack.

Rows are accepted by the API straight into Postgres (``blockbatch.store.streams.append_rows``), never
through Temporal; these two activities are all the workflow needs of them. ``form_pack``
is keyed by the pack number the workflow chose, so a retried attempt (a worker died after
its commit) finds its pack and returns it, and no row is ever in two packs.
"""

from __future__ import annotations

import asyncpg
from temporalio import activity

from activities.db import PRIOR_AFTER_CALLS, prior_ratios
from blockbatch.core.context import RunContext
from blockbatch.core.planning import OutputRatios
from blockbatch.core.stream_types import (
    FormPackInput,
    FormPackOutput,
    PollStreamInput,
    PollStreamOutput,
)
from blockbatch.store import ledger, streams
from blockbatch.store.runs import cached_run_context


class StreamActivities:
    """Activities over one asyncpg pool (built in blockbatch/runtime/temporal.py)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @activity.defn
    async def poll_stream(self, inp: PollStreamInput) -> PollStreamOutput:
        """What the stream holds in no pack yet (rows, tokens, the oldest's wait, closed)."""
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, inp.run_id)
            return PollStreamOutput(
                buffered=await streams.buffered(conn, ctx, await _ratios(conn, ctx))
            )

    @activity.defn
    async def form_pack(self, inp: FormPackInput) -> FormPackOutput:
        """Give the oldest buffered rows pack ``inp.pack_index`` (the same on a retry)."""
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, inp.run_id)
            blocks, accepted = await streams.form_pack(
                conn,
                ctx,
                inp.pack_index,
                max_rows=inp.max_rows,
                max_tokens=inp.max_tokens,
                ratios=await _ratios(conn, ctx),
            )
        activity.logger.info(
            "stream %s: pack %d of %d rows (%s)", inp.run_id, inp.pack_index, blocks, inp.reason
        )
        return FormPackOutput(pack_index=inp.pack_index, blocks=blocks, accepted=accepted)


async def _ratios(conn: asyncpg.Connection, ctx: RunContext) -> OutputRatios | None:
    """What answers write per token of the schema's estimate: the stream's own answered
    calls (``llm_calls.est_output_tokens`` against what they wrote: one aggregate, cheap
    enough for every look), else earlier runs of its schema on its model; ``None``: the
    schema's estimate alone. Without this a stream's packs stay as small as a first plan's.
    (``learned_ratios``, which a run's re-plan uses, reads and measures every answer: a
    second or more per call here, which throttled a stream to a pack every few seconds.)
    """
    if not ctx.learns_output():
        return None
    seen = await ledger.observed_output(conn, ctx.run_id)
    if seen is not None and seen[0] >= PRIOR_AFTER_CALLS:
        return OutputRatios(
            overall=round(seen.ratio, 4), by_type={}, blocks=seen.blocks, source="run"
        )
    return await prior_ratios(conn, ctx.run_id)
