"""RunWorkflow: plan a run, do its packs in a sliding window, roll up from Postgres.

``run`` tells the story: plan (``plan_run``, or ``plan_retry`` for a retry), then either
**sync mode** (``_run_packs``: a window of at most ``max_concurrent_packs`` ProcessPack
children) or **batch mode** (workflows/batch.py), continue as new while work is left, else
drain the window and ``finish_run``. The plan lives in Postgres; the workflow knows how
many packs there are and which is next.

The window is the ``batch_sliding_window`` sample's (workflows/window.py): packs outlive
continue-as-new and always report by the ``pack_done`` signal to whichever execution is
current, which counts each pack once. All state that crosses continue-as-new is the one
``RunInput``. Continue-as-new comes after ``packs_per_history`` packs started here, or when
Temporal suggests it, right after the window was filled: the next execution inherits it.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ContinueAsNewVersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.db import DbActivities
    from blockbatch.core import call_types, outage_types, retry_types, run_types
    from blockbatch.core.quality import GATE_SAMPLES_PER_PACK, gate_trips, gate_window
    from blockbatch.core.run_view import progress_details, result_details, run_progress
    from blockbatch.core.workflow_names import (
        CANCEL,
        PROGRESS,
        REQUEST_CANCEL,
        RETRY_UNDER_WAY,
        RUN_ENDING,
        RUN_NOT_FINISHED,
        RUN_WORKFLOW,
    )
    from workflows import planning
    from workflows.batch import BatchRounds
    from workflows.outage import OutageWatch
    from workflows.pack import latest
    from workflows.retries import DB_RETRY, DB_TIMEOUT
    from workflows.window import PackWindow


@workflow.defn(name=RUN_WORKFLOW)
class RunWorkflow:
    @workflow.init
    def __init__(self, inp: run_types.RunInput) -> None:
        self._s = inp  # set here: a pack's signal may come before ``run`` begins
        self._cancel_requested = False
        self._fatal_error: str | None = None
        self._status = "planning"
        self._batch: BatchRounds | None = None
        self._outage = OutageWatch(inp, self._stopping, self._show, self._end_paused)
        self._packs = PackWindow(inp, self.pack_done)
        #: The limiter as the run's latest reported call saw it; what a re-plan changed.
        self._limiter: call_types.LimiterNote | None = None
        self._replanned: str | None = None
        self._learning = False
        #: A retry's claim (``plan_retry``), or why it was refused; the Update waits for it.
        self._claim: retry_types.PlanRetryOutput | ApplicationError | None = None
        self._retry_asked = False

    @workflow.update(name=CANCEL)
    def cancel(self) -> None:
        """Stop starting packs; running packs stop before their next call."""
        self._cancel_requested = True

    @workflow.signal(name=REQUEST_CANCEL)
    def request_cancel(self) -> None:
        """The ``cancel`` Update's request, sent as a signal when no worker is there to
        take an Update: the server records it at once and the next worker carries it out
        (ignored once the run is finishing)."""
        if self._status in ("planning", "running", "draining"):
            self._cancel_requested = True

    @cancel.validator
    def _check_cancel(self) -> None:
        if self._status not in ("planning", "running", "draining"):
            raise ApplicationError(
                f"run {self._s.run_id} is {self._status}: nothing to cancel", type=RUN_ENDING
            )

    # Registered under its method name, blockbatch.core.workflow_names.RETRY (an async Update
    # named by ``name=`` loses its result type for callers that pass the method).
    @workflow.update
    async def retry(self) -> retry_types.PlanRetryOutput:
        """The claim of the retry this execution was started for, or why it was refused."""
        if self._retry_asked:  # two at once, validated together: the first one takes it
            raise self._under_way()
        self._retry_asked = True
        await workflow.wait_condition(lambda: self._claim is not None)
        if isinstance(self._claim, ApplicationError):
            raise self._claim
        assert self._claim is not None
        return self._claim

    @retry.validator
    def _check_retry(self) -> None:
        if self._s.retry is None:
            raise ApplicationError(
                f"run {self._s.run_id} is still running: a retry can start once it has finished",
                type=RUN_NOT_FINISHED,
            )
        if self._retry_asked or workflow.info().continued_run_id is not None:
            raise self._under_way()

    def _under_way(self) -> ApplicationError:
        return ApplicationError(
            f"a retry of run {self._s.run_id} is under way", type=RETRY_UNDER_WAY
        )

    @workflow.signal
    async def api_down(self, report: outage_types.ApiDownReport) -> None:
        """A pack's call kept failing because Claude is down: pause, probe, resume."""
        await self._outage.report(report)

    @workflow.signal
    def pack_done(self, outcome: call_types.PackOutcome) -> None:
        """A planned pack ended: count it once (a pack not in the window was counted)."""
        if not self._packs.count(outcome):
            return
        self._fatal_error = self._fatal_error or outcome.fatal_error
        if outcome.budget_exhausted:
            self._budget_out()
        self._limiter = latest(self._limiter, outcome.limiter)
        self._show()

    @workflow.query(name=PROGRESS)
    def progress(self) -> run_types.RunProgress:
        return run_progress(
            self._s,
            status=self._status,
            error=self._fatal_error,
            batch=self._batch.progress() if self._batch is not None else None,
            outage=self._outage.current,
            limiter=self._limiter,
        )

    @workflow.run
    async def run(self, inp: run_types.RunInput) -> run_types.RunResult:
        if inp.pack_count is None:
            await self._plan(inp)
        self._status = "running"
        self._show()
        if inp.batch is not None:
            self._batch = BatchRounds(inp, lambda: self._cancel_requested)
            end = await self._batch.run()
            self._fatal_error = end.fatal_error
            inp.budget_exhausted = inp.budget_exhausted or end.budget_exhausted
            if end.more:
                await self._continue_as_new()
        else:
            if await self._run_packs(inp):
                await self._continue_as_new()
            await self._drain()
        return await self._finish(inp)

    async def _plan(self, inp: run_types.RunInput) -> None:
        if inp.retry is None:
            self._learning = (await planning.plan_run(inp)).learning
            return
        # A refused retry fails this execution; the ``retry`` Update tells the caller why.
        try:
            self._claim = await planning.claim_retry(inp)
        except ApplicationError as refusal:
            self._claim = refusal
            await workflow.wait_condition(workflow.all_handlers_finished)
            raise

    async def _run_packs(self, inp: run_types.RunInput) -> bool:
        """Sync mode: fill the window with packs until every pack has started or the run
        stops; True when this history is long enough and packs are left to start."""
        assert inp.pack_count is not None
        # One small warm-up call writes the prompt cache, then every pack starts at once;
        # a learning pack (or pack 0, when the warm-up failed) goes first alone instead,
        # writing the cache and teaching the plan. A continued execution finds it warm.
        fresh, serial = workflow.info().continued_run_id is None, False
        if fresh and inp.pack_count - inp.next_pack > 1 and not self._stopping():
            serial = (self._learning or not await self._warm_cache(inp)) and inp.next_pack == 0
        elif not fresh and inp.replans and inp.next_pack < inp.pack_count and not self._halted():
            await self._replan(inp)
        gated = inp.quality is not None and inp.quality.min_agreement is not None
        at_least = GATE_SAMPLES_PER_PACK if gated else 0  # samples each pack gives the gate
        started = 0
        while inp.next_pack < inp.pack_count:
            # While Claude is down (the run paused, probing) no pack starts.
            await workflow.wait_condition(lambda: self._room(inp) > 0 or self._halted())
            if self._halted():
                return False
            reading = gate_trips(inp.quality)
            if reading is not None:
                await self._gate(inp, reading)
                continue
            # Free slots fill in one workflow task: one server round trip, not one per pack.
            count = min(
                self._room(inp), inp.pack_count - inp.next_pack, inp.packs_per_history - started
            )
            first, count = inp.next_pack, 1 if serial and inp.next_pack == 0 else count
            inp.next_pack, started = inp.next_pack + count, started + count
            starts = [
                self._packs.start(i, probe_at_least=at_least) for i in range(first, first + count)
            ]
            await asyncio.gather(*starts)
            if serial and first == 0:
                await workflow.wait_condition(lambda: not inp.running or self._stopping())
                if self._learning and not self._stopping():
                    await self._replan(inp)
            elif inp.next_pack < inp.pack_count and (
                started >= inp.packs_per_history or workflow.info().is_continue_as_new_suggested()
            ):
                return True
        return False

    async def _continue_as_new(self) -> None:
        """A fresh history on the current build, which the packs in flight report to; not while
        paused (this execution resumes the held packs), nor once the run stops (it drains)."""
        quiet = workflow.all_handlers_finished
        await workflow.wait_condition(
            lambda: self._stopping() or (not self._outage.paused and quiet())
        )
        if not self._stopping():
            workflow.continue_as_new(
                self._s, initial_versioning_behavior=ContinueAsNewVersioningBehavior.AUTO_UPGRADE
            )

    async def _drain(self) -> None:
        """Wait for every pack in flight to report; a stopping run cancels them first."""
        await workflow.wait_condition(lambda: not self._s.running or self._stopping())
        if self._stopping():
            await self._packs.stop(self._fatal_error or "cancel requested")
            await workflow.wait_condition(lambda: not self._s.running)

    async def _gate(self, inp: run_types.RunInput, reading: run_types.GateReading) -> None:
        """Agreement below the target: the packs not started yet get smaller. With
        re-asks, the packs in flight end first (their blocks are asked again)."""
        assert inp.quality is not None
        if inp.quality.reask:
            await workflow.wait_condition(lambda: not inp.running or self._stopping())
            if self._stopping():
                return
        await planning.replan(inp, reading)
        self._show()

    async def _replan(self, inp: run_types.RunInput) -> None:
        out = await planning.replan(inp)
        if out.text is not None:
            self._replanned = out.text
            self._show()

    async def _warm_cache(self, inp: run_types.RunInput) -> bool:
        """One small call writes the prompt cache (False: it failed; pack 0 goes first)."""
        try:
            out = await planning.warm_cache(inp)
        except ApplicationError as err:  # the key, account or model refuses every call
            self._fatal_error = err.message
            return False
        if out is not None and out.over_budget:
            self._budget_out()
        return out is not None

    async def _finish(self, inp: run_types.RunInput) -> run_types.RunResult:
        status, error = "completed", None
        if self._fatal_error:
            status, error = "failed", self._fatal_error
        elif self._cancel_requested:
            status, error = "cancelled", "cancelled by request"
        elif inp.budget_exhausted:
            status = "budget_exhausted"  # finish_run says what is left and what it costs
        self._status = status
        result = await workflow.execute_activity_method(
            DbActivities.finish_run,
            run_types.FinishRunInput(run_id=inp.run_id, status=status, error=error),
            start_to_close_timeout=DB_TIMEOUT,
            retry_policy=DB_RETRY,
            summary=f"finish_run: {status}, recount from Postgres",
        )
        # The final status comes from Postgres: "completed" may end as
        # completed_with_failures, or failed when nothing was done.
        self._status = result.status
        result.outages, result.paused_s = inp.totals.outages, round(inp.totals.paused_s, 1)
        workflow.set_current_details(result_details(result, self.progress(), inp.totals.probes))
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result

    def _room(self, inp: run_types.RunInput) -> int:
        """Packs that may start now: none while Claude is down, fewer while the gate probes."""
        if self._outage.paused:
            return 0
        return gate_window(inp.quality, inp.max_concurrent_packs) - len(inp.running)

    def _stopping(self) -> bool:
        return self._cancel_requested or self._fatal_error is not None

    def _halted(self) -> bool:
        """No pack may start: the run is stopping, or its budget is exhausted."""
        return self._stopping() or self._s.budget_exhausted

    def _end_paused(self, why: str) -> None:
        """A pause that cannot end well (unreachable, too long): the run stops with ``why``."""
        self._fatal_error = self._fatal_error or why
        self._show()

    def _budget_out(self) -> None:
        if not self._s.budget_exhausted:
            workflow.logger.warning("the run's budget cannot hold its next call: no packs start")
        self._s.budget_exhausted = True
        self._show()

    def _show(self) -> None:
        exhausted, replanned = self._s.budget_exhausted, self._replanned
        details = progress_details(
            self.progress(), now=workflow.now(), budget_exhausted=exhausted, replanned=replanned
        )
        workflow.set_current_details(details)
