"""Reads for a quote (``starter.py estimate``): what earlier runs' answers wrote.

Read-only: a quote creates nothing.
"""

from __future__ import annotations

import asyncpg

from core.quote import OutputHistory
from store import replans


async def output_history(conn: asyncpg.Connection, schema_id: str, model: str,
                         effort: str | None = None) -> OutputHistory | None:
    """Output written against the planner's shape estimate by earlier runs of this schema
    (by content: a schema's id is its content hash) on this model.

    Only sync pack calls answered in full count: they record the estimate
    (``est_output_tokens``), and a truncated answer says only "more". ``None`` when there
    are none. Thinking per call is read from the runs at ``effort`` (the run option).
    """
    seen = await replans.schema_output(conn, schema_id, model, effort=effort)
    if seen is None:
        return None
    return OutputHistory(runs=seen.runs, calls=seen.calls, estimated=seen.estimated,
                         written=seen.written, thinking_per_call=seen.thinking_per_call)
