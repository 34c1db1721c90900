"""Connecting to Temporal and building the worker, shared by worker.py, starter.py and tests."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio.worker import Worker, WorkerDeploymentConfig

from activities.batches import BatchActivities
from activities.db import DbActivities
from activities.escalation import EscalationActivities
from activities.limiter import FleetLimiter
from activities.llm import LlmActivities
from activities.sdk import anthropic
from activities.sender import OpenClient
from activities.streams import StreamActivities
from blockbatch.runtime.metrics import BlockbatchMetrics, MetricsInterceptor, metric_meter
from blockbatch.runtime.settings import Settings
from workflows.attributes import SEARCH_ATTRIBUTES
from workflows.escalate import EscalateWorkflow
from workflows.pack import ProcessPackWorkflow
from workflows.run import RunWorkflow
from workflows.stream import StreamWorkflow

#: Every workflow type a blockbatch worker runs; the workflow and replay tests use the same list.
WORKFLOWS: list[type] = [RunWorkflow, ProcessPackWorkflow, StreamWorkflow, EscalateWorkflow]
#: With Worker Versioning, a run and its packs stay on the build that started them
#: (docs/VERSIONING.md says why and how a new build is rolled out).
VERSIONING_BEHAVIOR = VersioningBehavior.PINNED


class TemporalUnavailable(RuntimeError):
    """Temporal could not be reached; the message says where and what to do."""


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """A client of the configured namespace; ``runtime``: one that serves metrics
    (``blockbatch.runtime.metrics.metrics_runtime``), else the SDK's default."""
    address = settings.resolved_temporal_address
    try:
        return await Client.connect(
            address,
            namespace=settings.temporal_namespace,
            data_converter=pydantic_data_converter,
            runtime=runtime,
        )
    except RuntimeError as exc:
        raise TemporalUnavailable(
            f"cannot connect to Temporal at {address} ({exc}); start the local stack with "
            "`make up`, or set TEMPORAL_ADDRESS"
        ) from exc


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register blockbatch's search attributes if the namespace lacks them."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import (
        AddSearchAttributesRequest,
        ListSearchAttributesRequest,
    )

    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = {k: v for k, v in SEARCH_ATTRIBUTES.items() if k not in listed.custom_attributes}
    if not missing:
        return
    kinds = {"Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD}
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={k: kinds[v] for k, v in missing.items()},
            )
        )
    except RPCError as exc:
        commands = "; ".join(
            f"temporal operator search-attribute create --namespace {namespace} "
            f"--name {k} --type {v}"
            for k, v in missing.items()
        )
        raise TemporalUnavailable(
            f"namespace {namespace!r} lacks blockbatch's search attributes and they could not "
            f"be added ({exc.message}); ask a Temporal admin to run: {commands}"
        ) from exc


def deployment_version(settings: Settings) -> WorkerDeploymentVersion | None:
    """The Worker Versioning version this worker registers as, or ``None`` (unversioned).

    Raises:
        ValueError: only one of the deployment name and the build id is set.
    """
    name, build_id = settings.worker_deployment_name, settings.worker_build_id
    if name is None and build_id is None:
        return None
    if name is None or build_id is None:
        raise ValueError(
            "Worker Versioning needs both WORKER_DEPLOYMENT_NAME and WORKER_BUILD_ID "
            f"(got deployment name {name!r}, build id {build_id!r}): set both, or neither "
            "for an unversioned worker"
        )
    return WorkerDeploymentVersion(deployment_name=name, build_id=build_id)


def build_worker(
    client: Client,
    task_queue: str,
    pool: asyncpg.Pool,
    llm: anthropic.AsyncAnthropic,
    *,
    max_concurrent_activities: int = 100,
    max_concurrent_workflow_tasks: int = 50,
    deployment: WorkerDeploymentVersion | None = None,
    open_client: OpenClient | None = None,
) -> Worker:
    """The blockbatch worker: every workflow and every activity on ``task_queue``.

    When ``client``'s runtime serves metrics (``METRICS_PORT``), blockbatch's own metrics
    are counted on it too (``blockbatch/runtime/metrics.py``).

    Args:
        deployment: register with Worker Versioning as this deployment version; ``None``
            for an unversioned worker (tests, the local stack).
        open_client: opens another provider's client for the runs that name one
            (``blockbatch.runtime.claude.provider_client``); ``None``: the Claude API only.

    The worker never reads the Models API: each run's models were resolved where it
    started and are kept with it (``blockbatch.store.runs.save_models``).
    """
    meter = metric_meter(client)
    llm_acts = LlmActivities(pool, llm, FleetLimiter(pool, llm.api_key), open_client)
    db_acts = DbActivities(pool, llm, llm_acts.calls.sender)
    batch_acts = BatchActivities(pool, llm, llm_acts.calls)
    stream_acts = StreamActivities(pool)
    escalation_acts = EscalationActivities(pool, llm_acts.calls)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=[
            db_acts.plan_run,
            db_acts.replan_run,
            db_acts.apply_results,
            db_acts.fail_blocks,
            db_acts.record_split,
            db_acts.mark_run_cancelling,
            db_acts.finish_run,
            db_acts.plan_retry,
            llm_acts.call_model,
            llm_acts.probe_api,
            llm_acts.warm_cache,
            llm_acts.probe_quality,
            batch_acts.open_batch_run,
            batch_acts.prewarm_round,
            batch_acts.submit_round,
            batch_acts.poll_round,
            batch_acts.cancel_round,
            batch_acts.collect_round,
            batch_acts.apply_round,
            stream_acts.poll_stream,
            stream_acts.form_pack,
            escalation_acts.plan_escalation,
            escalation_acts.second_pass,
            escalation_acts.count_to_escalate,
            escalation_acts.escalate_blocks,
        ],
        interceptors=[] if meter is None else [MetricsInterceptor(BlockbatchMetrics(meter))],
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_workflow_tasks=max_concurrent_workflow_tasks,
        # Every activity is async and runs on the event loop, so no activity_executor: a
        # thread pool would sit unused (and a 4-thread one made the SDK warn about 20 slots).
        # A sync activity added later makes Worker() refuse to start until one is given.
        deployment_config=None
        if deployment is None
        else WorkerDeploymentConfig(
            version=deployment,
            use_worker_versioning=True,
            default_versioning_behavior=VERSIONING_BEHAVIOR,
        ),
        graceful_shutdown_timeout=timedelta(seconds=30),
    )
