"""Escalation's activities: plan the second packing, ask it, ask the doubtful blocks on the
stronger model (docs/ESCALATION.md; the rules are ``blockbatch/core/escalation.py``).

**Paid once per model.** Every call opens its ledger row first under a key of its own: a
second pack ``second-<n>``, a block's escalation ``escalate-<block_index>``, attempts 1, 2,
... (:data:`~blockbatch.core.quality.PROBE_ATTEMPTS`). An attempt whose answer is in the
ledger is reused, never asked again, so a retried activity (a lost worker) pays nothing
twice; only a call that failed (no answer, nothing billed) is tried at its next attempt.
So a block is answered by the run's model in one first-pass call and one second-pass
call, and by the escalation model in at most one call. The quality probe's answers alone
stand in where they can (``escalations.probe_answers``): a block the probe asked alone on
the run's own model (the default ``probe_model``) takes that answer as its second one and
is in no second pack; one it asked alone on the escalation model (``--probe-model`` the
escalation model) takes the probe's answer and call instead of a new escalation call.

The second pass is the run's own request (``build_request`` with the run's context):
system prompt and tool are byte for byte the first pass's, so its calls read the prefix
the first pass cached. It never writes an overlay; only an escalation's answer does,
through ``store.overlays.escalate_answer``, and only while the overlay still holds the
first pass's outcome.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.calls import Asked, CallPath
from blockbatch.core.context import RunContext
from blockbatch.core.escalation import ESCALATED_STATUSES, escalation_reason, second_order
from blockbatch.core.escalation_types import (
    EscalateInput,
    EscalationPartInput,
    EscalationStepOutput,
    PlanEscalationOutput,
    SecondPassInput,
)
from blockbatch.core.evidence import ground
from blockbatch.core.planning import pack_numbers
from blockbatch.core.prompt import alias_map, build_request
from blockbatch.core.results import parse_results
from blockbatch.core.retry import FINISHED_STATUSES
from blockbatch.store import escalations, ledger, overlays, replans, runs
from blockbatch.store.runs import cached_run_context, context_on

#: ``plan_escalation`` refuses (non-retryable, nothing changed).
ESCALATION_REFUSED = "EscalationRefused"
#: Escalation calls in flight at once within one part (they go through the limiter too).
_UP_AT_ONCE = 4


class EscalationActivities:
    """Escalation's activities; they send through the worker's :class:`CallPath` (its
    ledger rows, budget, fleet limiter and sender)."""

    def __init__(self, pool: asyncpg.Pool, calls: CallPath) -> None:
        self.pool = pool
        self.calls = calls

    @activity.defn
    async def plan_escalation(self, inp: EscalateInput) -> PlanEscalationOutput:
        """Claim a finished run for its escalation and plan the second packing, in one
        transaction under the run row's lock; a retried activity gets the same plan.

        The answered blocks are dealt from their first-pass calls into
        ``core.escalation.second_order`` and packed with the run's own sizing (and the
        quality gate's size, if it set one, and ``second_pack_size``); failed and refused
        blocks go up at once.
        """
        async with self.pool.acquire() as conn, conn.transaction():
            state = await runs.lock_for_planning(conn, inp.run_id)
            if state is None:
                raise ApplicationError(
                    f"no run {inp.run_id!r}", type=ESCALATION_REFUSED, non_retryable=True
                )
            planned = await escalations.existing_plan(conn, inp.run_id)
            if planned is not None:
                if state.status == "running":  # this escalation's own claim (one at a time)
                    return planned
                if await escalations.resumable(conn, inp.run_id, inp.model):
                    # A stopped escalation goes on: the run is claimed again, the rows
                    # done stay done (their calls are in the ledger).
                    await escalations.reopen_for_escalation(conn, inp.run_id)
                    return planned
                raise ApplicationError(
                    f"run {inp.run_id} was escalated already: an escalation runs once a run",
                    type=ESCALATION_REFUSED,
                    non_retryable=True,
                )
            if state.status not in ESCALATED_STATUSES:
                raise ApplicationError(
                    f"run {inp.run_id} is {state.status}: "
                    + (
                        "escalate it once it has finished"
                        if state.status not in FINISHED_STATUSES
                        else "only a run that ran to its end is escalated (retry it first)"
                    ),
                    type=ESCALATION_REFUSED,
                    non_retryable=True,
                )
            ctx = await cached_run_context(conn, inp.run_id)
            blocks = await escalations.first_pass_blocks(conn, inp.run_id)
            if not blocks:
                raise ApplicationError(
                    f"run {inp.run_id} has no answered or failed block to escalate",
                    type=ESCALATION_REFUSED,
                    non_retryable=True,
                )
            # A block the quality probe asked alone on the run's own model has its second
            # answer already: that one, not a second pack (no call on that model again).
            probed = await escalations.probe_answers(
                conn,
                inp.run_id,
                [b.block_uid for b in blocks if b.call_id is not None],
                ctx.model.id,
            )
            by_call: dict[int, list[str]] = {}
            for b in blocks:
                if b.call_id is not None and b.block_uid not in probed:
                    by_call.setdefault(b.call_id, []).append(b.block_uid)
            order = second_order([by_call[c] for c in sorted(by_call)])
            of = {b.block_uid: b for b in blocks}
            caps = [await replans.gate_size(conn, inp.run_id), inp.second_pack_size]
            packs = ctx.plan(
                [of[u].est_tokens for u in order],
                cap=min((c for c in caps if c is not None), default=None),
            )
            pack_of = dict(zip(order, pack_numbers(packs), strict=True))
            place = {u: n for n, u in enumerate(order)}
            await escalations.insert_plan(
                conn,
                inp.run_id,
                inp.model,
                blocks,
                [pack_of.get(b.block_uid) for b in blocks],
                [
                    None
                    if b.call_id is not None
                    else ("refused" if b.reason_code == "refused" else "failed")
                    for b in blocks
                ],
                [place.get(b.block_uid) for b in blocks],
            )
            seconds = {
                b.block_uid: (
                    probed[b.block_uid].call_id,
                    probed[b.block_uid].answer,
                    escalation_reason(
                        ctx.spec, "ai_complete", b.answer, probed[b.block_uid].answer
                    ),
                )
                for b in blocks
                if b.block_uid in probed
            }
            await escalations.record_second(conn, inp.run_id, seconds)
            await escalations.reopen_for_escalation(conn, inp.run_id)
        activity.logger.info(
            "run %s: escalation to %s takes %d blocks (%d second packs, %d compared with "
            "the quality probe's answers alone)",
            inp.run_id,
            inp.model,
            len(blocks),
            len(packs),
            len(seconds),
        )
        return PlanEscalationOutput(
            second_packs=len(packs),
            blocks=len(blocks),
            up_at_once=sum(b.call_id is None for b in blocks)
            + sum(reason is not None for _, _, reason in seconds.values()),
            by_probe=len(seconds),
        )

    @activity.defn
    async def second_pass(self, inp: SecondPassInput) -> EscalationStepOutput:
        """Ask one second pack on the run's model and compare each block's two answers.

        Ledger purpose ``second_pass``, pack path ``second-<n>``. A pack that comes back
        short (overflow, truncated, badly mapped) is not halved: its blocks without a
        usable second answer go up (``no_second_answer``), one strong call each.
        """
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, inp.run_id)
            blocks = await escalations.second_pack_blocks(conn, inp.run_id, inp.second_pack)
            observed = await ledger.observed_output(conn, inp.run_id)
        if not blocks:
            return EscalationStepOutput()
        uids = [b.block_uid for b in blocks]
        pack = ctx.pack(
            [b.est_tokens for b in blocks],
            1,
            observed.ratio if observed is not None else None,
            observed.thinking if observed is not None else None,
        )
        aliases = alias_map(uids) if ctx.options.short_ids else None
        request = _request(
            ctx, [(b.block_uid, b.block_type, b.block_content) for b in blocks], pack.max_tokens
        )
        asked = await self.calls.ask_alone(
            ctx,
            escalations.second_path(inp.second_pack),
            uids,
            request,
            pack,
            purpose=escalations.SECOND_PASS,
            aliases=aliases,
        )
        if asked.stopped:  # cancelled: the blocks stay planned, their first answer kept
            return EscalationStepOutput()
        second: dict[str, dict[str, Any] | None] = dict.fromkeys(uids)
        if asked.call_id is not None:
            async with self.pool.acquire() as conn:
                answer = await ledger.answer_to_apply(conn, inp.run_id, asked.call_id)
            parsed = parse_results(answer.response, uids, ctx.spec, answer.block_aliases)
            second.update({u: parsed.valid.get(u) for u in uids})
        reasons = {
            b.block_uid: escalation_reason(
                ctx.spec, "ai_complete", b.first_answer, second[b.block_uid]
            )
            for b in blocks
        }
        async with self.pool.acquire() as conn:
            up = await escalations.record_second(
                conn, inp.run_id, {u: (asked.call_id, second[u], reasons[u]) for u in uids}
            )
        return EscalationStepOutput(
            blocks=len(blocks), to_escalate=up, calls=asked.calls, cost_usd=asked.cost_usd
        )

    @activity.defn
    async def count_to_escalate(self, inp: EscalateInput) -> int:
        """How many blocks go to the escalation model (once every second pack is done)."""
        async with self.pool.acquire() as conn:
            return await escalations.count_up(conn, inp.run_id)

    @activity.defn
    async def escalate_blocks(self, inp: EscalationPartInput) -> EscalationStepOutput:
        """Ask one part of the blocks that go up, each alone on the escalation model, and
        make each usable answer the block's overlay (``overlays.escalate_answer``).

        Ledger purpose ``escalation``, pack path ``escalate-<block_index>``; on the run's
        context moved to the escalation model (its answer channel, prices and limits),
        under the run's budget and through the fleet's limiter.
        """
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, inp.run_id)
            blocks = await escalations.part_to_escalate(conn, inp.run_id, inp.part)
            model = await escalations.model_of(conn, inp.run_id) if blocks else None
            up_ctx = await context_on(conn, ctx, model) if model is not None else ctx
            probed = (
                await escalations.probe_answers(
                    conn, inp.run_id, [b.block_uid for b in blocks], up_ctx.model.id
                )
                if blocks
                else {}
            )
        gate = asyncio.Semaphore(_UP_AT_ONCE)

        async def one(block: escalations.UpBlock) -> Asked:
            if block.block_uid in probed:  # asked alone on this model already: no new call
                return await self._take_probe_answer(up_ctx, block, probed[block.block_uid])
            async with gate:
                return await self._escalate_block(up_ctx, block)

        out = EscalationStepOutput(blocks=len(blocks))
        for asked in await asyncio.gather(*(one(b) for b in blocks)):
            out.calls += asked.calls
            out.cost_usd += asked.cost_usd
            out.escalated += asked.call_id is not None and asked.error is None
        return out

    async def _escalate_block(self, ctx: RunContext, block: escalations.UpBlock) -> Asked:
        uid = block.block_uid
        pack = ctx.pack([block.est_tokens])
        aliases = alias_map([uid]) if ctx.options.short_ids else None
        request = _request(ctx, [(uid, block.block_type, block.block_content)], pack.max_tokens)
        path = escalations.escalation_path(block.block_index)
        asked = await self.calls.ask_alone(
            ctx, path, [uid], request, pack, purpose=escalations.ESCALATION, aliases=aliases
        )
        if asked.stopped:  # cancelled: the block is left as it is
            return asked
        single: dict[str, Any] | None = None
        evidence: dict[str, Any] | None = None
        if asked.call_id is not None:
            async with self.pool.acquire() as conn:
                answer = await ledger.answer_to_apply(conn, ctx.run_id, asked.call_id)
            parsed = parse_results(answer.response, [uid], ctx.spec, answer.block_aliases)
            single = parsed.valid.get(uid)
            if single is None:
                asked.error = f"the escalation's answer is unusable: {parsed.summary()}"
            elif ctx.spec.prompt_config.evidence:
                evidence = ground(parsed.evidence.get(uid, {}), single, block.block_content)
        await self._record(ctx, block, asked, single, evidence, path)
        return asked

    async def _take_probe_answer(
        self, ctx: RunContext, block: escalations.UpBlock, probed: escalations.ProbeAnswer
    ) -> Asked:
        """The block's escalation answered by the run's quality probe, which asked it alone
        on the escalation model already (``escalations.probe_answers``): its answer is
        written as an escalation's, pointing at the probe's call; nothing is paid."""
        asked = Asked(call_id=probed.call_id)
        evidence = probed.evidence if ctx.spec.prompt_config.evidence else None
        await self._record(ctx, block, asked, probed.answer, evidence, probed.pack_path)
        return asked

    async def _record(
        self,
        ctx: RunContext,
        block: escalations.UpBlock,
        asked: Asked,
        single: dict[str, Any] | None,
        evidence: dict[str, Any] | None,
        path: str,
    ) -> None:
        """The block's escalation row (and, for a usable answer, its overlay) in one
        transaction; each write conditional on the state it leaves, so a retry moves
        nothing twice."""
        uid = block.block_uid
        async with self.pool.acquire() as conn, conn.transaction():
            if single is None:
                await escalations.record_escalation(
                    conn,
                    ctx.run_id,
                    uid,
                    status="failed",
                    call_id=asked.call_id,
                    answer=None,
                    error=asked.error,
                )
                return
            assert asked.call_id is not None
            moved = await overlays.escalate_answer(
                conn,
                ctx.run_id,
                uid,
                first_call_id=block.first_call_id,
                answer=single,
                call_id=asked.call_id,
                pack_path=path,
                evidence=evidence,
            )
            await escalations.record_escalation(
                conn,
                ctx.run_id,
                uid,
                status="escalated" if moved else "skipped",
                call_id=asked.call_id,
                answer=single,
                error=None if moved else "the overlay changed meanwhile: left as it is",
            )


def _request(
    ctx: RunContext, blocks: list[tuple[str, str, str]], max_tokens: int
) -> dict[str, Any]:
    """The run's own request over ``blocks`` (uid, type, content), on ``ctx``'s model."""
    uids = [uid for uid, _, _ in blocks]
    return build_request(
        ctx.spec,
        [
            {"block_uid": uid, "block_type": kind, "block_content": content}
            for uid, kind, content in blocks
        ],
        max_tokens=max_tokens,
        model=ctx.model.id,
        shape=ctx.shape,
        cache_ttl=ctx.options.cache_ttl,
        aliases=alias_map(uids) if ctx.options.short_ids else None,
    )
