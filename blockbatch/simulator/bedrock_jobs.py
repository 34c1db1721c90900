"""Amazon Bedrock batch inference: the ``bedrock`` control plane's model invocation jobs.

The records live where the real service keeps them, in S3 (a local S3-compatible server in
the stack, ``Services.start_s3``; its URL is the scenario's ``bedrock_batch.s3_endpoint_url``),
and are read and written there as Bedrock does. Sources: ``docs/platforms-checked.md`` §2
(Bedrock rows) and the ``bedrock`` service model botocore ships (REST JSON, signing name
``bedrock``):

- ``POST /model-invocation-job`` (CreateModelInvocationJob): ``jobName``, ``roleArn``,
  ``modelId``, ``inputDataConfig.s3InputDataConfig.s3Uri``,
  ``outputDataConfig.s3OutputDataConfig.s3Uri``, optional ``clientRequestToken`` and
  ``timeoutDurationInHours``; answers ``{"jobArn"}``. A token seen before creates nothing and
  answers that job's ARN ("If this token matches a previous request, Amazon Bedrock ignores
  the request, but does not return an error"). The input is one ``.jsonl`` object or every
  ``.jsonl`` under a prefix ("At least one JSONL file ... must end in the extension
  .jsonl"); fewer records than the model's "Minimum number of records per batch inference
  job" (``min_records``) or more than "Records per batch inference job" (``max_records``)
  is a ``ValidationException``; more jobs in progress than the quota
  (``max_jobs_in_progress``) a ``ServiceQuotaExceededException``.
- ``GET /model-invocation-job/{jobIdentifier}`` (the ARN, URL-encoded, or the id):
  ``status`` from ``Submitted`` to ``Completed`` (``PartiallyCompleted`` when some records
  errored), ``Stopped`` or ``Expired``, with ``submitTime``, ``endTime``,
  ``jobExpirationTime`` and the record counts.
- ``POST /model-invocation-job/{jobIdentifier}/stop`` (StopModelInvocationJob).
- Output: for each input file ``<name>.jsonl``, ``<output uri>/<job id>/<name>.jsonl.out``, a
  line per processed record: the record with ``modelOutput`` (the InvokeModel answer) or, where
  the record failed, ``error`` (``{"errorCode", "errorMessage"}``) in its place; and
  ``manifest.json.out`` with the counts (batch-inference-results page). The output order is
  not promised: lines are written in reverse input order here, so a client that joins by
  position fails.

A job ends ``batch.processing_delay_s`` after creation on the simulator's clock, looked at
lazily (as Message Batches are); then each record is answered like an InvokeModel call
(``modelInput`` with its ``anthropic_version``), faults and all: an injected error is that
record's ``error``. ``bedrock_batch.expire_jobs`` jobs expire instead, unprocessed (their
records have no line), as a job past ``timeoutDurationInHours`` does. Errors are AWS REST
JSON: ``{"message"}`` with ``x-amzn-ErrorType``.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from blockbatch.core.providers import resolve_model
from blockbatch.core.registry import UnknownModelError
from blockbatch.simulator import messages
from blockbatch.simulator.errors import ApiError
from blockbatch.simulator.state import SimState, state_of

_ACCOUNT = "123456789012"
_ROLE_ARN = re.compile(r"^arn:aws(-[^:]+)?:iam::([0-9]{12})?:role/.+$")
_S3_URI = re.compile(r"^s3://(?P<bucket>[^/]+)/?(?P<key>.*)$")
_VERSIONS = {"bedrock-2023-05-31": "2023-06-01", "2026-10-21": "2026-10-21"}
_IN_PROGRESS = ("Submitted", "Validating", "Scheduled", "InProgress", "Stopping")


class AwsError(Exception):
    """An AWS REST JSON error answer."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message

    def response(self) -> web.Response:
        return web.json_response(
            {"message": self.message}, status=self.status, headers={"x-amzn-ErrorType": self.kind}
        )


def _invalid(message: str) -> AwsError:
    return AwsError(400, "ValidationException", message)


@dataclass
class Job:
    arn: str
    name: str
    token: str | None
    model_id: str
    model: str
    role_arn: str
    input_uri: str
    output_uri: str
    timeout_hours: int
    submitted: float
    ready_at: float
    files: dict[str, list[dict[str, Any]]]
    expire: bool
    status: str = "Submitted"
    ended: float | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        return self.arn.rsplit("/", 1)[1]

    @property
    def total(self) -> int:
        return sum(len(r) for r in self.files.values())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "jobArn": self.arn,
            "jobName": self.name,
            "modelId": self.model_id,
            "roleArn": self.role_arn,
            "status": self.status,
            "submitTime": _iso(self.submitted),
            "lastModifiedTime": _iso(self.ended or self.submitted),
            "inputDataConfig": {"s3InputDataConfig": {"s3Uri": self.input_uri}},
            "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": self.output_uri}},
            "timeoutDurationInHours": self.timeout_hours,
            "jobExpirationTime": _iso(self.submitted + self.timeout_hours * 3600),
            "totalRecordCount": self.total,
            "processedRecordCount": self.counts.get("processed", 0),
            "successRecordCount": self.counts.get("success", 0),
            "errorRecordCount": self.counts.get("error", 0),
        }
        if self.token:
            out["clientRequestToken"] = self.token
        if self.ended is not None:
            out["endTime"] = _iso(self.ended)
        return out


@dataclass
class JobStore:
    jobs: dict[str, Job] = field(default_factory=dict)
    by_token: dict[str, str] = field(default_factory=dict)
    expired: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


_JOBS: web.AppKey[JobStore] = web.AppKey("bedrock_jobs", JobStore)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _s3(state: SimState) -> Any:
    endpoint = state.scenario.bedrock_batch.s3_endpoint_url
    if endpoint is None:
        raise AwsError(
            500,
            "InternalServerException",
            "the simulator has no S3 to read batch files from: set the scenario's "
            "bedrock_batch.s3_endpoint_url (Services.start_s3)",
        )
    try:
        import boto3
    except ModuleNotFoundError:
        raise AwsError(
            500, "InternalServerException", "Bedrock batch jobs need boto3 (blockbatch[bedrock])"
        ) from None
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bedrock-service-role",
        aws_secret_access_key="bedrock-service-role",
    )


def _split(uri: str, what: str) -> tuple[str, str]:
    match = _S3_URI.match(uri)
    if match is None:
        raise _invalid(f"{what}: {uri!r} is not an S3 URI")
    return match["bucket"], match["key"]


def _read_input(s3: Any, uri: str) -> dict[str, list[dict[str, Any]]]:
    """Every ``.jsonl`` object at ``uri`` (one object, or all under a prefix): records."""
    bucket, key = _split(uri, "inputDataConfig.s3InputDataConfig.s3Uri")
    try:
        if key.endswith(".jsonl"):
            keys = [key]
        else:
            listed = s3.list_objects_v2(Bucket=bucket, Prefix=key)
            keys = [o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith(".jsonl")]
        files = {}
        for k in keys:
            raw = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
            files[k] = [json.loads(line) for line in raw.splitlines() if line.strip()]
    except s3.exceptions.NoSuchBucket:
        raise _invalid(f"the S3 bucket {bucket!r} does not exist") from None
    except (s3.exceptions.NoSuchKey, json.JSONDecodeError) as err:
        raise _invalid(f"cannot read the input at {uri}: {err}") from None
    if not files:
        raise _invalid(f"no .jsonl file at {uri}")
    for k, records in files.items():
        for n, r in enumerate(records, 1):
            if not isinstance(r, dict) or not isinstance(r.get("modelInput"), dict):
                raise _invalid(f"{k} line {n}: each record needs a modelInput object")
    return files


async def create_job(request: web.Request) -> web.Response:
    state, store = state_of(request), request.app[_JOBS]
    try:
        if not request.headers.get("authorization", "").strip():
            raise AwsError(403, "AccessDeniedException", "Missing Authentication Token")
        body = await request.json()
        name = body.get("jobName")
        role = body.get("roleArn")
        model_id = body.get("modelId")
        token = body.get("clientRequestToken")
        timeout_hours = int(body.get("timeoutDurationInHours") or 24)
        input_uri = body.get("inputDataConfig", {}).get("s3InputDataConfig", {}).get("s3Uri")
        output_uri = body.get("outputDataConfig", {}).get("s3OutputDataConfig", {}).get("s3Uri")
        for what, value in (
            ("jobName", name),
            ("roleArn", role),
            ("modelId", model_id),
            ("inputDataConfig.s3InputDataConfig.s3Uri", input_uri),
            ("outputDataConfig.s3OutputDataConfig.s3Uri", output_uri),
        ):
            if not isinstance(value, str) or not value:
                raise _invalid(f"{what} is required")
        if not _ROLE_ARN.match(role):
            raise _invalid(f"roleArn: {role!r} is not an IAM role ARN")
        if not 24 <= timeout_hours <= 168:
            raise _invalid("timeoutDurationInHours must be from 24 to 168")
        _split(output_uri, "outputDataConfig.s3OutputDataConfig.s3Uri")
        try:
            model = resolve_model("bedrock", model_id)[0].id
        except UnknownModelError as err:
            raise _invalid(str(err)) from None
        async with store.lock:
            if token and token in store.by_token:
                return web.json_response({"jobArn": store.by_token[token]})
            settings = state.scenario.bedrock_batch
            running = sum(1 for j in store.jobs.values() if j.status in _IN_PROGRESS)
            if running >= settings.max_jobs_in_progress:
                raise AwsError(
                    400,
                    "ServiceQuotaExceededException",
                    f"{running} batch inference jobs are in progress, the quota is "
                    f"{settings.max_jobs_in_progress}",
                )
            files = await asyncio.to_thread(_read_input, _s3(state), input_uri)
            job = Job(
                arn=f"arn:aws:bedrock:us-east-1:{_ACCOUNT}:model-invocation-job/"
                f"{secrets.token_hex(6)}",
                name=name,
                token=token,
                model_id=model_id,
                model=model,
                role_arn=role,
                input_uri=input_uri,
                output_uri=output_uri,
                timeout_hours=timeout_hours,
                submitted=state.clock(),
                ready_at=state.clock() + state.scenario.batch.processing_delay_s,
                files=files,
                expire=store.expired < settings.expire_jobs,
            )
            if job.total < settings.min_records:
                raise _invalid(
                    f"the job has {job.total} records: the minimum number of records per "
                    f"batch inference job for {model_id} is {settings.min_records}"
                )
            if job.total > settings.max_records:
                raise _invalid(
                    f"the job has {job.total} records: at most {settings.max_records} per job"
                )
            store.expired += job.expire
            store.jobs[job.job_id] = job
            if token:
                store.by_token[token] = job.arn
    except AwsError as err:
        return err.response()
    except (ValueError, AttributeError, TypeError) as err:
        return _invalid(f"malformed request: {err}").response()
    return web.json_response({"jobArn": job.arn})


def _job(store: JobStore, identifier: str) -> Job:
    job_id = unquote(identifier).rsplit("/", 1)[-1]
    job = store.jobs.get(job_id)
    if job is None:
        raise AwsError(404, "ResourceNotFoundException", f"no job {identifier!r}")
    return job


async def get_job(request: web.Request) -> web.Response:
    state, store = state_of(request), request.app[_JOBS]
    try:
        async with store.lock:
            job = _job(store, request.match_info["job"])
            await _advance(state, job)
    except AwsError as err:
        return err.response()
    return web.json_response(job.to_json())


async def stop_job(request: web.Request) -> web.Response:
    state, store = state_of(request), request.app[_JOBS]
    try:
        async with store.lock:
            job = _job(store, request.match_info["job"])
            await _advance(state, job)
            if job.status not in _IN_PROGRESS:
                raise AwsError(
                    400, "ValidationException", f"the job is {job.status}: it cannot be stopped"
                )
            # Nothing was processed yet (processing happens at the end, all at once).
            job.status, job.ended = "Stopped", state.clock()
    except AwsError as err:
        return err.response()
    return web.json_response({})


async def _advance(state: SimState, job: Job) -> None:
    """End the job once its time has come: answer and write its records, or expire it."""
    if job.status not in ("Submitted", "InProgress") or state.clock() < job.ready_at:
        if job.status == "Submitted":
            job.status = "InProgress"
        return
    if job.expire:
        job.status, job.ended = "Expired", state.clock()
        return
    outputs: dict[str, list[dict[str, Any]]] = {}
    success = error = 0
    for key, records in job.files.items():
        lines = []
        for r in records:
            line = {"recordId": r.get("recordId"), "modelInput": r["modelInput"]}
            try:
                line["modelOutput"] = await _invoke(state, job, r)
                success += 1
            except ApiError as err:
                line["error"] = {"errorCode": err.status, "errorMessage": err.message}
                error += 1
            lines.append(line)
        outputs[key] = list(reversed(lines))
    await asyncio.to_thread(_write_output, _s3(state), job, outputs, success, error)
    job.counts = {"processed": success + error, "success": success, "error": error}
    job.status = "PartiallyCompleted" if error else "Completed"
    job.ended = state.clock()


async def _invoke(state: SimState, job: Job, r: dict[str, Any]) -> dict[str, Any]:
    """One record answered like an InvokeModel call of the job's model."""
    body = dict(r["modelInput"])
    version = _VERSIONS.get(str(body.pop("anthropic_version", "")))
    if version is None:
        raise ApiError(
            "invalid_request_error",
            f"anthropic_version: must be one of {', '.join(_VERSIONS)}",
        )
    body["model"] = job.model
    keys = state.scenario.auth.valid_keys
    # The job's role was checked when it was created; its records carry no key.
    headers = {"anthropic-version": version, "x-api-key": keys[0] if keys else "bedrock-job"}
    message, _ = await messages.create_message(
        state, headers, json.dumps(body).encode(), f"{job.job_id}:{r.get('recordId')}"
    )
    return message


def _write_output(
    s3: Any, job: Job, outputs: dict[str, list[dict[str, Any]]], success: int, error: int
) -> None:
    bucket, prefix = _split(job.output_uri, "output")
    folder = "/".join(p for p in (prefix.strip("/"), job.job_id) if p)
    for key, lines in outputs.items():
        name = key.rsplit("/", 1)[-1]
        body = "".join(json.dumps(line) + "\n" for line in lines).encode()
        s3.put_object(Bucket=bucket, Key=f"{folder}/{name}.out", Body=body)
    usage = [
        line["modelOutput"].get("usage", {})
        for ls in outputs.values()
        for line in ls
        if "modelOutput" in line
    ]
    manifest = {
        "totalRecordCount": job.total,
        "processedRecordCount": success + error,
        "successRecordCount": success,
        "errorRecordCount": error,
        "inputTokenCount": sum(u.get("input_tokens", 0) for u in usage),
        "outputTokenCount": sum(u.get("output_tokens", 0) for u in usage),
    }
    s3.put_object(Bucket=bucket, Key=f"{folder}/manifest.json.out", Body=json.dumps(manifest))


def add_bedrock_job_routes(app: web.Application) -> None:
    """The ``bedrock`` control plane's model invocation job routes (module docstring)."""
    app[_JOBS] = JobStore()
    app.router.add_post("/model-invocation-job", create_job)
    app.router.add_get("/model-invocation-job/{job:.+?}", get_job)
    app.router.add_post("/model-invocation-job/{job:.+}/stop", stop_job)
