"""Amazon Bedrock batch inference jobs: submit, poll, results, cancel (the job client).

:class:`BedrockJobs` runs one round's part as a model invocation job through boto3's
``bedrock`` client (the control plane) with its JSONL in S3 (boto3's ``s3`` client); the
rules (records, results, statuses, settings) are ``blockbatch/core/bedrock_batch.py``'s.
Both clients take the worker's AWS credentials, region and endpoints where boto3 reads them
(``AWS_REGION``, ``AWS_PROFILE`` or keys, ``AWS_ENDPOINT_URL_BEDROCK``,
``AWS_ENDPOINT_URL_S3``); nothing of them reaches a job, the ledger or a log line.

* **Created once.** A part's files go to ``<prefix>/<token>/``, ``token`` derived from its
  custom_ids, and the job is created with ``clientRequestToken = token``: Bedrock ignores a
  create whose token it has seen, answering the first job, so a create repeated after a
  crash (``activities/batches/create.py``) adopts the job it made instead of paying twice.
* **Below the minimum, sync.** A part with fewer records than the model's minimum per job
  is not sent as a job (Bedrock would refuse it): its records are written to S3 all the same
  and, when its results are read, each is sent through InvokeModel by the worker's sender
  (``blockbatch/send/sender.py``, the run's route) at the on-demand price. Only records not yet in the ledger are
  sent (``results(..., wanted=...)``), and the collector records each answer as it comes,
  so a retried collection does not pay for one twice.
* **Joined on recordId.** Results are read from every ``*.jsonl.out`` under the job's output
  folder and matched to requests by ``recordId`` (our custom_id) only.

:class:`BedrockSender` is a Bedrock run's :class:`~blockbatch.send.sender.Sender`: its
batch calls (create, retrieve, cancel, results) are these jobs, so the batch activities
run a Bedrock run unchanged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.exceptions import ApplicationError

from activities.errors import application_error
from blockbatch.core.bedrock_batch import (
    SYNC_JOB_PREFIX,
    BedrockBatchConfig,
    S3Location,
    is_sync_job,
    job_name,
    job_token,
    output_result,
    processing_status,
    records_jsonl,
    sync_request,
)
from blockbatch.core.claude_errors import ClaudeError, classify
from blockbatch.core.endpoint import Endpoint
from blockbatch.core.providers import CLAUDE_API, Route
from blockbatch.send.sender import (
    Counted,
    NotSent,
    ProviderBatch,
    Sender,
    Sent,
    provider_batch,
)

#: An AWS error code as the status and Messages error type the run's policy classifies.
_AWS_ERRORS: dict[str, tuple[int, str]] = {
    "ThrottlingException": (429, "rate_limit_error"),
    "ServiceQuotaExceededException": (429, "rate_limit_error"),
    "TooManyRequestsException": (429, "rate_limit_error"),
    "AccessDeniedException": (403, "permission_error"),
    "UnrecognizedClientException": (401, "authentication_error"),
    "InvalidSignatureException": (401, "authentication_error"),
    "ExpiredTokenException": (401, "authentication_error"),
    "ValidationException": (400, "invalid_request_error"),
    "ConflictException": (400, "invalid_request_error"),
    "ResourceNotFoundException": (404, "not_found_error"),
    "NoSuchBucket": (404, "not_found_error"),
    "InternalServerException": (500, "api_error"),
    "ServiceUnavailableException": (503, "overloaded_error"),
}


def aws_error(err: Exception, doing: str) -> ApplicationError:
    """A boto3 failure as the activity error the batch workflow expects (retried, or not)."""
    response = getattr(err, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        code = str(error.get("Code") or "")
        status, kind = _AWS_ERRORS.get(
            code, (int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 500), code)
        )
        message = f"{code}: {error.get('Message') or ''}".strip(": ")
        return application_error(classify(status, kind, message, model_call=False), doing)
    # No answer (botocore's EndpointConnectionError, a read timeout): retried.
    return application_error(classify(None, "APIConnectionError", str(err)), doing)


class BedrockJobs:
    """Model invocation jobs in one account and region (module docstring).

    Args:
        config: role, S3 location and quotas (``BedrockBatchConfig.from_env``).
        bedrock: boto3's ``bedrock`` client.
        s3: boto3's ``s3`` client.
        sender: the worker's sending step, which a sync part's records go through
            (InvokeModel, with the run's route).
    """

    def __init__(self, config: BedrockBatchConfig, bedrock: Any, s3: Any, sender: Sender) -> None:
        self.config = config
        self.bedrock = bedrock
        self.s3 = s3
        self.sender = sender

    @property
    def location(self) -> S3Location:
        return self.config.location

    async def submit(self, wire_model: str, requests: list[dict[str, Any]]) -> str:
        """Write a part's records to S3 and create its job (once); returns the job's ARN,
        or a sync job's id when the part is under the minimum."""
        token = job_token([r["custom_id"] for r in requests])
        body = records_jsonl(requests)
        if self.config.runs_sync(len(requests)):
            key = self.location.key(token, "sync", "records.jsonl")
            await self._call(
                self.s3.put_object,
                "writing a part's records to S3",
                Bucket=self.location.bucket,
                Key=key,
                Body=body,
            )
            return SYNC_JOB_PREFIX + self.location.uri(token, "sync", "records.jsonl")
        key = self.location.key(token, "input", "records.jsonl")
        await self._call(
            self.s3.put_object,
            "writing a job's records to S3",
            Bucket=self.location.bucket,
            Key=key,
            Body=body,
        )
        created = await self._call(
            self.bedrock.create_model_invocation_job,
            "creating a Bedrock batch inference job",
            jobName=job_name(token),
            roleArn=self.config.role_arn,
            clientRequestToken=token,
            modelId=wire_model,
            inputDataConfig={
                "s3InputDataConfig": {"s3Uri": self.location.uri(token, "input", "records.jsonl")}
            },
            outputDataConfig={
                "s3OutputDataConfig": {"s3Uri": self.location.uri(token, "output") + "/"}
            },
            timeoutDurationInHours=self.config.timeout_hours,
        )
        return str(created["jobArn"])

    async def poll(self, job_id: str) -> dict[str, Any]:
        """``GetModelInvocationJob``'s answer (a sync job: already ended)."""
        if is_sync_job(job_id):
            return {"status": "Completed", "totalRecordCount": 0}
        return dict(
            await self._call(
                self.bedrock.get_model_invocation_job,
                f"looking at Bedrock job {job_id}",
                jobIdentifier=job_id,
            )
        )

    async def cancel(self, job_id: str) -> dict[str, Any]:
        """Stop a job (``StopModelInvocationJob``); one that already ended stays as it is."""
        if not is_sync_job(job_id):
            job = await self.poll(job_id)
            if processing_status(str(job.get("status"))) == "in_progress":
                await self._call(
                    self.bedrock.stop_model_invocation_job,
                    f"stopping Bedrock job {job_id}",
                    jobIdentifier=job_id,
                )
        return await self.poll(job_id)

    async def results(
        self, job_id: str, model_id: str, route: Route, wanted: Collection[str] | None = None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """``(recordId, Message Batches result)`` of a job; of a sync job, each record in
        ``wanted`` (all when ``None``) sent now, through InvokeModel."""
        if is_sync_job(job_id):
            async for item in self._sync_results(job_id, model_id, route, wanted):
                yield item
            return
        job = await self.poll(job_id)
        output = str(job["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"])
        location = S3Location.parse(output.rstrip("/"))
        folder = location.key(job_id.rsplit("/", 1)[-1]) + "/"
        listed = await self._call(
            self.s3.list_objects_v2,
            f"listing the results of {job_id}",
            Bucket=location.bucket,
            Prefix=folder,
        )
        for item in listed.get("Contents", []):
            if not str(item["Key"]).endswith(".jsonl.out"):
                continue
            raw = await self._read(location.bucket, str(item["Key"]))
            for line in raw.splitlines():
                if line.strip():
                    yield output_result(json.loads(line))

    async def _sync_results(
        self, job_id: str, model_id: str, route: Route, wanted: Collection[str] | None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        location = S3Location.parse(job_id.removeprefix(SYNC_JOB_PREFIX))
        raw = await self._read(location.bucket, location.prefix)
        for line in raw.splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            record_id = str(rec["recordId"])
            if wanted is not None and record_id not in wanted:
                continue
            try:
                sent = await self.sender.send(sync_request(model_id, rec["modelInput"]), route)
            except NotSent as err:
                if not err.answered:  # nothing came back: retried, nothing paid
                    raise application_error(err.error, f"sending {record_id}") from None
                yield record_id, errored_result(err.error)
                continue
            yield record_id, {"type": "succeeded", "message": sent.message}

    async def _read(self, bucket: str, key: str) -> bytes:
        got = await self._call(
            self.s3.get_object, f"reading s3://{bucket}/{key}", Bucket=bucket, Key=key
        )
        return bytes(await asyncio.to_thread(got["Body"].read))

    async def _call(self, fn: Callable[..., Any], doing: str, **kwargs: Any) -> Any:
        """One boto3 call off the event loop; its failure as an activity error."""
        from botocore.exceptions import BotoCoreError, ClientError  # with boto3

        try:
            return await asyncio.to_thread(fn, **kwargs)
        except (ClientError, BotoCoreError) as err:
            raise aws_error(err, doing) from None


# ------------------------------------------------------- as the anthropic client's batches


def as_message_batch(job_id: str, job: dict[str, Any], created: datetime | None = None) -> Any:
    """A job as the SDK's ``MessageBatch`` (what the batch activities record and read)."""
    from anthropic.types.messages import MessageBatch

    status = str(job.get("status"))
    state = processing_status(status)
    total = int(job.get("totalRecordCount") or 0)
    done = int(job.get("processedRecordCount") or 0)
    left = max(total - done, 0)
    submitted = job.get("submitTime") or created or datetime.now(UTC)
    ended = job.get("endTime") if state == "ended" else None
    expires = job.get("jobExpirationTime") or submitted + timedelta(hours=24)
    return MessageBatch.model_validate(
        {
            "id": job_id,
            "type": "message_batch",
            "processing_status": state,
            "created_at": submitted,
            "expires_at": expires,
            "ended_at": ended or (submitted if is_sync_job(job_id) else None),
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": None,
            "request_counts": {
                "processing": left if state != "ended" else 0,
                "succeeded": int(job.get("successRecordCount") or 0),
                "errored": int(job.get("errorRecordCount") or 0),
                "canceled": left if status == "Stopped" else 0,
                "expired": left if status == "Expired" else 0,
            },
        }
    )


class BedrockBatches:
    """:class:`BedrockJobs` for one run; ``endpoint`` is who answers (Bedrock's, as the
    run's sync calls)."""

    def __init__(self, jobs: BedrockJobs, model_id: str, route: Route, endpoint: Endpoint) -> None:
        self.jobs = jobs
        self.model_id = model_id
        self.route = route
        self.endpoint = endpoint


def errored_result(error: ClaudeError) -> dict[str, Any]:
    """A sync record's error answer as a Message Batches ``errored`` result."""
    body: dict[str, Any] = {"type": error.error_type, "message": error.message}
    if error.error_code:
        body["details"] = {"error_code": error.error_code}
    return {"type": "errored", "error": {"type": "error", "error": body}}


class BedrockSender:
    """The worker's :class:`~blockbatch.send.sender.Sender` for one Bedrock run's batches:
    its batch calls are the run's model invocation jobs (:class:`BedrockBatches`), every
    other request goes to the worker's own sender."""

    def __init__(self, sender: Sender, batches: BedrockBatches) -> None:
        self.sender = sender
        self.bedrock = batches

    @property
    def min_records(self) -> int:
        """Bedrock's minimum records per job (a smaller part runs sync)."""
        return self.bedrock.jobs.config.min_records

    async def send(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Sent:
        return await self.sender.send(request, route)

    async def count_tokens(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Counted:
        return await self.sender.count_tokens(request, route)

    async def endpoint(self, route: Route = CLAUDE_API) -> Endpoint:
        return self.bedrock.endpoint

    async def create_batch(
        self, requests: list[dict[str, Any]], route: Route = CLAUDE_API
    ) -> ProviderBatch:
        b = self.bedrock
        job_id = await b.jobs.submit(b.route.wire_model or b.model_id, requests)
        if is_sync_job(job_id):
            job = {"status": "Completed", "totalRecordCount": len(requests)}
            return provider_batch(as_message_batch(job_id, job))
        return provider_batch(as_message_batch(job_id, await b.jobs.poll(job_id)))

    async def batch(self, batch_id: str, route: Route = CLAUDE_API) -> ProviderBatch:
        return provider_batch(as_message_batch(batch_id, await self.bedrock.jobs.poll(batch_id)))

    async def cancel_batch(self, batch_id: str, route: Route = CLAUDE_API) -> ProviderBatch:
        job = await self.bedrock.jobs.cancel(batch_id)
        return provider_batch(as_message_batch(batch_id, job))

    async def batches(self, route: Route = CLAUDE_API) -> AsyncGenerator[ProviderBatch, None]:
        """No job to adopt by listing: a repeated create with the part's token finds it."""
        for _ in ():
            yield _

    async def batch_results(
        self, batch_id: str, route: Route = CLAUDE_API, wanted: Collection[str] | None = None
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        from anthropic.types.messages import MessageBatchIndividualResponse

        b = self.bedrock
        async for record_id, result in b.jobs.results(batch_id, b.model_id, b.route, wanted):
            line = MessageBatchIndividualResponse.model_validate(
                {"custom_id": record_id, "result": result}
            )
            yield record_id, line.result.model_dump(mode="json")
