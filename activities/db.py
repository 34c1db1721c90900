"""Activities that touch only Postgres: planning, applying results, failing, rolling up,
and claiming a retry of a finished run.

They compose the persistence layer (``blockbatch/store/``), which owns every statement and every
overlay state transition; each write there is idempotent and conditional on state, so a
retried activity (or a second worker running a stale attempt) never writes a block twice.
"""

from __future__ import annotations

import asyncio
import dataclasses

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.batches.rounds import enqueue
from activities.shared import heartbeating
from blockbatch.core.batch_types import BatchOptions
from blockbatch.core.batching import PackAttempt
from blockbatch.core.blocks import is_set_aside
from blockbatch.core.call_types import (
    ApplyResultsInput,
    ApplyResultsOutput,
    FailBlocksInput,
    FailBlocksOutput,
    RecordSplitInput,
)
from blockbatch.core.context import RunContext
from blockbatch.core.endpoint import Endpoint
from blockbatch.core.planning import (
    PACK_OUTPUT_OVERHEAD_TOKENS,
    OutputRatios,
    answer_tokens,
    learn_ratios,
    pack_numbers,
    ratios_close,
)
from blockbatch.core.policy import failure_code
from blockbatch.core.prompt import request_prefix
from blockbatch.core.quality import halved, probe_plan
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.retry import FINISHED_STATUSES, describe_blocks, selection_text
from blockbatch.core.retry_types import PlanRetryInput, PlanRetryOutput, RetryRequest
from blockbatch.core.reuse import answer_key, prompt_digest
from blockbatch.core.run_types import (
    ACTIVE_STATUSES,
    FinishRunInput,
    MarkCancellingInput,
    PlanRunInput,
    PlanRunOutput,
    ReplanInput,
    ReplanOutput,
    RunResult,
)
from blockbatch.core.views import RetryRecord
from blockbatch.core.warm_up import warm_up_request
from blockbatch.core.workflow_names import NOTHING_TO_RETRY, RETRY_REFUSED, RUN_NOT_FINISHED
from blockbatch.send.endpoint import client_endpoint
from blockbatch.send.sdk import anthropic
from blockbatch.send.sender import Sender
from blockbatch.store import (
    batches,
    escalations,
    overlays,
    quality,
    reads,
    replans,
    retries,
    runs,
    splits,
)
from blockbatch.store.repo import NotFound
from blockbatch.store.runs import PlanState, cached_run_context

#: A run plans from earlier runs of its schema on its model once they answered this many
#: pack calls in full.
PRIOR_AFTER_CALLS = 3


class DbActivities:
    """Activities over one asyncpg pool (built in worker.py).

    ``llm``: the worker's Claude client; its endpoint (blockbatch/send/endpoint.py) is the one
    whose earlier answers ``plan_run`` may reuse. Without one, no answer is reused.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        llm: anthropic.AsyncAnthropic | None = None,
        sender: Sender | None = None,
    ) -> None:
        """``sender``: the worker's sender, which knows each provider's endpoint; a run on
        another provider reuses only that provider's answers. ``None``: ``llm``'s."""
        self.pool = pool
        self.llm = llm
        self.sender = sender

    async def _endpoint(self, run_id: str) -> Endpoint | None:
        """The endpoint that answers ``run_id``'s calls on this worker."""
        if self.llm is None:
            return None
        if self.sender is None:
            return await client_endpoint(self.llm)
        try:
            async with self.pool.acquire() as conn:
                route = (await cached_run_context(conn, run_id)).route
        except NotFound:  # plan_run says so
            return await client_endpoint(self.llm)
        try:
            return await self.sender.endpoint(route)
        except ApplicationError:
            # This worker cannot open the run's provider: nothing is reused, and the run's
            # first call says what to set.
            return None

    @activity.defn
    async def plan_run(self, inp: PlanRunInput) -> PlanRunOutput:
        """:meth:`_plan_run`, heartbeating: a million blocks take minutes to plan on a
        loaded machine (the workflow gives it a heartbeat timeout, not minutes to guess)."""
        async with heartbeating("planning"):
            return await self._plan_run(inp)

    async def _plan_run(self, inp: PlanRunInput) -> PlanRunOutput:
        """Reuse earlier answers, size the packs of the rest and persist each block's
        pack_index, in one transaction; the same plan on retry.

        Every block gets its answer key (blockbatch/core/reuse.py). With ``reuse_answers`` (the
        default), a block whose key an earlier run answered gets that model answer at once
        (``ai_complete``, marked reused; store.overlays.insert_plan) and is in no pack;
        only the others are packed and called. Only answers this worker's endpoint gave are
        reused (blockbatch/core/endpoint.py): never the simulator's for Claude's. A block
        whose key an earlier block of this run has is in no pack: it takes that block's
        outcome when it lands (``same_as``), so duplicate content is asked once.
        """
        endpoint = await self._endpoint(inp.run_id)
        async with self.pool.acquire() as conn, conn.transaction():
            state = await runs.lock_for_planning(conn, inp.run_id)
            if state is None:
                raise ValueError(f"no run {inp.run_id!r}")
            ctx = await cached_run_context(conn, inp.run_id)
            if state.pack_count > 0 or state.blocks_total > 0:
                # Planned already (every block reused leaves no pack, hence blocks_total).
                # The same flags too: the plan had a learning pack when nothing told it
                # what answers write (no earlier run then; none since, barring a race).
                reused = await runs.reuse_totals(conn, inp.run_id)
                learns = ctx.learns_output()
                learning = (
                    learns
                    and state.pack_count > 1
                    and await prior_ratios(conn, inp.run_id) is None
                    and not await replans.changes(conn, inp.run_id, kind="learned")
                )
                return PlanRunOutput(
                    pack_count=state.pack_count,
                    block_count=state.blocks_total,
                    mode=ctx.options.mode,
                    learning=learning,
                    replans=learns,
                    reused=reused.blocks_reused,
                    reuse_saved_usd=reused.reuse_saved_usd,
                )
            blocks = await runs.document_blocks(conn, ctx.document_id)
            prompt = prompt_digest(ctx.spec, ctx.model.id, ctx.shape)
            keys = [answer_key(prompt, b.content_sha256) for b in blocks]
            # Blocks of a set-aside type (running headers, navigation, ...) stay in the run as
            # ``set_aside``, never sent nor reused, unless the run includes them.
            aside = (
                set()
                if ctx.options.include_boilerplate
                else {pos for pos, b in enumerate(blocks) if is_set_aside(b.block_type)}
            )
            found = (
                await overlays.reusable_answers(conn, keys, endpoint)
                if ctx.options.reuse_answers
                else {}
            )
            # The same content under the same prompt and model is asked once per run: the
            # first copy is packed, the others wait for its outcome (store.overlays).
            first_of: dict[str, str] = {}
            same_as: list[str | None] = [None] * len(blocks)
            to_call = []
            for pos, key in enumerate(keys):
                if key in found or pos in aside:
                    continue
                if key in first_of:
                    same_as[pos] = first_of[key]
                else:
                    first_of[key] = blocks[pos].block_uid
                    to_call.append(pos)
            # Packs sized from the schema's estimate of each answer, or from what earlier
            # runs of the schema on the model wrote; with neither, a learning pack first.
            learns = ctx.learns_output()
            prior = await prior_ratios(conn, inp.run_id) if learns else None
            learning = learns and prior is None
            # Planning a million blocks is a minute of CPU: off the event loop, so this
            # worker still answers its workflows' queries (status, watch) and heartbeats.
            packs = await asyncio.to_thread(
                ctx.plan, [blocks[pos].est_tokens for pos in to_call], prior, learning=learning
            )
            pack_of: list[int | None] = [None] * len(blocks)
            for pos, number in zip(to_call, pack_numbers(packs), strict=True):
                pack_of[pos] = number
            await overlays.insert_plan(
                conn,
                inp.run_id,
                blocks,
                pack_of,
                keys,
                {
                    b.block_uid: found[key]
                    for pos, (b, key) in enumerate(zip(blocks, keys, strict=True))
                    if key in found and pos not in aside
                },
                same_as,
                set_aside=[blocks[pos].block_uid for pos in sorted(aside)],
            )
            if ctx.options.mode == "sync" and ctx.plan_limits().size_cap > 1:
                # The quality probe's sample, of the blocks called (blockbatch/core/quality.py); none
                # when every pack is one block (its answer is a single answer already).
                # Capped by cost: its expected calls within probe_max_share of the run's.
                # A probe call of a prefix the API does not cache pays all of it again:
                # what earlier calls of this prefix showed, else the estimate decides.
                q = ctx.options.quality or QualityOptions()
                probe_ctx = await runs.probe_context(conn, ctx)
                warm_up = warm_up_request(probe_ctx)
                seen = await quality.prefix_cache_seen(
                    conn, request_prefix(warm_up)[0], probe_ctx.model.id
                )
                sample, sizing = await asyncio.to_thread(
                    probe_plan,
                    ctx,
                    [blocks[pos].block_uid for pos in to_call],
                    [blocks[pos].est_tokens for pos in to_call],
                    packs,
                    q,
                    inp.run_id,
                    prior,
                    cached=seen,
                    probe_ctx=probe_ctx if probe_ctx is not ctx else None,
                )
                await quality.plan_sample(conn, inp.run_id, sample)
                if sizing.wanted:
                    await quality.save_plan(conn, inp.run_id, sizing)
            reused = await runs.save_plan(
                conn,
                inp.run_id,
                len(packs),
                len(blocks) - len(aside),
                set_aside=len(aside),
                set_aside_usd=ctx.blocks_cost_usd([blocks[pos].est_tokens for pos in aside]),
            )
        activity.logger.info(
            "run %s planned: %d blocks in %d packs, %d reused, %d set aside%s",
            inp.run_id,
            len(blocks) - len(aside),
            len(packs),
            reused.blocks_reused,
            len(aside),
            "" if prior is None else f"; answers write {prior.text()}",
        )
        return PlanRunOutput(
            pack_count=len(packs),
            block_count=len(blocks) - len(aside),
            mode=ctx.options.mode,
            learning=learning and len(packs) > 1,
            replans=learns,
            reused=reused.blocks_reused,
            reuse_saved_usd=reused.reuse_saved_usd,
        )

    @activity.defn
    async def replan_run(self, inp: ReplanInput) -> ReplanOutput:
        """:meth:`_replan_run`, heartbeating (a million-block run's first re-plan moves
        every block it has not started: minutes on a loaded machine)."""
        async with heartbeating("re-planning"):
            return await self._replan_run(inp)

    async def _replan_run(self, inp: ReplanInput) -> ReplanOutput:
        """Plan the packs not started yet again, from what the run's answers wrote.

        Moves pending blocks of packs ``first_pack`` on to new packs when that changes how
        many there are by at least a tenth (a pack at least); recorded in plan_changes, so a
        retried activity returns the same plan. Never above the quality gate's pack size.
        With ``gate`` set, the quality gate's re-plan instead (:meth:`_gate_replan`).
        """
        if inp.gate is not None:
            return await self._gate_replan(inp)
        async with self.pool.acquire() as conn, conn.transaction():
            state = await runs.lock_for_planning(conn, inp.run_id)
            if state is None:
                raise ValueError(f"no run {inp.run_id!r}")
            done = await replans.recorded_change(conn, inp.run_id, inp.first_pack)
            if done is not None:
                return ReplanOutput(pack_count=done.packs_after, text=done.text())
            unchanged = ReplanOutput(pack_count=state.pack_count)
            ctx = await cached_run_context(conn, inp.run_id)
            ratios = learned_ratios(ctx, await replans.answers(conn, inp.run_id))
            if ratios is None or state.status not in ACTIVE_STATUSES:
                return unchanged
            # Each continued history asks again; reading every unstarted block to find the
            # same plan cost a million-block run a minute of no new packs each time.
            if ratios_close(ratios, await planned_ratios(conn, inp.run_id)):
                return unchanged
            blocks = await replans.unstarted_blocks(conn, inp.run_id, inp.first_pack)
            if not blocks:
                return unchanged
            packs = await asyncio.to_thread(
                ctx.plan,
                [b.est_tokens for b in blocks],
                ratios,
                [b.block_type for b in blocks],
                cap=await replans.gate_size(conn, inp.run_id),
            )
            before = state.pack_count - inp.first_pack
            if abs(len(packs) - before) < max(1, before // 10):
                return unchanged
            change = replans.PlanChange(
                inp.first_pack,
                state.pack_count,
                inp.first_pack + len(packs),
                dataclasses.asdict(ratios),
            )
            await replans.repack(
                conn,
                inp.run_id,
                [(b.block_uid, b.block_index) for b in blocks],
                pack_numbers(packs, inp.first_pack),
                change,
            )
        text = change.text()
        activity.logger.info("run %s: %s", inp.run_id, text)
        return ReplanOutput(pack_count=change.packs_after, text=text)

    async def _gate_replan(self, inp: ReplanInput) -> ReplanOutput:
        """The quality gate tripped: re-plan the unstarted packs at half the largest one's
        size (never below 1), sized from what the answers wrote when the run learns that;
        recorded in plan_changes (kind ``quality_gate``), so a retry returns the same.
        With ``reask``, the blocks earlier packs answered in calls larger than the new
        size (their unreviewed model answers) go back to pending into the new packs too,
        in the same transaction (store.overlays.reask_for_gate)."""
        assert inp.gate is not None
        async with self.pool.acquire() as conn, conn.transaction():
            state = await runs.lock_for_planning(conn, inp.run_id)
            if state is None:
                raise ValueError(f"no run {inp.run_id!r}")
            done = await replans.recorded_change(conn, inp.run_id, inp.first_pack, "quality_gate")
            if done is not None:
                return ReplanOutput(
                    pack_count=done.packs_after, text=done.text(), pack_size=done.pack_size
                )
            unchanged = ReplanOutput(pack_count=state.pack_count)
            was = await quality.largest_pack(conn, inp.run_id, inp.first_pack)
            if was <= 1 or state.status not in ACTIVE_STATUSES:
                return unchanged
            ctx = await cached_run_context(conn, inp.run_id)
            ratios = (
                learned_ratios(ctx, await replans.answers(conn, inp.run_id))
                if ctx.learns_output()
                else None
            )
            size = halved(was)
            unstarted = await replans.unstarted_blocks(conn, inp.run_id, inp.first_pack)
            # With re-asks, the blocks earlier packs answered in larger calls go back to
            # pending and are packed at the new size with the unstarted ones, in block order.
            again = (
                await replans.answered_in_larger_packs(conn, inp.run_id, inp.first_pack, size)
                if inp.reask
                else []
            )
            blocks: list[replans.UnstartedBlock | replans.AnsweredLarger] = [*again, *unstarted]
            blocks.sort(key=lambda b: b.block_index)
            packs = ctx.plan(
                [b.est_tokens for b in blocks], ratios, [b.block_type for b in blocks], cap=size
            )
            ratios_info: dict[str, object] = {"was": was}
            if again:
                call_sizes = [b.call_size for b in again]
                ratios_info |= {
                    "reasked": len(again),
                    "reasked_sizes": [min(call_sizes), max(call_sizes)],
                }
            change = replans.PlanChange(
                inp.first_pack,
                state.pack_count,
                inp.first_pack + len(packs),
                ratios_info,
                kind="quality_gate",
                pack_size=size,
                gate=inp.gate.model_dump(mode="json"),
            )
            pack_of = dict(
                zip((b.block_uid for b in blocks), pack_numbers(packs, inp.first_pack), strict=True)
            )
            if again:
                moved = await overlays.reask_for_gate(
                    conn,
                    inp.run_id,
                    [b.block_uid for b in again],
                    [pack_of[b.block_uid] for b in again],
                )
                assert moved == len(again), "re-asked blocks changed under the run's lock"
            # Every block now pending from first_pack on: the unstarted ones and the
            # re-asked ones reask_for_gate just moved (moved again to the same pack).
            await replans.repack(
                conn,
                inp.run_id,
                [(b.block_uid, b.block_index) for b in blocks],
                [pack_of[b.block_uid] for b in blocks],
                change,
            )
        text = change.text()
        activity.logger.info("run %s: %s", inp.run_id, text)
        return ReplanOutput(pack_count=change.packs_after, text=text, pack_size=size)

    @activity.defn
    async def apply_results(self, inp: ApplyResultsInput) -> ApplyResultsOutput:
        """Validate a ledger answer by block_uid and write the valid overlays to staging."""
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, inp.run_id)
            return await overlays.apply_answer(
                conn, inp.run_id, inp.call_id, inp.pack_path, inp.max_block_attempts, ctx.spec
            )

    @activity.defn
    async def fail_blocks(self, inp: FailBlocksInput) -> FailBlocksOutput:
        """End still-pending blocks as ``failed`` with a readable reason and its code."""
        async with self.pool.acquire() as conn:
            failed = await overlays.fail_pending(
                conn,
                inp.run_id,
                inp.reason,
                inp.pack_path,
                reason_code=failure_code(inp),
                block_uids=inp.block_uids,
                pack_index=inp.pack_index,
            )
        return FailBlocksOutput(failed=failed)

    @activity.defn
    async def record_split(self, inp: RecordSplitInput) -> None:
        """Record that a pack was halved (once per pack path)."""
        async with self.pool.acquire() as conn:
            await splits.record_split(
                conn, inp.run_id, inp.pack_path, inp.reason, inp.block_count, inp.child_paths
            )

    @activity.defn
    async def mark_run_cancelling(self, inp: MarkCancellingInput) -> None:
        """After this commits, ``call_model`` refuses to start a call for the run."""
        async with self.pool.acquire() as conn:
            await runs.mark_cancelling(conn, inp.run_id, inp.reason)

    @activity.defn
    async def finish_run(self, inp: FinishRunInput) -> RunResult:
        """Close the run and recompute every counter from Postgres, the source of truth."""
        async with self.pool.acquire() as conn, conn.transaction():
            ended = await overlays.end_pending(conn, inp.run_id, inp.status, inp.error)
            result = await runs.close_run(conn, inp.run_id, inp.status, inp.error)
            result.blocks_ended = ended
            await retries.close_open(conn, inp.run_id, result.status)
            result.plan_changes = await replans.change_texts(conn, inp.run_id)
            result.quality = await quality.result(conn, inp.run_id)
            result.endpoints = await reads.run_endpoints(conn, inp.run_id)
            result.escalation = await escalations.result(conn, inp.run_id)
            return result

    @activity.defn
    async def plan_retry(self, inp: PlanRetryInput) -> PlanRetryOutput:
        """Claim a retry of a finished run and plan it, in one transaction.

        Under the run row's ``for update`` lock: the blocks the retry takes go back to
        ``pending`` and are packed with the run's own sizing into new packs after the
        run's existing ones (so pack paths, and the ledger's pack attempt keys, never meet
        the earlier execution's); batch mode puts them into a new round after the last
        one. The run is ``running`` again and ``run_retries`` records the claim by this
        RunWorkflow execution (its Temporal run id). A retried attempt (a worker crashed)
        finds that claim and returns the same plan without changing anything. A run that
        is not finished and not claimed by this execution (a retry already running), or
        a selection with nothing left in it, is refused (non-retryable); nothing changes.
        """
        claim = activity.info().workflow_run_id
        assert claim is not None, "a retry is claimed by the workflow that runs it"
        async with self.pool.acquire() as conn, conn.transaction():
            state = await runs.lock_for_planning(conn, inp.run_id)
            if state is None:
                raise ApplicationError(
                    f"no run {inp.run_id!r}", type=RETRY_REFUSED, non_retryable=True
                )
            ctx = await cached_run_context(conn, inp.run_id)
            record = await retries.claimed_by(conn, inp.run_id, claim)
            if record is None:
                record = await _claim_retry(conn, ctx, state, claim, inp.retry)
                activity.logger.info(
                    "run %s retry %d: %d blocks in packs %d..%d",
                    inp.run_id,
                    record.retry,
                    record.block_count,
                    record.first_pack,
                    record.pack_count - 1,
                )
            totals = await runs.current_totals(conn, inp.run_id, record.first_pack)
        batch = ctx.options.mode == "batch"
        return PlanRetryOutput(
            retry=record.retry,
            blocks=record.block_count,
            first_pack=record.first_pack,
            pack_count=record.pack_count,
            block_count=state.blocks_total,
            mode=ctx.options.mode,
            first_round=record.first_round,
            batch_options=(ctx.options.batch or BatchOptions()) if batch else None,
            totals=totals,
        )


async def _claim_retry(
    conn: asyncpg.Connection,
    ctx: RunContext,
    state: PlanState,
    claim: str,
    request: RetryRequest,
) -> RetryRecord:
    """Reset, pack and record a retry (inside :meth:`DbActivities.plan_retry`'s transaction)."""
    run_id = ctx.run_id
    if state.status not in FINISHED_STATUSES:
        raise ApplicationError(
            f"run {run_id} is {state.status}: a retry can start only once the run has "
            "finished (is another retry under way?); nothing was changed",
            type=RUN_NOT_FINISHED,
            non_retryable=True,
        )
    blocks = await retries.blocks_to_retry(conn, run_id, request)
    if not blocks:
        counts = await retries.block_counts(conn, run_id)
        raise ApplicationError(
            f"run {run_id} has no {selection_text(request)} left to retry "
            f"({describe_blocks(counts)}); nothing was changed",
            type=NOTHING_TO_RETRY,
            non_retryable=True,
        )
    packs = ctx.plan([b.est_tokens for b in blocks], cap=await replans.gate_size(conn, run_id))
    first = state.pack_count
    pack_of = pack_numbers(packs, first)
    uids = [b.block_uid for b in blocks]
    if request.max_cost_usd is not None:
        # A raised budget (`retry --max-cost`) holds for the whole run from now on.
        await runs.set_budget(conn, run_id, request.max_cost_usd)
    await overlays.reset_for_retry(conn, run_id, uids, pack_of, request.statuses())
    first_round = None
    if ctx.options.mode == "batch":
        # Round numbers are part of the provider batches' keys: the retry's requests go
        # into a round after every earlier one, and only they are in it.
        first_round = await batches.last_round(conn, run_id) + 1
        await enqueue(
            conn,
            ctx,
            first_round,
            [
                PackAttempt(
                    str(first + offset), first + offset, 1, 0, [uids[pos] for pos in pack.positions]
                )
                for offset, pack in enumerate(packs)
            ],
        )
    await runs.reopen_for_retry(conn, run_id, first + len(packs))
    reasons: dict[str, int] = {}
    for b in blocks:
        reasons[b.reason_code or "unknown"] = reasons.get(b.reason_code or "unknown", 0) + 1
    return await retries.record_claim(
        conn,
        run_id=run_id,
        workflow_run_id=claim,
        request=request,
        reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        block_count=len(blocks),
        first_pack=first,
        pack_count=first + len(packs),
        first_round=first_round,
        previous_status=state.status,
        previous_error=state.error,
    )


async def prior_ratios(conn: asyncpg.Connection, run_id: str) -> OutputRatios | None:
    """What earlier runs of the run's schema on its model wrote (``None``: too few)."""
    seen = await replans.prior_output(conn, run_id)
    if seen is None or seen.calls < PRIOR_AFTER_CALLS:
        return None
    return OutputRatios(
        overall=round(seen.ratio, 4), by_type={}, blocks=seen.blocks, source="earlier runs"
    )


async def planned_ratios(conn: asyncpg.Connection, run_id: str) -> OutputRatios | None:
    """The ratios the run's current plan was made with: its latest re-plan's when that was
    learned, else (never re-planned) earlier runs' as :meth:`DbActivities.plan_run` took
    them; ``None`` when the plan came from the schema's estimate or the quality gate."""
    made = await replans.changes(conn, run_id)
    if not made:
        return await prior_ratios(conn, run_id)
    last = made[-1]
    if last.kind != "learned":
        return None
    return OutputRatios(**last.ratios)


def learned_ratios(ctx: RunContext, seen: replans.Answers) -> OutputRatios | None:
    """:func:`blockbatch.core.planning.learn_ratios` over a run's answered blocks."""
    samples = [
        (
            b.block_type,
            ctx.answer_shape(b.est_tokens),
            answer_tokens(b.answer),
        )
        for b in seen.blocks
    ]
    written = seen.output_tokens - seen.calls * PACK_OUTPUT_OVERHEAD_TOKENS
    return learn_ratios(samples, written)
