"""EscalateWorkflow (``run-<run_id>/escalate``): pay the strong model only where the cheap
one is unsure (docs/ESCALATION.md).

``run`` reads as the whole story: claim the finished run and plan the second packing
(``plan_escalation``), ask every second pack on the run's model (``second_pass``, at most
``max_concurrent_packs`` at once), count the blocks that go up, ask them alone on the
escalation model in parts (``escalate_blocks``), and close the run as a run ends
(``finish_run``: status and counters recomputed from Postgres, the escalation's summary
with them). The rows live in Postgres (``escalations``); the workflow only knows counts.
RunWorkflow never knows: it ended before this starts.

A ``cancel`` signal marks the run cancelling (no new call opens in the ledger), starts
nothing more, lets what runs end, and finishes the run: blocks not yet compared or asked
keep their first answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.db import DbActivities
    from activities.escalation import EscalationActivities
    from blockbatch.core.models import (
        ESCALATION_PART,
        EscalateInput,
        EscalationPartInput,
        EscalationStepOutput,
        FinishRunInput,
        MarkCancellingInput,
        RunResult,
        SecondPassInput,
    )
    from workflows.retries import (
        CALL_MODEL_HEARTBEAT,
        CALL_MODEL_TIMEOUT,
        DB_RETRY,
        DB_TIMEOUT,
        PLAN_TIMEOUT,
        QUALITY_PROBE_RETRY,
    )


def escalate_workflow_id(run_id: str) -> str:
    """One escalation of a run at a time: the id says whose."""
    return f"run-{run_id}/escalate"


@workflow.defn(name="EscalateWorkflow")
class EscalateWorkflow:
    def __init__(self) -> None:
        self._done = EscalationStepOutput()
        self._stage = "planning"
        self._cancel_requested = False

    @workflow.signal
    async def cancel(self) -> None:
        """Stop the escalation: no new call, what runs ends, the run is finished."""
        self._cancel_requested = True

    @workflow.run
    async def run(self, inp: EscalateInput) -> RunResult:
        plan = await workflow.execute_activity_method(
            EscalationActivities.plan_escalation,
            inp,
            start_to_close_timeout=PLAN_TIMEOUT,
            retry_policy=DB_RETRY,
            summary=f"plan_escalation: claim the run, pack a second order, to {inp.model}",
        )
        watch = asyncio.ensure_future(self._stop_on_cancel(inp.run_id))
        self._stage = f"second pass: {plan.second_packs} packs"
        workflow.set_current_details(f"{plan.blocks} blocks; {self._stage}")
        await self._window(
            plan.second_packs,
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
        up = 0
        if not self._cancel_requested:
            up = await workflow.execute_activity_method(
                EscalationActivities.count_to_escalate,
                inp,
                start_to_close_timeout=DB_TIMEOUT,
                retry_policy=DB_RETRY,
            )
        self._stage = f"escalation: {up} blocks to {inp.model}"
        workflow.set_current_details(f"{plan.blocks} blocks; {self._stage}")
        await self._window(
            -(-up // ESCALATION_PART),
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
        self._stage = "done"
        if self._cancel_requested:
            await watch
            workflow.set_current_details(f"{plan.blocks} blocks; cancelled")
        else:
            watch.cancel()
        return await workflow.execute_activity_method(
            DbActivities.finish_run,
            FinishRunInput(run_id=inp.run_id, status="completed"),
            start_to_close_timeout=DB_TIMEOUT,
            retry_policy=DB_RETRY,
            summary="finish_run: status and counters from Postgres",
        )

    async def _window(
        self, count: int, start: Callable[[int], Awaitable[EscalationStepOutput]], width: int
    ) -> None:
        """Run ``start(0..count-1)``, at most ``width`` at once, adding up what they did."""
        gate = asyncio.Semaphore(width)

        async def one(n: int) -> None:
            async with gate:
                if self._cancel_requested:
                    return
                out = await start(n)
            for name in type(out).model_fields:
                setattr(self._done, name, getattr(self._done, name) + getattr(out, name))

        await asyncio.gather(*(one(n) for n in range(count)))

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

    @workflow.query
    def progress(self) -> EscalationStepOutput:
        """What the escalation did so far (second packs and escalation parts done)."""
        return self._done
