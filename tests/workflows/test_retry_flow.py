"""RunWorkflow's retry branch: a retry plans with ``plan_retry``, not ``plan_run``, and runs
only the retried blocks' new packs (sync) or its new round (batch), then finishes."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio import activity
from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from blockbatch.core.batch_types import BatchOptions
from blockbatch.core.call_types import Totals
from blockbatch.core.retry_types import PlanRetryInput, PlanRetryOutput, RetryRequest
from blockbatch.core.run_types import PlanRunInput, PlanRunOutput, RunInput
from blockbatch.core.workflow_names import NOTHING_TO_RETRY, RETRY_UNDER_WAY, RUN_NOT_FINISHED
from tests.workflows.conftest import Harness
from tests.workflows.fakes import FakeWorld, Hold
from workflows.run import RunWorkflow

#: Calls the earlier execution made (the retry's counters start from them).
EARLIER_CALLS = 5


class RetryWorld(FakeWorld):
    """A finished run whose ``failed`` blocks failed; ``plan_retry`` moves the blocks a
    retry takes into one new pack after the others (batch mode: into round
    ``first_round``), as the real one does in Postgres."""

    def __init__(
        self,
        run_id: str,
        pack_sizes: list[int],
        failed: set[str],
        *,
        refuse: bool = False,
        first_round: int = 3,
        **kwargs: Any,
    ) -> None:
        super().__init__(run_id, pack_sizes, **kwargs)
        self.failed.update(dict.fromkeys(failed, "request_rejected"))
        self.done.update(u for u in self.uids if u not in failed)
        self.refuse = refuse
        self.first_round = first_round
        self.plan_retry_calls: list[PlanRetryInput] = []
        self.plan_run_calls = 0

    def activities(self) -> list[Any]:
        return [*super().activities(), self.plan_retry]

    @activity.defn(name="plan_run")
    async def plan_run(self, inp: PlanRunInput) -> PlanRunOutput:
        self.plan_run_calls += 1
        return await super().plan_run(inp)

    @activity.defn(name="plan_retry")
    async def plan_retry(self, inp: PlanRetryInput) -> PlanRetryOutput:
        self.plan_retry_calls.append(inp)
        if self.refuse:
            raise ApplicationError(
                "nothing left to retry", type=NOTHING_TO_RETRY, non_retryable=True
            )
        asked = inp.retry.blocks
        take = [u for u in self.uids if u in self.failed and (asked is None or u in asked)]
        first = len(self.packs)
        for uid in take:
            del self.failed[uid]
        for index, blocks in self.packs.items():
            self.packs[index] = [u for u in blocks if u not in take]
        # Two new packs when there is more than one block, so continue-as-new can be seen.
        half = (len(take) + 1) // 2
        new_packs = [take[:half], take[half:]] if len(take) > 1 else [take]
        for offset, blocks in enumerate(new_packs):
            self.packs[first + offset] = blocks
        batch = self.mode == "batch"
        if batch:
            self.round_members[self.first_round] = [str(first + i) for i in range(len(new_packs))]
        return PlanRetryOutput(
            retry=1,
            blocks=len(take),
            first_pack=first,
            pack_count=first + len(new_packs),
            block_count=len(self.uids),
            mode=self.mode,
            first_round=self.first_round if batch else None,
            batch_options=BatchOptions(poll_initial_s=60, poll_max_s=600) if batch else None,
            totals=Totals(
                blocks_done=len(self.done),
                blocks_failed=len(self.failed),
                packs_done=first,
                calls=EARLIER_CALLS,
            ),
        )


async def test_a_retry_plans_with_plan_retry_and_runs_only_its_new_packs(
    wf: Harness, run_id: str
) -> None:
    world = RetryWorld(run_id, [3, 3], failed={"b0-1", "b1-2"})
    async with wf.worker(world):
        handle = await wf.start(world, retry=RetryRequest())
        result = await handle.result()
        progress = await handle.query("progress")
    assert (world.plan_run_calls, len(world.plan_retry_calls)) == (0, 1)
    assert sorted(world.called_paths()) == ["2", "3"]  # new packs after packs 0 and 1
    assert sorted(c.pack_index for c in world.calls) == [2, 3]
    assert world.packs[2] + world.packs[3] == ["b0-1", "b1-2"]
    assert result.status == "completed"
    assert (result.blocks_ai_complete, result.blocks_failed) == (6, 0)
    # The live view starts from the run's counters and adds the retry's.
    assert (progress["blocks_done"], progress["packs_done"], progress["packs_total"]) == (6, 4, 4)
    assert progress["calls"] == EARLIER_CALLS + 2


async def test_a_retry_of_named_blocks_leaves_the_other_failures_alone(
    wf: Harness, run_id: str
) -> None:
    world = RetryWorld(run_id, [3, 3], failed={"b0-1", "b1-2"})
    result = await wf.run(world, retry=RetryRequest(blocks=["b1-2"]))
    assert world.plan_retry_calls[0].retry.blocks == ["b1-2"]
    assert world.called_paths() == ["2"]
    assert world.packs[2] == ["b1-2"]
    assert result.status == "completed"  # the fake's finish_run does not judge the blocks
    assert (result.blocks_ai_complete, result.blocks_failed) == (5, 1)
    assert set(world.failed) == {"b0-1"}


async def test_a_retry_continues_as_new_without_planning_again(wf: Harness, run_id: str) -> None:
    # A pack may still run when the run continues as new: it outlives it.
    world = RetryWorld(run_id, [2, 2, 2], failed={"b0-0", "b1-1", "b2-0", "b2-1"})
    result = await wf.run(world, retry=RetryRequest(), packs_per_history=1, max_concurrent_packs=1)
    assert len(world.plan_retry_calls) == 1 and world.plan_run_calls == 0
    assert world.called_paths() == ["3", "4"]
    assert (result.status, result.blocks_ai_complete) == ("completed", 6)


async def test_a_batch_mode_retry_starts_at_its_own_round(wf: Harness, run_id: str) -> None:
    world = RetryWorld(run_id, [2, 3], failed={"b1-0", "b1-2"}, mode="batch", first_round=4)
    result = await wf.run(world, retry=RetryRequest())
    assert 1 not in world.round_members  # round 1 was not formed again (open_batch_run)
    assert [a.round for a in world.applied] == [4]
    assert world.round_members[4] == ["2", "3"]
    assert world.calls == []
    assert (result.status, result.blocks_ai_complete, result.blocks_failed) == ("completed", 5, 0)


async def test_a_refused_retry_fails_its_execution_and_finishes_nothing(
    wf: Harness, run_id: str
) -> None:
    world = RetryWorld(run_id, [2], failed={"b0-1"}, refuse=True)
    with pytest.raises(WorkflowFailureError) as caught:
        await wf.run(world, retry=RetryRequest(reasons=["truncated"]))
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == NOTHING_TO_RETRY
    assert len(world.plan_retry_calls) == 1  # non-retryable: not tried again
    assert world.finished is None and world.calls == []


def _retry_start(wf: Harness, world: FakeWorld, **run_input: Any) -> WithStartWorkflowOperation:
    """How ``Blockbatch.retry`` starts a retry: the run's workflow id, reused if closed."""
    return WithStartWorkflowOperation(
        RunWorkflow.run,
        RunInput(run_id=world.run_id, retry=RetryRequest(), **run_input),
        id=f"run-{world.run_id}",
        task_queue=wf.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def test_the_retry_update_answers_with_the_claim(wf: Harness, run_id: str) -> None:
    world = RetryWorld(run_id, [3, 3], failed={"b0-1", "b1-2"})
    async with wf.worker(world):
        start = _retry_start(wf, world)
        claim = await wf.env.client.execute_update_with_start_workflow(
            RunWorkflow.retry, start_workflow_operation=start
        )
        result = await (await start.workflow_handle()).result()
    assert (claim.retry, claim.blocks, claim.first_pack) == (1, 2, 2)
    assert result.status == "completed" and result.blocks_ai_complete == 6


async def test_a_refused_retry_reaches_the_caller_through_the_update_with_its_reason(
    wf: Harness, run_id: str
) -> None:
    world = RetryWorld(run_id, [2], failed={"b0-1"}, refuse=True)
    async with wf.worker(world):
        start = _retry_start(wf, world)
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await wf.env.client.execute_update_with_start_workflow(
                RunWorkflow.retry, start_workflow_operation=start
            )
        with pytest.raises(WorkflowFailureError):
            await (await start.workflow_handle()).result()
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == NOTHING_TO_RETRY
    assert cause.message == "nothing left to retry"
    assert world.finished is None and world.calls == []


async def test_a_second_retry_is_refused_by_the_running_one(wf: Harness, run_id: str) -> None:
    world = RetryWorld(run_id, [2, 2], failed={"b0-1", "b1-0"}, script={"2": [Hold("released")]})
    async with wf.worker(world):
        start = _retry_start(wf, world)
        await wf.env.client.execute_update_with_start_workflow(
            RunWorkflow.retry, start_workflow_operation=start
        )
        await world.held("2")
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await wf.env.client.execute_update_with_start_workflow(
                RunWorkflow.retry, start_workflow_operation=_retry_start(wf, world)
            )
        world.release.set()
        result = await (await start.workflow_handle()).result()
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == RETRY_UNDER_WAY
    assert cause.message == f"a retry of run {run_id} is under way"
    assert len(world.plan_retry_calls) == 1 and result.status == "completed"


async def test_a_retry_of_a_run_still_running_is_refused(wf: Harness, run_id: str) -> None:
    world = FakeWorld(run_id, [2], {"0": [Hold("released")]})
    async with wf.worker(world):
        handle = await wf.start(world)
        await world.held("0")
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update(RunWorkflow.retry)
        world.release.set()
        assert (await handle.result()).status == "completed"
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == RUN_NOT_FINISHED
    assert f"run {run_id} is still running" in cause.message
