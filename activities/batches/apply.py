"""Applying a collected round (``apply_round``): overlays through the same
``blockbatch.store.overlays.apply_answer`` as sync mode's ``apply_results``, then what follows each
request is asked of the one pack policy (``blockbatch.core.policy.decide``); whatever is unfinished
becomes round n + 1."""

from __future__ import annotations

import asyncpg

from activities.batches.rounds import enqueue
from activities.shared import heartbeating
from blockbatch.core.batch_types import ApplyRoundInput, ApplyRoundOutput
from blockbatch.core.batching import PackAttempt
from blockbatch.core.claude_errors import classify
from blockbatch.core.context import RunContext
from blockbatch.core.policy import Decision, decide, split_pack
from blockbatch.store import batches, overlays, splits
from blockbatch.store.runs import cached_run_context


async def apply_round(pool: asyncpg.Pool, inp: ApplyRoundInput) -> ApplyRoundOutput:
    """Apply each answer, then schedule round n + 1 from the rest.

    Every request is handled once (``handled_at``): a retry goes on with the rest.
    """
    out = ApplyRoundOutput()
    async with (
        heartbeating(f"round {inp.round}: applying") as status,
        pool.acquire() as conn,
    ):
        ctx = await cached_run_context(conn, inp.run_id)
        todo = await batches.results_to_handle(conn, inp.run_id, inp.round)
        for n, r in enumerate(todo):
            status[0] = f"round {inp.round}: applied {n} of {len(todo)}"
            await _handle(conn, ctx, inp, r, out)
        out.next_requests, out.next_blocks = await batches.round_size(
            conn, inp.run_id, inp.round + 1
        )
        out.packs_done = await overlays.packs_done(conn, inp.run_id)
    return out


async def _handle(
    conn: asyncpg.Connection,
    ctx: RunContext,
    inp: ApplyRoundInput,
    r: batches.Collected,
    out: ApplyRoundOutput,
) -> None:
    """Apply one request's result (when it has an answer) and carry out the decision."""
    remaining = r.block_uids
    stopping = not inp.schedule_next
    if r.result_type == "succeeded":
        assert r.call_id is not None
        applied = await overlays.apply_answer(
            conn, inp.run_id, r.call_id, r.pack_path, inp.max_block_attempts, ctx.spec
        )
        out.completed += applied.completed
        out.count_failed(applied.failed_reasons)
        remaining = applied.remaining
        decision = decide(
            "answered",
            blocks=len(r.block_uids),
            remaining=len(remaining),
            reason=applied.reason,
            stopping=stopping,
        )
    elif r.result_type == "errored":
        decision = decide(
            "errored",
            blocks=len(r.block_uids),
            error=classify(None, r.error_type, r.error_message or "", error_code=r.error_code),
            retries_left=r.resubmits < inp.max_resubmits,
            stopping=stopping,
        )
    else:  # expired, canceled, missing
        decision = decide(
            "not_processed",
            blocks=len(r.block_uids),
            reason=r.result_type,
            retries_left=r.resubmits < inp.max_resubmits,
            stopping=stopping,
        )
    async with conn.transaction():
        await _carry_out(conn, ctx, inp, r, remaining, decision, out)
        await batches.mark_handled(
            conn,
            inp.run_id,
            r.custom_id,
            f"{decision.step}: {decision.reason}" if decision.reason else decision.step,
        )


async def _carry_out(
    conn: asyncpg.Connection,
    ctx: RunContext,
    inp: ApplyRoundInput,
    r: batches.Collected,
    remaining: list[str],
    decision: Decision,
    out: ApplyRoundOutput,
) -> None:
    """Do what the policy decided: retry, resubmit, split, fail, or stop the run."""
    path, index, nxt = r.pack_path, r.pack_index, inp.round + 1
    if decision.step == "retry":
        out.count_failed(
            await enqueue(
                conn,
                ctx,
                nxt,
                [PackAttempt(path, index, r.pack_attempt + 1, r.resubmits, remaining)],
            )
        )
    elif decision.step == "resubmit":
        still = await overlays.still_pending(conn, inp.run_id, r.block_uids)
        if still:
            out.resubmitted += 1
            out.count_failed(
                await enqueue(
                    conn,
                    ctx,
                    nxt,
                    [PackAttempt(path, index, r.pack_attempt + 1, r.resubmits + 1, still)],
                )
            )
    elif decision.step == "split":
        halves = split_pack(path, remaining)
        await splits.record_split(
            conn, inp.run_id, path, decision.reason, len(remaining), [child for child, _ in halves]
        )
        out.splits += 1
        out.count_failed(
            await enqueue(
                conn, ctx, nxt, [PackAttempt(child, index, 1, 0, h) for child, h in halves]
            )
        )
    elif decision.step == "fail":
        code = decision.code or "unfinished"
        failed = await overlays.fail_pending(
            conn, inp.run_id, decision.reason, path, reason_code=code, block_uids=remaining
        )
        out.count_failed({code: failed})
    elif decision.step == "fatal":
        out.fatal_error = out.fatal_error or decision.reason
