"""Run one blockbatch worker: registers the workflows and activities, then polls Temporal.

Scale out by running more of these, on any machine that reaches Temporal and Postgres.
Configuration comes from the environment (docs/configuration.md). SIGTERM/SIGINT shut it down
gracefully: in-flight activities get up to 30 s to finish. With ``METRICS_PORT`` set it
serves Prometheus metrics, Temporal's and blockbatch's, on ``/metrics`` (blockbatch/runtime/metrics.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from temporalio.client import Client

from blockbatch.runtime.claude import anthropic_client, provider_client
from blockbatch.runtime.endpoint import announced
from blockbatch.runtime.metrics import MetricsUnavailable, metrics_runtime
from blockbatch.runtime.process import exit_process
from blockbatch.runtime.settings import Settings, load_settings
from blockbatch.runtime.temporal import (
    TemporalUnavailable,
    build_worker,
    connect,
    deployment_version,
    ensure_search_attributes,
)
from blockbatch.store.db import DatabaseUnavailable, create_pool

log = logging.getLogger("blockbatch.worker")


async def main(settings: Settings | None = None, client: Client | None = None) -> None:
    """Run the worker until SIGTERM/SIGINT.

    Args:
        settings: the configuration; ``None`` reads it from the environment.
        client: a connected client to use; its runtime then decides about metrics
            (``METRICS_PORT`` applies only to the client this function connects).
    """
    settings = settings or load_settings()
    deployment = deployment_version(settings)  # a half-set version fails before any I/O
    # A port in use fails here, before any I/O, with a message that says what to do.
    runtime = (
        metrics_runtime(settings.metrics_host, settings.metrics_port)
        if client is None and settings.metrics_port is not None
        else None
    )
    pool = await create_pool(settings.resolved_database_url, max_size=settings.worker_db_pool_size)
    pid_file = settings.data_dir / "run" / f"worker-{os.getpid()}.pid"
    try:
        client = client or await connect(settings, runtime)
        try:
            await ensure_search_attributes(client, settings.temporal_namespace)
        except TemporalUnavailable as exc:
            log.warning("%s", exc)  # runs will fail to start until they exist
        llm = anthropic_client(settings)
        worker = build_worker(
            client,
            settings.temporal_task_queue,
            pool,
            llm,
            max_concurrent_activities=settings.worker_max_concurrent_activities,
            max_concurrent_workflow_tasks=settings.worker_max_concurrent_workflow_tasks,
            deployment=deployment,
            sticky_timeout=settings.workflow_task_timeout,
            # A run on another provider (docs/providers.md): its client, with this
            # worker's environment, opened at the run's first call.
            open_client=lambda provider: provider_client(settings, provider),
        )
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if settings.data_dir.exists():
            pid_file.parent.mkdir(parents=True, exist_ok=True)
            pid_file.write_text(str(os.getpid()))
        version = deployment.to_canonical_string() if deployment else "unversioned"
        if runtime is not None:
            log.info(
                "metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port
            )
        # Says in Postgres which endpoint it calls: a starter set otherwise warns.
        async with announced(pool, settings.temporal_task_queue, llm) as endpoint, worker:
            log.info(
                "worker %d (%s) polling %s on %s (namespace %s); Claude: %s%s",
                os.getpid(),
                version,
                settings.temporal_task_queue,
                settings.resolved_temporal_address,
                settings.temporal_namespace,
                endpoint.text(),
                " (answers are SIMULATED)" if endpoint.simulated else "",
            )
            await stop.wait()
            log.info("shutting down: waiting for in-flight activities")
        await llm.close()
    finally:
        pid_file.unlink(missing_ok=True)
        await pool.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        asyncio.run(main())
    except (DatabaseUnavailable, TemporalUnavailable, MetricsUnavailable, ValueError) as exc:
        exit_process(f"error: {exc}")
    exit_process(0)
