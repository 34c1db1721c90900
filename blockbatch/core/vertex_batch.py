"""Google Vertex AI batch prediction for Claude, as blockbatch uses it: the rules.

A round's part (``blockbatch/core/batching.py``: ``{"custom_id", "params"}`` requests)
becomes one batch prediction job: its requests are a JSONL file in Cloud Storage, one
``{"custom_id", "request"}`` a line, ``request`` the rawPredict body (the Messages body
without ``model``, which is the job's publisher model, and with ``anthropic_version``).
Vertex writes the job's output as JSONL files under the job's output directory, each line
the input line with ``response`` (the Messages answer, with its usage) and ``status`` (empty,
or what went wrong), in no promised order, so results are joined on ``custom_id`` only.
Sources (cited per rule below):

- Google Cloud, "Batch predictions with Anthropic Claude models"
  (cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/batch): the input
  line ``{"custom_id": "request-1", "request": {"messages": ..., "anthropic_version":
  "vertex-2023-10-16", "max_tokens": 50}}``; "Batch prediction jobs reserve two column names
  for the batch prediction output: response(JSON) and status"; "By default, the number of
  concurrent batch requests that you can make in a single project is 4";
- the Vertex AI REST reference, ``projects.locations.batchPredictionJobs`` (create, get,
  list with ``filter``, cancel) and ``JobState`` (``JOB_STATE_QUEUED``, ``PENDING``,
  ``RUNNING``, ``SUCCEEDED``, ``FAILED``, ``CANCELLING``, ``CANCELLED``, ``PAUSED``,
  ``EXPIRED``, ``UPDATING``, ``PARTIALLY_SUCCEEDED``); ``completionStats``
  (``successfulCount``, ``failedCount``, ``incompleteCount``); ``outputInfo.
  gcsOutputDirectory``.

Not confirmed (docs/providers.md says so): a minimum number of requests per job (none is
documented for Claude, so none is applied), how long a job may run before it is
``JOB_STATE_EXPIRED``, and the exact text of a failed line's ``status``.

Vertex has no idempotency token on create. A part's job is named after its requests
(:func:`display_name`), so a create repeated after a crash first looks for a job of that
name (``filter=display_name="..."``) and adopts it instead of paying for a second one.
Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from blockbatch.core.buckets import BucketLocation

#: The rawPredict body version the SDK's AnthropicVertex sends, and the batch page's example.
VERTEX_BODY_VERSION = "vertex-2023-10-16"
#: "the number of concurrent batch requests that you can make in a single project is 4".
CONCURRENT_JOBS = 4
#: The input file's name inside a part's folder.
INPUT_NAME = "requests.jsonl"

ProcessingStatus = Literal["in_progress", "canceling", "ended"]

_STATES: dict[str, ProcessingStatus] = {
    "JOB_STATE_UNSPECIFIED": "in_progress",
    "JOB_STATE_QUEUED": "in_progress",
    "JOB_STATE_PENDING": "in_progress",
    "JOB_STATE_RUNNING": "in_progress",
    "JOB_STATE_UPDATING": "in_progress",
    "JOB_STATE_PAUSED": "in_progress",
    "JOB_STATE_CANCELLING": "canceling",
    "JOB_STATE_SUCCEEDED": "ended",
    "JOB_STATE_PARTIALLY_SUCCEEDED": "ended",
    "JOB_STATE_FAILED": "ended",
    "JOB_STATE_CANCELLED": "ended",
    "JOB_STATE_EXPIRED": "ended",
}
_GCS_URI = re.compile(r"^gs://(?P<bucket>[a-z0-9][a-z0-9._-]{1,220}[a-z0-9])(?:/(?P<prefix>.*))?$")
#: A Google project id: 6 to 30 lowercase letters, digits and hyphens, starting with a letter.
_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^(global|[a-z]+-[a-z]+[0-9]+)$")
#: Words of a failed line's ``status`` and the Messages error type they stand for.
_STATUS_KINDS = (
    (("RESOURCE_EXHAUSTED", "429", "rate limit", "quota"), "rate_limit_error"),
    (("DEADLINE_EXCEEDED", "timeout", "timed out"), "timeout_error"),
    (("UNAVAILABLE", "overloaded", "529", "503"), "overloaded_error"),
    (("PERMISSION_DENIED", "403"), "permission_error"),
    (("UNAUTHENTICATED", "401"), "authentication_error"),
    (("INVALID_ARGUMENT", "invalid_request", "400"), "invalid_request_error"),
)


class VertexBatchConfigError(ValueError):
    """Vertex batch settings missing or malformed (the message names the variable)."""


class GcsLocation(BucketLocation):
    """Where Vertex batch prediction jobs keep their JSONL (``gs://bucket/prefix``)."""

    scheme = "gs"
    kind = "a Cloud Storage URI"
    pattern = _GCS_URI
    setting = "BLOCKBATCH_VERTEX_GCS_URI"
    error = VertexBatchConfigError


@dataclass(frozen=True)
class VertexBatchConfig:
    """What a worker needs to run Vertex batch prediction jobs (``docs/providers.md``).

    Attributes:
        project: the Google Cloud project the jobs run in (``ANTHROPIC_VERTEX_PROJECT_ID``).
        region: the jobs' region (``CLOUD_ML_REGION``; batch jobs run in a region, not
            ``global``).
        location: where the jobs' JSONL goes (input and output under one prefix).
    """

    project: str
    region: str
    location: GcsLocation

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> VertexBatchConfig:
        """Read the settings from ``env``.

        Raises:
            VertexBatchConfigError: a required variable is missing or one is malformed.
        """
        project = env.get("ANTHROPIC_VERTEX_PROJECT_ID", "").strip()
        region = env.get("CLOUD_ML_REGION", "").strip()
        uri = env.get("BLOCKBATCH_VERTEX_GCS_URI", "").strip()
        missing = [
            name
            for name, value in (
                ("ANTHROPIC_VERTEX_PROJECT_ID", project),
                ("CLOUD_ML_REGION", region),
                ("BLOCKBATCH_VERTEX_GCS_URI", uri),
            )
            if not value
        ]
        if missing:
            raise VertexBatchConfigError(
                f"Vertex batch prediction needs {' and '.join(missing)}: the project and "
                "region the jobs run in, and the Cloud Storage location for their files "
                "(docs/providers.md, Google Vertex AI)"
            )
        if not _PROJECT.match(project):
            raise VertexBatchConfigError(
                f"ANTHROPIC_VERTEX_PROJECT_ID must be a Google Cloud project id (got {project!r})"
            )
        if not _REGION.match(region):
            raise VertexBatchConfigError(
                f"CLOUD_ML_REGION must be a region like us-east5 (got {region!r})"
            )
        if region == "global":
            raise VertexBatchConfigError(
                "CLOUD_ML_REGION is global: Vertex batch prediction jobs run in a region "
                "(us-east5, europe-west1 ...); set one where your Claude model is served"
            )
        return cls(project, region, GcsLocation.parse(uri))

    @property
    def parent(self) -> str:
        """The jobs' parent resource."""
        return f"projects/{self.project}/locations/{self.region}"

    def publisher_model(self, wire_model: str) -> str:
        """The job's ``model``: Anthropic's publisher model as Vertex names it."""
        return f"publishers/anthropic/models/{wire_model}"


def part_token(custom_ids: Sequence[str]) -> str:
    """A part's token (its folder and job name): the same requests give the same token."""
    return hashlib.sha256("\n".join(sorted(custom_ids)).encode()).hexdigest()[:40]


def display_name(token: str) -> str:
    """The job's ``displayName``, by which a repeated create finds it."""
    return f"blockbatch-{token}"


def name_filter(token: str) -> str:
    """The ``filter`` of a list call that finds the part's job."""
    return f'display_name="{display_name(token)}"'


def job_body(config: VertexBatchConfig, token: str, wire_model: str) -> dict[str, Any]:
    """``batchPredictionJobs.create``'s body for a part whose input is already written."""
    return {
        "displayName": display_name(token),
        "model": config.publisher_model(wire_model),
        "inputConfig": {
            "instancesFormat": "jsonl",
            "gcsSource": {"uris": [config.location.uri(token, INPUT_NAME)]},
        },
        "outputConfig": {
            "predictionsFormat": "jsonl",
            "gcsDestination": {"outputUriPrefix": config.location.uri(token, "output")},
        },
    }


def line(custom_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """One JSONL line of a Message Batches request's ``params``: ``request`` is the
    rawPredict body (no ``model``; ``anthropic_version`` the Vertex one)."""
    body = {k: v for k, v in params.items() if k != "model"}
    body["anthropic_version"] = VERTEX_BODY_VERSION
    return {"custom_id": custom_id, "request": body}


def requests_jsonl(requests: Sequence[Mapping[str, Any]]) -> bytes:
    """A part's requests as the job's input file."""
    return b"".join(
        json.dumps(line(r["custom_id"], r["params"]), separators=(",", ":")).encode() + b"\n"
        for r in requests
    )


def processing_status(state: str) -> ProcessingStatus:
    """A job's ``state`` as a Message Batch's ``processing_status``."""
    return _STATES.get(state, "in_progress")


def output_result(out: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A line of the job's output: its ``custom_id`` and the Message Batches result
    (``succeeded`` with the message, or ``errored`` with a Messages error body).

    Raises:
        ValueError: a line without a ``custom_id`` (it cannot be joined to a request).
    """
    custom_id = out.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise ValueError("an output line without a custom_id")
    status = out.get("status")
    response = out.get("response")
    if not status and isinstance(response, dict) and response.get("type") == "message":
        return custom_id, {"type": "succeeded", "message": response}
    if isinstance(response, dict) and response.get("type") == "error":
        error = response.get("error") or {}
        kind = str(error.get("type") or "api_error")
        return custom_id, errored(kind, str(error.get("message") or status or kind))
    text = str(status or "no response in the output line")
    return custom_id, errored(status_kind(text), text)


def status_kind(status: str) -> str:
    """The Messages error type a failed line's ``status`` text stands for (an unknown
    one: ``api_error``, retried)."""
    lowered = status.lower()
    for words, kind in _STATUS_KINDS:
        if any(w.lower() in lowered for w in words):
            return kind
    return "api_error"


def errored(kind: str, message: str) -> dict[str, Any]:
    """A Message Batches ``errored`` result."""
    return {
        "type": "errored",
        "error": {"type": "error", "error": {"type": kind, "message": message or kind}},
    }


def counts(job: Mapping[str, Any], requests: int) -> dict[str, int]:
    """A job's ``completionStats`` as a Message Batch's ``request_counts``: what is
    neither succeeded nor failed is processing while the job runs, and expired (or
    canceled) when it ended without it."""
    stats = job.get("completionStats") or {}
    ok = int(stats.get("successfulCount") or 0)
    failed = int(stats.get("failedCount") or 0)
    left = max(requests - ok - failed, 0)
    state = str(job.get("state") or "")
    ended = processing_status(state) == "ended"
    return {
        "processing": 0 if ended else left,
        "succeeded": ok,
        "errored": failed,
        "canceled": left if state == "JOB_STATE_CANCELLED" else 0,
        "expired": left if ended and state != "JOB_STATE_CANCELLED" else 0,
    }
