"""How build_worker configures the Temporal worker: executor and Worker Versioning."""

from __future__ import annotations

import uuid
import warnings
from datetime import timedelta
from typing import Any

import anthropic
import pytest
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from blockbatch.runtime.settings import Settings
from blockbatch.runtime.temporal import build_worker, deployment_version
from tests.waiting import until

#: build_worker keeps the pool for the activities; none of them runs in these tests.
NO_POOL: Any = object()


def _worker(env: WorkflowEnvironment, **kwargs: Any) -> Any:
    llm = anthropic.AsyncAnthropic(api_key="unused", max_retries=0)
    return build_worker(env.client, f"cfg-{uuid.uuid4().hex[:8]}", NO_POOL, llm, **kwargs)


async def test_building_the_worker_emits_no_executor_warning(ts_env: WorkflowEnvironment) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker = _worker(ts_env, max_concurrent_activities=20)
    assert [str(w.message) for w in caught if "activity_executor" in str(w.message)] == []
    assert worker.config().get("activity_executor") is None


async def test_unset_deployment_means_an_unversioned_worker(ts_env: WorkflowEnvironment) -> None:
    assert deployment_version(Settings()) is None
    assert _worker(ts_env).config().get("deployment_config") is None


async def test_deployment_name_and_build_id_turn_on_worker_versioning(
    ts_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKER_DEPLOYMENT_NAME", "blockbatch")
    monkeypatch.setenv("WORKER_BUILD_ID", "2026-11-23.1")
    version = deployment_version(Settings())
    assert version == WorkerDeploymentVersion("blockbatch", "2026-11-23.1")
    config = _worker(ts_env, deployment=version).config()["deployment_config"]
    assert config is not None and config.use_worker_versioning
    assert config.version == version
    assert config.default_versioning_behavior == VersioningBehavior.PINNED


def test_half_a_deployment_version_is_refused_with_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORKER_BUILD_ID", "abc123")
    with pytest.raises(ValueError, match="WORKER_DEPLOYMENT_NAME"):
        deployment_version(Settings())


async def test_versioned_worker_registers_its_version_on_the_dev_server(
    temporal_env: WorkflowEnvironment,
) -> None:
    name = f"bb-{uuid.uuid4().hex[:6]}"
    version = WorkerDeploymentVersion(name, "build-1")
    client = temporal_env.client
    async with _worker(temporal_env, deployment=version):
        # The version appears once the worker has polled: a bounded wait for that, not a
        # speed check.
        async def listed() -> bool:
            try:
                described = await client.workflow_service.describe_worker_deployment(
                    DescribeWorkerDeploymentRequest(
                        namespace=client.namespace, deployment_name=name
                    )
                )
            except RPCError:
                return False
            builds = [
                s.deployment_version.build_id
                for s in described.worker_deployment_info.version_summaries
            ]
            return "build-1" in builds

        await until(listed, f"deployment {name} listed build-1", interval=0.2)


async def test_a_workers_sticky_queue_waits_as_long_as_its_setting(
    ts_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task waiting for the worker that last ran its workflow goes to any worker after
    # this long: the wait after that worker died (WORKFLOW_TASK_TIMEOUT_S).
    assert _worker(ts_env).config()["sticky_queue_schedule_to_start_timeout"] == timedelta(
        seconds=10
    )
    monkeypatch.setenv("WORKFLOW_TASK_TIMEOUT_S", "1.5")
    shorter = _worker(ts_env, sticky_timeout=Settings().workflow_task_timeout)
    assert shorter.config()["sticky_queue_schedule_to_start_timeout"] == timedelta(seconds=1.5)
