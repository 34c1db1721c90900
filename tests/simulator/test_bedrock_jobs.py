"""Bedrock's model invocation jobs in the simulator, through blockbatch's job client
(``activities/bedrock_jobs.py``) and boto3, with the records in a local S3 (moto's server in
a thread): created once per token, refused under the minimum or over the jobs quota,
results joined on ``recordId``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import boto3
import pytest
import pytest_asyncio
from moto.server import ThreadedMotoServer
from temporalio.exceptions import ApplicationError

from activities.bedrock_jobs import BedrockJobs, as_message_batch
from activities.errors import BATCH_REJECTED, RETRYABLE
from blockbatch.core.providers import Route
from blockbatch.devtools.stack import free_port
from blockbatch.runtime.bedrock_jobs import open_bedrock_jobs
from blockbatch.runtime.claude import anthropic_client
from blockbatch.runtime.settings import Settings
from blockbatch.send.sender import AnthropicSender
from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import make_blocks, pack_params

ROUTE = Route("bedrock", "us.anthropic.claude-haiku-5-5")


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="t",
        aws_secret_access_key="t",
    ).create_bucket(Bucket="bb-jobs")
    yield url
    server.stop()


def scenario(s3_url: str, **bedrock_batch: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "batch": {"processing_delay_s": 0},
            "bedrock_batch": {"s3_endpoint_url": s3_url, **bedrock_batch},
        }
    )


@pytest_asyncio.fixture
async def sim(s3_url: str) -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(scenario=scenario(s3_url, min_records=2)) as server:
        yield server


def jobs(
    monkeypatch: pytest.MonkeyPatch, sim: SimulatorServer, s3_url: str, min_records: int = 2
) -> BedrockJobs:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_ENDPOINT_URL_BEDROCK": sim.base_url,
        "AWS_ENDPOINT_URL_S3": s3_url,
    }.items():
        monkeypatch.setenv(name, value)
    return open_bedrock_jobs(
        AnthropicSender(anthropic_client(Settings(anthropic_api_key="unused"))),
        {
            "AWS_REGION": "us-east-1",
            "BLOCKBATCH_BEDROCK_ROLE_ARN": "arn:aws:iam::123456789012:role/bedrock-batch",
            "BLOCKBATCH_BEDROCK_S3_URI": "s3://bb-jobs/runs",
            "BLOCKBATCH_BEDROCK_MIN_RECORDS": str(min_records),
        },
    )


def requests(n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"p{i}_a1-{tag}",
            "params": pack_params(make_blocks(2, document=f"{tag}{i}"), model="claude-haiku-5-5"),
        }
        for i in range(n)
    ]


async def test_a_job_is_created_once_and_its_results_join_on_record_id(
    sim: SimulatorServer, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = jobs(monkeypatch, sim, s3_url)
    part = requests(3, "once")
    arn = await client.submit(ROUTE.wire_model or "", part)
    assert arn.startswith("arn:aws:bedrock:us-east-1:")
    # A create repeated after a crash (same requests, same token) finds the same job.
    assert await client.submit(ROUTE.wire_model or "", part) == arn
    job = await client.poll(arn)
    assert job["status"] == "Completed" and job["successRecordCount"] == 3
    results = [r async for r in client.results(arn, "claude-haiku-5-5", ROUTE)]
    # Written in another order than submitted: joined by recordId, every request once.
    assert sorted(rid for rid, _ in results) == sorted(r["custom_id"] for r in part)
    assert [rid for rid, _ in results] != [r["custom_id"] for r in part]
    assert all(result["type"] == "succeeded" for _, result in results)
    assert all(result["message"]["usage"]["output_tokens"] > 0 for _, result in results)


async def test_bedrock_refuses_a_job_under_the_minimum_so_the_client_runs_it_sync(
    sim: SimulatorServer, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = jobs(monkeypatch, sim, s3_url, min_records=2)
    sync_id = await client.submit(ROUTE.wire_model or "", requests(1, "small"))
    assert sync_id.startswith("sync:s3://bb-jobs/runs/")
    assert "POST /model-invocation-job" not in sim.state.stats.requests
    # The same part as a job: Bedrock's ValidationException, not retried.
    eager = jobs(monkeypatch, sim, s3_url, min_records=1)
    with pytest.raises(ApplicationError, match="minimum number of records") as refused:
        await eager.submit(ROUTE.wire_model or "", requests(1, "small"))
    assert refused.value.type == BATCH_REJECTED and refused.value.non_retryable


async def test_more_jobs_than_the_quota_are_retried_later(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = scenario(s3_url, min_records=1, max_jobs_in_progress=1)
    busy.batch.processing_delay_s = 3600  # the first job is still in progress
    async with SimulatorServer(scenario=busy) as sim:
        client = jobs(monkeypatch, sim, s3_url, min_records=1)
        await client.submit(ROUTE.wire_model or "", requests(1, "first"))
        with pytest.raises(ApplicationError, match="ServiceQuotaExceeded") as limited:
            await client.submit(ROUTE.wire_model or "", requests(1, "second"))
    assert limited.value.type == RETRYABLE and not limited.value.non_retryable


async def test_a_stopped_job_ends_with_its_records_unanswered(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = scenario(s3_url, min_records=1)
    slow.batch.processing_delay_s = 3600
    async with SimulatorServer(scenario=slow) as sim:
        client = jobs(monkeypatch, sim, s3_url, min_records=1)
        arn = await client.submit(ROUTE.wire_model or "", requests(2, "stop"))
        assert (await client.poll(arn))["status"] == "InProgress"
        stopped = await client.cancel(arn)
        assert stopped["status"] == "Stopped"
        assert [r async for r in client.results(arn, "claude-haiku-5-5", ROUTE)] == []
        # What the batch activities record: ended, both requests canceled (resubmitted).
        batch = as_message_batch(arn, stopped)
        assert batch.processing_status == "ended"
        assert batch.request_counts.canceled == 2
