"""EscalateWorkflow (``run-<run_id>/escalate``): pay the strong model only where the cheap
one is unsure (docs/ESCALATION.md).

``run`` reads as the whole story: claim the finished run and plan the second packing
(``plan_escalation``), ask every second pack on the run's model (``second_pass``, at most
``max_concurrent_packs`` at once), count the blocks that go up, ask them alone on the
escalation model in parts (``escalate_blocks``), and close the run as a run ends
(``finish_run``: status and counters recomputed from Postgres, the escalation's summary
with them). The rows live in Postgres (``escalations``); the workflow only knows counts.
RunWorkflow never knows: it ended before this starts.

A large run with small second packs is tens of thousands of activities, more than one
history holds. After ``activities_per_history`` second packs and parts started in this
history (or sooner, when Temporal suggests it) nothing more starts, those started end,
and the workflow continues as new with where it is (``EscalateInput.resume``: the plan,
the phase, the next second pack or part, and the counts so far, so ``progress`` adds up
over every history). The plan is carried, not asked again (it is only counts, and a
cancelling run would refuse a second claim). The blocks that go up are counted once, when
the second pass ends: part ``n`` is the ``n``-th 20 of the rows with a reason in block
order, and a row keeps its reason whatever its escalation did, so a part is the same
blocks in every history (``escalations.part_to_escalate``): none is redone or skipped.

A ``cancel`` signal marks the run cancelling (no new call opens in the ledger), starts
nothing more, lets what runs end, and finishes the run: blocks not yet compared or asked
keep their first answer. An activity that fails for good (its retries spent) ends it the
same way, the run's error saying so (``ESCALATION_FAILED``), and fails the workflow. Once
cancelled, the workflow never continues as new (a cancel
that comes while a history drains ends the escalation in it), and it continues only once
its signal handlers have finished: a signal that comes as it continues makes Temporal run
that workflow task again with the signal, so none is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.workflow import ContinueAsNewVersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.db import DbActivities
    from activities.escalation import EscalationActivities
    from blockbatch.core.escalation_types import (
        ESCALATION_FAILED,
        ESCALATION_PART,
        EscalateInput,
        EscalationPartInput,
        EscalationState,
        EscalationStepOutput,
        SecondPassInput,
    )
    from blockbatch.core.run_types import FinishRunInput, MarkCancellingInput, RunResult
    from blockbatch.core.workflow_names import (
        CANCEL_ESCALATION,
        ESCALATE_WORKFLOW,
        PROGRESS,
    )
    from workflows.retries import (
        CALL_MODEL_HEARTBEAT,
        CALL_MODEL_TIMEOUT,
        DB_RETRY,
        DB_TIMEOUT,
        PLAN_TIMEOUT,
        QUALITY_PROBE_RETRY,
    )


@workflow.defn(name=ESCALATE_WORKFLOW)
class EscalateWorkflow:
    @workflow.init
    def __init__(self, inp: EscalateInput) -> None:
        # A continued execution answers ``progress`` with the counts so far from the start.
        self._done = inp.resume.done if inp.resume is not None else EscalationStepOutput()
        self._stage = "planning"
        self._cancel_requested = False
        #: Second packs and parts started in this history, and how many it may start.
        self._started, self._per_history = 0, inp.activities_per_history
        self._failed = False

    @workflow.signal(name=CANCEL_ESCALATION)
    async def cancel(self) -> None:
        """Stop the escalation: no new call, what runs ends, the run is finished."""
        self._cancel_requested = True

    @workflow.run
    async def run(self, inp: EscalateInput) -> RunResult:
        s = inp.resume or await self._plan(inp)
        self._done = s.done
        watch = asyncio.ensure_future(self._stop_on_cancel(inp.run_id))
        try:
            if s.phase == "second_pass":
                if await self._second_pass(inp, s):
                    await self._continue_as_new(inp, s)
                s.phase, s.next = "escalation", 0
                if not self._cancel_requested:
                    s.up = await workflow.execute_activity_method(
                        EscalationActivities.count_to_escalate,
                        inp,
                        start_to_close_timeout=DB_TIMEOUT,
                        retry_policy=DB_RETRY,
                    )
            if await self._escalate(inp, s):
                await self._continue_as_new(inp, s)
        except ActivityError as err:
            # An activity failed for good: the run is closed all the same (it would stay
            # `running` in Postgres with no workflow), the blocks not compared or asked
            # keep their first answer, and the failure stays this workflow's.
            watch.cancel()
            self._stage = "failed"
            workflow.set_current_details(f"{s.plan.blocks} blocks; escalation failed")
            await self._finish(inp, f"{ESCALATION_FAILED}: {err.cause or err}")
            raise
        self._stage = "done"
        if self._cancel_requested:
            await watch
            workflow.set_current_details(f"{s.plan.blocks} blocks; cancelled")
        else:
            watch.cancel()
        return await self._finish(inp, None)

    async def _finish(self, inp: EscalateInput, error: str | None) -> RunResult:
        return await workflow.execute_activity_method(
            DbActivities.finish_run,
            FinishRunInput(run_id=inp.run_id, status="completed", error=error),
            start_to_close_timeout=DB_TIMEOUT,
            retry_policy=DB_RETRY,
            summary="finish_run: status and counters from Postgres",
        )

    async def _plan(self, inp: EscalateInput) -> EscalationState:
        plan = await workflow.execute_activity_method(
            EscalationActivities.plan_escalation,
            inp,
            start_to_close_timeout=PLAN_TIMEOUT,
            retry_policy=DB_RETRY,
            summary=f"plan_escalation: claim the run, pack a second order, to {inp.model}",
        )
        return EscalationState(plan=plan)

    async def _second_pass(self, inp: EscalateInput, s: EscalationState) -> bool:
        """Every second pack from ``s.next``; True: some are left for the next history."""
        self._show(s, f"second pass: {s.plan.second_packs} packs")
        return await self._window(
            s,
            s.plan.second_packs,
            lambda n: workflow.execute_activity_method(
                EscalationActivities.second_pass,
                SecondPassInput(run_id=inp.run_id, second_pack=n),
                start_to_close_timeout=CALL_MODEL_TIMEOUT,
                heartbeat_timeout=CALL_MODEL_HEARTBEAT,
                retry_policy=QUALITY_PROBE_RETRY,
                summary=f"second_pass: second pack {n}",
            ),
            inp.max_concurrent_packs,
        )

    async def _escalate(self, inp: EscalateInput, s: EscalationState) -> bool:
        """Every part of the blocks that go up from ``s.next``; True: some are left."""
        self._show(s, f"escalation: {s.up} blocks to {inp.model}")
        return await self._window(
            s,
            -(-s.up // ESCALATION_PART),
            lambda part: workflow.execute_activity_method(
                EscalationActivities.escalate_blocks,
                EscalationPartInput(run_id=inp.run_id, part=part),
                start_to_close_timeout=CALL_MODEL_TIMEOUT,
                heartbeat_timeout=CALL_MODEL_HEARTBEAT,
                retry_policy=QUALITY_PROBE_RETRY,
                summary=f"escalate_blocks: part {part} alone on {inp.model}",
            ),
            max(1, inp.max_concurrent_packs // 4),
        )

    async def _window(
        self,
        s: EscalationState,
        count: int,
        start: Callable[[int], Awaitable[EscalationStepOutput]],
        width: int,
    ) -> bool:
        """Run ``start(s.next..count-1)``, at most ``width`` at once, adding up what they
        did into ``s.done``, until every one has started, the escalation is cancelled or
        this history is full; then let those started end. True: some are left to start,
        in the next history."""
        running = 0

        async def one(n: int) -> None:
            nonlocal running
            try:
                out = await start(n)
            except ActivityError:
                self._failed = True  # nothing more starts: the escalation fails
                raise
            finally:
                running -= 1
            for name in type(out).model_fields:
                setattr(s.done, name, getattr(s.done, name) + getattr(out, name))

        def room() -> bool:
            return running < width or self._stopping()

        started: list[asyncio.Task[None]] = []
        while s.next < count:
            await workflow.wait_condition(room)
            if self._stopping() or self._history_full():
                break
            running, self._started = running + 1, self._started + 1
            started.append(asyncio.ensure_future(one(s.next)))
            s.next += 1
        await asyncio.gather(*started)
        return s.next < count and not self._cancel_requested

    def _stopping(self) -> bool:
        return self._cancel_requested or self._failed

    def _history_full(self) -> bool:
        """Enough started here: the rest go in a fresh history (one start at least, so
        every history moves on)."""
        return self._started >= 1 and (
            self._started >= self._per_history or workflow.info().is_continue_as_new_suggested()
        )

    async def _continue_as_new(self, inp: EscalateInput, s: EscalationState) -> None:
        """Go on in a fresh history on the current build, once the signal handlers ended;
        not once cancelled (returns: this execution finishes the run)."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        if not self._cancel_requested:
            workflow.continue_as_new(
                inp.model_copy(update={"resume": s}),
                initial_versioning_behavior=ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
            )

    async def _stop_on_cancel(self, run_id: str) -> None:
        """Once cancelled: the run is marked cancelling, after which no call opens."""
        await workflow.wait_condition(lambda: self._cancel_requested)
        await workflow.execute_activity_method(
            DbActivities.mark_run_cancelling,
            MarkCancellingInput(run_id=run_id, reason="escalation cancelled"),
            start_to_close_timeout=DB_TIMEOUT,
            retry_policy=DB_RETRY,
            summary="mark_run_cancelling: no new Claude call may start",
        )

    def _show(self, s: EscalationState, stage: str) -> None:
        self._stage = stage
        more = f" (from {s.next}, continued)" if s.next else ""
        workflow.set_current_details(f"{s.plan.blocks} blocks; {stage}{more}")

    @workflow.query(name=PROGRESS)
    def progress(self) -> EscalationStepOutput:
        """What the escalation did so far (second packs and escalation parts done)."""
        return self._done
