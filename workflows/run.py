"""RunWorkflow: plan a run, do its packs in one of two modes, roll up from Postgres.

``run`` reads as the whole story: plan (``plan_run``), then either **sync mode**
(``_run_packs``: ProcessPack children, at most ``max_concurrent_packs`` at once) or
**batch mode** (``_run_batch_rounds``: rounds of Message Batches, workflows/batch.py),
then continue as new if work is left and this history is long enough, else
``finish_run``. A run with a budget whose next call cannot fit it (a pack or the warm-up
says ``budget_exhausted``) starts no more packs, lets the running ones end, and finishes
``budget_exhausted``. The plan lives in Postgres (each overlay row has its ``pack_index``); the
workflow only knows how many packs there are and which is next. Sync mode continues as new
every ``packs_per_history`` packs, so a 100,000-block run keeps a small history.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.common import SearchAttributePair
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ContinueAsNewVersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.db import DbActivities
    from activities.errors import RUN_STOPPED
    from activities.llm import LlmActivities
    from blockbatch.core.budget import suggested_budget
    from blockbatch.core.models import (
        ApiDownReport,
        BatchRunState,
        FinishRunInput,
        GateReading,
        LimiterNote,
        MarkCancellingInput,
        PackOutcome,
        PlanRetryInput,
        PlanRunInput,
        ProcessPackInput,
        ReplanInput,
        RunInput,
        RunProgress,
        RunResult,
        Totals,
        WarmCacheInput,
    )
    from blockbatch.core.outage import paused_text, waiting_text
    from blockbatch.core.quality import (
        GATE_PROBATION_PACKS,
        GATE_SAMPLES_PER_PACK,
        gate_reading,
        on_probation,
        probe_cost_text,
        reading_text,
        running_text,
    )
    from workflows import attributes
    from workflows.batch import BatchRounds
    from workflows.outage import OutageWatch
    from workflows.pack import ProcessPackWorkflow, latest
    from workflows.retries import (
        CALL_MODEL_HEARTBEAT,
        CALL_MODEL_TIMEOUT,
        DB_RETRY,
        DB_TIMEOUT,
        PLAN_TIMEOUT,
        WARM_UP_RETRY,
    )


def run_workflow_id(run_id: str) -> str:
    return f"run-{run_id}"


def _pack_id(run_id: str, index: int) -> str:
    return f"{run_workflow_id(run_id)}/pack-{index}"


@workflow.defn(name="RunWorkflow")
class RunWorkflow:
    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        # Set here, not in ``run``: a pack's signal may be handled before ``run`` begins.
        self._state: RunInput | None = inp
        #: Packs in flight: their handle, or ``None`` for one an earlier execution started
        #: (it was handed over at continue-as-new and reports by ``pack_done``).
        self._running: dict[int, workflow.ChildWorkflowHandle | None] = dict.fromkeys(inp.running)
        self._cancel_requested = False
        self._fatal_error: str | None = None
        #: A call was refused by the run's budget: no pack starts (carried over).
        self._budget_exhausted = inp.budget_exhausted
        self._status = "planning"
        self._batch: BatchRounds | None = None
        self._outage: OutageWatch | None = OutageWatch(inp, self._stopping, self._show)
        #: The limiter as the run's latest reported call saw it (progress, UI details).
        self._limiter: LimiterNote | None = None
        #: Packs this execution started whose workflows have not closed yet (a pack that
        #: reports by signal, once handed over, closes just after; the run closes after
        #: its packs).
        self._open: set[int] = set()
        #: Pack 0 is a learning pack (``plan_run``); what the latest re-plan changed.
        self._learning = False
        self._replanned: str | None = None
        #: The run has a quality gate (``RunInput.quality.min_agreement``).
        self._gated = False

    @workflow.signal
    def cancel(self) -> None:
        """Stop starting packs; running packs stop before their next call."""
        self._cancel_requested = True

    @workflow.signal
    async def api_down(self, report: ApiDownReport) -> None:
        """A pack's call kept failing because Claude is down: pause, probe, resume."""
        assert self._outage is not None
        await self._outage.report(report)

    @workflow.signal
    def pack_done(self, outcome: PackOutcome) -> None:
        """A planned pack ended (sent by packs that may outlive an execution)."""
        self._pack_ended(int(outcome.pack_path), outcome)

    def _paused(self) -> bool:
        return self._outage is not None and self._outage.paused

    @workflow.query
    def progress(self) -> RunProgress:
        state = self._state
        assert state is not None
        t = state.totals
        total = state.block_count
        outage = self._outage.current if self._outage is not None else None
        return RunProgress(
            run_id=state.run_id,
            status="waiting_for_api" if outage is not None else self._status,
            blocks_total=total,
            blocks_done=t.blocks_done,
            blocks_failed=t.blocks_failed,
            blocks_pending=max(total - t.blocks_done - t.blocks_failed, 0),
            packs_total=state.pack_count or 0,
            packs_done=t.packs_done,
            packs_running=len(self._running),
            calls=t.calls,
            splits=t.splits,
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            cache_creation_input_tokens=t.cache_creation_input_tokens,
            cache_read_input_tokens=t.cache_read_input_tokens,
            cost_usd=round(t.cost_usd, 6),
            error=self._fatal_error,
            batch=self._batch.progress() if self._batch is not None else None,
            outage=outage,
            limiter=self._limiter,
            limiter_wait_s=round(t.limiter_wait_s, 1),
            blocks_reused=t.blocks_reused,
            reuse_saved_usd=round(t.reuse_saved_usd, 6),
            quality_sampled=t.quality_sampled,
            quality_agreeing=t.quality_agreeing,
            quality_calls=t.quality_calls,
            quality_cost_usd=round(t.quality_cost_usd, 6),
            quality_gate=state.quality.text if state.quality is not None else None,
        )

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        if inp.pack_count is None:
            await self._plan(inp)
        self._status = "running"
        self._show()
        if inp.batch is not None:
            finished = await self._run_batch_rounds(inp)
        else:
            finished = await self._run_packs(inp)
        if not finished:
            # Work is left and this history is long enough: go on with a fresh one, on the
            # deployment's current build (a run is pinned to its build only between these).
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(
                inp, initial_versioning_behavior=ContinueAsNewVersioningBehavior.AUTO_UPGRADE
            )
        return await self._finish(inp)

    async def _plan(self, inp: RunInput) -> None:
        if inp.retry is not None:
            # A retry of a finished run (``starter.py retry``): the blocks it takes, in new
            # packs after the run's packs; in batch mode, a new round after the last one.
            retry = await workflow.execute_activity_method(
                DbActivities.plan_retry,
                PlanRetryInput(run_id=inp.run_id, retry=inp.retry),
                start_to_close_timeout=PLAN_TIMEOUT,
                retry_policy=DB_RETRY,
                summary="plan_retry: claim the run, reset the blocks to retry, pack them "
                "after its packs",
            )
            inp.pack_count, inp.block_count = retry.pack_count, retry.block_count
            inp.next_pack, inp.totals = retry.first_pack, retry.totals
            if retry.mode == "batch":
                assert retry.first_round is not None and retry.batch_options is not None
                inp.batch = BatchRunState(
                    round=retry.first_round, opened=True, options=retry.batch_options
                )
            return
        plan = await workflow.execute_activity_method(
            DbActivities.plan_run,
            PlanRunInput(run_id=inp.run_id),
            start_to_close_timeout=PLAN_TIMEOUT,
            retry_policy=DB_RETRY,
            summary="plan_run: size packs from block and output estimates",
        )
        inp.pack_count, inp.block_count = plan.pack_count, plan.block_count
        inp.replans, self._learning = plan.replans, plan.learning
        # Blocks answered at planning by an earlier run's answer are done (no pack).
        inp.totals.add(
            Totals(
                blocks_done=plan.reused,
                blocks_reused=plan.reused,
                reuse_saved_usd=plan.reuse_saved_usd,
            )
        )
        if plan.mode == "batch":
            inp.batch = BatchRunState()

    async def _run_packs(self, inp: RunInput) -> bool:
        """Sync mode: ProcessPack children, at most ``max_concurrent_packs`` at once.

        Returns:
            False when ``packs_per_history`` packs were started here and packs are left
            (the caller continues as new); True when the run has nothing left to start.
        """
        assert inp.pack_count is not None
        started_here = 0
        # One small warm-up call writes the prompt cache, then every pack starts at once
        # (a learning pack goes first alone instead, when the plan needs one). A retry's
        # first execution warms the cache too (it may have been cold for hours); a
        # continued-as-new execution finds it warm.
        serial_first = inp.next_pack == 0 and inp.pack_count > 1
        continued = workflow.info().continued_run_id is not None
        fresh = not continued and inp.pack_count - inp.next_pack > 1
        learn = False
        if fresh and not self._stopping():
            # With no idea yet of what the answers write, pack 0 is a few blocks sent alone:
            # it writes the prompt cache like the warm-up call and teaches the plan.
            learn = self._learning
            serial_first = learn or not await self._warm_cache(inp)
        elif continued and inp.replans and inp.next_pack < inp.pack_count and not self._stopping():
            await self._replan(inp)
        q = inp.quality
        self._gated = q is not None and q.min_agreement is not None
        while inp.next_pack < inp.pack_count and not self._halted():
            # While Claude is down (the run paused, probing) no pack starts.
            await workflow.wait_condition(
                lambda: (
                    (len(self._running) < self._window(inp) and not self._paused())
                    or self._halted()
                )
            )
            if self._halted() or started_here >= inp.packs_per_history:
                break
            reading = self._gate_reading(inp)
            if reading is not None:
                # Agreement below the target: the packs not started yet get smaller.
                await self._gate(inp, reading)
                continue
            # Every free slot's pack starts in one workflow task: awaiting each start on its
            # own costs a server round trip per pack and capped a run at ~10 packs/s.
            count = min(
                self._window(inp) - len(self._running),
                inp.pack_count - inp.next_pack,
                inp.packs_per_history - started_here,
            )
            if inp.next_pack == 0 and serial_first:
                count = 1
            indexes = range(inp.next_pack, inp.next_pack + count)
            inp.next_pack += count
            started_here += count
            await asyncio.gather(*(self._start_pack(index) for index in indexes))
            if indexes[0] == 0 and serial_first:
                # The first call writes the prompt cache; the rest then read it instead of
                # each paying for their own cache write.
                await workflow.wait_condition(lambda: not self._running or self._stopping())
                if learn and not self._stopping():
                    await self._replan(inp)
        if self._stopping():
            await self._stop_children()
        elif inp.next_pack < inp.pack_count and not self._budget_exhausted:
            # This history is full: continue as new with the packs still running; they
            # report to the next execution.
            if await self._carry_over(inp):
                return False
            await self._stop_children()
        else:
            # Every pack has started (or this history is full): a cancel that arrives while
            # the last ones run must still reach them.
            await workflow.wait_condition(lambda: not self._running or self._stopping())
            if self._stopping():
                await self._stop_children()
        await workflow.wait_condition(lambda: not self._running and not self._open)
        # Out of budget: the packs never started end budget_exhausted in finish_run.
        return inp.next_pack >= inp.pack_count or self._stopping() or self._budget_exhausted

    async def _carry_over(self, inp: RunInput) -> bool:
        """Get the packs in flight ready to outlive this execution; False: stopping instead.

        Packs that have reported close within a workflow task: let them, so that only
        packs still at work are carried over (``inp.running``). Not while paused: the
        held packs wait for this execution's probe to resume them.
        """
        await workflow.wait_condition(
            lambda: (not self._paused() and self._open <= self._running.keys()) or self._stopping()
        )
        if not self._stopping():
            await self._hand_over()
            await workflow.wait_condition(lambda: not self._paused() or self._stopping())
        if self._stopping():
            return False
        inp.running = sorted(self._running)
        inp.budget_exhausted = self._budget_exhausted
        return True

    def _window(self, inp: RunInput) -> int:
        """Packs in flight at most: fewer while the quality gate lacks samples at the
        current pack size (blockbatch/core/quality.py)."""
        q = inp.quality
        # Packs of one block are not compared: no samples will come, and no smaller size.
        if (
            self._gated
            and q is not None
            and q.min_agreement is not None
            and q.pack_size != 1
            and on_probation(q.agreeing, q.sampled, q.min_agreement)
        ):
            return min(inp.max_concurrent_packs, GATE_PROBATION_PACKS)
        return inp.max_concurrent_packs

    def _gate_reading(self, inp: RunInput) -> GateReading | None:
        """What the quality gate saw, when it trips now (``None``: it does not)."""
        q = inp.quality
        if (
            not self._gated
            or q is None
            or q.min_agreement is None
            or q.pack_size == 1
            or inp.pack_count is None
            or inp.next_pack >= inp.pack_count
        ):
            return None
        return gate_reading(q.agreeing, q.sampled, q.min_agreement)

    async def _gate(self, inp: RunInput, reading: GateReading) -> None:
        """Re-plan the packs not started yet at half the size; count again from them.
        With re-asks, the packs in flight end first, and the blocks answered in larger
        packs are re-planned at the new size too (new packs after ``next_pack``)."""
        q = inp.quality
        assert q is not None
        reask = q.reask
        if reask:
            await workflow.wait_condition(lambda: not self._running or self._stopping())
            if self._stopping():
                return
        out = await workflow.execute_activity_method(
            DbActivities.replan_run,
            ReplanInput(run_id=inp.run_id, first_pack=inp.next_pack, gate=reading, reask=reask),
            start_to_close_timeout=PLAN_TIMEOUT,
            retry_policy=DB_RETRY,
            summary=f"replan_run: quality gate, {reading_text(reading)}",
        )
        inp.pack_count = out.pack_count
        q.since_pack, q.sampled, q.agreeing = inp.next_pack, 0, 0
        # No smaller size to go to (packs of one block): the gate has done what it can.
        q.pack_size = out.pack_size or 1
        if out.text is not None:
            q.text = out.text
            workflow.logger.warning("run %s: %s", inp.run_id, out.text)
        self._show()

    async def _hand_over(self) -> None:
        """Tell the packs this execution started to report to the next one by signal.

        A pack the signal no longer reaches has closed: its result is on its way to this
        execution, which waits for it, so that only packs that will report are carried over.
        """
        here = [(index, h) for index, h in self._running.items() if h is not None]
        sent = await asyncio.gather(
            *(h.signal(ProcessPackWorkflow.report_to_run) for _, h in here), return_exceptions=True
        )
        closed = {
            index for (index, _), r in zip(here, sent, strict=True) if isinstance(r, BaseException)
        }
        await workflow.wait_condition(
            lambda: not (closed & self._running.keys()) or self._stopping()
        )

    async def _replan(self, inp: RunInput) -> None:
        """Plan the packs not started yet again, from what the run's answers wrote."""
        out = await workflow.execute_activity_method(
            DbActivities.replan_run,
            ReplanInput(run_id=inp.run_id, first_pack=inp.next_pack),
            start_to_close_timeout=PLAN_TIMEOUT,
            retry_policy=DB_RETRY,
            summary=f"replan_run: packs {inp.next_pack} on, from what the answers wrote",
        )
        inp.pack_count = out.pack_count
        if out.text is not None:
            self._replanned = out.text
            self._show()

    async def _warm_cache(self, inp: RunInput) -> bool:
        """One small call writes the prompt cache (False: it failed; pack 0 goes first)."""
        try:
            out = await workflow.execute_activity_method(
                LlmActivities.warm_cache,
                WarmCacheInput(run_id=inp.run_id, first_pack=inp.next_pack),
                start_to_close_timeout=CALL_MODEL_TIMEOUT,
                heartbeat_timeout=CALL_MODEL_HEARTBEAT,
                retry_policy=WARM_UP_RETRY,
                summary="warm_cache: write the prompt cache once, then start every pack",
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == RUN_STOPPED:
                # The key, the account or the model refuses every call: no pack starts.
                self._fatal_error = cause.message
                return False
            workflow.logger.warning(
                "warm-up call failed (%s): pack 0 goes first instead", err.cause or err
            )
            return False
        if out.over_budget:
            self._budget_out()
        inp.totals.add(out.totals)
        return True

    async def _run_batch_rounds(self, inp: RunInput) -> bool:
        """Batch mode (workflows/batch.py): rounds of Message Batches replace the children.

        Returns:
            False when this history is long enough and rounds are left (continue as new).
        """
        self._batch = BatchRounds(inp, lambda: self._cancel_requested)
        end = await self._batch.run()
        self._fatal_error = end.fatal_error
        self._budget_exhausted = self._budget_exhausted or end.budget_exhausted
        return not end.more

    async def _finish(self, inp: RunInput) -> RunResult:
        if self._fatal_error:
            status, error = "failed", self._fatal_error
        elif self._cancel_requested:
            status, error = "cancelled", "cancelled by request"
        elif self._budget_exhausted:
            # finish_run says what is left and what finishing would cost.
            status, error = "budget_exhausted", None
        else:
            status, error = "completed", None
        self._status = status
        result = await workflow.execute_activity_method(
            DbActivities.finish_run,
            FinishRunInput(run_id=inp.run_id, status=status, error=error),
            start_to_close_timeout=DB_TIMEOUT,
            retry_policy=DB_RETRY,
            summary=f"finish_run: {status}, recount from Postgres",
        )
        # The final status comes from Postgres (finish_run): "completed" may end as
        # completed_with_failures, or failed when nothing was done.
        self._status = result.status
        result.outages, result.paused_s = inp.totals.outages, round(inp.totals.paused_s, 1)
        self._show(result)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result

    def _stopping(self) -> bool:
        return self._cancel_requested or self._fatal_error is not None

    def _halted(self) -> bool:
        """No pack may start: the run is stopping, or its budget is exhausted."""
        return self._stopping() or self._budget_exhausted

    def _budget_out(self) -> None:
        if not self._budget_exhausted:
            workflow.logger.warning(
                "the run's budget cannot hold its next call: no more packs start"
            )
        self._budget_exhausted = True
        self._show()

    async def _start_pack(self, index: int) -> None:
        inp = self._state
        assert inp is not None
        handle = await workflow.start_child_workflow(
            ProcessPackWorkflow.run,
            ProcessPackInput(
                run_id=inp.run_id,
                pack_path=str(index),
                pack_index=index,
                max_block_attempts=inp.max_block_attempts,
                failures_to_pause=inp.outage.failures_to_pause,
                quality_probe=inp.quality is not None and inp.quality.probe,
                probe_at_least=GATE_SAMPLES_PER_PACK if self._gated else 0,
            ),
            id=_pack_id(inp.run_id, index),
            # A pack outlives the execution that started it (continue-as-new); it is
            # cancelled by the run's cancel signal, never by the parent closing.
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            # No total in the summary: it is fixed at start, and a re-plan (from the first
            # answers, or the quality gate) changes how many packs follow.
            static_summary=f"pack {index} of run {inp.run_id}",
            static_details=(
                f"planned as pack {index} of {inp.pack_count}; a re-plan from "
                "the answers or the quality gate may change the packs after it"
            ),
            # The run's own attributes (document, schema, model) plus run id and pack.
            search_attributes=workflow.info().typed_search_attributes.updated(
                SearchAttributePair(attributes.RUN_ID, inp.run_id),
                SearchAttributePair(attributes.PACK, str(index)),
            ),
        )
        self._running[index] = handle
        self._open.add(index)
        asyncio.get_running_loop().create_task(self._await_pack(index, handle))

    async def _await_pack(self, index: int, handle: workflow.ChildWorkflowHandle) -> None:
        try:
            outcome: PackOutcome = await handle
        except ChildWorkflowError as err:
            # A pack workflow itself failed (a bug, not a model failure): its blocks stay
            # pending and finish_run reports them; the run goes on.
            workflow.logger.error("pack %s failed: %s", index, err)
            outcome = PackOutcome(pack_path=str(index))
        self._open.discard(index)
        # A pack that reports by signal has been counted already (its signal comes first).
        self._pack_ended(index, outcome)

    def _pack_ended(self, index: int, outcome: PackOutcome) -> None:
        """Count a pack's outcome once, whether it came by signal or as its result."""
        inp = self._state
        assert inp is not None
        if index not in self._running:
            return
        inp.totals.add(outcome.totals)
        inp.totals.packs_done += 1
        if outcome.fatal_error and not self._fatal_error:
            self._fatal_error = outcome.fatal_error
        if outcome.budget_exhausted:
            self._budget_out()
        q = inp.quality
        if q is not None and index >= q.since_pack:
            # The gate counts the samples of packs at the current size.
            q.sampled += outcome.totals.quality_sampled
            q.agreeing += outcome.totals.quality_agreeing
        self._limiter = latest(self._limiter, outcome.limiter)
        del self._running[index]
        self._show()

    async def _stop_children(self) -> None:
        inp = self._state
        assert inp is not None
        reason = self._fatal_error or "cancel requested"
        await workflow.execute_activity_method(
            DbActivities.mark_run_cancelling,
            MarkCancellingInput(run_id=inp.run_id, reason=reason),
            start_to_close_timeout=DB_TIMEOUT,
            retry_policy=DB_RETRY,
            summary="mark_run_cancelling: no new Claude call may start",
        )
        for index, handle in list(self._running.items()):
            try:
                if handle is not None:
                    await handle.signal(ProcessPackWorkflow.cancel)
                else:  # started by an earlier execution of this run
                    await workflow.get_external_workflow_handle_for(
                        ProcessPackWorkflow.run, _pack_id(inp.run_id, index)
                    ).signal(ProcessPackWorkflow.cancel)
            except Exception:  # noqa: BLE001 - the child may have just finished
                workflow.logger.debug("cancel not delivered to pack %s", index)

    def _show(self, result: RunResult | None = None) -> None:
        p = self.progress()
        if result is not None:
            details = (
                f"**{result.status}** · {result.blocks_ai_complete}/{result.blocks_total} "
                f"blocks ok · {result.blocks_failed} failed · {result.blocks_cancelled} "
                f"cancelled · {result.calls} calls · {result.split_events} splits · "
                f"${result.cost_usd:.4f}"
            )
            details += self._reused_line(result.blocks_reused, result.reuse_saved_usd)
            if result.outages:
                probes = self._state.totals.probes if self._state is not None else 0
                details += (
                    f"\n\nrode out {result.outages} outage(s) of the API: paused "
                    f"{paused_text(result.paused_s)}, {probes} probe(s)"
                )
            if result.failure_reasons:
                details += "\n\nnot done: " + ", ".join(
                    f"{n} {code}" for code, n in result.failure_reasons.items()
                )
            if result.budget is not None:
                details += (
                    f"\n\n**budget exhausted**: {result.budget.blocks_left} blocks "
                    f"left, about ${result.budget.to_finish_usd or 0:.4f} to finish; "
                    f"continue with `starter.py retry {result.run_id} --max-cost "
                    f"{suggested_budget(result.budget):.2f}`"
                )
            if result.error:
                details += f"\n\n{result.error}"
            for change in result.plan_changes:
                details += f"\n\n{change}"
            if result.quality is not None:
                qr = result.quality
                details += (
                    f"\n\n{qr.text} · "
                    + probe_cost_text(
                        qr.probe_calls,
                        qr.probe_cost_usd,
                        qr.run_cost_usd,
                        max_share=qr.probe_max_share,
                        capped=qr.sample_capped,
                        gated=qr.min_agreement is not None,
                    )
                    + (f" · pack size {qr.pack_size}" if qr.pack_size else "")
                )
            details += self._limiter_line(p)
            workflow.set_current_details(details)
            return
        if p.outage is not None:
            workflow.set_current_details(
                f"**{waiting_text(p.outage, workflow.now())}** · {p.blocks_done}/"
                f"{p.blocks_total} blocks done · {p.packs_running} packs held · "
                f"${p.cost_usd:.4f}"
            )
            return
        status = p.status
        if self._budget_exhausted and status == "running":
            status = "running: budget exhausted, no more packs start"
        details = (
            f"**{status}** · {p.blocks_done}/{p.blocks_total} blocks done · "
            f"{p.blocks_failed} failed · packs {p.packs_done}/{p.packs_total} "
            f"({p.packs_running} running) · {p.calls} calls · {p.splits} splits · "
            f"${p.cost_usd:.4f}"
        )
        if self._replanned is not None:
            details += f"\n\n{self._replanned}"
        if p.quality_sampled or p.quality_calls:
            details += (
                f"\n\n{running_text(p.quality_agreeing, p.quality_sampled)} · "
                + probe_cost_text(p.quality_calls, p.quality_cost_usd, p.cost_usd)
            )
        if p.quality_gate is not None:
            details += f"\n\n{p.quality_gate}"
        details += self._reused_line(p.blocks_reused, p.reuse_saved_usd)
        workflow.set_current_details(details + self._limiter_line(p))

    @staticmethod
    def _reused_line(reused: int, saved: float) -> str:
        return (
            ""
            if not reused
            else f"\n\n{reused} blocks reused from earlier runs (saved ${saved:.4f})"
        )

    @staticmethod
    def _limiter_line(p: RunProgress) -> str:
        return "" if p.limiter is None else "\n\n" + p.limiter.text(p.limiter_wait_s)
