"""Reads for a quote (the CLI's ``estimate``): what earlier runs' answers wrote.

Read-only: a quote creates nothing.
"""

from __future__ import annotations

from typing import Literal

import asyncpg

from blockbatch.core.quote import OutputHistory
from blockbatch.store import replans

#: Other schemas' latest answered pack calls read for a first quote, at most this many.
PRIOR_CALLS = 100


async def output_history(
    conn: asyncpg.Connection, schema_id: str, model: str, effort: str | None = None
) -> OutputHistory | None:
    """Output written against the planner's shape estimate by earlier runs of this schema
    (by content: a schema's id is its content hash) on this model.

    Only sync pack calls answered in full count: they record the estimate
    (``est_output_tokens``), and a truncated answer says only "more". ``None`` when there
    are none. Thinking per call is read from the runs at ``effort`` (the run option).
    """
    seen = await replans.schema_output(conn, schema_id, model, effort=effort)
    if seen is None:
        return None
    return OutputHistory(
        runs=seen.runs,
        calls=seen.calls,
        estimated=seen.estimated,
        written=seen.written,
        thinking_per_call=seen.thinking_per_call,
    )


async def other_schemas_output(
    conn: asyncpg.Connection, schema_id: str, model: str
) -> OutputHistory | None:
    """What answers of other schemas wrote against their shape estimate: on ``model``
    (scope ``model``), else on any model (``any``); their latest pack calls answered in
    full, as :func:`output_history` reads them. A first quote of ``schema_id`` expects
    this ratio of its own shape estimate (core.quote ``prior``); ``None``: no such call."""
    scopes: tuple[tuple[Literal["model", "any"], bool], ...] = (("model", True), ("any", False))
    for scope, same_model in scopes:
        row = await conn.fetchrow(
            """with latest as (
                   select c.run_id, c.output_tokens, c.est_output_tokens
                   from runs e join llm_calls c on c.run_id = e.run_id
                   where e.schema_id <> $1 and (not $3 or e.model = $2)
                     and c.purpose = 'pack' and c.status = 'succeeded'
                     and c.est_output_tokens > 0
                     and c.stop_reason is distinct from 'max_tokens'
                   order by c.call_id desc limit $4)
               select count(distinct run_id) as runs, count(*) as calls,
                      sum(est_output_tokens) as estimated, sum(output_tokens) as written
               from latest""",
            schema_id,
            model,
            same_model,
            PRIOR_CALLS,
        )
        if row is not None and row["calls"] and row["estimated"]:
            return OutputHistory(
                runs=int(row["runs"]),
                calls=int(row["calls"]),
                estimated=int(row["estimated"]),
                written=int(row["written"]),
                scope=scope,
            )
    return None
