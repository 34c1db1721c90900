"""RunWorkflow around its packs: cancel at each stage, continue-as-new, batch rounds."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from blockbatch.core.call_types import PackOutcome, Totals
from blockbatch.core.run_types import RunInput, RunResult
from blockbatch.core.workflow_names import RUN_ENDING
from tests.waiting import until
from tests.workflows.conftest import Harness
from tests.workflows.fakes import OVERLOADED, Answer, BatchRound, FakeWorld, Hold


async def test_cancel_before_planning_finishes_calls_nothing(wf: Harness, run_id: str) -> None:
    world = FakeWorld(run_id, [2, 2], hold_plan=True)
    async with wf.worker(world):
        handle = await wf.start(world)
        await world.in_flight.wait()
        await handle.execute_update("cancel")
        world.release.set()
        result = await handle.result()
    assert result.status == "cancelled" and result.error == "cancelled by request"
    assert world.calls == []
    assert (result.blocks_ai_complete, result.blocks_cancelled) == (0, 4)


async def test_cancel_while_packs_run_keeps_answers_in_flight_and_starts_no_pack(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [2, 2, 2], {"0": [Hold("released")]})
    async with wf.worker(world):
        handle = await wf.start(world, max_concurrent_packs=1)
        await world.in_flight.wait()
        await handle.execute_update("cancel")
        await world.cancel_marked.wait()  # no Claude call may start from here on
        world.release.set()
        result = await handle.result()
    assert result.status == "cancelled"
    assert world.called_paths() == ["0"]
    assert world.done == {"b0-0", "b0-1"}  # the answer already paid for is applied
    assert (result.blocks_ai_complete, result.blocks_cancelled) == (2, 4)


async def test_cancel_during_a_split_stops_the_halves(wf: Harness, run_id: str) -> None:
    world = FakeWorld(
        run_id,
        [4, 1],
        {
            "0": [Answer(ok=0)],
            "0.0": [Hold("released", then=Answer(ok=1))],  # one block left: would go on
            "0.1": [Hold("released")],
        },
    )
    async with wf.worker(world):
        handle = await wf.start(world, max_concurrent_packs=1)
        await world.held("0.0", "0.1")
        await handle.execute_update("cancel")
        await world.cancel_marked.wait()
        world.release.set()
        result = await handle.result()
    assert result.status == "cancelled"
    assert world.done == {"b0-0", "b0-2", "b0-3"}
    assert "1" not in world.called_paths()
    assert (result.blocks_ai_complete, result.blocks_cancelled, result.calls) == (3, 2, 3)


async def test_cancel_while_the_last_pack_runs_stops_it(wf: Harness, run_id: str) -> None:
    # Every pack has started: the cancel must still reach the running one, whose halves
    # then make no call.
    world = FakeWorld(run_id, [4], {"0": [Hold("released", then=Answer(ok=0))]})
    async with wf.worker(world):
        handle = await wf.start(world)
        await world.in_flight.wait()
        await handle.execute_update("cancel")
        with contextlib.suppress(TimeoutError):
            # A hang guard, not a speed check: marking takes one activity.
            await asyncio.wait_for(world.cancel_marked.wait(), 10)
        marked_while_running = world.cancel_marked.is_set()
        world.release.set()
        result = await handle.result()
    assert marked_while_running, "the run did not mark itself cancelling while its last pack ran"
    assert result.status == "cancelled"
    assert (result.blocks_ai_complete, result.blocks_cancelled) == (0, 4)


async def test_run_continues_as_new_and_still_finishes_every_pack(wf: Harness, run_id: str) -> None:
    # A pack may still run when the run continues as new: it outlives it.
    world = FakeWorld(run_id, [1, 2, 1, 2, 1])
    async with wf.worker(world):
        handle = await wf.start(world, packs_per_history=2, max_concurrent_packs=2)
        result = await handle.result()
        first = await wf.env.client.get_workflow_handle(
            handle.id, run_id=handle.result_run_id
        ).describe()
        last = await wf.env.client.get_workflow_handle(handle.id).describe()
    assert result.status == "completed"
    assert (result.blocks_ai_complete, result.calls) == (7, 5)
    assert sorted(world.called_paths()) == ["0", "1", "2", "3", "4"]
    assert first.status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    assert last.run_id != handle.result_run_id


async def test_packs_in_flight_outlive_continue_as_new_and_the_window_stays_full(
    wf: Harness, run_id: str
) -> None:
    # Pack 0 is held in flight across continue-as-new: the next executions start packs
    # 2, 3, ... without waiting for it, and its outcome reaches the execution then current.
    world = FakeWorld(run_id, [1, 1, 1, 1, 1, 1], {"0": [Hold("released")]})
    async with wf.worker(world):
        handle = await wf.start(world, packs_per_history=2, max_concurrent_packs=3)
        await world.held("0")
        # Every other pack is done while pack 0, started by the first execution, is held.
        await until(lambda: len(world.done) >= 5, "five packs done", interval=0.02)

        async def five_done() -> dict[str, Any] | None:
            progress = await handle.query("progress")
            return progress if progress["packs_done"] >= 5 else None

        running = await until(five_done, "five packs counted done", interval=0.1)
        world.release.set()
        result = await handle.result()
        progress = await handle.query("progress")
        first = await wf.env.client.get_workflow_handle(
            handle.id, run_id=handle.result_run_id
        ).describe()
    assert first.status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    assert running["packs_running"] == 1 and running["packs_done"] == 5
    assert result.status == "completed" and result.blocks_ai_complete == 6
    # Each pack counted once, whichever execution it reported to.
    assert (progress["packs_done"], progress["calls"], progress["blocks_done"]) == (6, 6, 6)
    # Pack 0 outlived the execution that started it and reported once, by signal.
    assert await _signals_sent(wf, f"run-{run_id}/pack-0") == 1


async def test_a_cancel_reaches_a_pack_started_before_continue_as_new(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [2, 2, 2], {"0": [Hold("cancelling")]})
    async with wf.worker(world):
        handle = await wf.start(world, packs_per_history=1, max_concurrent_packs=2)
        await world.held("0")
        await until(lambda: len(world.called_paths()) >= 3, "three packs called", interval=0.02)
        await handle.execute_update("cancel")
        result = await handle.result()
    assert result.status == "cancelled"
    assert (result.blocks_ai_complete, result.blocks_cancelled) == (4, 2)
    assert world.cancelling is not None


async def test_a_pack_reported_twice_is_counted_once(wf: Harness, run_id: str) -> None:
    # Pack 0 reported (by signal); a second report of it, however it comes, is dropped.
    world = FakeWorld(run_id, [1, 1], {"1": [Hold("released")]})
    again = PackOutcome(pack_path="0", totals=Totals(calls=50, blocks_done=1))
    async with wf.worker(world):
        handle = await wf.start(world, max_concurrent_packs=2)
        await world.held("1")

        async def one_done() -> bool:
            return bool((await handle.query("progress"))["packs_done"] >= 1)

        await until(one_done, "one pack counted done", interval=0.02)
        await handle.signal("pack_done", again)
        await handle.signal("pack_done", again)
        progress = await handle.query("progress")
        world.release.set()
        result = await handle.result()
        final = await handle.query("progress")
    assert (progress["packs_done"], progress["calls"], progress["packs_running"]) == (1, 1, 1)
    assert (final["packs_done"], final["calls"], final["blocks_done"]) == (2, 2, 2)
    assert result.status == "completed"


async def test_a_cancel_once_the_run_is_finishing_is_refused_with_its_reason(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [1], hold_finish=True)
    async with wf.worker(world):
        handle = await wf.start(world)
        await world.in_flight.wait()  # finish_run is under way
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update("cancel")
        world.release.set()
        result = await handle.result()
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == RUN_ENDING
    assert cause.message == f"run {run_id} is completed: nothing to cancel"
    assert result.status == "completed"


async def test_batch_round_resubmits_errored_and_expired_requests(wf: Harness, run_id: str) -> None:
    world = FakeWorld(
        run_id,
        [2, 3, 1],
        mode="batch",
        rounds={1: BatchRound(errored=["1"], expired=["2"], polls=3)},
    )
    result = await wf.run(world)
    assert result.status == "completed"
    assert (result.blocks_ai_complete, result.blocks_failed) == (6, 0)
    assert world.round_members == {1: ["0", "1", "2"], 2: ["1", "2"]}
    assert [a.round for a in world.applied] == [1, 2]
    # Each round is offered its pre-warm before it is submitted; no pack is a sync call.
    assert world.prewarmed == [1, 2]
    assert world.calls == []


async def test_batch_requests_that_keep_failing_fail_their_blocks(wf: Harness, run_id: str) -> None:
    rounds = {n: BatchRound(errored=["0"]) for n in (1, 2, 3)}
    world = FakeWorld(run_id, [2, 1], mode="batch", rounds=rounds)
    result = await wf.run(world)
    assert result.status == "completed"
    assert (result.blocks_ai_complete, result.blocks_failed) == (1, 2)
    assert [a.round for a in world.applied] == [1, 2, 3]


async def test_cancel_while_a_batch_round_is_processing_cancels_the_batch(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(
        run_id,
        [2, 2, 2],
        mode="batch",
        rounds={1: BatchRound(polls=None, done_before_cancel=["1"])},
    )
    async with wf.worker(world):
        handle = await wf.start(world)
        # Waiting on the result lets the server skip the polling timers.
        result_task = asyncio.create_task(handle.result())
        await world.in_flight.wait()
        await handle.execute_update("cancel")
        result = await result_task
    assert result.status == "cancelled"
    assert world.canceled_rounds == [1]
    assert world.done == {"b1-0", "b1-1"}  # what the batch finished before the cancel
    assert world.applied[-1].schedule_next is False and 2 not in world.round_members
    assert (result.blocks_ai_complete, result.blocks_cancelled) == (2, 4)


async def test_a_warm_up_call_writes_the_cache_and_every_pack_starts_at_once(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [2] * 4, {str(i): [Hold("released")] for i in range(4)})
    async with wf.worker(world):
        handle = await wf.start(world, max_concurrent_packs=4)
        await world.held("0", "1", "2", "3")  # all four in flight together: none waits
        world.release.set()
        result = await handle.result()
    assert world.warm_ups == 1
    assert result.status == "completed" and result.blocks_ai_complete == 8
    # Every pack reports its outcome once, by signal, continue-as-new or not.
    for index in range(4):
        assert await _signals_sent(wf, f"run-{run_id}/pack-{index}") == 1


async def test_when_the_warm_up_fails_pack_zero_goes_first_as_before(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [2] * 3, {"0": [Hold("released")]})
    world.warm_error = OVERLOADED
    async with wf.worker(world):
        handle = await wf.start(world, max_concurrent_packs=3)
        # The warm-up's three tries back off on the server's clock, moved here, not waited.
        await wf.skipping_until(lambda: "0" in world.holding, "pack 0 held")
        assert world.called_paths() == ["0"]  # the others wait for pack 0's cache write
        world.release.set()
        result = await handle.result()
    assert world.warm_ups == 3  # its retry policy's attempts
    # Packs 1 and 2 start together once pack 0 is done: either may call first.
    paths = world.called_paths()
    assert result.status == "completed" and paths[0] == "0" and sorted(paths) == ["0", "1", "2"]


async def test_a_learning_pack_goes_first_alone_and_the_rest_is_planned_from_its_answer(
    wf: Harness, run_id: str
) -> None:
    # Pack 0 (a few blocks) writes the cache instead of a warm-up call; its answer re-plans
    # the five packs of two into two packs of five, which then start together.
    world = FakeWorld(
        run_id, [2] * 6, {"0": [Hold("released")]}, learning=True, replan_sizes=[5, 5]
    )
    async with wf.worker(world):
        handle = await wf.start(world, max_concurrent_packs=8)
        await world.held("0")
        assert world.called_paths() == ["0"] and world.replans == []
        world.release.set()
        result = await handle.result()
        meta = await handle.query("__temporal_workflow_metadata")
    assert world.warm_ups == 0
    assert [r.first_pack for r in world.replans] == [1]
    assert sorted(world.called_paths()) == ["0", "1", "2"]
    assert result.status == "completed" and result.blocks_ai_complete == 12
    assert result.plan_changes == ["packs 1-5 re-planned as 1-2"]
    assert "packs 1-5 re-planned as 1-2" in meta.current_details


async def test_a_run_sized_from_its_answers_replans_at_each_continue_as_new(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [1, 1, 1, 1, 1], learning=True)
    async with wf.worker(world):
        handle = await wf.start(world, packs_per_history=2, max_concurrent_packs=2)
        result = await handle.result()
    assert result.status == "completed" and result.blocks_ai_complete == 5
    # After the learning pack, then at each continue-as-new with packs left to start.
    firsts = [r.first_pack for r in world.replans]
    assert firsts[0] == 1 and len(firsts) >= 2 and firsts == sorted(firsts)


async def _signals_sent(wf: Harness, workflow_id: str) -> int:
    """How many signals a workflow sent to others (``pack_done``, ``api_down``)."""
    history = await wf.env.client.get_workflow_handle(workflow_id).fetch_history()
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
    )


async def test_a_runs_packs_and_their_halves_keep_its_workflow_task_timeout(
    wf: Harness, run_id: str
) -> None:
    # A task a lost worker held is given to another after the run's workflow task timeout
    # (WORKFLOW_TASK_TIMEOUT_S, where the run starts): its packs and their halves keep it,
    # where a child's default is the namespace's 10 s.
    world = FakeWorld(run_id, [4], {"0": [Answer(ok=0)]})
    async with wf.worker(world):
        handle = await wf.env.client.start_workflow(
            "RunWorkflow",
            RunInput(run_id=run_id),
            id=f"run-{run_id}",
            task_queue=wf.task_queue,
            result_type=RunResult,
            task_timeout=timedelta(seconds=3),
        )
        assert (await handle.result()).blocks_ai_complete == 4
    assert {"0", "0.0", "0.1"} <= set(world.called_paths())
    for path in ("0", "0.0", "0.1"):
        pack = wf.env.client.get_workflow_handle(f"run-{run_id}/pack-{path}")
        config = (await pack.describe()).raw_description.execution_config
        assert config.default_workflow_task_timeout.ToTimedelta() == timedelta(seconds=3), path
