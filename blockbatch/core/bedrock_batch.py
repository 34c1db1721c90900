"""Amazon Bedrock batch inference (model invocation jobs), as blockbatch uses it: the rules.

A round's part (``blockbatch/core/batching.py``: ``{"custom_id", "params"}`` requests) becomes
one job: its records are a JSONL file in S3, one ``{"recordId", "modelInput"}`` a line, the
``recordId`` being our ``custom_id`` and ``modelInput`` the InvokeModel body (the Messages
body without ``model``, which is the job's ``modelId``, and with ``anthropic_version``).
Bedrock writes one ``<input>.jsonl.out`` per input file, each line the record with
``modelOutput`` (the InvokeModel answer: a Messages response with ``usage``) or ``error``
(``{"errorCode", "errorMessage"}``) in its place, in no promised order, so results are joined
on ``recordId`` only. Sources (``docs/platforms-checked.md`` §2, Bedrock rows):

- record and output shapes: AWS user guide, batch-inference-data and batch-inference-results
  ("An error object replaces the modelOutput field in any line where there was an error");
- the control plane (``bedrock`` service, botocore's model): ``CreateModelInvocationJob``
  (``POST /model-invocation-job``: jobName, roleArn, clientRequestToken, modelId,
  inputDataConfig, outputDataConfig, timeoutDurationInHours), ``GetModelInvocationJob`` (status
  ``Submitted``, ``Validating``, ``Scheduled``, ``InProgress``, ``Completed``,
  ``PartiallyCompleted``, ``Failed``, ``Stopping``, ``Stopped``, ``Expired``, and the record
  counts), ``StopModelInvocationJob``; a ``clientRequestToken`` seen before creates nothing
  ("Amazon Bedrock ignores the request"), so a create retried with the same token cannot
  make a second job;
- "Minimum number of records per batch inference job" is a per-model quota (its value is not
  in any official page stored: 100 per third-party sources, and the default here, settable);
  "Records per batch inference job" likewise (50,000 per third-party sources);
- the batch price: half the on-demand price per token (third-party sources agree; the official
  price page was not retrieved), the same discount as the Claude API's batches, so the
  registry's batch prices hold (``cost_usd(..., batch=True)``).

A part with fewer records than the minimum is not sent as a job: it runs sync, record by
record through InvokeModel at the on-demand price (a "sync job", :data:`SYNC_JOB_PREFIX`),
which costs no more than padding it and ends at once. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from blockbatch.core.buckets import BucketLocation
from blockbatch.core.providers import bedrock_body_version

#: Default per-model quotas (third-party values; the real ones are the account's).
MIN_RECORDS_PER_JOB = 100
MAX_RECORDS_PER_JOB = 50_000
#: ``timeoutDurationInHours``: a job not done by then ends ``Expired``; its unanswered
#: records are resubmitted in the next round, like an expired Message Batches request.
JOB_TIMEOUT_HOURS = 24
#: The id of a part run sync (below the minimum): this, then the S3 URI of its records.
SYNC_JOB_PREFIX = "sync:"

ProcessingStatus = Literal["in_progress", "canceling", "ended"]

_STATUS: dict[str, ProcessingStatus] = {
    "Submitted": "in_progress",
    "Validating": "in_progress",
    "Scheduled": "in_progress",
    "InProgress": "in_progress",
    "Stopping": "canceling",
    "Completed": "ended",
    "PartiallyCompleted": "ended",
    "Failed": "ended",
    "Stopped": "ended",
    "Expired": "ended",
}
_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>.*))?$")
_ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:role/.+$")
#: A record's ``errorCode`` as the Messages error type the pack policy classifies.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


class BedrockBatchConfigError(ValueError):
    """Bedrock batch settings missing or malformed (the message names the variable)."""


class S3Location(BucketLocation):
    """Where Bedrock batch jobs keep their JSONL (``s3://bucket/prefix``)."""

    scheme = "s3"
    kind = "an S3 URI"
    pattern = _S3_URI
    setting = "BLOCKBATCH_BEDROCK_S3_URI"
    error = BedrockBatchConfigError


@dataclass(frozen=True)
class BedrockBatchConfig:
    """What a worker needs to run Bedrock batch jobs (``docs/providers.md``).

    Attributes:
        role_arn: the IAM service role Bedrock assumes to read and write the bucket.
        location: where the jobs' JSONL goes (input and output under one prefix).
        min_records: the model's "minimum number of records per batch inference job".
        max_records: the model's "records per batch inference job".
        timeout_hours: ``timeoutDurationInHours`` of each job.
    """

    role_arn: str
    location: S3Location
    min_records: int = MIN_RECORDS_PER_JOB
    max_records: int = MAX_RECORDS_PER_JOB
    timeout_hours: int = JOB_TIMEOUT_HOURS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BedrockBatchConfig:
        """Read ``BLOCKBATCH_BEDROCK_*`` from ``env``.

        Raises:
            BedrockBatchConfigError: a required variable is missing or one is malformed.
        """
        role = env.get("BLOCKBATCH_BEDROCK_ROLE_ARN", "").strip()
        uri = env.get("BLOCKBATCH_BEDROCK_S3_URI", "").strip()
        missing = [
            name
            for name, value in (
                ("BLOCKBATCH_BEDROCK_ROLE_ARN", role),
                ("BLOCKBATCH_BEDROCK_S3_URI", uri),
            )
            if not value
        ]
        if missing:
            raise BedrockBatchConfigError(
                f"Bedrock batch jobs need {' and '.join(missing)}: the IAM role Bedrock "
                "assumes to read and write the jobs' files, and the S3 location for them "
                "(docs/providers.md, Amazon Bedrock)"
            )
        if not _ROLE_ARN.match(role):
            raise BedrockBatchConfigError(
                "BLOCKBATCH_BEDROCK_ROLE_ARN must be an IAM role ARN like "
                "arn:aws:iam::123456789012:role/bedrock-batch"
            )
        return cls(
            role_arn=role,
            location=S3Location.parse(uri),
            min_records=_int(env, "BLOCKBATCH_BEDROCK_MIN_RECORDS", MIN_RECORDS_PER_JOB, 1),
            max_records=_int(env, "BLOCKBATCH_BEDROCK_MAX_RECORDS", MAX_RECORDS_PER_JOB, 1),
            timeout_hours=_int(env, "BLOCKBATCH_BEDROCK_JOB_HOURS", JOB_TIMEOUT_HOURS, 24, 168),
        )

    def runs_sync(self, records: int) -> bool:
        """A part of ``records`` runs sync: a job would be refused under the minimum."""
        return records < self.min_records


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int = 10**9) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise BedrockBatchConfigError(f"{name} must be a whole number from {low} to {high}")
    return value


def job_token(custom_ids: list[str]) -> str:
    """The part's ``clientRequestToken`` (and the name of its folder): the same requests
    give the same token, so a create call repeated after a crash finds the first job."""
    return hashlib.sha256("\n".join(sorted(custom_ids)).encode()).hexdigest()[:40]


def job_name(token: str) -> str:
    """A job name Bedrock accepts (letters, digits and hyphens, at most 63)."""
    return f"blockbatch-{token[:40]}"


def record(custom_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """One JSONL record of a Message Batches request's ``params``: ``recordId`` is the
    ``custom_id``; ``modelInput`` the InvokeModel body, its version as the sync path's
    (``bedrock-2023-05-31`` before Claude 4.7)."""
    body = {k: v for k, v in params.items() if k != "model"}
    body["anthropic_version"] = bedrock_body_version(str(params["model"]))
    return {"recordId": custom_id, "modelInput": body}


def records_jsonl(requests: Sequence[Mapping[str, Any]]) -> bytes:
    """A part's requests as the job's input file."""
    return b"".join(
        json.dumps(record(r["custom_id"], r["params"]), separators=(",", ":")).encode() + b"\n"
        for r in requests
    )


def sync_request(model_id: str, model_input: Mapping[str, Any]) -> dict[str, Any]:
    """The Messages request (registry model id) a record of a sync job is sent as."""
    body = {k: v for k, v in model_input.items() if k != "anthropic_version"}
    return {"model": model_id, **body}


def processing_status(status: str) -> ProcessingStatus:
    """A job's status as a Message Batch's ``processing_status``."""
    return _STATUS.get(status, "in_progress")


def is_sync_job(job_id: str) -> bool:
    return job_id.startswith(SYNC_JOB_PREFIX)


def output_result(line: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A line of a ``.jsonl.out`` file: its ``recordId`` and the Message Batches result
    (``succeeded`` with the message, or ``errored`` with a Messages error body).

    Raises:
        ValueError: a line without a ``recordId`` (it cannot be joined to a request).
    """
    record_id = line.get("recordId")
    if not isinstance(record_id, str) or not record_id:
        raise ValueError("an output line without a recordId")
    output = line.get("modelOutput")
    if isinstance(output, dict):
        return record_id, {"type": "succeeded", "message": output}
    error = line.get("error")
    if not isinstance(error, dict):
        error = {}
    return record_id, errored(error.get("errorCode"), str(error.get("errorMessage") or ""))


def errored(code: object, message: str) -> dict[str, Any]:
    """A Message Batches ``errored`` result for a Bedrock error status ``code``."""
    status = code if isinstance(code, int) else 500
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {
        "type": "errored",
        "error": {"type": "error", "error": {"type": kind, "message": message or kind}},
    }
