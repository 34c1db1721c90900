"""Record real workflow histories for the replay test (tests/workflows/test_replay.py).

    .venv/bin/python -m tests.histories.record

Starts a throw-away stack (Postgres, Temporal dev server, simulator) under a temp dir, runs
one real run of each kind through the real worker, and writes each workflow's history as
``tests/histories/<name>.json`` (``WorkflowHistory.to_json()``; the workflow ids, which
replay needs because child ids derive from them, go into ``workflow_ids.json``):

* ``sync_splits.run``: a sync run whose truncated answers are halved;
  ``sync_splits.pack_split``: a ProcessPack that halved itself; ``sync_splits.pack_half``:
  one of its halves (``.../pack-N.0``).
* ``cancelled.run``: a run cancelled while its packs run.
* ``batch_rounds.run``: a batch-mode run with more than one round.
* ``continue_as_new.first`` / ``continue_as_new.last``: the first and last runs of a
  RunWorkflow that continued as new (``packs_per_history=2``).
* ``outlive.first`` / ``outlive.last`` / ``outlive.pack``: the first and last executions
  of a RunWorkflow that continued as new with packs in flight (they outlive it; every pack
  reports by signal), and a pack that reported to a later execution than the one that
  started it.
* ``warm_start.run``: a sync run whose warm-up call wrote the prompt cache before every
  pack started at once.
* ``outage.run`` / ``outage.pack``: a run that paused for an outage (every call 503),
  probed and resumed, and one of the packs that waited for it.
* ``unreachable.run``: a run whose worker reached no server (a closed local port): it
  paused, its probes reached nothing, and it ended ``failed``, reason ``unreachable``.
* ``cancel_without_worker.run``: a run cancelled while no worker ran (the
  ``request_cancel`` signal), carried out by the next worker.
* ``retry.run`` / ``retry.batch_run``: the RunWorkflow execution of ``starter.py retry``
  after a run (sync; batch mode) ended with failed blocks.
* ``budget.run`` / ``budget.pack``: a run given half of its unbudgeted cost
  (``max_cost_usd``) that stopped starting packs when the budget could not hold the next
  call and ended ``budget_exhausted``, and a pack whose call the budget refused.
* ``stream.first`` / ``stream.last``: the first and last executions of a StreamWorkflow
  (``packs_per_history=2``) whose rows were put while it ran: packs formed by the row
  trigger and by the oldest row's wait, continue-as-new with packs in flight, then closed
  and drained.
* ``quality.run`` / ``quality.pack``: a run with a quality gate (``min_agreement``) on the
  simulator's quality model whose gate re-planned its unstarted packs at half the size, and
  a pack that probed its sampled blocks alone after applying.
* ``quality_reask.run``: the same run since the gate re-asks the blocks answered in larger
  packs, once its packs in flight ended.
* ``escalation.run``: an EscalateWorkflow after a Haiku run: its second pass, and the
  blocks that went up asked alone on Sonnet.
* ``escalation_continued.first`` / ``escalation_continued.last``: the first and last
  executions of one that continued as new (``activities_per_history=2``) in the second
  pass and again in the escalation phase.

``python -m tests.histories.record outage`` records only the kinds named.

Re-record after any change to ``workflows/`` that is meant to change histories, and only
once the old histories' runs can no longer be in flight (docs/VERSIONING.md).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from blockbatch.api import Blockbatch
from blockbatch.core.batch_types import BatchOptions
from blockbatch.core.claude_errors import fatal_code_of
from blockbatch.core.escalation_types import EscalateInput
from blockbatch.core.outage_types import OutageOptions
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.core.workflow_names import escalate_workflow_id
from blockbatch.devtools import stack
from blockbatch.runtime.claude import anthropic_client
from blockbatch.runtime.settings import Settings
from blockbatch.runtime.temporal import build_worker
from blockbatch.send.sdk import anthropic
from blockbatch.simulator.testing import control
from blockbatch.store.db import create_pool, migrate
from tests.helpers import REJECT_MARKER, extract_schema, markdown_doc, marked_document
from workflows.attributes import SEARCH_ATTRIBUTES
from workflows.escalate import EscalateWorkflow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


@dataclass
class Recorder:
    bb: Blockbatch
    client: Client
    settings: Settings
    sim_url: str
    pool: asyncpg.Pool

    def scenario(self, **settings: Any) -> None:
        control(self.sim_url, "PUT", "/_sim/scenario", settings, timeout=10)

    async def start(
        self, n_blocks: int, options: RunOptions, *, words: int = 300, **kwargs: Any
    ) -> str:
        doc = await self.bb.ingest_bytes(markdown_doc(n_blocks), name="doc.md", fmt="markdown")
        schema_id = await self.bb.add_schema(extract_schema(instruction_words=words))
        if "reuse_answers" not in options.model_fields_set:
            # Every kind records the calls it makes: an earlier kind's answers to the same
            # blocks would leave nothing to call.
            options = options.model_copy(update={"reuse_answers": False})
        return await self.bb.start_run(doc, schema_id, options, **kwargs)

    def worker(self) -> Any:
        return build_worker(
            self.client,
            self.settings.temporal_task_queue,
            self.pool,
            anthropic_client(self.settings),
        )

    async def history(self, workflow_id: str, run_id: str | None = None) -> WorkflowHistory:
        return await self.client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()


IDS = HERE / "workflow_ids.json"


def save(name: str, history: WorkflowHistory) -> None:
    path = HERE / f"{name}.json"
    path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
    ids = json.loads(IDS.read_text()) if IDS.exists() else {}
    ids[name] = history.workflow_id
    IDS.write_text(json.dumps(dict(sorted(ids.items())), indent=1) + "\n")
    print(
        f"{path.relative_to(ROOT)}: {len(history.events)} events, "
        f"{path.stat().st_size:,} bytes ({history.workflow_id})"
    )


def _has(history: WorkflowHistory, event_type: int) -> bool:
    return any(e.event_type == event_type for e in history.events)


async def record_sync_splits(r: Recorder) -> None:
    r.scenario(faults={"truncate": 0.5}, seed=3)
    run_id = await r.start(12, RunOptions(pack_size=4, max_concurrent_packs=2))
    async with r.worker():
        result = await r.bb.wait(run_id)
    assert result.status == "completed" and result.split_events > 0, result
    save("sync_splits.run", await r.history(f"run-{run_id}"))
    paths = [
        row["pack_path"]
        for row in await r.pool.fetch(
            "select distinct pack_path from llm_calls where run_id = $1 and purpose = 'pack' "
            "order by pack_path",
            run_id,
        )
    ]
    split = half = None
    for path in paths:
        history = await r.history(f"run-{run_id}/pack-{path}")
        started_child = _has(history, EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
        if split is None and started_child:
            split = history
        if half is None and "." in path:
            half = history
    assert split is not None and half is not None, paths
    save("sync_splits.pack_split", split)
    save("sync_splits.pack_half", half)


async def record_cancelled(r: Recorder) -> None:
    r.scenario(speed_factor=1.0, latency={"ttft_ms": 400, "per_output_token_ms": 0})
    run_id = await r.start(24, RunOptions(pack_size=3, max_concurrent_packs=2))
    async with r.worker():
        while not (
            await r.pool.fetchval(
                "select count(*) from llm_calls where run_id = $1 and status = 'succeeded'", run_id
            )
        ):
            await asyncio.sleep(0.1)
        await r.bb.cancel(run_id)
        result = await r.bb.wait(run_id)
    assert result.status == "cancelled", result
    save("cancelled.run", await r.history(f"run-{run_id}"))


async def record_batch_rounds(r: Recorder) -> None:
    r.scenario(faults={"truncate": 0.5}, seed=3)
    run_id = await r.start(
        12,
        RunOptions(
            mode="batch",
            pack_size=4,
            max_block_attempts=6,  # half the answers are cut off: a lone block may be, again
            batch=BatchOptions(poll_initial_s=0.2, poll_max_s=1),
        ),
    )
    async with r.worker():
        result = await r.bb.wait(run_id)
    history = await r.history(f"run-{run_id}")
    rounds = sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "submit_round"
    )
    assert result.status == "completed" and rounds > 1, (result, rounds)
    save("batch_rounds.run", history)


async def _first_and_last(r: Recorder, wid: str) -> tuple[WorkflowHistory, WorkflowHistory]:
    """The first and the last execution of a workflow that continued as new."""
    last = await r.history(wid)
    first = last
    while prev := first.events[
        0
    ].workflow_execution_started_event_attributes.continued_execution_run_id:
        first = await r.history(wid, prev)
    assert _has(first, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
    return first, last


async def record_continue_as_new(r: Recorder) -> None:
    r.scenario()
    run_id = await r.start(10, RunOptions(pack_size=2, max_concurrent_packs=2), packs_per_history=2)
    async with r.worker():
        result = await r.bb.wait(run_id)
    assert result.status == "completed", result
    first, last = await _first_and_last(r, f"run-{run_id}")
    save("continue_as_new.first", first)
    save("continue_as_new.last", last)


async def record_outlive(r: Recorder, name: str = "outlive") -> None:
    r.scenario(speed_factor=1.0, latency={"ttft_ms": 400, "per_output_token_ms": 0})
    run_id = await r.start(12, RunOptions(pack_size=2, max_concurrent_packs=4), packs_per_history=2)
    async with r.worker():
        result = await r.bb.wait(run_id)
    assert result.status == "completed", result
    wid = f"run-{run_id}"
    first, last = await _first_and_last(r, wid)
    # Pack 0 started in the first execution; it reported to a later one.
    pack = await r.history(f"{wid}/pack-0")
    assert _has(pack, EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
    save(f"{name}.first", first)
    save(f"{name}.last", last)
    save(f"{name}.pack", pack)


async def record_warm_start(r: Recorder) -> None:
    r.scenario()
    # A prompt long enough to be cached (1,024 tokens and more): the warm-up writes it.
    run_id = await r.start(12, RunOptions(pack_size=3), words=1500)
    async with r.worker():
        result = await r.bb.wait(run_id)
    assert result.status == "completed", result
    purposes = {
        row["purpose"]
        for row in await r.pool.fetch("select purpose from llm_calls where run_id = $1", run_id)
    }
    assert "warm_up" in purposes, purposes
    save("warm_start.run", await r.history(f"run-{run_id}"))


async def record_learning(r: Recorder) -> None:
    r.scenario()
    # Packs sized by estimate, no earlier run of the schema: a learning pack goes first
    # (no warm-up), the rest is re-planned from its answer, and again at continue-as-new.
    # A schema no other kind runs (its own instruction length): no earlier answers of it.
    run_id = await r.start(
        150, RunOptions(max_concurrent_packs=2, output_budget=1024), words=1450, packs_per_history=3
    )
    async with r.worker():
        result = await r.bb.wait(run_id)
    assert result.status == "completed", result
    first, last = await _first_and_last(r, f"run-{run_id}")
    for history in (first, last):
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        assert "replan_run" in scheduled and "warm_cache" not in scheduled, scheduled
    save("learning.first", first)
    save("learning.last", last)


async def record_outage(r: Recorder) -> None:
    slow = {"speed_factor": 1.0, "latency": {"ttft_ms": 300, "per_output_token_ms": 0}}
    r.scenario(**slow)
    run_id = await r.start(
        16,
        RunOptions(
            pack_size=4,
            max_concurrent_packs=2,
            outage=OutageOptions(probe_initial_s=0.5, probe_max_s=1),
        ),
    )
    async with r.worker():
        while (await r.bb.progress(run_id)).packs_done < 1:
            await asyncio.sleep(0.1)
        r.scenario(**slow, errors={"outage_status": 503})
        while (await r.bb.progress(run_id)).status != "waiting_for_api":
            await asyncio.sleep(0.2)
        await asyncio.sleep(2)  # a probe or two goes unanswered
        r.scenario(**slow)
        result = await r.bb.wait(run_id)
    assert result.status == "completed" and result.outages == 1, result
    save("outage.run", await r.history(f"run-{run_id}"))
    waited = await r.pool.fetchval(
        """select pack_path from llm_calls where run_id = $1 and purpose = 'pack'
           and http_status = 503 order by call_id limit 1""",
        run_id,
    )
    save("outage.pack", await r.history(f"run-{run_id}/pack-{waited}"))


async def record_unreachable(r: Recorder) -> None:
    """A run whose worker reaches no server (a closed local port) ends ``unreachable``."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    options = RunOptions(
        pack_size=4,
        max_concurrent_packs=2,
        outage=OutageOptions(
            failures_to_pause=1, probe_initial_s=0.5, probe_max_s=1, unreachable_after_s=3
        ),
    )
    run_id = await r.start(8, options)
    llm = anthropic.AsyncAnthropic(
        api_key="sk-ant-record-unreachable", base_url=f"http://127.0.0.1:{port}", max_retries=0
    )
    async with build_worker(r.client, r.settings.temporal_task_queue, r.pool, llm):
        result = await r.bb.wait(run_id)
    await llm.close()
    assert result.status == "failed" and fatal_code_of(result.error) == "unreachable", result
    save("unreachable.run", await r.history(f"run-{run_id}"))


async def record_cancel_without_worker(r: Recorder) -> None:
    """A cancel sent while no worker ran (the ``request_cancel`` signal), carried out by the
    next worker."""
    run_id = await r.start(8, RunOptions(pack_size=4))
    request = await r.bb.request_cancel(run_id)
    assert request.waits_for_worker, request
    async with r.worker():
        result = await r.bb.wait(run_id)
    assert result.status == "cancelled", result
    save("cancel_without_worker.run", await r.history(f"run-{run_id}"))


async def record_retry(r: Recorder) -> None:
    for name, options in (
        ("retry.run", RunOptions(pack_size=4, max_concurrent_packs=2, reuse_answers=False)),
        (
            "retry.batch_run",
            RunOptions(
                mode="batch",
                pack_size=4,
                reuse_answers=False,
                batch=BatchOptions(poll_initial_s=0.2, poll_max_s=1),
            ),
        ),
    ):
        r.scenario(reject_marker=REJECT_MARKER, batch={"processing_delay_s": 0.2})
        doc = await r.bb.ingest_bytes(marked_document(8, {2, 5}), name=f"{name}.md", fmt="markdown")
        schema_id = await r.bb.add_schema(extract_schema(instruction_words=300))
        run_id = await r.bb.start_run(doc, schema_id, options)
        async with r.worker():
            first = await r.bb.wait(run_id)
            assert first.status == "completed_with_failures", first
            r.scenario(batch={"processing_delay_s": 0.2})
            started = await r.bb.retry(run_id)
            result = await r.bb.wait(run_id)
        assert result.status == "completed" and started.blocks == 2, (result, started)
        save(name, await r.history(f"run-{run_id}", started.workflow_run_id))


async def record_budget(r: Recorder) -> None:
    r.scenario()
    options = RunOptions(pack_size=2, max_concurrent_packs=2, reuse_answers=False)
    async with r.worker():
        free = await r.bb.wait(await r.start(40, options, words=200))
        run_id = await r.start(
            40, options.model_copy(update={"max_cost_usd": round(free.cost_usd / 2, 6)}), words=200
        )
        result = await r.bb.wait(run_id)
    assert result.status == "budget_exhausted" and result.blocks_ai_complete > 0, result
    save("budget.run", await r.history(f"run-{run_id}"))
    refused = await r.pool.fetchval(
        """select pack_path from overlays where run_id = $1 and reason_code = 'budget_exhausted'
             and last_error like 'the run''s budget of %' order by block_index limit 1""",
        run_id,
    )
    assert refused is not None
    save("budget.pack", await r.history(f"run-{run_id}/pack-{refused}"))


async def _gated_run(r: Recorder) -> tuple[str, RunResult]:
    """80 blocks where packs of 8 answer most blocks wrongly and packs of 4 right, with a
    quality gate at 90%: the gate halves the rest."""
    r.scenario(
        seed=3,
        quality={
            "enabled": True,
            "free_blocks": 4,
            "wrong_per_extra_block": 0.2,
            "skip_per_extra_block": 0,
            "bleed_per_extra_block": 0,
        },
    )
    run_id = await r.start(
        80,
        RunOptions(
            pack_size=8,
            max_concurrent_packs=2,
            reuse_answers=False,
            quality=QualityOptions(min_agreement=0.9),
        ),
    )
    async with r.worker():
        return run_id, await r.bb.wait(run_id)


async def record_quality(r: Recorder) -> None:
    run_id, result = await _gated_run(r)
    assert result.status == "completed" and result.quality is not None, result
    assert result.quality.gate and result.quality.pack_size == 4, result.quality
    save("quality.run", await r.history(f"run-{run_id}"))
    probed = await r.pool.fetchval(
        """select min(o.pack_index) from quality_samples q join overlays o
           using (run_id, block_uid) where q.run_id = $1 and q.status = 'compared'""",
        run_id,
    )
    save("quality.pack", await r.history(f"run-{run_id}/pack-{probed}"))


async def record_quality_reask(r: Recorder) -> None:
    # The same run: the gate also re-asks the blocks packs of 8 answered, after its packs
    # in flight end.
    run_id, result = await _gated_run(r)
    q = result.quality
    assert result.status == "completed" and q is not None and q.blocks_reasked, result
    save("quality_reask.run", await r.history(f"run-{run_id}"))


def _start_simulator(log: Path, port: int) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "blockbatch.simulator",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )


@asynccontextmanager
async def throwaway_stack(base: Path) -> AsyncIterator[Recorder]:
    pg = stack.start_postgres(base / "pg", stack.free_port(), base / "pg.log", fsync=False)
    sim_port = stack.free_port()
    sim = _start_simulator(base / "simulator.log", sim_port)
    env: WorkflowEnvironment | None = None
    pool: asyncpg.Pool | None = None
    try:
        stack.ensure_database(pg, "bb")
        conn = await asyncpg.connect(pg.url("bb"))
        try:
            await migrate(conn)
        finally:
            await conn.close()
        extra: list[str] = []
        for name, kind in SEARCH_ATTRIBUTES.items():
            extra += ["--search-attribute", f"{name}={kind}"]
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(stack.temporal_cli_path()),
            data_converter=pydantic_data_converter,
            dev_server_extra_args=extra,
        )
        sim_url = f"http://127.0.0.1:{sim_port}"
        stack._wait_until(
            lambda: stack._http_ok(sim_url + "/health"), 30, "simulator", base / "simulator.log"
        )
        settings = Settings(
            database_url=pg.url("bb"),
            temporal_address=env.client.service_client.config.target_host,
            temporal_task_queue=f"record-{uuid.uuid4().hex[:8]}",
            anthropic_base_url=sim_url,
            anthropic_api_key="sim-record-key",
            blockbatch_data_dir=base / "data",
        )
        pool = await create_pool(pg.url("bb"), max_size=20)
        yield Recorder(Blockbatch(pool, env.client, settings), env.client, settings, sim_url, pool)
    finally:
        if pool is not None:
            await pool.close()
        if env is not None:
            await env.shutdown()
        sim.terminate()
        sim.wait(10)
        stack.stop_postgres(pg.data_dir)


async def record_stream(r: Recorder) -> None:
    r.scenario(speed_factor=1.0, latency={"ttft_ms": 300, "per_output_token_ms": 0})
    stream = await r.bb.open_stream(
        extract_schema(instruction_words=300),
        max_rows=3,
        max_wait_s=0.5,
        packs_per_history=2,
        options=RunOptions(max_concurrent_packs=2),
    )
    async with r.worker():
        for i in range(4):
            await stream.put_many(
                [
                    {"id": f"{i}-{j}", "text": f"Row {i}.{j}: page the lead."}
                    for j in range(3 if i < 3 else 2)
                ]
            )
            await asyncio.sleep(0.2)
        await stream.close()
        result = await stream.wait()
    assert result.status == "completed" and result.blocks_ai_complete == 11, result
    first, last = await _first_and_last(r, f"run-{stream.run_id}")
    save("stream.first", first)
    save("stream.last", last)


HAIKU, SONNET = "claude-haiku-5-5", "claude-sonnet-5-5"


async def _haiku_run(r: Recorder) -> str:
    """A finished run on Haiku, wrong about many blocks (more in packs): some of its blocks
    go up to Sonnet when it is escalated."""
    r.scenario(
        seed=3,
        quality={
            "enabled": True,
            "free_blocks": 2,
            "skip_per_extra_block": 0,
            "bleed_per_extra_block": 0,
            "models": {HAIKU: {"wrong_alone": 0.05, "wrong_per_extra_block": 0.03}, SONNET: {}},
        },
    )
    options = RunOptions(
        model=HAIKU,
        pack_size=6,
        max_concurrent_packs=2,
        quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
    )
    run_id = await r.start(24, options)
    async with r.worker():
        await r.bb.wait(run_id)
    return run_id


async def record_escalation(r: Recorder) -> None:
    run_id = await _haiku_run(r)
    async with r.worker():
        wid = await r.bb.escalate(run_id, SONNET)
        result = await r.bb.wait_escalation(run_id)
    assert result.escalation is not None and result.escalation.escalated > 0, result
    save("escalation.run", await r.history(wid))


def _activities(history: WorkflowHistory) -> set[str]:
    return {
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }


async def record_escalation_continued(r: Recorder) -> None:
    # Two second packs or parts a history: four second packs take two histories, and the
    # parts a third (it continued as new in the escalation phase).
    run_id = await _haiku_run(r)
    wid = escalate_workflow_id(run_id)
    inp = EscalateInput(
        run_id=run_id, model=SONNET, max_concurrent_packs=2, activities_per_history=2
    )
    async with r.worker():
        await r.client.start_workflow(
            EscalateWorkflow.run, inp, id=wid, task_queue=r.settings.temporal_task_queue
        )
        result = await r.bb.wait_escalation(run_id)
    assert result.escalation is not None and result.escalation.escalated > 0, result
    first, last = await _first_and_last(r, wid)
    assert "second_pass" in _activities(first), _activities(first)
    assert {"escalate_blocks", "finish_run"} <= _activities(last), _activities(last)
    assert "second_pass" not in _activities(last), _activities(last)
    save("escalation_continued.first", first)
    save("escalation_continued.last", last)


RECORDERS = {
    "warm_start": record_warm_start,
    "sync_splits": record_sync_splits,
    "cancelled": record_cancelled,
    "batch_rounds": record_batch_rounds,
    "continue_as_new": record_continue_as_new,
    "outage": record_outage,
    "unreachable": record_unreachable,
    "cancel_without_worker": record_cancel_without_worker,
    "retry": record_retry,
    "outlive": record_outlive,
    "learning": record_learning,
    "budget": record_budget,
    "stream": record_stream,
    "quality": record_quality,
    "quality_reask": record_quality_reask,
    "escalation": record_escalation,
    "escalation_continued": record_escalation_continued,
}


async def main(names: list[str]) -> None:
    unknown = set(names) - set(RECORDERS)
    if unknown:
        sys.exit(f"unknown kinds {sorted(unknown)}; known: {', '.join(RECORDERS)}")
    with tempfile.TemporaryDirectory(prefix="bb-record-") as tmp:
        async with throwaway_stack(Path(tmp)) as r:
            for name, record in RECORDERS.items():
                if not names or name in names:
                    await record(r)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
