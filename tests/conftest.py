"""Shared fixtures: a real Postgres, a real Temporal dev server and the simulator.

Each is started once per test session from the installed binaries; every test gets its own
database (cloned from a migrated template, dropped when the test ends) and its own task
queue, so nothing depends on test order.
"""

# ruff: noqa: E402 - the imports follow the bytecode setting below, which must come first

from __future__ import annotations

import os
import sys

# The suite's processes keep their compiled bytecode (``__pycache__``, git-ignored) even in
# a shell that exports PYTHONDONTWRITEBYTECODE: without it every Python process the suite
# starts (each xdist worker, the simulator, every ``worker.py`` and ``starter.py``)
# compiles the project's 200 modules again, about 0.9 s of CPU each, and pytest rewrites
# every test module again in each worker (docs/testing.md, "Where the CPU goes"). Set
# before the project's modules below are imported, and in the environment every
# subprocess inherits.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

import asyncio
import contextlib
import itertools
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import hypothesis
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from blockbatch.api import Blockbatch
from blockbatch.devtools import stack
from blockbatch.devtools.lifeline import guard_process
from blockbatch.devtools.services import Services
from blockbatch.runtime.claude import anthropic_client
from blockbatch.runtime.settings import Settings
from blockbatch.runtime.temporal import build_worker
from blockbatch.simulator.testing import control
from blockbatch.store.db import create_pool, migrate
from tests.waiting import until

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DB = "bb_template"
_db_counter = itertools.count()
#: The session fixtures that start a service (Postgres, the Temporal dev server, the
#: simulator process). A test using any of them, directly or through another fixture, or
#: living in tests/e2e, is marked ``stack``: `make test-fast` runs the others
#: (``-m "not stack"``, docs/testing.md).
STACK_FIXTURES = frozenset({"pg", "temporal_env", "simulator_process"})
#: The session's dev server keeps each task queue in one partition (the server's default is
#: four, each polled and forwarded between): every test opens a task queue of its own, and
#: one partition cut the dev server's CPU by about a tenth (docs/testing.md). A query to a
#: task queue no worker has polled for 5 s fails at once with "no poller seen" (the default
#: window is 20 s, which `test_status_live` waited out). Production's servers, `make up` and
#: the benchmark stacks keep the defaults.
TEST_TEMPORAL_OPTIONS = (
    "--dynamic-config-value",
    "matching.numTaskqueueReadPartitions=1",
    "--dynamic-config-value",
    "matching.numTaskqueueWritePartitions=1",
    "--dynamic-config-value",
    'matching.queryPollerUnavailableWindow="5s"',
)

# Property tests without a max_examples of their own draw this many examples per tier
# (those with one use tests/helpers.py `examples`): `make test-deep` draws Hypothesis's
# default, `make test` half of it, `make test-fast` a quarter (docs/testing.md). No
# deadline: Hypothesis's default fails an example that takes over 200 ms of wall time (and
# calls the test flaky when its rerun is quicker), which a busy machine decides, not the
# code; pytest-timeout still stops a test that hangs.
hypothesis.settings.register_profile("deep", max_examples=100, deadline=None)
hypothesis.settings.register_profile("test", max_examples=50, deadline=None)
hypothesis.settings.register_profile("fast", max_examples=25, deadline=None)
_TIER = os.environ.get("BLOCKBATCH_TEST_TIER") or "test"
if _TIER not in ("fast", "test", "deep"):
    raise pytest.UsageError(f"BLOCKBATCH_TEST_TIER={_TIER}: set it to fast or deep, or unset it")
hypothesis.settings.load_profile(_TIER)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "stack: needs Postgres, the Temporal dev server or the simulator process"
    )
    config.addinivalue_line(
        "markers", "property: a Hypothesis property test (`make test-deep` runs them alone)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        in_e2e = "e2e" in Path(str(item.fspath)).parts
        if in_e2e or STACK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.stack)
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


@pytest.fixture(scope="session")
def services() -> Iterator[Services]:
    """The session's throw-away stack (blockbatch.devtools.Services), nothing started:
    `pg`, `temporal_env` and `simulator_process` each start their service on first use."""
    # Not under pytest's temporary directory: run as root, Postgres runs as a user of its
    # own that must traverse the path, and any pytest starting on the machine resets
    # /tmp/pytest-of-root to 0700 (seen: initdb failing while another suite started).
    services = Services(
        Path(tempfile.mkdtemp(prefix="bb-test-")), temporal_options=TEST_TEMPORAL_OPTIONS
    )
    yield services
    services.stop()
    shutil.rmtree(services.root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg(services: Services) -> stack.PostgresInstance:
    instance = services.start_postgres(TEMPLATE_DB)

    async def _migrate() -> None:
        conn = await asyncpg.connect(instance.url(TEMPLATE_DB))
        try:
            await migrate(conn)
        finally:
            await conn.close()

    asyncio.run(_migrate())
    return instance


@pytest_asyncio.fixture(scope="session")
async def temporal_env(services: Services) -> WorkflowEnvironment:
    address = await asyncio.to_thread(services.start_temporal)
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    return WorkflowEnvironment.from_client(client)


@dataclass
class SimulatorProcess:
    base_url: str

    def call(self, method: str, path: str, body: Any = None) -> Any:
        return control(self.base_url, method, path, body, timeout=10)

    def scenario(self, **settings: Any) -> None:
        """Replace the scenario (defaults for everything not given)."""
        self.call("PUT", "/_sim/scenario", settings)

    def stats(self) -> dict[str, Any]:
        return self.call("GET", "/_sim/stats")

    def requests(self) -> list[dict[str, Any]]:
        return self.call("GET", "/_sim/requests")

    def hold(self) -> None:
        """Hold every answer back once it is ready (until :meth:`release` or a reset)."""
        self.call("POST", "/_sim/hold")

    def release(self) -> None:
        self.call("POST", "/_sim/release")

    def held(self) -> int:
        """How many ready answers the simulator holds back now."""
        return int(self.call("GET", "/_sim/hold")["held"])

    @contextlib.asynccontextmanager
    async def holding(self, what: str = "an answer held in flight") -> AsyncIterator[None]:
        """Answers held back until the block ends, entered once one is held: what the block
        does (a cancel) lands while a call is under way, however fast the model or slow
        the machine."""
        self.hold()
        try:
            await until(self.held, what)
            yield
        finally:
            self.release()


@pytest.fixture(scope="session")
def simulator_process(services: Services) -> SimulatorProcess:
    return SimulatorProcess(services.start_simulator())


@pytest.fixture
def sim(simulator_process: SimulatorProcess) -> SimulatorProcess:
    """The simulator with the default scenario and zeroed counters."""
    simulator_process.scenario()
    simulator_process.call("POST", "/_sim/reset")
    return simulator_process


@pytest_asyncio.fixture
async def db_url(pg: stack.PostgresInstance) -> AsyncIterator[str]:
    async with fresh_database(pg, f"t_{os.getpid()}_{next(_db_counter)}", TEMPLATE_DB) as url:
        yield url


@contextlib.asynccontextmanager
async def fresh_database(
    pg: stack.PostgresInstance, name: str, template: str
) -> AsyncIterator[str]:
    """A new database ``name``, a copy of ``template`` (which nothing may be connected to),
    for the block: its URL. Dropped when the block ends, whatever is still connected to it.

    Dropped there, not left to the session's end: a copy is about 460 files and 15 MB, and
    one kept past the kernel's writeback (30 s) is written to disk, whose removal with the
    session's directory took about 0.2 s per test at the end of every xdist worker's session
    (12 to 19 s after 65 tests, on this machine's ext4 mounted ``discard``; docs/testing.md,
    h-teardown). Dropped within its test, most copies never reach the disk.
    """
    await _admin(pg, f'create database "{name}" template "{template}"')
    try:
        yield pg.url(name)
    finally:
        # ``with (force)``: the connections it still has are closed.
        await _admin(pg, f'drop database if exists "{name}" with (force)')


async def _admin(pg: stack.PostgresInstance, sql: str) -> None:
    conn = await asyncpg.connect(pg.url("postgres"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest_asyncio.fixture
async def pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(db_url, max_size=20)
    yield p
    await p.close()


@dataclass
class Stack:
    """Everything a pipeline test needs, wired like production."""

    settings: Settings
    client: Client
    pool: asyncpg.Pool
    bb: Blockbatch
    sim: SimulatorProcess
    task_queue: str

    def worker(self, **kwargs: Any) -> Worker:
        llm = anthropic_client(self.settings)
        return build_worker(self.client, self.task_queue, self.pool, llm, **kwargs)

    def worker_env(self, key: str, log: Path, **extra: str) -> dict[str, str]:
        """The environment of a ``worker.py`` process on this stack with API key ``key``.

        The shell's own ``ANTHROPIC_*`` and ``METRICS_*`` settings are left out: a second
        worker would refuse an exported ``METRICS_PORT`` the first one holds.
        """
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "METRICS_"))},
            "DATABASE_URL": self.settings.resolved_database_url,
            "TEMPORAL_ADDRESS": self.settings.resolved_temporal_address,
            "TEMPORAL_TASK_QUEUE": self.task_queue,
            "ANTHROPIC_BASE_URL": self.sim.base_url,
            "ANTHROPIC_API_KEY": key,
            "BLOCKBATCH_DATA_DIR": str(log.parent / "data"),
            **extra,
        }

    def start_worker_process(self, key: str, log: Path, **extra: str) -> subprocess.Popen[bytes]:
        """``worker.py`` in a process of its own (see :meth:`worker_env`), output to ``log``."""
        with open(log, "wb") as out:
            proc = subprocess.Popen(  # our own entry point
                [sys.executable, str(ROOT / "worker.py")],
                cwd=ROOT,
                env=self.worker_env(key, log, **extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        guard_process(proc.pid)  # stopped with the session, even if pytest is SIGKILLed
        return proc


@pytest_asyncio.fixture
async def bbstack(
    temporal_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    db_url: str,
    sim: SimulatorProcess,
    tmp_path: Path,
) -> AsyncIterator[Stack]:
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        database_url=db_url,
        temporal_address=temporal_env.client.service_client.config.target_host,
        temporal_task_queue=task_queue,
        anthropic_base_url=sim.base_url,
        anthropic_api_key="sim-test-key",
        blockbatch_data_dir=tmp_path / "data",
    )
    bb = Blockbatch(pool, temporal_env.client, settings)
    yield Stack(settings, temporal_env.client, pool, bb, sim, task_queue)
    await bb.close()  # its Models API client; the pool is the fixture's
