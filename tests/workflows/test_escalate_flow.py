"""EscalateWorkflow on the time-skipping server with fake activities: plan, every second
pack once (at most ``max_concurrent_packs`` at once), the blocks that go up in parts, then
``finish_run``; a refused plan stops it before any call; a long one continues as new in
either phase and still does every step once, and a cancel around a continue-as-new ends it."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from activities.escalation import ESCALATION_REFUSED
from blockbatch.core.escalation_types import (
    ESCALATION_FAILED,
    ESCALATION_PART,
    EscalateInput,
    EscalationPartInput,
    EscalationResult,
    EscalationStepOutput,
    PlanEscalationOutput,
    SecondPassInput,
)
from blockbatch.core.run_types import FinishRunInput, MarkCancellingInput, RunResult
from blockbatch.core.workflow_names import escalate_workflow_id
from blockbatch.runtime.temporal import WORKFLOWS
from tests.workflows.conftest import Harness

SONNET = "claude-sonnet-5-5"


class EscalationWorld:
    """What the real activities keep in Postgres: which second packs were asked (each
    block sent up once), which parts were escalated, and whether the run was finished."""

    def __init__(self, packs: int, up: int, *, refuse: bool = False) -> None:
        self.packs, self.up, self.refuse = packs, up, refuse
        self.asked: list[int] = []
        self.parts: list[int] = []
        self.flaky = {1}  # second pack 1 fails once (a lost worker): retried, asked once
        #: Second packs that fail for good (non-retryable).
        self.broken: set[int] = set()
        self.in_flight = 0
        self.most_in_flight = 0
        self.finished: list[FinishRunInput] = []
        self.cancelling: list[MarkCancellingInput] = []
        #: Set once a second pack was asked (a test may cancel then).
        self.first_asked = asyncio.Event()
        #: Set when second pack ``n`` starts (its first attempt).
        self.pack_started: defaultdict[int, asyncio.Event] = defaultdict(asyncio.Event)
        self.pack_seconds = 0.01
        #: Second packs that wait, once started, until ``release`` is set: a test acts while
        #: they are in flight, however slow the machine.
        self.held: set[int] = set()
        self.release = asyncio.Event()
        #: When set, the first second pack waits until another is in flight beside it
        #: (fails after 60 s if none comes): concurrency shown, not hoped for.
        self.await_company = False
        self.company = asyncio.Event()
        #: The workflow execution (run id) that asked each second pack, and each part.
        self.pack_run: dict[int, str | None] = {}
        self.part_run: dict[int, str | None] = {}
        self.counted = 0

    def activities(self) -> list[Any]:
        return [
            self.plan_escalation,
            self.second_pass,
            self.count_to_escalate,
            self.escalate_blocks,
            self.finish_run,
            self.mark_run_cancelling,
        ]

    @activity.defn(name="mark_run_cancelling")
    async def mark_run_cancelling(self, inp: MarkCancellingInput) -> None:
        self.cancelling.append(inp)

    @activity.defn(name="plan_escalation")
    async def plan_escalation(self, inp: EscalateInput) -> PlanEscalationOutput:
        if self.refuse:
            raise ApplicationError(
                f"run {inp.run_id} is running: escalate it once it has finished",
                type=ESCALATION_REFUSED,
                non_retryable=True,
            )
        return PlanEscalationOutput(second_packs=self.packs, blocks=self.packs * 10, up_at_once=0)

    @activity.defn(name="second_pass")
    async def second_pass(self, inp: SecondPassInput) -> EscalationStepOutput:
        self.pack_started[inp.second_pack].set()
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.in_flight > 1:
            self.company.set()
        try:
            if self.await_company:
                await asyncio.wait_for(self.company.wait(), 60)
            if inp.second_pack in self.held:
                await self.release.wait()
            await asyncio.sleep(self.pack_seconds)
            if inp.second_pack in self.broken:
                raise ApplicationError("the pack's answer cannot be read", non_retryable=True)
            if inp.second_pack in self.flaky:
                self.flaky.discard(inp.second_pack)
                raise RuntimeError("worker lost")
            self.asked.append(inp.second_pack)
            self.pack_run[inp.second_pack] = activity.info().workflow_run_id
            self.first_asked.set()
            return EscalationStepOutput(blocks=10, to_escalate=0, calls=1, cost_usd=0.001)
        finally:
            self.in_flight -= 1

    @activity.defn(name="count_to_escalate")
    async def count_to_escalate(self, inp: EscalateInput) -> int:
        self.counted += 1
        return self.up

    @activity.defn(name="escalate_blocks")
    async def escalate_blocks(self, inp: EscalationPartInput) -> EscalationStepOutput:
        self.parts.append(inp.part)
        self.part_run[inp.part] = activity.info().workflow_run_id
        n = min(ESCALATION_PART, self.up - inp.part * ESCALATION_PART)
        return EscalationStepOutput(blocks=n, escalated=n, calls=n, cost_usd=0.01 * n)

    @activity.defn(name="finish_run")
    async def finish_run(self, inp: FinishRunInput) -> RunResult:
        self.finished.append(inp)
        return RunResult(
            run_id=inp.run_id,
            status="completed",
            escalation=EscalationResult(
                model=SONNET,
                blocks=self.packs * 10,
                escalated_by_reason={"disagrees": self.up},
                escalated=self.up,
            ),
        )


async def _escalate(wf: Harness, world: EscalationWorld, run_id: str, **inp: Any) -> RunResult:
    async with Worker(
        wf.env.client, task_queue=wf.task_queue, workflows=WORKFLOWS, activities=world.activities()
    ):
        handle = await wf.env.client.start_workflow(
            "EscalateWorkflow",
            EscalateInput(run_id=run_id, model=SONNET, **inp),
            id=escalate_workflow_id(run_id),
            task_queue=wf.task_queue,
            result_type=RunResult,
        )
        result: RunResult = await handle.result()
        progress = await handle.query("progress", result_type=EscalationStepOutput)
    # Cumulative over every execution: each second pack 10 blocks and a call, each block
    # that went up a call.
    assert progress.blocks == world.packs * 10 + world.up
    assert progress.escalated == world.up
    assert progress.calls == world.packs + world.up
    return result


async def test_every_second_pack_once_then_the_blocks_that_go_up_in_parts(wf: Harness) -> None:
    run_id = uuid.uuid4().hex[:12]
    world = EscalationWorld(packs=9, up=2 * ESCALATION_PART + 3)
    world.await_company = True
    result = await _escalate(wf, world, run_id, max_concurrent_packs=3)
    assert sorted(world.asked) == list(range(9))  # the flaky pack too, answered once
    assert 1 < world.most_in_flight <= 3
    assert sorted(world.parts) == [0, 1, 2]
    assert [f.status for f in world.finished] == ["completed"]
    assert result.escalation is not None and result.escalation.escalated == world.up


async def test_nothing_to_send_up_asks_no_part(wf: Harness) -> None:
    world = EscalationWorld(packs=2, up=0)
    await _escalate(wf, world, uuid.uuid4().hex[:12])
    assert sorted(world.asked) == [0, 1] and world.parts == []
    assert len(world.finished) == 1


async def test_a_refused_escalation_asks_nothing_and_finishes_nothing(wf: Harness) -> None:
    world = EscalationWorld(packs=2, up=1, refuse=True)
    async with Worker(
        wf.env.client, task_queue=wf.task_queue, workflows=WORKFLOWS, activities=world.activities()
    ):
        handle = await wf.env.client.start_workflow(
            "EscalateWorkflow",
            EscalateInput(run_id="r1", model=SONNET),
            id=escalate_workflow_id(f"r1-{uuid.uuid4().hex[:6]}"),
            task_queue=wf.task_queue,
            result_type=RunResult,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError)
    assert cause.cause.type == ESCALATION_REFUSED and "once it has finished" in str(cause.cause)
    assert world.asked == [] and world.parts == [] and world.finished == []


async def test_an_escalation_that_fails_for_good_still_finishes_the_run(wf: Harness) -> None:
    run_id = uuid.uuid4().hex[:12]
    world = EscalationWorld(packs=6, up=3)
    world.broken = {2}
    async with Worker(
        wf.env.client, task_queue=wf.task_queue, workflows=WORKFLOWS, activities=world.activities()
    ):
        handle = await wf.env.client.start_workflow(
            "EscalateWorkflow",
            EscalateInput(run_id=run_id, model=SONNET, max_concurrent_packs=1),
            id=escalate_workflow_id(run_id),
            task_queue=wf.task_queue,
            result_type=RunResult,
        )
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    # nothing started after the failure, no part asked, and the run is closed with why
    assert sorted(world.asked) == [0, 1] and world.parts == [] and world.counted == 0
    assert len(world.finished) == 1 and world.finished[0].status == "completed"
    error = world.finished[0].error or ""
    assert error.startswith(ESCALATION_FAILED) and "cannot be read" in error, error


async def test_a_cancelled_escalation_starts_nothing_more_and_finishes_the_run(
    wf: Harness,
) -> None:
    run_id = uuid.uuid4().hex[:12]
    world = EscalationWorld(packs=20, up=5)
    world.flaky.clear()
    world.held = {1}  # in flight until the cancel has landed
    async with Worker(
        wf.env.client, task_queue=wf.task_queue, workflows=WORKFLOWS, activities=world.activities()
    ):
        handle = await wf.env.client.start_workflow(
            "EscalateWorkflow",
            EscalateInput(run_id=run_id, model=SONNET, max_concurrent_packs=1),
            id=escalate_workflow_id(run_id),
            task_queue=wf.task_queue,
            result_type=RunResult,
        )
        await asyncio.wait_for(world.pack_started[1].wait(), 30)
        await handle.signal("cancel")
        world.release.set()
        await handle.result()
    assert [c.run_id for c in world.cancelling] == [run_id]
    assert sorted(world.asked) == [0, 1] and world.parts == []
    assert [f.status for f in world.finished] == ["completed"]


async def test_a_long_escalation_continues_as_new_in_each_phase_and_does_every_step_once(
    wf: Harness,
) -> None:
    # 7 second packs and 5 parts, 3 a history: packs 0-2 | 3-5 | 6, parts 0-1 | parts 2-4.
    run_id = uuid.uuid4().hex[:12]
    world = EscalationWorld(packs=7, up=5 * ESCALATION_PART - 3)
    await _escalate(wf, world, run_id, max_concurrent_packs=2, activities_per_history=3)
    assert sorted(world.asked) == list(range(7))  # the flaky pack too, answered once
    assert sorted(world.parts) == list(range(5))
    assert world.most_in_flight <= 2
    assert world.counted == 1  # counted once: every part indexes the same blocks
    packs_in = [world.pack_run[n] for n in range(7)]
    parts_in = [world.part_run[n] for n in range(5)]
    # Continued as new in the second pass (its packs in three executions, in order) and
    # in the escalation (its parts in two, the last of them asking no second pack).
    assert len(set(packs_in)) == 3 and len(set(parts_in)) == 2
    assert parts_in[0] == packs_in[-1] and parts_in[-1] not in packs_in
    assert [f.status for f in world.finished] == ["completed"]


@pytest.mark.parametrize("when", ["draining", "continued"])
async def test_a_cancel_around_continue_as_new_ends_the_escalation(wf: Harness, when: str) -> None:
    # Two second packs a history, one at a time: pack 1 starts as the first history's last,
    # which then drains; pack 2 is the continued execution's first.
    run_id = uuid.uuid4().hex[:12]
    world = EscalationWorld(packs=6, up=5)
    world.flaky.clear()
    async with Worker(
        wf.env.client, task_queue=wf.task_queue, workflows=WORKFLOWS, activities=world.activities()
    ):
        handle = await wf.env.client.start_workflow(
            "EscalateWorkflow",
            EscalateInput(
                run_id=run_id, model=SONNET, max_concurrent_packs=1, activities_per_history=2
            ),
            id=escalate_workflow_id(run_id),
            task_queue=wf.task_queue,
            result_type=RunResult,
        )
        last = 1 if when == "draining" else 2
        world.held = {last}  # in flight until the cancel has landed
        await asyncio.wait_for(world.pack_started[last].wait(), 30)
        await handle.signal("cancel")
        world.release.set()
        await handle.result()
        progress = await handle.query("progress", result_type=EscalationStepOutput)
    # What was started ends; nothing more starts, no part goes up; the run is finished once.
    assert sorted(world.asked) == list(range(last + 1))
    assert world.parts == [] and world.counted == 0
    assert [c.run_id for c in world.cancelling] == [run_id]
    assert [f.status for f in world.finished] == ["completed"]
    assert progress.blocks == 10 * (last + 1)
    # Cancelled while draining: it finished in that execution, never continued.
    executions = len(set(world.pack_run.values()))
    assert executions == (1 if when == "draining" else 2)
