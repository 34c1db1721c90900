"""What the Models API said of each model (``model_facts``), as it wrote it.

Read at run start and by the worker on a run's first call (``blockbatch/runtime/models_api.py``);
a run's model is the registry's entry with fresh facts taking over (``blockbatch.core.run_model``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import asyncpg


async def save(
    conn: asyncpg.Connection | asyncpg.Pool, model_id: str, facts: dict[str, Any]
) -> None:
    """Keep the API's answer for ``model_id`` (the latest one wins)."""
    await conn.execute(
        """insert into model_facts (model_id, facts, fetched_at)
           values ($1, ($2::text)::jsonb, now())
           on conflict (model_id) do update set facts = excluded.facts,
                                                fetched_at = excluded.fetched_at""",
        model_id,
        json.dumps(facts),
    )


async def fresh(
    conn: asyncpg.Connection | asyncpg.Pool, model_id: str, max_age_s: float
) -> dict[str, Any] | None:
    """The facts of ``model_id`` read within ``max_age_s`` seconds (``None``: none)."""
    row = await conn.fetchrow(
        """select facts from model_facts
           where model_id = $1 and fetched_at > now() - make_interval(secs => $2)""",
        model_id,
        float(max_age_s),
    )
    if row is None:
        return None
    facts = row["facts"]
    # A connection of its own (no json codec, e.g. a quote's) reads jsonb as text.
    return dict(json.loads(facts) if isinstance(facts, str) else facts)


async def fetched_at(conn: asyncpg.Connection | asyncpg.Pool, model_id: str) -> datetime | None:
    """When the facts of ``model_id`` were last read (``None``: never)."""
    value: datetime | None = await conn.fetchval(
        "select fetched_at from model_facts where model_id = $1", model_id
    )
    return value
