"""What every part of :class:`~blockbatch.api.client.Blockbatch` stands on: one Postgres
pool, Temporal (connected on first use), the Models API (read where a run starts), the
workers' endpoint, and a run as stored.

The parts (documents.py, runs.py, escalation.py, retry.py, reading.py) each add one
mechanism's methods to this base; ``Blockbatch`` composes them. What only some methods use
(Temporal, the Models API, the Claude client) is imported in them: a command that reads
Postgres alone (``status`` of a finished run, ``list``) loads neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

import asyncpg

from blockbatch.api.errors import TemporalUnavailable, speaks_python
from blockbatch.core.endpoint import endpoint_of, mismatch_text
from blockbatch.runtime.settings import Settings, load_settings
from blockbatch.store import reads, workers
from blockbatch.store.db import create_pool

if TYPE_CHECKING:
    from temporalio.client import Client

    from blockbatch.core.endpoint import Endpoint
    from blockbatch.core.registry import ModelInfo
    from blockbatch.core.views import RunInfo
    from blockbatch.runtime.models_api import ModelFacts


@speaks_python
class Connection:
    """One connection to Postgres and (lazily) Temporal; the base of ``Blockbatch``."""

    def __init__(self, pool: asyncpg.Pool, client: Client | None, settings: Settings) -> None:
        #: Word an error's advice for a Python caller (``blockbatch.api.errors.reword``).
        self.renders_errors = True
        self.pool = pool
        self._client = client
        self.settings = settings
        self._owns_pool = False
        #: Reads the Models API (its own anthropic client), made on first use.
        self._models: ModelFacts | None = None

    @classmethod
    async def connect(
        cls,
        settings: Settings | None = None,
        client: Client | None = None,
        *,
        temporal: bool = True,
        pool_size: int = 4,
    ) -> Self:
        """Connect to Postgres (migrating it) and, unless ``temporal=False``, to Temporal."""
        settings = settings or load_settings()
        pool = await create_pool(settings.resolved_database_url, max_size=pool_size)
        bb = cls(pool, client, settings)
        bb._owns_pool = True
        try:
            if temporal:
                await bb.temporal()
        except Exception:
            await pool.close()
            raise
        return bb

    async def temporal(self) -> Client:
        """The Temporal client, connecting on first use."""
        if self._client is None:
            from blockbatch.runtime.connect import connect

            self._client = await connect(self.settings)
        return self._client

    @property
    def client(self) -> Client:
        """The Temporal client once connected.

        Raises:
            TemporalUnavailable: :meth:`temporal` has not connected yet.
        """
        if self._client is None:
            raise TemporalUnavailable("not connected to Temporal yet: await bb.temporal() first")
        return self._client

    async def close(self) -> None:
        """Close the Models API client if one was made, and the Postgres pool if this
        client opened it."""
        if self._models is not None:
            await self._models.client.close()
            self._models = None
        if self._owns_pool:
            await self.pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ models

    async def run_model(self, name: str) -> ModelInfo:
        """The model a run of ``name`` would use, checked before anything is created
        (:func:`blockbatch.api.quote.checked_model`: the Models API's facts first, where it
        answers; configured prices for a model the registry does not price).

        What a run uses is kept with it (``blockbatch.store.runs.save_models``): its
        workers read it there and never ask the Models API.

        Raises:
            RetiredModelError: retired; the message names the model to move to.
            UnknownModelError: neither the registry nor configuration prices it.
        """
        from blockbatch.api.quote import checked_model
        from blockbatch.runtime.claude import configured_client
        from blockbatch.runtime.models_api import READ_TIMEOUT_S, ModelFacts

        if self._models is None:
            client = configured_client(self.settings, timeout_s=READ_TIMEOUT_S)
            # No credentials: only facts kept by others.
            self._models = ModelFacts(client) if client is not None else None
        return await checked_model(name, self.settings, self.pool, self._models)

    # ------------------------------------------------------------------ workers

    async def workers_polling(self, task_queue: str | None = None) -> int:
        """How many workers polled the task queue recently (0: runs would wait)."""
        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

        client = await self.temporal()
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self.settings.temporal_namespace,
                task_queue=TaskQueue(name=task_queue or self.settings.temporal_task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        return len(resp.pollers)

    async def endpoint_warning(self, task_queue: str | None = None) -> str | None:
        """Why this process's Claude settings (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``)
        are not the ones the live workers on the task queue call with (blockbatch/core/endpoint.py);
        ``None`` when they agree or no worker said. The workers' answers are what a run
        gets, whatever this process is set for."""
        queue = task_queue or self.settings.temporal_task_queue
        try:
            key: str | None = self.settings.resolved_api_key()
        except RuntimeError:
            key = None
        own = endpoint_of(
            self.settings.resolved_anthropic_base_url,
            simulated=self.settings.uses_simulator,
            api_key=key,
        )
        return mismatch_text(own, await workers.live(self.pool, queue), queue)

    async def answering_endpoint(self, task_queue: str | None = None) -> Endpoint | None:
        """The endpoint a run on the task queue would be answered by (its provider and
        host), the one whose earlier answers it may reuse (blockbatch/runtime/endpoint.py)."""
        from blockbatch.runtime.endpoint import answering_endpoint

        return await answering_endpoint(self.pool, self.settings, task_queue)

    # ------------------------------------------------------------------ runs as stored

    async def run(self, run_id: str) -> RunInfo:
        """One run as stored (raises NotFound for an unknown id)."""
        return await reads.get_run(self.pool, run_id)

    async def runs(self, *, limit: int = 20, status: str | None = None) -> list[RunInfo]:
        """The newest runs, optionally only those in ``status``."""
        return await reads.list_runs(self.pool, limit=limit, status=status)
