"""StreamWorkflow on the time-skipping server: triggers, draining on close, continue-as-new.

:class:`StreamWorld` is a :class:`FakeWorld` whose rows are buffered until ``form_pack``
gives them a pack; its clock is the number of looks (``poll_stream``): the oldest row has
waited half a second per look since it arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from blockbatch.core.run_types import RunResult
from blockbatch.core.stream_types import (
    FormPackInput,
    FormPackOutput,
    PollStreamInput,
    PollStreamOutput,
    StreamInput,
)
from blockbatch.core.streams import Buffered, StreamTriggers
from tests.workflows.conftest import Harness
from tests.workflows.fakes import FakeWorld, Step

#: Seconds a row waits per look at the buffer, in this world.
WAIT_PER_POLL_S = 0.5


class StreamWorld(FakeWorld):
    def __init__(
        self,
        run_id: str,
        rows: int,
        script: dict[str, list[Step]] | None = None,
        *,
        closed: bool = False,
        close_after_packs: int | None = None,
        close_at_poll: int | None = None,
    ) -> None:
        super().__init__(run_id, [], script)
        self.rows: list[str] = []
        self.arrived: dict[str, int] = {}
        self.assigned: set[str] = set()
        self.stream_polls = 0
        self.closed = closed
        self.close_after_packs = close_after_packs
        self.close_at_poll = close_at_poll
        #: (pack, why, rows) for each pack formed, in order.
        self.formed: list[tuple[int, str, int]] = []
        #: The start-to-close timeouts the stream's own steps were given, by activity.
        self.step_timeouts: dict[str, set[float]] = {}
        self.add(rows)

    def add(self, n: int) -> None:
        for _ in range(n):
            uid = f"s-{len(self.rows)}"
            self.rows.append(uid)
            self.arrived[uid] = self.stream_polls

    def buffered(self) -> list[str]:
        return [u for u in self.rows if u not in self.assigned]

    def activities(self) -> list[Callable[..., Any]]:
        return [*super().activities(), self.poll_stream, self.form_pack]

    def _step_timeout(self) -> None:
        info = activity.info()
        timeout = info.start_to_close_timeout
        seconds = timeout.total_seconds() if timeout is not None else float("inf")
        self.step_timeouts.setdefault(info.activity_type, set()).add(seconds)

    @activity.defn(name="poll_stream")
    async def poll_stream(self, inp: PollStreamInput) -> PollStreamOutput:
        self._step_timeout()
        self.stream_polls += 1
        if self.close_at_poll is not None and self.stream_polls >= self.close_at_poll:
            self.closed = True
        buf = self.buffered()
        oldest = min((self.arrived[u] for u in buf), default=self.stream_polls)
        return PollStreamOutput(
            buffered=Buffered(
                rows=len(buf),
                tokens=10 * len(buf),
                closed=self.closed,
                accepted=len(self.rows),
                oldest_wait_s=(self.stream_polls - oldest) * WAIT_PER_POLL_S,
            )
        )

    @activity.defn(name="form_pack")
    async def form_pack(self, inp: FormPackInput) -> FormPackOutput:
        self._step_timeout()
        if inp.pack_index in self.packs:  # a retried attempt: the same pack
            return FormPackOutput(
                pack_index=inp.pack_index,
                blocks=len(self.packs[inp.pack_index]),
                accepted=len(self.rows),
            )
        take = self.buffered()[: inp.max_rows or 50]
        if inp.max_tokens is not None:
            take = take[: max(inp.max_tokens // 10, 1)]
        if take:
            self.packs[inp.pack_index] = take
            self.assigned.update(take)
            self.formed.append((inp.pack_index, inp.reason, len(take)))
            if self.close_after_packs is not None and len(self.packs) >= self.close_after_packs:
                self.closed = True
        return FormPackOutput(pack_index=inp.pack_index, blocks=len(take), accepted=len(self.rows))


async def start(wf: Harness, world: StreamWorld, **inp: Any) -> WorkflowHandle[Any, RunResult]:
    return await wf.env.client.start_workflow(
        "StreamWorkflow",
        StreamInput(run_id=world.run_id, pack_count=0, **inp),
        id=f"run-{world.run_id}",
        task_queue=wf.task_queue,
        result_type=RunResult,
    )


async def test_packs_form_by_rows_then_by_the_oldest_rows_wait_and_the_stream_drains(
    wf: Harness, run_id: str
) -> None:
    world = StreamWorld(run_id, 25, close_after_packs=3)
    async with wf.worker(world):
        handle = await start(wf, world, triggers=StreamTriggers(max_rows=10, max_wait_s=2.0))
        result = await handle.result()
    # Two packs of 10 at once; the last 5 only once the oldest waited 2 s (4 looks), with
    # no signal: the workflow looked again when that wait ran out.
    assert world.formed == [(0, "rows", 10), (1, "rows", 10), (2, "wait", 5)]
    assert world.stream_polls == 5  # 2 for the full packs, 2 for the wait, 1 seeing it drained
    assert result.status == "completed" and result.blocks_ai_complete == 25
    assert sorted(world.called_paths()) == ["0", "1", "2"]


async def test_a_step_a_lost_worker_held_is_tried_again_within_ten_seconds(
    wf: Harness, run_id: str
) -> None:
    """The stream's look at its buffer and the forming of a pack are small database steps:
    one a killed worker held is given to another after 10 s, not after a minute (the
    end-to-end worker-kill test in tests/e2e/test_streams.py waited 50 s for one)."""
    world = StreamWorld(run_id, 5, close_after_packs=1)
    async with wf.worker(world):
        result = await (await start(wf, world, triggers=StreamTriggers(max_rows=5))).result()
    assert result.status == "completed" and result.blocks_ai_complete == 5
    assert world.step_timeouts == {"poll_stream": {10.0}, "form_pack": {10.0}}


async def test_a_token_trigger_cuts_packs_by_estimated_tokens(wf: Harness, run_id: str) -> None:
    world = StreamWorld(run_id, 9, close_after_packs=3)
    async with wf.worker(world):
        handle = await start(wf, world, triggers=StreamTriggers(max_tokens=30))
        result = await handle.result()
    assert world.formed == [(0, "tokens", 3), (1, "tokens", 3), (2, "tokens", 3)]
    assert result.blocks_ai_complete == 9


async def test_a_closed_stream_drains_across_continue_as_new_each_pack_once(
    wf: Harness, run_id: str
) -> None:
    world = StreamWorld(run_id, 12, closed=True)
    async with wf.worker(world):
        handle = await start(
            wf,
            world,
            packs_per_history=2,
            max_concurrent_packs=2,
            triggers=StreamTriggers(max_rows=2),
        )
        result = await handle.result()
        first = await wf.env.client.get_workflow_handle(
            handle.id, run_id=handle.result_run_id
        ).describe()
    assert first.status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    assert [why for _, why, _ in world.formed] == ["closed"] * 6
    assert [pack for pack, _, _ in world.formed] == list(range(6))
    assert sorted(world.called_paths(), key=int) == [str(i) for i in range(6)]
    assert len(world.calls) == 6  # no pack called twice
    assert result.status == "completed" and result.blocks_ai_complete == 12


async def test_an_idle_stream_continues_as_new_and_ends_when_closed(
    wf: Harness, run_id: str
) -> None:
    world = StreamWorld(run_id, 0, close_at_poll=7)
    async with wf.worker(world):
        handle = await start(wf, world, polls_per_history=3)
        result = await handle.result()
        first = await wf.env.client.get_workflow_handle(
            handle.id, run_id=handle.result_run_id
        ).describe()
    assert first.status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    assert world.stream_polls == 7 and world.formed == []
    assert result.status == "completed" and result.blocks_total == 0


async def test_a_cancelled_stream_forms_no_more_packs(wf: Harness, run_id: str) -> None:
    world = StreamWorld(run_id, 3)  # 3 rows, below max_rows: they wait
    async with wf.worker(world):
        handle = await start(wf, world, triggers=StreamTriggers(max_rows=10, max_wait_s=60))
        await handle.execute_update("cancel")
        result = await handle.result()
    assert world.formed == [] and world.calls == []
    assert result.status == "cancelled"
