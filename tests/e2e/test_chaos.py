"""Chaos in CI: workers SIGKILLed, Postgres and Temporal restarted under live workers, a
misbehaving model; nothing lost, nothing written twice, no pack attempt paid twice.

Each test runs real ``python worker.py`` processes against a throw-away stack of its own
module (bench/chaos_stack.py), so Postgres and Temporal can be stopped without touching
the session's services. The invariants are recomputed from rows (bench/chaos_check.py).
bench/chaos.py is the full-size version (1,000 blocks, every disruption).
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from bench.chaos_check import check_run, fault_free_reference, install_audit, violations
from bench.chaos_stack import ChaosStack, chaos_document, chaos_schema
from blockbatch.api import Blockbatch
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.store.db import create_pool

#: The model misbehaving, on an account with large limits: an injected 429's headers then
#: give those limits with most of each left. On an account with none, they give a nominal
#: limit with nothing left (blockbatch/simulator/limits.py, ``NOMINAL``), which the fleet
#: limiter honours by pacing the run's output for the rest of the minute: 10 to 15 s of
#: waiting a run on the providers whose 429s carry the headers (aws, google-cloud).
MODEL_FAULTS: dict[str, Any] = {
    "limits": {"rpm": 50_000, "input_tpm": 50_000_000, "output_tpm": 10_000_000},
    "errors": {"rate_429": 0.05, "rate_529": 0.05, "rate_500": 0.04, "retry_after_s": 1},
    "faults": {
        "truncate": 0.08,
        "malformed_tool_input": 0.05,
        "skip_block": 0.01,
        "duplicate_uid": 0.01,
        "unknown_uid": 0.01,
    },
}


#: The runs' and workers' workflow task timeout here (``WORKFLOW_TASK_TIMEOUT_S``). Not
#: shorter: these ``worker.py`` processes' own workflow tasks took up to 1.2 s at load 5
#: (docs/testing.md, h-suiteG), and a task timed out on a live worker is replayed whole.
WORKFLOW_TASK_S = 5.0

#: One xdist worker runs the whole module (`make test` uses ``--dist loadgroup``), so
#: its throw-away stack starts once, not once on each worker a test of it lands on.
pytestmark = pytest.mark.xdist_group("chaos")


@pytest.fixture(scope="module")
def chaos_stack() -> Iterator[ChaosStack]:
    # A workflow task a killed worker held, or one waiting on its sticky queue, goes to a
    # live worker after 5 s instead of Temporal's 10 (the production default stays).
    st = ChaosStack.create(
        prefix="bb-chaos-test-", anthropic_timeout_s=15, workflow_task_timeout_s=WORKFLOW_TASK_S
    )
    try:
        st.start()
        yield st
    finally:
        st.close()


class Harness:
    """One test's view of the chaos stack: its own task queue, workers and document."""

    def __init__(self, st: ChaosStack, bb: Blockbatch) -> None:
        self.st = st
        self.bb = bb
        self.names: list[str] = []

    async def start_workers(self, *names: str) -> None:
        """Start workers ``names`` and wait until each is ready (in a thread: the wait
        polls the worker's log and must not block the test's event loop meanwhile)."""
        for name in names:
            full = f"{self.st.task_queue}-{name}"
            self.st.start_worker(full)
            self.names.append(full)
        for full in self.names:
            await asyncio.to_thread(self.st.wait_worker_ready, full)

    def worker(self, name: str) -> str:
        return f"{self.st.task_queue}-{name}"

    async def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        await asyncio.to_thread(self.st.kill_worker, self.worker(name), sig)

    async def kill_in_flight(self, *names: str) -> None:
        """SIGKILL workers ``names`` while calls are in flight: answers are held at the
        simulator from before the kill until the workers are gone, so the kill lands
        mid-call whatever the speed of this machine."""
        self.st.sim("POST", "/_sim/hold")
        try:
            await until_held(self.st, 1)
            for name in names:
                await self.kill(name)
        finally:
            self.st.sim("POST", "/_sim/release")

    def restart(self, name: str) -> None:
        self.st.start_worker(self.worker(name))

    def worker_log(self, name: str) -> str:
        return self.st.log(f"worker-{self.worker(name)}").read_text(errors="replace")

    async def document(self, blocks: int) -> tuple[str, str]:
        doc = await self.bb.ingest_bytes(
            chaos_document(blocks, seed=blocks), name="chaos.md", fmt="markdown"
        )
        return doc, await self.bb.add_schema(chaos_schema())

    async def fault_free(self, doc: str, schema: str, options: RunOptions) -> dict[str, Any]:
        self.st.sim("PUT", "/_sim/scenario", {})
        run_id = await self.bb.start_run(doc, schema, options)
        result = await asyncio.wait_for(self.bb.wait(run_id), 60)
        assert result.status == "completed"
        return await fault_free_reference(self.bb.pool, run_id)

    async def finished(self, run_id: str, timeout: float = 150) -> RunResult:
        """The run's result, waiting through Temporal being away."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                return await asyncio.wait_for(self.bb.wait(run_id), 20)
            except Exception:  # Temporal may be restarting
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(1)

    async def check(self, run_id: str, reference: dict[str, Any] | None) -> dict[str, Any]:
        # A fresh pool: connections opened before a Postgres restart are gone.
        pool = await create_pool(self.st.database_url, max_size=2)
        try:
            async with pool.acquire() as conn:
                return await check_run(
                    conn, run_id, sim_log=self.st.sim("GET", "/_sim/requests"), fault_free=reference
                )
        finally:
            await pool.close()


@pytest_asyncio.fixture
async def harness(chaos_stack: ChaosStack) -> AsyncIterator[Harness]:
    chaos_stack.task_queue = f"chaos-{uuid.uuid4().hex[:6]}"
    bb = await Blockbatch.connect(chaos_stack.settings())
    await install_audit(bb.pool)
    h = Harness(chaos_stack, bb)
    try:
        yield h
    finally:
        for name in h.names:
            chaos_stack.kill_worker(name, signal.SIGKILL)
        await bb.close()


async def progress(url: str, run_id: str) -> int | None:
    """Blocks of the run with a final status, or None while Postgres is away."""
    try:
        conn = await asyncpg.connect(url, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return None
    try:
        return int(
            await conn.fetchval(
                "select count(*) from overlays where run_id = $1 and status <> 'pending'", run_id
            )
        )
    finally:
        await conn.close()


async def until(
    url: str, run_id: str, blocks: int = 0, in_flight: int = 0, timeout: float = 90
) -> None:
    """Wait until ``blocks`` blocks are finished and ``in_flight`` calls are out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        done = await progress(url, run_id)
        calls = await _in_flight(url, run_id) if in_flight else 0
        if done is not None and done >= blocks and calls is not None and calls >= in_flight:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} did not reach {blocks} blocks / {in_flight} calls")


async def until_held(st: Any, count: int, timeout: float = 90) -> None:
    """Wait until the simulator holds ``count`` ready answers back."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if st.sim("GET", "/_sim/hold")["held"] >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the simulator did not hold {count} answers")


async def until_logged(h: Harness, worker: str, text: str, timeout: float = 90) -> None:
    """Wait until worker ``worker`` has logged ``text``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if text in h.worker_log(worker):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"worker {worker} never logged {text!r}")


async def _in_flight(url: str, run_id: str) -> int | None:
    conn = await asyncpg.connect(url, timeout=3)
    try:
        return int(
            await conn.fetchval(
                "select count(*) from llm_calls where run_id = $1 and status = 'started'", run_id
            )
        )
    finally:
        await conn.close()


# Two heartbeat timeouts (5 s each here, 20 s by default) and seven worker starts: at load 16
# on 2 cores it took 137 s with 20 s ones, near the suite's 180 s hang guard.
@pytest.mark.timeout(300)
async def test_sigkilled_workers_and_a_faulty_model_lose_and_duplicate_nothing(
    harness: Harness,
) -> None:
    h, st = harness, harness.st
    await h.start_workers("a", "b")
    doc, schema = await h.document(120)
    # reuse off: the run after the fault-free reference must call for every block. Six
    # attempts a block, not three: MODEL_FAULTS cut off 8% of answers, malform 5% and skip,
    # duplicate or misname 3% of blocks, so with three, now and then one block failed
    # honestly (seen in CI: one `missing`). That is the model's doing, not a lost block,
    # and this test is about what the kills must not lose.
    # A killed worker's calls move to a live one after 5 s without a heartbeat (the default
    # 20 s is waited out twice otherwise; test_pack_policy checks the setting reaches calls).
    options = RunOptions(
        pack_size=5,
        max_concurrent_packs=8,
        reuse_answers=False,
        max_block_attempts=6,
        call_heartbeat_s=5,
        call_retry_s=0.2,  # the 500s and 529s name no retry-after
    )
    reference = await h.fault_free(doc, schema, options)

    st.sim("POST", "/_sim/reset")
    st.sim("PUT", "/_sim/scenario", {"seed": 11, "speed_factor": 0.5, **MODEL_FAULTS})
    run_id = await h.bb.start_run(doc, schema, options)
    await until(st.database_url, run_id, 30)
    # b carries on; a's calls move to b after the heartbeat timeout
    await h.kill_in_flight("a")
    h.restart("a")
    await until(st.database_url, run_id, 70)
    await h.kill_in_flight("a", "b")  # nobody left: the run waits, then resumes
    h.restart("a")
    h.restart("b")
    result = await h.finished(run_id)

    report = await h.check(run_id, reference)
    assert violations(report) == []
    assert result.blocks_ai_complete + result.blocks_failed == 120
    assert report["blocks"]["lost"] == 0 and report["blocks"]["written_twice"] == 0
    assert report["calls"]["paid_twice_same_attempt"] == 0
    # The disruptions really happened: calls cut off by the kills, faults answered.
    assert report["calls"]["by_status"].get("abandoned", 0) > 0
    assert report["calls"]["errors"], report["calls"]
    assert report["calls"]["split_events"] > 0
    # The run, its packs and their halves kept the short workflow task timeout.
    half = await h.bb.pool.fetchval(
        "select pack_path from llm_calls where run_id = $1 and pack_path like '%.%' limit 1",
        run_id,
    )
    client = await h.bb.temporal()
    for workflow_id in (f"run-{run_id}", f"run-{run_id}/pack-0", f"run-{run_id}/pack-{half}"):
        described = await client.get_workflow_handle(workflow_id).describe()
        timeout = described.raw_description.execution_config.default_workflow_task_timeout
        assert timeout.ToTimedelta() == timedelta(seconds=WORKFLOW_TASK_S), workflow_id


async def test_postgres_restart_under_a_live_worker_keeps_every_paid_answer(
    harness: Harness,
) -> None:
    h, st = harness, harness.st
    await h.start_workers("a")
    doc, schema = await h.document(60)
    # reuse off: the run after the fault-free reference must call for every block.
    # The quality probe off: the check below counts one call per pack and the warm-up.
    options = RunOptions(
        pack_size=5,
        max_concurrent_packs=6,
        reuse_answers=False,
        quality=QualityOptions(probe_rate=0),
    )
    st.sim("POST", "/_sim/reset")
    st.sim(
        "PUT",
        "/_sim/scenario",
        {"speed_factor": 1.0, "latency": {"ttft_ms": 200, "per_output_token_ms": 0}},
    )
    run_id = await h.bb.start_run(doc, schema, options)
    await until(st.database_url, run_id, blocks=5)
    # Answers are held at the simulator until Postgres is down, then sent: the worker
    # receives paid answers it cannot record, whatever the speed of this machine.
    st.sim("POST", "/_sim/hold")
    await until_held(st, 3)
    await asyncio.to_thread(st.stop_postgres, "immediate")  # a crash: connections drop
    st.sim("POST", "/_sim/release")
    await until_logged(h, "a", "cannot record the answer")
    await asyncio.to_thread(st.start_postgres)
    result = await h.finished(run_id)

    report = await h.check(run_id, None)
    assert violations(report) == []
    assert result.blocks_ai_complete == 60
    calls = report["calls"]
    # Pay once: every answer Claude sent is in the ledger and none was asked for twice.
    assert calls["answers_never_recorded"] == 0
    # One answer per pack, and the warm-up call's, each sent by Claude once.
    assert calls["succeeded"] == calls["packs_planned"] + 1
    assert calls["simulator_answers"] == calls["succeeded"]
    # A call whose worker lost Postgres after opening its ledger row and before sending
    # it is marked abandoned by its next attempt: never sent, never answered, never paid.
    assert set(calls["by_status"]) <= {"succeeded", "abandoned"}
    assert st.worker_alive(h.worker("a"))


async def test_temporal_restart_under_live_workers_finishes_the_run(harness: Harness) -> None:
    h, st = harness, harness.st
    await h.start_workers("a")
    doc, schema = await h.document(40)
    # reuse off: the run after the fault-free reference must call for every block.
    options = RunOptions(pack_size=5, max_concurrent_packs=4, reuse_answers=False)
    st.sim("POST", "/_sim/reset")
    # Calls that take a while: the run is still going when the hold below starts.
    st.sim(
        "PUT",
        "/_sim/scenario",
        {"speed_factor": 1.0, "latency": {"ttft_ms": 500, "per_output_token_ms": 0}},
    )
    run_id = await h.bb.start_run(doc, schema, options)
    await until(st.database_url, run_id, 10)
    # Answers held until Temporal is back: calls are in flight while it is away, however
    # fast the model or slow the machine.
    st.sim("POST", "/_sim/hold")
    try:
        await until_held(st, 1)
        await asyncio.to_thread(st.stop_temporal)  # history stays in its SQLite file
        await asyncio.to_thread(st.start_temporal)
    finally:
        st.sim("POST", "/_sim/release")
    result = await h.finished(run_id)

    report = await h.check(run_id, None)
    assert violations(report) == []
    assert result.blocks_ai_complete == 40
    assert report["calls"]["paid_twice_same_attempt"] == 0
    assert report["calls"]["answers_never_recorded"] == 0
    assert st.worker_alive(h.worker("a"))  # the SDK reconnected; the worker did not exit
