"""Reads for a quote (``starter.py estimate``): what earlier runs' answers wrote.

Read-only: a quote creates nothing.
"""

from __future__ import annotations

import asyncpg

from core.quote import OutputHistory

#: The most recent runs of a schema and model a quote learns from.
HISTORY_RUNS = 20


async def output_history(conn: asyncpg.Connection, schema_id: str,
                         model: str) -> OutputHistory | None:
    """Output written against the planner's shape estimate by earlier runs of this schema
    (by content: a schema's id is its content hash) on this model.

    Only sync pack calls answered in full count: they record the estimate
    (``est_output_tokens``), and a truncated answer says only "more". ``None`` when there
    are none.
    """
    row = await conn.fetchrow(
        """select count(distinct c.run_id) as runs, count(*) as calls,
                  sum(c.est_output_tokens) as estimated, sum(c.output_tokens) as written
           from llm_calls c
           where c.run_id = any(array(
                     select run_id from runs where schema_id = $1 and model = $2
                     order by created_at desc limit $3))
             and c.purpose = 'pack' and c.status = 'succeeded' and c.est_output_tokens > 0
             and c.stop_reason is distinct from 'max_tokens'""",
        schema_id, model, HISTORY_RUNS)
    if row is None or not row["calls"]:
        return None
    return OutputHistory(runs=int(row["runs"]), calls=int(row["calls"]),
                         estimated=int(row["estimated"]), written=int(row["written"]))
