"""Google Vertex AI batch prediction jobs: submit, poll, results, cancel (the job client).

:class:`VertexJobs` runs one round's part as a ``batchPredictionJobs`` job of Anthropic's
publisher model, its JSONL in Cloud Storage; the rules (lines, results, states, settings)
are ``blockbatch/core/vertex_batch.py``'s. Both APIs are plain JSON over HTTP (aiohttp,
already the simulator's), authorised with the access token the run's Vertex client already
holds (``ANTHROPIC_VERTEX_ACCESS_TOKEN`` or Application Default Credentials, refreshed by
the SDK's ``AnthropicVertex``), sent as ``Authorization: Bearer`` and never kept, logged
or put in an error. The control plane is the Vertex client's base URL
(``https://{region}-aiplatform.googleapis.com/v1``, or ``ANTHROPIC_VERTEX_BASE_URL``);
Cloud Storage is ``https://storage.googleapis.com``, or ``STORAGE_EMULATOR_HOST`` (the
variable Google's storage clients read for a local stand-in).

* **Created once.** A part's files go to ``<prefix>/<token>/``, ``token`` derived from its
  custom_ids, and its job is named after the token. Vertex has no idempotency token, so a
  create first lists the jobs of that name and adopts one (a create repeated after a crash,
  ``activities/batches/create.py``, or an orphan of a worker that died) instead of paying
  for a second.
* **Joined on custom_id.** Results are read from every ``.jsonl`` under the job's
  ``outputInfo.gcsOutputDirectory`` and matched by ``custom_id`` only.
* **Expired or cancelled**: the lines without an answer are counted expired (canceled),
  and resubmitted in the next round like an expired Message Batches request.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, Collection
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp
from temporalio.exceptions import ApplicationError

from activities.errors import application_error
from blockbatch.core.batch_types import BatchCounts
from blockbatch.core.claude_errors import classify
from blockbatch.core.endpoint import Endpoint
from blockbatch.core.providers import CLAUDE_API, Route
from blockbatch.core.vertex_batch import (
    INPUT_NAME,
    GcsLocation,
    VertexBatchConfig,
    counts,
    job_body,
    name_filter,
    output_result,
    part_token,
    processing_status,
    requests_jsonl,
)
from blockbatch.send.sdk import vertex_access_token
from blockbatch.send.sender import Counted, ProviderBatch, Sender, Sent

#: Google's error ``status`` as the Messages error type the run's policy classifies.
_GOOGLE_ERRORS = {
    "RESOURCE_EXHAUSTED": "rate_limit_error",
    "UNAVAILABLE": "overloaded_error",
    "PERMISSION_DENIED": "permission_error",
    "UNAUTHENTICATED": "authentication_error",
    "INVALID_ARGUMENT": "invalid_request_error",
    "FAILED_PRECONDITION": "invalid_request_error",
    "NOT_FOUND": "not_found_error",
    "INTERNAL": "api_error",
    "DEADLINE_EXCEEDED": "timeout_error",
}
#: The label a job carries its number of requests in (completionStats has no total).
_REQUESTS_LABEL = "blockbatch-requests"
_TIMEOUT = aiohttp.ClientTimeout(total=120)


def google_error(status: int, body: bytes, doing: str) -> ApplicationError:
    """A Google error answer as the activity error the batch workflow expects."""
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    kind = _GOOGLE_ERRORS.get(str(error.get("status") or ""), "api_error")
    message = str(error.get("message") or f"HTTP {status}")
    return application_error(classify(status, kind, message, model_call=False), doing)


class VertexJobs:
    """Batch prediction jobs in one project and region (module docstring).

    Args:
        config: project, region, Cloud Storage location (``VertexBatchConfig.from_env``).
        vertex: the run's ``AsyncAnthropicVertex`` (its base URL and access token).
        storage_url: Cloud Storage's JSON API root.
    """

    def __init__(self, config: VertexBatchConfig, vertex: Any, storage_url: str) -> None:
        self.config = config
        self.vertex = vertex
        self.storage_url = storage_url.rstrip("/")

    @property
    def location(self) -> GcsLocation:
        return self.config.location

    def _jobs_url(self) -> str:
        return f"{str(self.vertex.base_url).rstrip('/')}/{self.config.parent}/batchPredictionJobs"

    async def _request(
        self, method: str, url: str, doing: str, *, data: bytes | None = None, **kw: Any
    ) -> bytes:
        token = await vertex_access_token(self.vertex)
        headers = {"Authorization": f"Bearer {token}"}
        if data is not None:
            headers["Content-Type"] = kw.pop("content_type", "application/json")
        try:
            async with (
                aiohttp.ClientSession(timeout=_TIMEOUT) as session,
                session.request(method, url, data=data, headers=headers, params=kw) as resp,
            ):
                body = await resp.read()
                if resp.status >= 300:
                    raise google_error(resp.status, body, doing)
                return body
        except aiohttp.ClientError as err:  # no answer: retried
            raise application_error(classify(None, "APIConnectionError", str(err)), doing) from None

    async def _json(self, method: str, url: str, doing: str, **kw: Any) -> dict[str, Any]:
        out = json.loads(await self._request(method, url, doing, **kw) or b"{}")
        return dict(out)

    async def bucket_reachable(self) -> None:
        """The bucket answers (``check --provider vertex``); raises the activity error."""
        await self._request(
            "GET",
            f"{self.storage_url}/storage/v1/b/{self.location.bucket}",
            f"reading the bucket gs://{self.location.bucket}",
        )

    async def submit(self, wire_model: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
        """The part's job: the one already made for these requests, else a new one (its
        JSONL written first)."""
        token = part_token([r["custom_id"] for r in requests])
        found = await self._json(
            "GET", self._jobs_url(), "looking for a Vertex job", filter=name_filter(token)
        )
        for job in found.get("batchPredictionJobs") or []:
            return dict(job)
        key = self.location.key(token, INPUT_NAME)
        await self._request(
            "POST",
            f"{self.storage_url}/upload/storage/v1/b/{self.location.bucket}/o",
            "writing a job's requests to Cloud Storage",
            data=requests_jsonl(requests),
            content_type="application/octet-stream",
            uploadType="media",
            name=key,
        )
        body = job_body(self.config, token, wire_model)
        body["labels"] = {_REQUESTS_LABEL: str(len(requests))}
        return await self._json(
            "POST",
            self._jobs_url(),
            "creating a Vertex batch prediction job",
            data=json.dumps(body).encode(),
        )

    async def poll(self, name: str) -> dict[str, Any]:
        base = str(self.vertex.base_url).rstrip("/")
        return await self._json("GET", f"{base}/{name}", f"looking at Vertex job {name}")

    async def cancel(self, name: str) -> dict[str, Any]:
        job = await self.poll(name)
        if processing_status(str(job.get("state"))) == "in_progress":
            base = str(self.vertex.base_url).rstrip("/")
            await self._request(
                "POST", f"{base}/{name}:cancel", f"cancelling Vertex job {name}", data=b"{}"
            )
        return await self.poll(name)

    async def results(self, name: str) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        job = await self.poll(name)
        directory = (job.get("outputInfo") or {}).get("gcsOutputDirectory")
        if not directory:  # ended without output (expired, cancelled, failed)
            return
        where = GcsLocation.parse(str(directory), "gcsOutputDirectory")
        listed = await self._json(
            "GET",
            f"{self.storage_url}/storage/v1/b/{where.bucket}/o",
            f"listing the results of {name}",
            prefix=where.prefix + "/",
        )
        for item in listed.get("items") or []:
            object_name = str(item["name"])
            if not object_name.endswith(".jsonl"):
                continue
            raw = await self._request(
                "GET",
                f"{self.storage_url}/storage/v1/b/{where.bucket}/o/{quote(object_name, safe='')}",
                f"reading gs://{where.bucket}/{object_name}",
                alt="media",
            )
            for line in raw.splitlines():
                if line.strip():
                    yield output_result(json.loads(line))


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def as_provider_batch(job: dict[str, Any]) -> ProviderBatch:
    """A job as the batch activities record it."""
    total = int((job.get("labels") or {}).get(_REQUESTS_LABEL) or 0)
    state = str(job.get("state") or "")
    status = processing_status(state)
    return ProviderBatch(
        id=str(job["name"]),
        status=status,
        counts=BatchCounts(**counts(job, total)),
        created_at=_time(job.get("createTime")) or datetime.now(UTC),
        expires_at=None,  # not documented for Claude's batch jobs (docs/providers.md)
        ended_at=_time(job.get("endTime")) if status == "ended" else None,
    )


class VertexSender:
    """The worker's :class:`~blockbatch.send.sender.Sender` for one Vertex run's batches:
    its batch calls are the run's batch prediction jobs; every other request goes to the
    worker's own sender."""

    def __init__(
        self, sender: Sender, jobs: VertexJobs, route: Route, model_id: str, endpoint: Endpoint
    ) -> None:
        self.sender = sender
        self.jobs = jobs
        self.route = route
        self.model_id = model_id
        self._endpoint = endpoint

    async def send(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Sent:
        return await self.sender.send(request, route)

    async def count_tokens(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Counted:
        return await self.sender.count_tokens(request, route)

    async def endpoint(self, route: Route = CLAUDE_API) -> Endpoint:
        return self._endpoint

    async def create_batch(
        self, requests: list[dict[str, Any]], route: Route = CLAUDE_API
    ) -> ProviderBatch:
        job = await self.jobs.submit(self.route.wire_model or self.model_id, requests)
        return as_provider_batch(job)

    async def batch(self, batch_id: str, route: Route = CLAUDE_API) -> ProviderBatch:
        return as_provider_batch(await self.jobs.poll(batch_id))

    async def cancel_batch(self, batch_id: str, route: Route = CLAUDE_API) -> ProviderBatch:
        return as_provider_batch(await self.jobs.cancel(batch_id))

    async def batches(self, route: Route = CLAUDE_API) -> AsyncGenerator[ProviderBatch, None]:
        """No job to adopt by listing: a repeated create finds the part's job by name."""
        for _ in ():
            yield _

    async def batch_results(
        self, batch_id: str, route: Route = CLAUDE_API, wanted: Collection[str] | None = None
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        from anthropic.types.messages import MessageBatchIndividualResponse

        async for custom_id, result in self.jobs.results(batch_id):
            line = MessageBatchIndividualResponse.model_validate(
                {"custom_id": custom_id, "result": result}
            )
            yield custom_id, line.result.model_dump(mode="json")


def open_vertex_jobs(sender: Any, env: Any = None) -> VertexJobs:
    """The job client of this worker's Vertex client (``sender.client_for("vertex")``).

    Raises:
        ValueError: a setting is missing or malformed (the message says what to set).
    """
    return vertex_jobs_for(sender.client_for("vertex"), env)


def vertex_jobs_for(vertex: Any, env: Any = None) -> VertexJobs:
    """The job client over the ``AsyncAnthropicVertex`` client ``vertex``, with the settings
    in ``env`` (the process's environment when ``None``).

    Raises:
        ValueError: a setting is missing or malformed (the message says what to set).
    """
    env = os.environ if env is None else env
    config = VertexBatchConfig.from_env(env)
    storage = (env.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com").strip()
    return VertexJobs(config, vertex, storage)


async def batch_readiness(vertex: Any, env: Any = None) -> str:
    """Whether ``--mode batch`` will work with this environment (``check --provider
    vertex``): the settings, then the bucket answering through the client's token."""
    try:
        jobs = vertex_jobs_for(vertex, env)
    except ValueError as err:
        return f"not ready: {err}"
    try:
        await jobs.bucket_reachable()
    except ApplicationError as err:
        return f"not ready: {err.message}"
    return f"ready: gs://{jobs.location.bucket} answers; jobs go to {jobs.config.parent}"
