"""The API key never leaves the worker's memory: not into Temporal history, the ledger or any
other table, the logs, or an error message.

A distinctive fake key (``sk-ant-test-SECRET-<random>``) is the only key the simulator
accepts. One run succeeds with faults that halve packs (so halved child workflows exist
and activities fail and retry with messages); a second run has its key rejected (401), so
the rejection is surfaced as the run's error. Then every raw history event of every
workflow of both runs, every row of every table, and the workers' logs (a ``worker.py``
process with the SDK's debug logging on, and an in-process worker logging at DEBUG) are
searched for the key and for its random part, and so is the worker's Prometheus
endpoint (``METRICS_PORT``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest
from pydantic import SecretStr
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from blockbatch.core.run_types import RunOptions
from blockbatch.devtools.stack import free_port
from blockbatch.runtime.claude import anthropic_client
from blockbatch.runtime.temporal import build_worker
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc
from tests.waiting import until

#: The account's limits in the simulator: far above what the runs use.
LIMITS = {"rpm": 50_000, "input_tpm": 50_000_000, "output_tpm": 10_000_000}


def new_key() -> tuple[str, str]:
    token = secrets.token_hex(12)
    return f"sk-ant-test-SECRET-{token}", token


def leaks(data: bytes | str, key: str, token: str) -> bool:
    raw = data.encode() if isinstance(data, str) else data
    return key.encode() in raw or token.encode() in raw


async def histories(client: Client, workflow_id: str) -> dict[str, bytes]:
    """Raw serialized history of a workflow and, recursively, of every child it started."""
    out: dict[str, bytes] = {}
    todo = [workflow_id]
    while todo:
        wid = todo.pop()
        history = await client.get_workflow_handle(wid).fetch_history()
        out[wid] = b"".join(e.SerializeToString() for e in history.events)
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
                attrs = event.child_workflow_execution_started_event_attributes
                todo.append(attrs.workflow_execution.workflow_id)
    return out


async def every_row(s: Stack) -> dict[str, str]:
    """Each table of the database as the text of all its rows."""
    tables = [
        r["table_name"]
        for r in await s.pool.fetch(
            """select table_name from information_schema.tables
           where table_schema = 'public' and table_type = 'BASE TABLE'"""
        )
    ]
    out = {}
    for table in tables:
        rows = await s.pool.fetch(f'select row_to_json(t)::text as j from "{table}" t')
        out[table] = "\n".join(r["j"] for r in rows)
    return out


def start_worker_process(
    s: Stack, key: str, log: Path, metrics_port: int | None = None
) -> subprocess.Popen[bytes]:
    return s.start_worker_process(
        key,
        log,
        ANTHROPIC_LOG="debug",  # the SDK's own request/response logging
        PYTHONUNBUFFERED="1",
        **({"METRICS_PORT": str(metrics_port)} if metrics_port else {}),
    )


async def test_api_key_is_nowhere_in_history_ledger_tables_logs_or_errors(
    bbstack: Stack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key, token = new_key()
    s = bbstack
    doc = await s.bb.ingest_bytes(markdown_doc(40), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(200))

    # 1. A run that succeeds, halving packs and retrying errors, on a worker.py process.
    # Its first calls are all refused with 429 (so the ledger and the metrics surely hold
    # one, whatever the timing), then the model is merely faulty.
    # A 429 teaches the fleet limiter the limits its headers show: large ones here, with
    # most left, so the run is not paced for the rest of the minute (the simulator's
    # nominal limits with nothing left did that: what the limiter makes of a 429's headers
    # is test_ratelimits.py's subject, not this test's).
    s.sim.scenario(
        auth={"valid_keys": [key]}, limits=LIMITS, errors={"rate_429": 1.0, "retry_after_s": 0}
    )
    log = tmp_path / "worker.log"
    metrics_port = free_port()
    proc = start_worker_process(s, key, log, metrics_port)
    try:
        # 500s name no retry-after: their retries back off from 0.2 s, not 2 s.
        ok_id = await s.bb.start_run(doc, schema_id, RunOptions(pack_size=10, call_retry_s=0.2))
        await until(
            lambda: s.sim.stats()["requests"].get("POST /v1/messages", {}).get("429"),
            "a call refused with 429",
            interval=0.1,
        )
        s.sim.scenario(
            auth={"valid_keys": [key]},
            seed=5,
            limits=LIMITS,
            faults={"truncate": 0.4, "skip_block": 0.05, "malformed_tool_input": 0.2},
            errors={"rate_429": 0.15, "rate_500": 0.1, "retry_after_s": 0},
        )
        ok = await asyncio.wait_for(s.bb.wait(ok_id), 150)
        # The worker's Prometheus endpoint, after calls that were answered and that failed.
        metrics = await asyncio.to_thread(
            lambda: urllib.request.urlopen(
                f"http://127.0.0.1:{metrics_port}/metrics", timeout=10
            ).read()
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 40)
    # Faults may leave a block failed: then the run is done with failures.
    assert ok.blocks_ai_complete + ok.blocks_failed == 40
    assert ok.status == ("completed" if not ok.blocks_failed else "completed_with_failures")
    assert ok.split_events > 0

    # 2. A run whose key is rejected (401), on an in-process worker logging at DEBUG.
    s.sim.scenario(auth={"valid_keys": ["another-key"]})
    caplog.set_level(logging.DEBUG)
    settings = s.settings.model_copy(update={"anthropic_api_key": SecretStr(key)})
    assert key not in repr(settings) and key not in str(settings.model_dump())
    worker = build_worker(s.client, s.task_queue, s.pool, anthropic_client(settings))
    async with worker:
        bad_id = await s.bb.start_run(doc, schema_id, RunOptions(pack_size=10, reuse_answers=False))
        bad = await asyncio.wait_for(s.bb.wait(bad_id), 60)
    assert bad.status == "failed"
    assert "API key was rejected" in (bad.error or "")
    assert s.sim.stats()["requests"]["POST /v1/messages"].get("401", 0) > 0

    # Temporal: every event of both runs and of every pack, halves included.
    found: dict[str, bytes] = {}
    for run_id in (ok_id, bad_id):
        found.update(await histories(s.client, f"run-{run_id}"))
    assert any("/pack-" in wid and "." in wid.rsplit("pack-", 1)[1] for wid in found), found.keys()
    assert all(run_id.encode() in found[f"run-{run_id}"] for run_id in (ok_id, bad_id))
    assert [wid for wid, raw in found.items() if leaks(raw, key, token)] == []

    # Postgres: every row of every table (the ledger's request/response/errors included).
    tables = await every_row(s)
    assert tables["llm_calls"] and "rate_limit_error" in tables["llm_calls"]
    assert "authentication_error" in tables["llm_calls"]
    assert [t for t, text in tables.items() if leaks(text, key, token)] == []

    # Metrics: served names and labels, with the calls counted.
    assert b"blockbatch_llm_calls_total" in metrics and b'status="429"' in metrics
    assert not leaks(metrics, key, token)

    # Logs: the worker process (with the SDK's debug log) and the in-process worker.
    worker_log = log.read_text(errors="replace")
    assert "HTTP Request" in worker_log or "Request options" in worker_log, worker_log[-2000:]
    assert not leaks(worker_log, key, token)
    assert "API key was rejected" in caplog.text
    assert not leaks(caplog.text, key, token)

    # Error messages, as the user sees them.
    runs = await s.pool.fetch("select run_id, error from runs")
    assert all(not leaks(r["error"] or "", key, token) for r in runs)
    assert not leaks(bad.model_dump_json(), key, token)
