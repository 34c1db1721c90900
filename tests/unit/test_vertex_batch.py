"""Vertex batch prediction's rules: the settings, the JSONL a job reads, and its output read
back as Message Batches results (blockbatch/core/vertex_batch.py)."""

from __future__ import annotations

import json

import pytest

from blockbatch.core.vertex_batch import (
    VERTEX_BODY_VERSION,
    GcsLocation,
    VertexBatchConfig,
    VertexBatchConfigError,
    counts,
    display_name,
    job_body,
    name_filter,
    output_result,
    part_token,
    processing_status,
    requests_jsonl,
)

ENV = {
    "ANTHROPIC_VERTEX_PROJECT_ID": "proj-one",
    "CLOUD_ML_REGION": "us-east5",
    "BLOCKBATCH_VERTEX_GCS_URI": "gs://bb-jobs/runs/",
}


def test_the_settings_name_project_region_and_bucket() -> None:
    config = VertexBatchConfig.from_env(ENV)
    assert config.parent == "projects/proj-one/locations/us-east5"
    assert config.location == GcsLocation("bb-jobs", "runs")
    assert config.publisher_model("claude-haiku-5-5@20261007") == (
        "publishers/anthropic/models/claude-haiku-5-5@20261007"
    )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"BLOCKBATCH_VERTEX_GCS_URI": ""}, "BLOCKBATCH_VERTEX_GCS_URI"),
        ({"ANTHROPIC_VERTEX_PROJECT_ID": ""}, "ANTHROPIC_VERTEX_PROJECT_ID"),
        ({"BLOCKBATCH_VERTEX_GCS_URI": "s3://bb-jobs/runs"}, "gs://my-bucket"),
        ({"CLOUD_ML_REGION": "global"}, "run in a region"),
        ({"ANTHROPIC_VERTEX_PROJECT_ID": "Not A Project"}, "project id"),
    ],
)
def test_missing_or_malformed_settings_say_what_to_set(change: dict[str, str], says: str) -> None:
    with pytest.raises(VertexBatchConfigError, match=says):
        VertexBatchConfig.from_env({**ENV, **change})


def test_a_part_is_one_jsonl_line_per_request_keyed_by_custom_id() -> None:
    requests = [
        {
            "custom_id": f"r{i}",
            "params": {"model": "claude-haiku-5-5", "max_tokens": 9, "messages": []},
        }
        for i in range(2)
    ]
    lines = [json.loads(x) for x in requests_jsonl(requests).splitlines()]
    assert [x["custom_id"] for x in lines] == ["r0", "r1"]
    assert lines[0]["request"] == {
        "max_tokens": 9,
        "messages": [],
        "anthropic_version": VERTEX_BODY_VERSION,
    }  # no model: it is the job's


def test_the_same_requests_name_the_same_job_whatever_their_order() -> None:
    token = part_token(["b", "a"])
    assert token == part_token(["a", "b"]) != part_token(["a", "c"])
    config = VertexBatchConfig.from_env(ENV)
    body = job_body(config, token, "claude-haiku-5-5")
    assert body["displayName"] == display_name(token)
    assert name_filter(token) == f'display_name="{display_name(token)}"'
    assert body["inputConfig"]["gcsSource"]["uris"] == [f"gs://bb-jobs/runs/{token}/requests.jsonl"]
    assert body["outputConfig"]["gcsDestination"]["outputUriPrefix"] == (
        f"gs://bb-jobs/runs/{token}/output"
    )


def test_an_output_line_becomes_a_message_batches_result() -> None:
    message = {"type": "message", "content": [], "usage": {"input_tokens": 3}}
    assert output_result({"custom_id": "r1", "response": message, "status": ""}) == (
        "r1",
        {"type": "succeeded", "message": message},
    )
    cid, failed = output_result({"custom_id": "r2", "status": "429 RESOURCE_EXHAUSTED: quota"})
    assert cid == "r2" and failed["type"] == "errored"
    assert failed["error"]["error"]["type"] == "rate_limit_error"
    _, bad = output_result({"custom_id": "r3", "status": "400 INVALID_ARGUMENT: max_tokens"})
    assert bad["error"]["error"]["type"] == "invalid_request_error"
    _, answered_error = output_result(
        {
            "custom_id": "r4",
            "response": {"type": "error", "error": {"type": "overloaded_error", "message": "x"}},
        }
    )
    assert answered_error["error"]["error"] == {"type": "overloaded_error", "message": "x"}
    _, unknown = output_result({"custom_id": "r5", "status": "something else"})
    assert unknown["error"]["error"]["type"] == "api_error"  # retried, not failed
    with pytest.raises(ValueError, match="custom_id"):
        output_result({"response": message})


def test_job_states_and_counts_read_as_a_message_batch() -> None:
    assert processing_status("JOB_STATE_RUNNING") == "in_progress"
    assert processing_status("JOB_STATE_CANCELLING") == "canceling"
    assert processing_status("JOB_STATE_EXPIRED") == "ended"
    stats = {"completionStats": {"successfulCount": 3, "failedCount": 1}}
    assert counts({**stats, "state": "JOB_STATE_RUNNING"}, 6)["processing"] == 2
    expired = counts({**stats, "state": "JOB_STATE_EXPIRED"}, 6)
    assert expired == {"processing": 0, "succeeded": 3, "errored": 1, "canceled": 0, "expired": 2}
    cancelled = counts({**stats, "state": "JOB_STATE_CANCELLED"}, 6)
    assert cancelled["canceled"] == 2 and cancelled["expired"] == 0


def test_a_job_reads_as_a_provider_batch_and_googles_errors_as_retryable_or_not() -> None:
    from activities.vertex_jobs import as_provider_batch, google_error

    job = {
        "name": "projects/p/locations/us-east5/batchPredictionJobs/42",
        "state": "JOB_STATE_EXPIRED",
        "labels": {"blockbatch-requests": "5"},
        "completionStats": {"successfulCount": "2", "failedCount": "1"},
        "createTime": "2026-11-28T10:00:00Z",
        "endTime": "2026-11-29T10:00:00Z",
    }
    batch = as_provider_batch(job)
    assert batch.id == job["name"] and batch.status == "ended"
    assert (batch.counts.succeeded, batch.counts.errored, batch.counts.expired) == (2, 1, 2)
    assert batch.requests == 5 and batch.ended_at is not None

    body = b'{"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}'
    assert not google_error(429, body, "creating").non_retryable
    refused = b'{"error": {"code": 400, "message": "bad model", "status": "INVALID_ARGUMENT"}}'
    assert google_error(400, refused, "creating").non_retryable
    assert "bad model" in google_error(400, refused, "creating").message
