"""The Python API: ingest a document, register a schema, start, follow and read a run.

Small and async; ``starter.py`` is built on it and so can any program::

    async with await Blockbatch.connect() as bb:
        doc = await bb.ingest_file("handbook.md")
        schema = await bb.add_schema_file("extract.json")
        run_id = await bb.start_run(doc, schema, RunOptions())
        result = await bb.wait(run_id)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from blockbatch import repo
from blockbatch.db import create_pool
from blockbatch.ingest import detect_format, parse_document
from blockbatch.models import RunInput, RunOptions, RunProgress, RunResult
from blockbatch.schema import SchemaSpec, load_schema
from blockbatch.settings import Settings, load_settings
from blockbatch.temporal import connect, ensure_search_attributes
from workflows.run import RunWorkflow, run_workflow_id

_KEYS = {
    "run": SearchAttributeKey.for_keyword("BlockbatchRunId"),
    "document": SearchAttributeKey.for_keyword("BlockbatchDocument"),
    "schema": SearchAttributeKey.for_keyword("BlockbatchSchema"),
    "model": SearchAttributeKey.for_keyword("BlockbatchModel"),
}


class Blockbatch:
    """One connection to Postgres and Temporal; use as an async context manager."""

    def __init__(self, pool: asyncpg.Pool, client: Client, settings: Settings) -> None:
        self.pool = pool
        self.client = client
        self.settings = settings
        self._owns_pool = False

    @classmethod
    async def connect(
        cls, settings: Settings | None = None, client: Client | None = None
    ) -> "Blockbatch":
        settings = settings or load_settings()
        pool = await create_pool(settings.resolved_database_url, max_size=4)
        try:
            client = client or await connect(settings)
        except Exception:
            await pool.close()
            raise
        bb = cls(pool, client, settings)
        bb._owns_pool = True
        return bb

    async def close(self) -> None:
        if self._owns_pool:
            await self.pool.close()

    async def __aenter__(self) -> "Blockbatch":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ inputs

    async def ingest_bytes(
        self, data: bytes, *, name: str, fmt: str, text_field: str = "text"
    ) -> str:
        """Parse and store a document; return its id (the same bytes give the same id)."""
        blocks = parse_document(data, fmt, text_field=text_field)
        async with self.pool.acquire() as conn:
            return await repo.save_document(conn, name, fmt, data, blocks)

    async def ingest_file(
        self, path: str | Path, *, fmt: str | None = None, text_field: str = "text"
    ) -> str:
        path = Path(path)
        fmt = fmt or detect_format(path.name)
        return await self.ingest_bytes(path.read_bytes(), name=path.name, fmt=fmt,
                                       text_field=text_field)

    async def add_schema(self, source: dict[str, Any] | SchemaSpec, name: str | None = None) -> str:
        spec = source if isinstance(source, SchemaSpec) else load_schema(source, name=name)
        async with self.pool.acquire() as conn:
            return await repo.save_schema(conn, spec)

    async def add_schema_file(self, path: str | Path) -> str:
        path = Path(path)
        spec = load_schema(path.read_bytes(), name=path.stem)
        async with self.pool.acquire() as conn:
            return await repo.save_schema(conn, spec)

    # ------------------------------------------------------------------ runs

    async def start_run(
        self,
        document_id: str,
        schema_id: str,
        options: RunOptions | None = None,
        *,
        run_id: str | None = None,
        packs_per_history: int = 400,
    ) -> str:
        """Create the run row and start its RunWorkflow; return the run id."""
        options = options or RunOptions()
        async with self.pool.acquire() as conn:
            if options.model == RunOptions().model:
                row = await conn.fetchrow(
                    "select definition from schemas where schema_id = $1", schema_id
                )
                if row is not None and row["definition"]["prompt_config"].get("model"):
                    options = options.model_copy(
                        update={"model": row["definition"]["prompt_config"]["model"]}
                    )
            run_id = await repo.create_run(conn, document_id, schema_id, options, run_id=run_id)
        await ensure_search_attributes(self.client, self.settings.temporal_namespace)
        try:
            await self.client.start_workflow(
                RunWorkflow.run,
                RunInput(
                    run_id=run_id,
                    max_concurrent_packs=options.max_concurrent_packs,
                    max_block_attempts=options.max_block_attempts,
                    packs_per_history=packs_per_history,
                ),
                id=run_workflow_id(run_id),
                task_queue=self.settings.temporal_task_queue,
                static_summary=f"blockbatch run {run_id}: {document_id} x {schema_id}",
                search_attributes=TypedSearchAttributes([
                    SearchAttributePair(_KEYS["run"], run_id),
                    SearchAttributePair(_KEYS["document"], document_id),
                    SearchAttributePair(_KEYS["schema"], schema_id),
                    SearchAttributePair(_KEYS["model"], options.model),
                ]),
            )
        except Exception:
            # Leave no half-created run behind: a run row without a workflow is removed.
            async with self.pool.acquire() as conn:
                await conn.execute("delete from runs where run_id = $1", run_id)
            raise
        return run_id

    def handle(self, run_id: str) -> WorkflowHandle[Any, RunResult]:
        return self.client.get_workflow_handle_for(RunWorkflow.run, run_workflow_id(run_id))

    async def progress(self, run_id: str) -> RunProgress:
        return await self.handle(run_id).query(RunWorkflow.progress)

    async def wait(self, run_id: str) -> RunResult:
        return await self.handle(run_id).result()

    async def cancel(self, run_id: str) -> None:
        await self.handle(run_id).signal(RunWorkflow.cancel)


async def open_default() -> Blockbatch:
    """Connect with settings from the environment."""
    return await Blockbatch.connect(load_settings())
