"""Google Vertex AI batch prediction for Claude: the ``batchPredictionJobs`` control plane.

The jobs' files live where the real service keeps them, in Cloud Storage (a local stand-in in
the stack, ``Services.start_gcs``; its URL is the scenario's ``vertex_batch.gcs_endpoint_url``),
read and written there through the Cloud Storage JSON API. Sources:

- Google Cloud, "Batch predictions with Anthropic Claude models"
  (cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/batch): the input, a
  JSONL file in Cloud Storage, one ``{"custom_id", "request"}`` a line, ``request`` the
  Claude body with ``anthropic_version: vertex-2023-10-16``; the output reserves
  ``response`` and ``status``; "By default, the number of concurrent batch requests that
  you can make in a single project is 4" (``vertex_batch.max_concurrent_jobs``: a create
  past it is refused, 429 ``RESOURCE_EXHAUSTED``, as Google's quota errors are).
- The Vertex AI REST reference, ``projects.locations.batchPredictionJobs``:
  ``POST .../batchPredictionJobs`` (``displayName``, ``model``, ``inputConfig.
  {instancesFormat, gcsSource.uris}``, ``outputConfig.{predictionsFormat, gcsDestination.
  outputUriPrefix}``; answers the job, ``name`` its resource name), ``GET {name}``,
  ``GET .../batchPredictionJobs?filter=display_name="..."``, ``POST {name}:cancel``;
  ``state`` a ``JobState``; ``completionStats``; ``outputInfo.gcsOutputDirectory``.
  Errors are Google's ``{"error": {"code", "message", "status"}}``.

A job ends ``batch.processing_delay_s`` after creation on the simulator's clock, looked at
lazily; then each line is answered like a rawPredict call, faults and all (an injected
error is that line's ``status``), and the output, in reverse input order (a client that
joins by position fails), is written to ``<outputUriPrefix>/prediction-model-<id>/
predictions.jsonl``. ``vertex_batch.expire_jobs`` jobs end ``JOB_STATE_EXPIRED`` instead,
unprocessed.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from blockbatch.core.providers import resolve_model
from blockbatch.core.registry import UnknownModelError
from blockbatch.simulator import messages
from blockbatch.simulator.errors import ApiError
from blockbatch.simulator.state import SimState, state_of
from blockbatch.simulator.validate import check_auth

_GS_URI = re.compile(r"^gs://(?P<bucket>[^/]+)/?(?P<key>.*)$")
_MODEL = re.compile(r"^(?:projects/[^/]+/locations/[^/]+/)?publishers/anthropic/models/(.+)$")
_VERSIONS = {"vertex-2023-10-16": "2023-06-01", "2026-10-21": "2026-10-21"}
_IN_PROGRESS = ("JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING")
_ROOT = "/v1/projects/{project}/locations/{region}/batchPredictionJobs"


class GoogleError(Exception):
    """A Google API error answer."""

    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code, self.status, self.message = code, status, message

    def response(self) -> web.Response:
        body = {"error": {"code": self.code, "message": self.message, "status": self.status}}
        return web.json_response(body, status=self.code)


def _invalid(message: str) -> GoogleError:
    return GoogleError(400, "INVALID_ARGUMENT", message)


@dataclass
class Job:
    name: str
    display_name: str
    model: str
    model_name: str
    input_uri: str
    output_prefix: str
    lines: list[dict[str, Any]]
    created: float
    ready_at: float
    expire: bool
    labels: dict[str, str]
    state: str = "JOB_STATE_PENDING"
    ended: float | None = None
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        return self.name.rsplit("/", 1)[1]

    @property
    def output_dir(self) -> str:
        return f"{self.output_prefix.rstrip('/')}/prediction-model-{self.job_id}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "displayName": self.display_name,
            "model": self.model_name,
            "labels": self.labels,
            "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": [self.input_uri]}},
            "outputConfig": {
                "predictionsFormat": "jsonl",
                "gcsDestination": {"outputUriPrefix": self.output_prefix},
            },
            "state": self.state,
            "createTime": _iso(self.created),
            "updateTime": _iso(self.ended or self.created),
            "completionStats": {
                "successfulCount": str(self.stats.get("ok", 0)),
                "failedCount": str(self.stats.get("failed", 0)),
                "incompleteCount": str(self.stats.get("incomplete", 0)),
            },
        }
        if self.ended is not None:
            out["endTime"] = _iso(self.ended)
        if self.state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_PARTIALLY_SUCCEEDED"):
            out["outputInfo"] = {"gcsOutputDirectory": self.output_dir}
        return out


@dataclass
class JobStore:
    jobs: dict[str, Job] = field(default_factory=dict)
    expired: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


_JOBS: web.AppKey[JobStore] = web.AppKey("vertex_jobs", JobStore)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _gcs(state: SimState) -> str:
    url = state.scenario.vertex_batch.gcs_endpoint_url
    if url is None:
        raise GoogleError(
            500,
            "INTERNAL",
            "the simulator has no Cloud Storage to read batch files from: set the "
            "scenario's vertex_batch.gcs_endpoint_url (Services.start_gcs)",
        )
    return url.rstrip("/")


def _split(uri: str, what: str) -> tuple[str, str]:
    match = _GS_URI.match(uri)
    if match is None or not match["key"]:
        raise _invalid(f"{what}: {uri!r} is not a Cloud Storage object URI")
    return match["bucket"], match["key"]


async def _read_input(gcs: str, uri: str) -> list[dict[str, Any]]:
    bucket, key = _split(uri, "inputConfig.gcsSource.uris")
    url = f"{gcs}/storage/v1/b/{bucket}/o/{quote(key, safe='')}?alt=media"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        if resp.status == 404:
            raise _invalid(f"cannot read the input at {uri}: no such object")
        raw = await resp.read()
    try:
        lines = [json.loads(x) for x in raw.splitlines() if x.strip()]
    except json.JSONDecodeError as err:
        raise _invalid(f"{uri}: not JSONL: {err}") from None
    for n, x in enumerate(lines, 1):
        if not isinstance(x, dict) or not isinstance(x.get("request"), dict):
            raise _invalid(f"{uri} line {n}: each line needs a request object")
    if not lines:
        raise _invalid(f"{uri}: no requests")
    return lines


async def _write_output(gcs: str, job: Job, lines: list[dict[str, Any]]) -> None:
    bucket, prefix = _split(job.output_dir + "/predictions.jsonl", "output")
    url = f"{gcs}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(prefix, safe='')}"
    body = "".join(json.dumps(x) + "\n" for x in lines).encode()
    async with aiohttp.ClientSession() as session, session.post(url, data=body) as resp:
        if resp.status >= 300:
            raise GoogleError(500, "INTERNAL", f"cannot write the output: {resp.status}")


def _authorised(request: web.Request) -> None:
    """``Authorization: Bearer`` a token is there (its validity is Google's business; it is
    still checked against the scenario's keys, like the rawPredict route's)."""
    try:
        if not request.headers.get("authorization", "").lower().startswith("bearer "):
            raise ApiError("authentication_error", "no Bearer token")
        check_auth(request.headers, state_of(request).scenario.auth)
    except ApiError:
        raise GoogleError(
            401,
            "UNAUTHENTICATED",
            "Request is missing required authentication credential.",
        ) from None


async def create_job(request: web.Request) -> web.Response:
    state, store = state_of(request), request.app[_JOBS]
    try:
        _authorised(request)
        body = await request.json()
        display = body.get("displayName")
        model_name = body.get("model")
        source = body.get("inputConfig", {})
        dest = body.get("outputConfig", {})
        uris = source.get("gcsSource", {}).get("uris") or []
        prefix = dest.get("gcsDestination", {}).get("outputUriPrefix")
        for what, value in (
            ("displayName", display),
            ("model", model_name),
            ("outputConfig.gcsDestination.outputUriPrefix", prefix),
        ):
            if not isinstance(value, str) or not value:
                raise _invalid(f"{what} is required")
        if source.get("instancesFormat") != "jsonl" or len(uris) != 1:
            raise _invalid("inputConfig: instancesFormat jsonl and one gcsSource uri")
        match = _MODEL.match(model_name)
        if match is None:
            raise _invalid(f"model: {model_name!r} is not publishers/anthropic/models/<model>")
        try:
            model = resolve_model("vertex", match[1])[0].id
        except UnknownModelError as err:
            raise GoogleError(404, "NOT_FOUND", str(err)) from None
        settings = state.scenario.vertex_batch
        async with store.lock:
            for other in store.jobs.values():  # jobs run on their own: a due one has ended
                await _advance(state, other)
            running = sum(1 for j in store.jobs.values() if j.state in _IN_PROGRESS)
            if running >= settings.max_concurrent_jobs:
                raise GoogleError(
                    429,
                    "RESOURCE_EXHAUSTED",
                    f"{running} batch prediction jobs are running in this project; the "
                    f"quota is {settings.max_concurrent_jobs} concurrent jobs",
                )
            lines = await _read_input(_gcs(state), uris[0])
            p, r = request.match_info["project"], request.match_info["region"]
            job = Job(
                name=f"projects/{p}/locations/{r}/batchPredictionJobs/{secrets.randbelow(10**18)}",
                display_name=display,
                model=model,
                model_name=model_name,
                input_uri=uris[0],
                output_prefix=prefix,
                lines=lines,
                created=state.clock(),
                ready_at=state.clock() + state.scenario.batch.processing_delay_s,
                expire=store.expired < settings.expire_jobs,
                labels={str(k): str(v) for k, v in (body.get("labels") or {}).items()},
            )
            store.expired += job.expire
            store.jobs[job.job_id] = job
    except GoogleError as err:
        return err.response()
    except (ValueError, AttributeError, TypeError) as err:
        return _invalid(f"malformed request: {err}").response()
    return web.json_response(job.to_json())


def _job(store: JobStore, job_id: str) -> Job:
    job = store.jobs.get(job_id)
    if job is None:
        raise GoogleError(404, "NOT_FOUND", f"no batch prediction job {job_id!r}")
    return job


async def get_job(request: web.Request) -> web.Response:
    state, store = state_of(request), request.app[_JOBS]
    try:
        _authorised(request)
        async with store.lock:
            job = _job(store, request.match_info["job"])
            await _advance(state, job)
    except GoogleError as err:
        return err.response()
    return web.json_response(job.to_json())


async def list_jobs(request: web.Request) -> web.Response:
    state, store = state_of(request), request.app[_JOBS]
    wanted = request.query.get("filter", "")
    match = re.fullmatch(r'\s*display_name\s*=\s*"(?P<name>[^"]*)"\s*', wanted)
    try:
        _authorised(request)
        if wanted and match is None:
            raise _invalid(f'filter: only display_name="..." is simulated (got {wanted!r})')
        async with store.lock:
            found = [
                j for j in store.jobs.values() if match is None or j.display_name == match["name"]
            ]
            for j in found:
                await _advance(state, j)
    except GoogleError as err:
        return err.response()
    return web.json_response({"batchPredictionJobs": [j.to_json() for j in found]})


async def cancel_job(request: web.Request) -> web.Response:
    state, store = state_of(request), request.app[_JOBS]
    job_id, _, verb = request.match_info["job"].partition(":")
    try:
        _authorised(request)
        if verb != "cancel":
            raise GoogleError(404, "NOT_FOUND", f"no method {verb!r}")
        async with store.lock:
            job = _job(store, job_id)
            await _advance(state, job)
            if job.state in _IN_PROGRESS:
                # Nothing was processed yet (processing happens at the end, all at once).
                job.state, job.ended = "JOB_STATE_CANCELLED", state.clock()
                job.stats = {"incomplete": len(job.lines)}
    except GoogleError as err:
        return err.response()
    return web.json_response({})


async def _advance(state: SimState, job: Job) -> None:
    """End the job once its time has come: answer and write its lines, or expire it."""
    if job.state not in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"):
        return
    if state.clock() < job.ready_at:
        job.state = "JOB_STATE_RUNNING"
        return
    if job.expire:
        job.state, job.ended = "JOB_STATE_EXPIRED", state.clock()
        job.stats = {"incomplete": len(job.lines)}
        return
    out, ok, failed = [], 0, 0
    for x in job.lines:
        line: dict[str, Any] = {"custom_id": x.get("custom_id"), "request": x["request"]}
        try:
            line["response"] = await _predict(state, job, x)
            line["status"] = ""
            ok += 1
        except ApiError as err:
            line["status"] = f"{err.status} {err.error_type}: {err.message}"
            failed += 1
        out.append(line)
    await _write_output(_gcs(state), job, list(reversed(out)))
    job.stats = {"ok": ok, "failed": failed}
    job.state = "JOB_STATE_PARTIALLY_SUCCEEDED" if failed else "JOB_STATE_SUCCEEDED"
    job.ended = state.clock()


async def _predict(state: SimState, job: Job, x: dict[str, Any]) -> dict[str, Any]:
    """One line answered like a rawPredict call of the job's model."""
    body = dict(x["request"])
    version = _VERSIONS.get(str(body.pop("anthropic_version", "")))
    if version is None:
        raise ApiError(
            "invalid_request_error", f"anthropic_version: must be one of {', '.join(_VERSIONS)}"
        )
    body["model"] = job.model
    keys = state.scenario.auth.valid_keys
    # The job's caller was checked when it was created; its lines carry no key.
    headers = {"anthropic-version": version, "x-api-key": keys[0] if keys else "vertex-job"}
    message, _ = await messages.create_message(
        state, headers, json.dumps(body).encode(), f"{job.job_id}:{x.get('custom_id')}"
    )
    return message


def add_vertex_job_routes(app: web.Application) -> None:
    """The ``batchPredictionJobs`` routes (module docstring)."""
    app[_JOBS] = JobStore()
    app.router.add_post(_ROOT, create_job)
    app.router.add_get(_ROOT, list_jobs)
    app.router.add_get(_ROOT + "/{job}", get_job)
    app.router.add_post(_ROOT + "/{job}", cancel_job)
