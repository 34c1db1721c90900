"""Runs as the layers below the front doors see them: the cached :class:`RunContext`."""

from __future__ import annotations

from typing import Any

import asyncpg

from core.context import RunContext
from core.models import RunOptions
from core.registry import get_model
from core.schema import load_schema
from store.repo import NotFound


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
