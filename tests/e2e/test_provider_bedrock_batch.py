"""Bedrock batch inference against the local stack: model invocation jobs whose JSONL lives
in a local S3-compatible server (moto's server mode, started by ``Services.start_s3`` only
here), answered by the simulator's ``bedrock`` control plane.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from bench.chaos_check import check_run, install_audit, violations
from blockbatch.core.batching import BATCH_CACHE_TTL
from blockbatch.core.budget import worst_case_usd
from blockbatch.core.registry import Usage, cost_usd, get_model
from blockbatch.devtools.services import Services
from blockbatch.runtime.claude import anthropic_client, provider_client
from blockbatch.runtime.temporal import build_worker
from blockbatch.store import batches
from blockbatch.store.runs import cached_run_context
from tests.conftest import Stack
from tests.e2e.test_chaos import MODEL_FAULTS
from tests.e2e.test_secrets import every_row, histories, leaks
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`


def test_the_local_s3_server_holds_objects_and_leaves_nothing_behind(tmp_path: Path) -> None:
    services = Services(tmp_path)
    url = services.start_s3()
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        s3.create_bucket(Bucket="bb-jobs")
        s3.put_object(Bucket="bb-jobs", Key="in/a.jsonl", Body=b'{"recordId": "r1"}\n')
        body = s3.get_object(Bucket="bb-jobs", Key="in/a.jsonl")["Body"].read()
        assert body == b'{"recordId": "r1"}\n'
        pid = int(services.pid_file("s3").read_text())
    finally:
        services.stop()
    assert not services.pid_file("s3").exists()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"the S3 server (pid {pid}) is still running after stop()")


#: The sample document and schema (`make demo`'s).
SAMPLES = Path(__file__).resolve().parents[2] / "samples"
JOB_ROUTES = ("POST /model-invocation-job", "GET /model-invocation-job/{job}")


@pytest.fixture(scope="module")
def s3_url(services: Services) -> Iterator[str]:
    """The local S3 server, for this module only (no other test waits for it)."""
    url = services.start_s3()
    yield url
    services.stop_s3()


def bedrock_env(
    monkeypatch: pytest.MonkeyPatch, sim: str, s3: str, secret: str, min_records: int
) -> None:
    """A worker's environment for Bedrock batch jobs, every endpoint the local stack's."""
    for name, value in {
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": f"AKIA{secret[-16:].upper()}",
        "AWS_SECRET_ACCESS_KEY": f"aws-SECRET-{secret}",
        "AWS_BEARER_TOKEN_BEDROCK": f"platform-SECRET-{secret}",
        "ANTHROPIC_BEDROCK_BASE_URL": sim,
        "AWS_ENDPOINT_URL_BEDROCK": sim,
        "AWS_ENDPOINT_URL_S3": s3,
        "BLOCKBATCH_BEDROCK_ROLE_ARN": "arn:aws:iam::123456789012:role/bedrock-batch",
        "BLOCKBATCH_BEDROCK_S3_URI": "s3://bb-jobs/runs",
        "BLOCKBATCH_BEDROCK_MIN_RECORDS": str(min_records),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def s3_keys(s3: str) -> list[str]:
    client = boto3.client(
        "s3",
        endpoint_url=s3,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    with contextlib.suppress(client.exceptions.ClientError):
        client.create_bucket(Bucket="bb-jobs")
    listed = client.list_objects_v2(Bucket="bb-jobs", Prefix="runs/")
    return [o["Key"] for o in listed.get("Contents", [])]


def bedrock_stack(
    s: Stack,
    s3_url: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    min_records: int,
    bedrock_batch: dict[str, Any] | None = None,
    **scenario: Any,
) -> str:
    """The local stack made ready for a Bedrock batch run, and the run's secret: the bucket
    the user names exists, the simulator takes only the secret's credential and holds
    Bedrock to ``min_records`` records per job (``bedrock_batch`` and ``scenario`` besides),
    and the worker's environment points at both."""
    secret = secrets.token_hex(12)
    s3_keys(s3_url)  # the bucket the user names must exist
    s.sim.scenario(
        auth={"valid_keys": [f"platform-SECRET-{secret}", "sim-test-key"]},
        bedrock_batch={"s3_endpoint_url": s3_url, "min_records": min_records}
        | (bedrock_batch or {}),
        **scenario,
    )
    bedrock_env(monkeypatch, s.sim.base_url, s3_url, secret, min_records=min_records)
    return secret


async def run_demo(cli: Cli, s: Stack, *extra: str) -> Any:
    worker = build_worker(
        s.client,
        s.task_queue,
        s.pool,
        anthropic_client(s.settings),
        open_client=lambda p: provider_client(s.settings, p),
    )
    async with worker:
        return await cli(
            "run",
            str(SAMPLES / "handbook.md"),
            "--schema",
            str(SAMPLES / "extract.json"),
            "--provider",
            "bedrock",
            "--model",
            "us.anthropic.claude-haiku-5-5",
            "--mode",
            "batch",
            "--set",
            "quality.probe_rate=0",
            "--set",
            "batch.poll_initial_s=0.2",
            "--set",
            "batch.poll_max_s=0.5",
            *extra,
            timeout=170,
        )


def assert_no_credential(texts: dict[str, bytes | str], secret: str) -> None:
    """No part of the fake AWS credentials or the Bedrock key in any of ``texts``."""
    needles = (secret, secret[-16:].upper(), f"aws-SECRET-{secret}")
    assert [name for name, text in texts.items() for n in needles if leaks(text, n, n)] == []


async def test_a_bedrock_batch_run_goes_through_model_invocation_jobs_under_chaos(
    cli: Cli,
    bbstack: Stack,
    s3_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = bbstack
    # The first job expires unprocessed; records error and answers truncate or mis-map.
    secret = bedrock_stack(
        s,
        s3_url,
        monkeypatch,
        min_records=1,
        bedrock_batch={"expire_jobs": 1},
        seed=38,
        batch={"processing_delay_s": 0.3},
        **MODEL_FAULTS,
    )
    caplog.set_level(logging.DEBUG)
    await install_audit(s.pool)
    run = await run_demo(cli, s)
    assert run.code == 0, run.out + run.err
    assert run.run_id

    requests = s.sim.stats()["requests"]
    assert requests[JOB_ROUTES[0]].get("200", 0) >= 2, requests  # expired, then resubmitted
    assert not any("batches" in route for route in requests), requests
    jobs = await s.pool.fetch(
        "select provider_batch_id, status from provider_batches where run_id = $1", run.run_id
    )
    assert jobs and all(j["provider_batch_id"].startswith("arn:aws:bedrock:") for j in jobs), jobs
    keys = s3_keys(s3_url)
    assert any(k.endswith("/records.jsonl") for k in keys), keys
    assert any(k.endswith("/records.jsonl.out") for k in keys), keys
    resubmitted = await s.pool.fetchval(
        "select count(*) from batch_requests where run_id = $1 and resubmits > 0", run.run_id
    )
    assert resubmitted > 0  # the expired job's requests went again in the next round

    async with s.pool.acquire() as conn:
        result = await check_run(conn, run.run_id)
    assert violations(result) == [], result
    assert result["blocks"]["ai_complete"] == result["blocks"]["total"] > 0
    assert result["calls"]["cost_usd"] > 0
    assert_no_credential(
        {
            **await histories(s.client, f"run-{run.run_id}"),
            **await every_row(s),
            "logs": caplog.text,
            "output": run.out + run.err,
        },
        secret,
    )


async def test_a_round_under_the_minimum_records_runs_sync_at_on_demand_prices(
    cli: Cli,
    bbstack: Stack,
    s3_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = bbstack
    bedrock_stack(s, s3_url, monkeypatch, min_records=100)  # Bedrock's default
    run = await run_demo(cli, s)
    assert run.code == 0, run.out + run.err
    requests = s.sim.stats()["requests"]
    assert JOB_ROUTES[0] not in requests  # no job Bedrock would refuse
    assert requests["POST /model/{model_id}/invoke"].get("200", 0) > 0
    parts = await s.pool.fetch(
        "select provider_batch_id, note from provider_batches where run_id = $1", run.run_id
    )
    assert parts and all(p["provider_batch_id"].startswith("sync:s3://bb-jobs/") for p in parts)
    assert all("minimum" in (p["note"] or "") for p in parts), parts
    row = await s.pool.fetchrow(
        "select status, blocks_total, blocks_ai_complete from runs where run_id = $1",
        run.run_id,
    )
    assert row["status"] == "completed" and row["blocks_ai_complete"] == row["blocks_total"]
    ctx_model = get_model("claude-haiku-5-5")
    calls = await s.pool.fetch(
        """select response, cost_usd from llm_calls where run_id = $1
           and purpose = 'batch_request' and status = 'succeeded'""",
        run.run_id,
    )
    assert calls
    for c in calls:  # on-demand prices: these were sync calls, not a job's
        usage = Usage.from_message(c["response"])
        assert float(c["cost_usd"]) == pytest.approx(cost_usd(ctx_model, usage, batch=False))


async def first_round_worst_cases(s: Stack, run_id: str) -> tuple[float, float]:
    """Round 1's worst cases as a budget sizes them, at batch and at on-demand prices."""
    async with s.pool.acquire() as conn:
        ctx = await cached_run_context(conn, run_id)
        requests = await batches.round_requests(conn, run_id, 1)
        est = await batches.block_tokens(conn, [u for r in requests for u in r.block_uids])

    def total(batch: bool) -> float:
        return sum(
            worst_case_usd(
                ctx.model,
                input_tokens=ctx.pack([est[u] for u in r.block_uids]).est_input_tokens,
                max_tokens=r.max_tokens,
                prefix_tokens=ctx.cacheable_prefix_tokens,
                cache_ttl=BATCH_CACHE_TTL,
                batch=batch,
            )
            for r in requests
        )

    return total(True), total(False)


async def test_a_round_run_sync_is_held_to_the_budget_at_the_price_it_pays(
    cli: Cli,
    bbstack: Stack,
    s3_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = bbstack
    bedrock_stack(s, s3_url, monkeypatch, min_records=100)
    first = await run_demo(cli, s, "--set", "reuse_answers=false")
    assert first.code == 0 and first.run_id, first.out + first.err
    at_batch, on_demand = await first_round_worst_cases(s, first.run_id)
    assert on_demand > at_batch * 1.9
    # Enough for round 1 at batch prices, not at the on-demand prices a sync round pays.
    budget = (at_batch + on_demand) / 2
    run = await run_demo(cli, s, "--set", "reuse_answers=false", "--max-cost", f"{budget:.6f}")
    assert run.run_id, run.out + run.err
    row = await s.pool.fetchrow("select status, cost_usd from runs where run_id = $1", run.run_id)
    spent = await s.pool.fetchval(
        "select coalesce(sum(cost_usd), 0) from llm_calls where run_id = $1", run.run_id
    )
    assert float(spent) <= budget
    exhausted = await s.pool.fetchval(
        """select count(*) from overlays where run_id = $1
           and reason_code = 'budget_exhausted'""",
        run.run_id,
    )
    assert row["status"] == "budget_exhausted" and exhausted > 0, (row, exhausted)
