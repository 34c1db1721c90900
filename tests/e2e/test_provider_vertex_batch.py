"""Vertex AI batch prediction against the local stack: ``batchPredictionJobs`` whose JSONL
lives in a local Cloud Storage stand-in (gcp-storage-emulator, started by
``Services.start_gcs`` only here), answered by the simulator's Vertex control plane
(``blockbatch/simulator/vertex_jobs.py``).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.chaos_check import check_run, install_audit, violations
from blockbatch.core.registry import Usage, cost_usd, get_model
from blockbatch.devtools.services import Services
from blockbatch.runtime.claude import anthropic_client, provider_client
from tests.conftest import Stack
from tests.e2e.test_chaos import MODEL_FAULTS
from tests.e2e.test_provider_batches import BATCH_POLLS
from tests.e2e.test_providers import (
    platform_env,
    platform_settings,
    run_demo_on,
)
from tests.e2e.test_secrets import every_row, histories, leaks
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

JOBS = "POST /v1/projects/{project}/locations/{region}/batchPredictionJobs"
BUCKET = "bb-jobs"


def test_the_local_cloud_storage_server_holds_objects_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    services = Services(tmp_path)
    url = services.start_gcs()
    try:
        make = urllib.request.Request(
            f"{url}/storage/v1/b?project=proj-1",
            data=json.dumps({"name": "bb-own"}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(make, timeout=10).close()
        put = urllib.request.Request(
            f"{url}/upload/storage/v1/b/bb-own/o?uploadType=media&name=in%2Fa.jsonl",
            data=b'{"custom_id": "r1"}\n',
            headers={"Content-Type": "application/octet-stream"},
            method="POST",
        )
        urllib.request.urlopen(put, timeout=10).close()
        got = f"{url}/storage/v1/b/bb-own/o/in%2Fa.jsonl?alt=media"
        with urllib.request.urlopen(got, timeout=10) as r:
            assert r.read() == b'{"custom_id": "r1"}\n'
        pid = int(services.pid_file("gcs").read_text())
    finally:
        services.stop()
    assert not services.pid_file("gcs").exists()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"the Cloud Storage server (pid {pid}) still runs after stop()")


@pytest.fixture(scope="module")
def gcs_url(services: Services) -> Iterator[str]:
    """The local Cloud Storage server, for this module only."""
    url = services.start_gcs()
    create = urllib.request.Request(
        f"{url}/storage/v1/b?project=proj-1",
        data=json.dumps({"name": BUCKET}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(create, timeout=10).close()  # the bucket the user names
    yield url
    services.stop_gcs()


def gcs_names(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/storage/v1/b/{BUCKET}/o?prefix=runs/", timeout=10) as r:
        return [item["name"] for item in json.loads(r.read()).get("items", [])]


async def run_vertex_batch(
    cli: Cli,
    s: Stack,
    gcs: str,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    vertex_batch: dict[str, Any] | None = None,
    **scenario: Any,
) -> Any:
    """The demo document, ``--provider vertex --mode batch``, every endpoint the stack's."""
    monkeypatch.setenv("BLOCKBATCH_VERTEX_GCS_URI", f"gs://{BUCKET}/runs")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs)
    return await run_demo_on(
        "vertex",
        s,
        cli,
        monkeypatch,
        key,
        *BATCH_POLLS,
        args=("--mode", "batch"),
        vertex_batch={"gcs_endpoint_url": gcs} | (vertex_batch or {}),
        batch={"processing_delay_s": 0.3},
        **scenario,
    )


async def test_a_vertex_batch_run_goes_through_batch_prediction_jobs(
    cli: Cli,
    bbstack: Stack,
    gcs_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = bbstack
    token = secrets.token_hex(12)
    key = f"platform-SECRET-{token}"
    caplog.set_level(logging.DEBUG)
    await install_audit(s.pool)
    run = await run_vertex_batch(cli, s, gcs_url, monkeypatch, key)
    assert run.code == 0, run.out + run.err
    assert run.run_id

    requests = s.sim.stats()["requests"]
    assert requests[JOBS].get("200", 0) > 0, requests
    assert not any("messages/batches" in route for route in requests), requests
    jobs = await s.pool.fetch(
        "select provider_batch_id from provider_batches where run_id = $1", run.run_id
    )
    assert jobs and all("/batchPredictionJobs/" in j["provider_batch_id"] for j in jobs), jobs
    names = gcs_names(gcs_url)
    assert any(n.endswith("/requests.jsonl") for n in names), names
    assert any(n.endswith("/predictions.jsonl") for n in names), names

    row = await s.pool.fetchrow(
        "select status, blocks_total, blocks_ai_complete from runs where run_id = $1",
        run.run_id,
    )
    assert row["status"] == "completed" and row["blocks_ai_complete"] == row["blocks_total"] > 0
    async with s.pool.acquire() as conn:
        result = await check_run(conn, run.run_id)
    assert violations(result) == [], result
    model = get_model("claude-haiku-5-5")
    calls = await s.pool.fetch(
        """select response, cost_usd from llm_calls where run_id = $1
           and purpose = 'batch_request' and status = 'succeeded'""",
        run.run_id,
    )
    assert calls
    for c in calls:  # Vertex's batch price: the registry's, half the on-demand one
        usage = Usage.from_message(c["response"])
        assert float(c["cost_usd"]) == pytest.approx(cost_usd(model, usage, batch=True), abs=1e-8)

    found = await histories(s.client, f"run-{run.run_id}")
    assert [wid for wid, raw in found.items() if leaks(raw, key, token)] == []
    tables = await every_row(s)
    assert [t for t, text in tables.items() if leaks(text, key, token)] == []
    assert not leaks(caplog.text, key, token)
    assert not leaks(run.out + run.err, key, token)


async def test_an_expired_vertex_job_is_resubmitted_and_nothing_is_paid_twice_under_chaos(
    cli: Cli,
    bbstack: Stack,
    gcs_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = bbstack
    key = f"platform-SECRET-{secrets.token_hex(12)}"
    await install_audit(s.pool)
    run = await run_vertex_batch(
        cli,
        s,
        gcs_url,
        monkeypatch,
        key,
        vertex_batch={"expire_jobs": 1},
        seed=38,
        **MODEL_FAULTS,
    )
    assert run.code == 0, run.out + run.err
    assert run.run_id
    assert s.sim.stats()["requests"][JOBS].get("200", 0) >= 2  # expired, then resubmitted
    resubmitted = await s.pool.fetchval(
        "select count(*) from batch_requests where run_id = $1 and resubmits > 0", run.run_id
    )
    assert resubmitted > 0
    async with s.pool.acquire() as conn:
        result = await check_run(conn, run.run_id)
    assert violations(result) == [], result
    assert result["blocks"]["ai_complete"] == result["blocks"]["total"] > 0
    assert result["calls"]["cost_usd"] > 0


async def test_check_says_whether_vertex_batch_mode_will_work(
    gcs_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from blockbatch.cli import amain
    from blockbatch.simulator.scenario import Auth, Scenario
    from blockbatch.simulator.server import SimulatorServer
    from tests.simulator.test_platforms import KEY, settings
    from tests.simulator.test_platforms import platform_env as sim_env

    argv = ["check", "--provider", "vertex", "--model", "claude-haiku-5-5"]
    async with SimulatorServer(scenario=Scenario(auth=Auth(valid_keys=[KEY]))) as sim:
        sim_env(monkeypatch, sim.base_url)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_url)
        monkeypatch.delenv("BLOCKBATCH_VERTEX_GCS_URI", raising=False)
        assert await amain(argv, settings=settings()) == 0  # sync works all the same
        out, err = capsys.readouterr()
        assert "batch mode: not ready: " in out and "BLOCKBATCH_VERTEX_GCS_URI" in out

        monkeypatch.setenv("BLOCKBATCH_VERTEX_GCS_URI", "gs://no-such-bucket/runs")
        assert await amain(argv, settings=settings()) == 0
        out, err = capsys.readouterr()
        assert "batch mode: not ready: " in out and "no-such-bucket" in out

        monkeypatch.setenv("BLOCKBATCH_VERTEX_GCS_URI", f"gs://{BUCKET}/runs")
        assert await amain(argv, settings=settings()) == 0
        out, err = capsys.readouterr()
        assert f"batch mode: ready: gs://{BUCKET} answers" in out
        assert KEY not in out + err


async def test_a_repeated_create_adopts_the_parts_job_and_the_project_quota_holds(
    gcs_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create retried after a crash (or by a worker that replaced a dead one) finds the
    job the first made, by its name, instead of paying for a second; a fifth job at once is
    refused with Google's quota error, retryable (4 concurrent jobs per project)."""
    from temporalio.exceptions import ApplicationError

    from activities.vertex_jobs import vertex_jobs_for
    from blockbatch.simulator.scenario import Scenario
    from blockbatch.simulator.server import SimulatorServer
    from tests.simulator.test_platforms import platform_env as sim_env
    from tests.simulator.test_platforms import settings

    def part(n: int) -> list[dict[str, Any]]:
        params = {
            "model": "claude-haiku-5-5",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}],
        }
        return [{"custom_id": f"p{n}-r{i}", "params": params} for i in range(3)]

    scenario = Scenario(
        vertex_batch={"gcs_endpoint_url": gcs_url}, batch={"processing_delay_s": 3600}
    )
    async with SimulatorServer(scenario=scenario) as sim:
        sim_env(monkeypatch, sim.base_url)
        env = {
            "ANTHROPIC_VERTEX_PROJECT_ID": "proj-1",
            "CLOUD_ML_REGION": "us-east5",
            "BLOCKBATCH_VERTEX_GCS_URI": f"gs://{BUCKET}/adopt",
            "STORAGE_EMULATOR_HOST": gcs_url,
        }
        vertex = provider_client(settings(), "vertex")
        jobs = vertex_jobs_for(vertex, env)
        first = await jobs.submit("claude-haiku-5-5", part(0))
        again = await jobs.submit("claude-haiku-5-5", list(reversed(part(0))))
        assert again["name"] == first["name"]
        assert sim.state.stats.requests[JOBS] == {"200": 1}  # one job, not two
        for n in (1, 2, 3):
            await jobs.submit("claude-haiku-5-5", part(n))
        with pytest.raises(ApplicationError) as refused:
            await jobs.submit("claude-haiku-5-5", part(4))
        assert "quota is 4 concurrent jobs" in refused.value.message
        assert not refused.value.non_retryable
        await vertex.close()


async def test_a_vertex_job_created_but_not_recorded_is_adopted_by_the_next_worker(
    bbstack: Stack, gcs_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker dies between Vertex creating the job and our commit of its name: the
    retry, on a fresh worker, adopts that job instead of paying for a second."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from activities.batches import BatchActivities
    from activities.db import DbActivities
    from activities.vertex_jobs import VertexJobs
    from blockbatch.core.batch_types import BatchRoundInput, OpenBatchRunInput
    from blockbatch.core.run_types import PlanRunInput, RunOptions
    from blockbatch.send.sender import AnthropicSender
    from blockbatch.store import repo
    from tests.helpers import extract_schema, markdown_doc

    s = bbstack
    key = f"platform-SECRET-{secrets.token_hex(12)}"
    s.sim.scenario(
        auth={"valid_keys": [key, "sim-test-key"]},
        vertex_batch={"gcs_endpoint_url": gcs_url},
        batch={"processing_delay_s": 60},
    )
    platform_env(monkeypatch, s.sim.base_url, key)
    monkeypatch.setenv("BLOCKBATCH_VERTEX_GCS_URI", f"gs://{BUCKET}/crash")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_url)
    worker_settings = platform_settings(s, key)

    def worker() -> BatchActivities:  # a fresh worker: its own sender and job client
        sender = AnthropicSender(
            anthropic_client(s.settings), lambda p: provider_client(worker_settings, p)
        )
        return BatchActivities(s.pool, sender)

    doc = await s.bb.ingest_bytes(markdown_doc(20), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(instruction_words=200))
    options = RunOptions(mode="batch", pack_size=5, provider="vertex")
    async with s.pool.acquire() as conn:
        run_id = await repo.create_run(conn, doc, schema_id, options)
    env = ActivityEnvironment()
    await env.run(DbActivities(s.pool).plan_run, PlanRunInput(run_id=run_id))
    await env.run(worker().open_batch_run, OpenBatchRunInput(run_id=run_id))

    real_submit = VertexJobs.submit

    async def lost_answer(self: VertexJobs, wire_model: str, requests: Any) -> Any:
        await real_submit(self, wire_model, requests)
        raise ApplicationError("the worker died before recording the job")

    monkeypatch.setattr(VertexJobs, "submit", lost_answer)
    with pytest.raises(ApplicationError):
        await env.run(worker().submit_round, BatchRoundInput(run_id=run_id, round=1))
    created = s.sim.stats()["requests"][JOBS]["200"]
    assert created >= 1
    monkeypatch.setattr(VertexJobs, "submit", real_submit)

    out = await env.run(worker().submit_round, BatchRoundInput(run_id=run_id, round=1))
    assert out.batches and all("/batchPredictionJobs/" in b.provider_batch_id for b in out.batches)
    assert s.sim.stats()["requests"][JOBS]["200"] == created  # adopted: no second job
    again = await env.run(worker().submit_round, BatchRoundInput(run_id=run_id, round=1))
    assert again.batches == out.batches
