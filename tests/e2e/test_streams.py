"""Streams end to end: rows put while the stream runs, through a worker SIGKILL and a
producer that restarts, each answered exactly once and paid once; bad input never kills it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from blockbatch.api import Blockbatch, InvalidRow, StreamClosed, StreamRow
from blockbatch.core.run_types import RunOptions
from tests.conftest import ROOT, Stack
from tests.helpers import extract_schema
from tests.starter_fixtures import Cli, Result, cli_fixture  # noqa: F401 - provides `cli`

#: The worker-kill test's workflow task timeout (``WORKFLOW_TASK_TIMEOUT_S``).
WORKFLOW_TASK_S = 3.0


def row(i: int) -> dict[str, Any]:
    return {
        "id": f"r{i}",
        "text": f"Row {i}: the pager rotates weekly; escalate to the "
        f"on-call lead after {i % 30 + 5} minutes.",
    }


async def test_stream_answers_every_row_once_through_a_worker_kill_and_a_producer_restart(
    bbstack: Stack, tmp_path: Path
) -> None:
    s = bbstack
    # A worker process of its own (SIGKILLed below), started first: it takes a while.
    # A workflow task it held, or one waiting on its sticky queue, goes to the next worker
    # after 3 s (the stream's and this worker's WORKFLOW_TASK_TIMEOUT_S; 10 s by default).
    worker = s.start_worker_process(
        "sim-test-key", tmp_path / "worker.log", WORKFLOW_TASK_TIMEOUT_S=str(WORKFLOW_TASK_S)
    )
    bb = Blockbatch(
        s.pool, s.client, s.settings.model_copy(update={"workflow_task_timeout_s": WORKFLOW_TASK_S})
    )
    s.sim.scenario(speed_factor=1.0, latency={"ttft_ms": 150, "per_output_token_ms": 0})
    stream = await bb.open_stream(
        extract_schema(instruction_words=200),
        max_rows=20,
        max_wait_s=0.3,
        max_buffered=120,
        task_queue=s.task_queue,
        # The killed worker's calls move on after 5 s without a heartbeat (20 s by default),
        # its database steps (applying an answer) after 5 s (60 s by default).
        options=RunOptions(
            max_concurrent_packs=3, reuse_answers=False, call_heartbeat_s=5, db_step_s=5
        ),
    )
    run_id = stream.run_id
    try:
        # The first producer puts rows 0..149; backpressure holds it at 120 rows not done
        # until the worker answers some. Then the worker is SIGKILLed, packs in flight.
        for i in range(0, 150, 15):
            await stream.put_many(
                [row(j) for j in range(i, i + 15)], keys=[f"r{j}" for j in range(i, i + 15)]
            )
        await stream.flush()
        assert (
            await s.pool.fetchval(
                "select count(*) from overlays where run_id = $1 and status = 'pending'", run_id
            )
            > 0
        )
    finally:
        worker.send_signal(signal.SIGKILL)
        await asyncio.to_thread(worker.wait)
        await bb.close()
    # The producer dies here; a new one (a new client) feeds its input again from row
    # 120: the 30 rows accepted before are recognised by key, the rest are new.
    async with s.worker(), await Blockbatch.connect(s.settings, s.client) as bb2:
        again = await bb2.stream(run_id)
        indexes = []
        for i in range(120, 300, 15):
            indexes += await again.put_many(
                [row(j) for j in range(i, i + 15)], keys=[f"r{j}" for j in range(i, i + 15)]
            )
        assert indexes == list(range(120, 300))
        with pytest.raises(InvalidRow) as bad:
            await again.put({"body": "no text field"})
        assert bad.value.reason == "invalid_row"
        results: list[StreamRow] = []
        reader = asyncio.create_task(_collect(again, results))
        assert await again.close()
        with pytest.raises(StreamClosed):
            await again.put(row(999))
        await asyncio.wait_for(reader, 120)
        result = await asyncio.wait_for(again.wait(), 120)

    assert result.status == "completed", result
    assert (result.blocks_total, result.blocks_ai_complete) == (300, 300)
    # The stream and its packs kept the short workflow task timeout.
    for workflow_id in (f"run-{run_id}", f"run-{run_id}/pack-0"):
        described = await s.client.get_workflow_handle(workflow_id).describe()
        timeout = described.raw_description.execution_config.default_workflow_task_timeout
        assert timeout.ToTimedelta() == timedelta(seconds=WORKFLOW_TASK_S), workflow_id
    assert sorted(r.key or "" for r in results) == sorted(f"r{j}" for j in range(300))
    assert all(r.ok and r.value for r in results)
    assert sum(r.usage["cost_usd"] for r in results) == pytest.approx(
        result.cost_usd - await _warm_cost(s, run_id), rel=0.01, abs=1e-6
    )
    # Paid once: no block is in two answered calls; the ledger's rows match the run's.
    twice = await s.pool.fetchval(
        """select count(*) from (select u from llm_calls, unnest(block_uids) u
           where run_id = $1 and status = 'succeeded' group by u having count(*) > 1) d""",
        run_id,
    )
    assert twice == 0
    blocks = await s.pool.fetchval(
        "select count(*) from blocks where document_id = $1", f"doc-stream-{run_id}"
    )
    assert blocks == 300
    # A stream is a run: export writes every row.
    out = tmp_path / "stream.jsonl"
    summary = await s.bb.export(run_id, out, staged=True)
    assert summary.lines == 300


async def test_a_row_sent_again_is_answered_once_and_paid_once(bbstack: Stack) -> None:
    """The same row (the same text: its answer key) sent again, in the same put, while its
    first copy waits, and after it was answered, without a key and with another one: each
    copy gets a result, the first copy's answer, and Claude is asked for it once."""
    s = bbstack
    again = {"id": "a2", "text": row(1)["text"]}
    async with s.worker():
        stream = await s.bb.open_stream(
            extract_schema(instruction_words=200),
            max_rows=3,
            max_wait_s=0.3,
            task_queue=s.task_queue,
            # No reuse of earlier runs' answers: a stream asks each row once by itself.
            options=RunOptions(reuse_answers=False),
        )
        run_id = stream.run_id
        # Rows 1 and 2, then row 1 again in the same put and in the next one.
        assert await stream.put_many([row(1), row(2), row(1)]) == [0, 1, 2]
        assert await stream.put(again) == 3
        early: list[StreamRow] = []
        async for r in stream.results():
            early.append(r)
            if len(early) == 4:
                break
        # Row 1 is answered by now: a copy sent now takes that answer at once.
        assert await stream.put(row(1), key="late") == 4
        assert await stream.close()
        results = [r async for r in stream.results(ordered=True)]
        result = await asyncio.wait_for(stream.wait(), 120)

    assert result.status == "completed", result
    assert (result.blocks_total, result.blocks_ai_complete) == (5, 5)
    assert [r.index for r in results] == [0, 1, 2, 3, 4]
    assert all(r.ok and r.value for r in results)
    first = results[0]
    assert [r.value for r in results if r.index in (2, 3, 4)] == [first.value] * 3
    assert results[4].key == "late" and results[3].metadata == {"id": "a2"}
    # Claude was asked for rows 1 and 2 once each: the ledger's answered calls carry two
    # blocks in all, and the copies paid nothing.
    sent = await s.pool.fetchval(
        """select coalesce(sum(cardinality(block_uids)), 0) from llm_calls
           where run_id = $1 and purpose = 'pack' and status = 'succeeded'""",
        run_id,
    )
    assert sent == 2
    for copy in results[2:]:
        assert copy.usage["cost_usd"] == 0 and copy.usage.get("reused") is True
    assert sum(r.usage["cost_usd"] for r in results) == pytest.approx(
        result.cost_usd - await _warm_cost(s, run_id), rel=0.01, abs=1e-6
    )


async def _warm_cost(s: Stack, run_id: str) -> float:
    return float(
        await s.pool.fetchval(
            """select coalesce(sum(cost_usd), 0) from llm_calls where run_id = $1
           and purpose <> 'pack'""",
            run_id,
        )
    )


async def _collect(stream: Any, into: list[StreamRow]) -> None:
    into.extend([r async for r in stream.results()])


async def test_stream_cli_prints_one_line_per_input_line_and_survives_bad_ones(
    bbstack: Stack, cli: Cli, tmp_path: Path
) -> None:
    s = bbstack
    lines = [json.dumps(row(i)) for i in range(12)]
    lines[3] = "{not json"
    lines[6] = json.dumps({"id": "nofield", "body": "x"})
    lines[9] = json.dumps({"id": "huge", "text": "word " * 300_000})  # > the context window
    source = tmp_path / "rows.jsonl"
    source.write_text("\n".join(lines) + "\n")
    async with s.worker():
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "starter.py",
            "stream",
            "--schema",
            cli.schema(),
            "--max-rows",
            "4",
            "--max-wait",
            "300ms",
            "--ordered",
            "--model",
            "claude-haiku-4-5",
            cwd=ROOT,
            env=cli.env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(source.read_bytes()), 120)
    res = Result(proc.returncode or 0, stdout.decode(), stderr.decode())
    out = [json.loads(x) for x in res.out.splitlines()]
    assert len(out) == 12, res.err
    by_id = {o["id"]: o for o in out}
    assert by_id["line:4"]["error"]["reason"] == "invalid_row"
    assert by_id["nofield"]["error"]["reason"] == "invalid_row"
    assert by_id["huge"]["error"]["reason"] == "oversized"
    assert all(by_id[f"r{i}"]["ok"] for i in range(12) if i not in (3, 6, 9))
    assert res.code == 5, res.err  # some rows failed
    assert "invalid lines" in res.err
