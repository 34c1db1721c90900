"""Building the worker: every workflow and activity on a task queue, shared by worker.py,
the Python API's in-process worker and tests. Connecting to Temporal is
blockbatch/runtime/connect.py (re-exported here for the worker's callers), so a front door
connects without loading the worker's modules."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkerDeploymentConfig

from activities.batches import BatchActivities
from activities.db import DbActivities
from activities.escalation import EscalationActivities
from activities.limiter import FleetLimiter
from activities.llm import LlmActivities
from activities.streams import StreamActivities
from blockbatch.runtime.bedrock_jobs import open_bedrock_jobs
from blockbatch.runtime.connect import TemporalUnavailable, connect, ensure_search_attributes
from blockbatch.runtime.metrics import BlockbatchMetrics, MetricsInterceptor, metric_meter
from blockbatch.runtime.settings import Settings
from blockbatch.send.sdk import anthropic
from blockbatch.send.sender import OpenClient
from workflows.escalate import EscalateWorkflow
from workflows.pack import ProcessPackWorkflow
from workflows.run import RunWorkflow
from workflows.stream import StreamWorkflow

__all__ = [
    "VERSIONING_BEHAVIOR",
    "WORKFLOWS",
    "TemporalUnavailable",
    "build_worker",
    "connect",
    "deployment_version",
    "ensure_search_attributes",
]

#: Every workflow type a blockbatch worker runs; the workflow and replay tests use the same list.
WORKFLOWS: list[type] = [RunWorkflow, ProcessPackWorkflow, StreamWorkflow, EscalateWorkflow]
#: With Worker Versioning, a run and its packs stay on the build that started them
#: (docs/VERSIONING.md says why and how a new build is rolled out).
VERSIONING_BEHAVIOR = VersioningBehavior.PINNED
#: A worker's sticky-queue wait unless told (``WORKFLOW_TASK_TIMEOUT_S``'s default).
STICKY_TIMEOUT = timedelta(seconds=Settings.model_fields["workflow_task_timeout_s"].default)


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


#: The worker runs its workflows outside Temporal's sandbox. The sandbox imports a
#: workflow's module afresh for each workflow it starts and swaps the importer around every
#: activation: replaying a recorded ProcessPack history costs 17 ms of CPU in it against
#: 6 ms without (a run has one pack per ~46 blocks; docs/benchmarks.md §3.5). What the
#: sandbox guards is still checked where it costs nothing at run time: the time-skipping
#: workflow tests (tests/workflows) and the replay of every recorded history run the same
#: workflows in the sandbox, so a workflow that reads the clock, the network or a random
#: source on a path those tests take fails CI (production no longer stops it);
#: tests/unit/test_workflow_state.py keeps module state out of the
#: workflows, which the sandbox would otherwise have isolated between runs.
WORKFLOW_RUNNER = UnsandboxedWorkflowRunner()

#: How long a stopping worker (SIGTERM) lets in-flight activities finish: a model call
#: under way is usually answered within it, and its answer applied.
GRACEFUL_SHUTDOWN = timedelta(seconds=30)


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
    sticky_timeout: timedelta = STICKY_TIMEOUT,
    graceful_shutdown: timedelta = GRACEFUL_SHUTDOWN,
) -> Worker:
    """The blockbatch worker: every workflow and every activity on ``task_queue``.

    When ``client``'s runtime serves metrics (``METRICS_PORT``), blockbatch's own metrics
    are counted on it too (``blockbatch/runtime/metrics.py``).

    Args:
        deployment: register with Worker Versioning as this deployment version; ``None``
            for an unversioned worker (tests, the local stack).
        open_client: opens another provider's client for the runs that name one
            (``blockbatch.runtime.claude.provider_client``); ``None``: the Claude API only.
        sticky_timeout: how long a workflow task waits on this worker's sticky queue (the
            worker that last ran its workflow) before any worker may take it: the wait
            after this worker dies (``WORKFLOW_TASK_TIMEOUT_S``).
        graceful_shutdown: how long a stopping worker lets its running activities finish
            before it cancels them.

    The worker never reads the Models API: each run's models were resolved where it
    started and are kept with it (``blockbatch.store.runs.save_models``).
    """
    meter = metric_meter(client)
    llm_acts = LlmActivities(pool, llm, FleetLimiter(pool, llm.api_key), open_client)
    db_acts = DbActivities(pool, llm, llm_acts.calls.sender)
    batch_acts = BatchActivities(
        pool,
        llm_acts.calls.sender,
        llm_acts.calls,
        bedrock=None if open_client is None else lambda: open_bedrock_jobs(llm_acts.calls.sender),
    )
    stream_acts = StreamActivities(pool)
    escalation_acts = EscalationActivities(pool, llm_acts.calls)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        workflow_runner=WORKFLOW_RUNNER,
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
        graceful_shutdown_timeout=graceful_shutdown,
        sticky_queue_schedule_to_start_timeout=sticky_timeout,
    )
