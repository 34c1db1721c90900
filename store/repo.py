"""Thin repository: documents, schemas and runs in, typed rows out.

Used by the API (ingest, create run) and by activities (load a run's context).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from core.ingest import ParsedBlock
from core.models import RunOptions
from core.planning import PlanLimits, estimate_tokens
from core.prompt import fixed_prompt_tokens
from core.registry import ModelInfo, get_model
from core.schema import SchemaSpec, load_schema


class NotFound(LookupError):
    """An id that is not in the database; the message says which and what to do."""


@dataclass(frozen=True)
class RunContext:
    """What activities need to know about a run (cached per process; runs are immutable)."""

    run_id: str
    document_id: str
    schema_id: str
    options: RunOptions
    spec: SchemaSpec
    model: ModelInfo

    def plan_limits(self) -> PlanLimits:
        """Pack sizing limits for this run (planning and re-planned halves alike)."""
        opts = self.options
        return PlanLimits(
            context_window=self.model.context_window,
            model_max_output=self.model.max_output_tokens,
            fixed_prompt_tokens=fixed_prompt_tokens(self.spec),
            output_budget=min(opts.output_budget, self.model.max_output_tokens),
            safety_margin=opts.safety_margin,
            hard_cap=opts.hard_cap,
            max_batch_size=self.spec.prompt_config.max_batch_size,
            pack_size=opts.pack_size,
            batching_enabled=opts.batching_enabled,
        )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def save_document(
    conn: asyncpg.Connection, name: str, fmt: str, raw: bytes, blocks: list[ParsedBlock]
) -> str:
    """Store a parsed document once (same bytes + format -> same id) and return its id."""
    digest = _sha256(fmt.encode() + b"\0" + raw)
    document_id = f"doc-{digest[:12]}"
    async with conn.transaction():
        inserted = await conn.fetchval(
            """insert into documents (document_id, name, format, content_sha256, block_count)
               values ($1, $2, $3, $4, $5)
               on conflict (document_id) do nothing
               returning document_id""",
            document_id, name, fmt, digest, len(blocks),
        )
        if inserted is None:
            return document_id
        await conn.execute(
            """insert into blocks (block_uid, document_id, block_index, block_type,
                                   block_content, metadata, est_tokens)
               select $1 || ':' || i, $1, i, t, c, m, e
               from unnest($2::int[], $3::text[], $4::text[], $5::jsonb[], $6::int[])
                    as x(i, t, c, m, e)""",
            document_id,
            [b.block_index for b in blocks],
            [b.block_type for b in blocks],
            [b.block_content for b in blocks],
            [b.metadata for b in blocks],
            [estimate_tokens(b.block_content) for b in blocks],
        )
    return document_id


async def save_schema(conn: asyncpg.Connection, spec: SchemaSpec) -> str:
    """Store a validated schema once (by content) and return its id."""
    digest = spec.content_hash()
    schema_id = f"schema-{digest[:12]}"
    await conn.execute(
        """insert into schemas (schema_id, name, definition, content_sha256)
           values ($1, $2, $3, $4) on conflict do nothing""",
        schema_id, spec.name, spec.model_dump(mode="json"), digest,
    )
    return schema_id


def new_run_id() -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


async def create_run(
    conn: asyncpg.Connection,
    document_id: str,
    schema_id: str,
    options: RunOptions,
    run_id: str | None = None,
) -> str:
    """Insert a run row (status ``created``); planning happens in the workflow."""
    run_id = run_id or new_run_id()
    get_model(options.model)
    try:
        await conn.execute(
            """insert into runs (run_id, document_id, schema_id, model, settings, workflow_id)
               values ($1, $2, $3, $4, $5, $6)""",
            run_id, document_id, schema_id, options.model, options.model_dump(mode="json"),
            f"run-{run_id}",
        )
    except asyncpg.UniqueViolationError:
        raise ValueError(
            f"run id {run_id!r} already exists: choose another id or omit it"
        ) from None
    except asyncpg.ForeignKeyViolationError as exc:
        raise NotFound(f"unknown document or schema for the run: {exc.detail}") from None
    return run_id


async def load_run_context(conn: asyncpg.Connection, run_id: str) -> RunContext:
    row = await conn.fetchrow(
        """select r.run_id, r.document_id, r.schema_id, r.settings, s.definition, s.name
           from runs r join schemas s using (schema_id) where r.run_id = $1""",
        run_id,
    )
    if row is None:
        raise NotFound(f"no run {run_id!r}: list runs with `python starter.py list`")
    options = RunOptions.model_validate(row["settings"])
    definition: dict[str, Any] = dict(row["definition"])
    spec = load_schema(definition, name=row["name"])
    return RunContext(
        run_id=row["run_id"],
        document_id=row["document_id"],
        schema_id=row["schema_id"],
        options=options,
        spec=spec,
        model=get_model(options.model),
    )


_CONTEXTS: dict[str, RunContext] = {}
_CONTEXT_CACHE_SIZE = 256


async def cached_run_context(conn: asyncpg.Connection, run_id: str) -> RunContext:
    """:func:`load_run_context`, cached per process: a run's schema and options never change."""
    ctx = _CONTEXTS.get(run_id)
    if ctx is None:
        ctx = await load_run_context(conn, run_id)
        if len(_CONTEXTS) >= _CONTEXT_CACHE_SIZE:
            _CONTEXTS.pop(next(iter(_CONTEXTS)))
        _CONTEXTS[run_id] = ctx
    return ctx
