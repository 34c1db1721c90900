"""The rules of Bedrock batch jobs (blockbatch/core/bedrock_batch.py): records, results,
statuses, settings."""

from __future__ import annotations

import json

import pytest

from blockbatch.core.bedrock_batch import (
    BedrockBatchConfig,
    BedrockBatchConfigError,
    S3Location,
    is_sync_job,
    job_name,
    job_token,
    output_result,
    processing_status,
    record,
    records_jsonl,
    sync_request,
)

ENV = {
    "BLOCKBATCH_BEDROCK_ROLE_ARN": "arn:aws:iam::123456789012:role/bedrock-batch",
    "BLOCKBATCH_BEDROCK_S3_URI": "s3://team-bucket/blockbatch/",
}


def test_a_record_is_the_invokemodel_body_keyed_by_our_custom_id() -> None:
    params = {"model": "claude-haiku-4-5", "max_tokens": 50, "messages": [{"role": "user"}]}
    line = record("p3_a1-abcd1234", params)
    assert line == {
        "recordId": "p3_a1-abcd1234",
        "modelInput": {
            "max_tokens": 50,
            "messages": [{"role": "user"}],
            "anthropic_version": "bedrock-2023-05-31",  # before Claude 4.7 on Bedrock
        },
    }
    newer = record("p1_a1-x", {**params, "model": "claude-haiku-5-5"})
    assert newer["modelInput"]["anthropic_version"] == "2026-10-21"
    assert sync_request("claude-haiku-4-5", line["modelInput"]) == params


def test_the_input_file_has_one_record_a_line() -> None:
    requests = [
        {"custom_id": f"p{i}_a1-t", "params": {"model": "claude-haiku-5-5", "max_tokens": 5}}
        for i in range(3)
    ]
    lines = records_jsonl(requests).decode().splitlines()
    assert [json.loads(x)["recordId"] for x in lines] == ["p0_a1-t", "p1_a1-t", "p2_a1-t"]


def test_output_lines_become_batch_results_joined_on_record_id() -> None:
    message = {"type": "message", "content": [], "usage": {"input_tokens": 3}}
    assert output_result({"recordId": "a", "modelInput": {}, "modelOutput": message}) == (
        "a",
        {"type": "succeeded", "message": message},
    )
    rid, result = output_result(
        {"recordId": "b", "error": {"errorCode": 429, "errorMessage": "slow down"}}
    )
    assert rid == "b" and result["type"] == "errored"
    assert result["error"]["error"] == {"type": "rate_limit_error", "message": "slow down"}
    _, bad = output_result({"recordId": "c", "error": {"errorCode": 400, "errorMessage": "x"}})
    assert bad["error"]["error"]["type"] == "invalid_request_error"
    with pytest.raises(ValueError, match="recordId"):
        output_result({"modelOutput": message})


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("Submitted", "in_progress"),
        ("Validating", "in_progress"),
        ("Scheduled", "in_progress"),
        ("InProgress", "in_progress"),
        ("Stopping", "canceling"),
        ("Completed", "ended"),
        ("PartiallyCompleted", "ended"),
        ("Failed", "ended"),
        ("Stopped", "ended"),
        ("Expired", "ended"),
    ],
)
def test_job_statuses_map_to_batch_processing_statuses(status: str, expected: str) -> None:
    assert processing_status(status) == expected


def test_the_same_requests_give_the_same_token_so_a_repeated_create_finds_its_job() -> None:
    a = job_token(["p1_a1-t", "p2_a1-t"])
    assert a == job_token(["p2_a1-t", "p1_a1-t"])
    assert a != job_token(["p1_a2-t", "p2_a1-t"])
    assert len(job_name(a)) <= 63


def test_settings_are_read_and_a_small_part_runs_sync() -> None:
    config = BedrockBatchConfig.from_env(ENV)
    assert config.location == S3Location("team-bucket", "blockbatch")
    assert config.location.uri("t1", "input") == "s3://team-bucket/blockbatch/t1/input"
    assert config.min_records == 100
    assert config.runs_sync(99) and not config.runs_sync(100)
    lower = BedrockBatchConfig.from_env({**ENV, "BLOCKBATCH_BEDROCK_MIN_RECORDS": "2"})
    assert not lower.runs_sync(2)
    assert is_sync_job("sync:s3://b/k") and not is_sync_job("arn:aws:bedrock:job/1")


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "BLOCKBATCH_BEDROCK_ROLE_ARN and BLOCKBATCH_BEDROCK_S3_URI"),
        ({**ENV, "BLOCKBATCH_BEDROCK_ROLE_ARN": "my-role"}, "IAM role ARN"),
        ({**ENV, "BLOCKBATCH_BEDROCK_S3_URI": "team-bucket"}, "S3 URI"),
        ({**ENV, "BLOCKBATCH_BEDROCK_JOB_HOURS": "2"}, "from 24 to 168"),
        ({**ENV, "BLOCKBATCH_BEDROCK_MIN_RECORDS": "many"}, "BLOCKBATCH_BEDROCK_MIN_RECORDS"),
    ],
)
def test_bad_settings_say_what_to_set(env: dict[str, str], says: str) -> None:
    with pytest.raises(BedrockBatchConfigError, match=says):
        BedrockBatchConfig.from_env(env)
