"""Reads for a quote (``starter.py estimate``): what earlier runs' answers wrote.

Read-only: a quote creates nothing.
"""

from __future__ import annotations

import asyncpg

from core.quote import OutputHistory

#: The latest answered calls a quote learns from, as many as a run's plan does.
HISTORY_CALLS = 100


async def output_history(conn: asyncpg.Connection, schema_id: str,
                         model: str) -> OutputHistory | None:
    """Output written against the planner's shape estimate by earlier runs of this schema
    (by content: a schema's id is its content hash) on this model.

    Only sync pack calls answered in full count: they record the estimate
    (``est_output_tokens``), and a truncated answer says only "more". ``None`` when there
    are none.
    """
    # The calls plan_run learns from (store.replans.prior_output), found by schema and
    # model instead of by a run: a quote has none.
    row = await conn.fetchrow(
        """with latest as (
               select c.run_id, c.output_tokens, c.est_output_tokens
               from runs e join llm_calls c on c.run_id = e.run_id
               where e.schema_id = $1 and e.model = $2 and c.purpose = 'pack'
                 and c.status = 'succeeded' and c.est_output_tokens > 0
                 and c.stop_reason is distinct from 'max_tokens'
               order by c.call_id desc limit $3)
           select count(distinct run_id) as runs, count(*) as calls,
                  sum(est_output_tokens) as estimated, sum(output_tokens) as written
           from latest""",
        schema_id, model, HISTORY_CALLS)
    if row is None or not row["calls"] or not row["estimated"]:
        return None
    return OutputHistory(runs=int(row["runs"]), calls=int(row["calls"]),
                         estimated=int(row["estimated"]), written=int(row["written"]))
