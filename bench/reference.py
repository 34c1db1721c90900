"""The ceiling for orchestration benchmarks: bare child workflows, one no-op activity each.

``RefParentWorkflow`` starts ``count`` ``RefChildWorkflow`` children with at most
``concurrency`` running at once, and each child runs one no-op activity. No Postgres, no
HTTP: what remains is Temporal and the Python worker, so children per second is what
this machine can do at best.

Two ways to fill the free slots: ``parallel_starts`` (the ceiling) starts every free slot's
child in the same workflow task; otherwise each start is awaited before the next one, as
``RunWorkflow`` did before its starts were batched (one server round trip per child).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow


class RefInput(BaseModel):
    count: int
    concurrency: int
    parallel_starts: bool = True


class RefChildInput(BaseModel):
    index: int


class RefOutput(BaseModel):
    done: int


@activity.defn(name="bench_noop")
async def noop(inp: RefChildInput) -> RefChildInput:
    return inp


@workflow.defn(name="BenchRefChild")
class RefChildWorkflow:
    @workflow.run
    async def run(self, inp: RefChildInput) -> RefChildInput:
        return await workflow.execute_activity(
            noop, inp, start_to_close_timeout=timedelta(seconds=60)
        )


@workflow.defn(name="BenchRefParent")
class RefParentWorkflow:
    def __init__(self) -> None:
        self._running = 0
        self._done = 0

    @workflow.run
    async def run(self, inp: RefInput) -> RefOutput:
        next_index = 0
        while next_index < inp.count:
            await workflow.wait_condition(lambda: self._running < inp.concurrency)
            free = inp.concurrency - self._running if inp.parallel_starts else 1
            indexes = range(next_index, min(inp.count, next_index + free))
            next_index += len(indexes)
            self._running += len(indexes)
            await asyncio.gather(*(self._start(i) for i in indexes))
        await workflow.wait_condition(lambda: self._running == 0)
        return RefOutput(done=self._done)

    async def _start(self, index: int) -> None:
        handle = await workflow.start_child_workflow(
            RefChildWorkflow.run,
            RefChildInput(index=index),
            id=f"{workflow.info().workflow_id}/child-{index}",
        )
        asyncio.get_running_loop().create_task(self._await(handle))

    async def _await(self, handle: workflow.ChildWorkflowHandle) -> None:
        await handle
        self._running -= 1
        self._done += 1
