"""Calibrations (the CLI's ``calibrate``): the answers its runs gave, and its record.

Reads a calibration run's answers with the call each came from (its size, the block's
place in it), stores a finished calibration, and finds the latest one of a schema and
model for a quote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg

from blockbatch.core.calibration import Calibration, CalibrationNote


@dataclass(frozen=True)
class RunAnswer:
    """One block of a calibration run: its answer (``None``: none) and where it sat.

    Attributes:
        block_index: the block's place in the sample document.
        answer: the model's answer (``ai_complete``), else ``None``.
        call_size: blocks in the call that answered it (0: no answering call).
        position: its place in that call, 1 for the first (0: no answering call).
    """

    block_index: int
    answer: dict[str, Any] | None
    call_size: int
    position: int


async def run_answers(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> list[RunAnswer]:
    """Every block of ``run_id`` in block order, with its answer and its call's shape."""
    rows = await conn.fetch(
        """select o.block_index,
                  case when o.status = 'ai_complete' then coalesce(o.model_answer, o.staging)
                  end as answer,
                  coalesce(cardinality(c.block_uids), 0) as call_size,
                  coalesce(array_position(c.block_uids, o.block_uid), 0) as position
           from overlays o left join llm_calls c on c.call_id = o.call_id
           where o.run_id = $1
           order by o.block_index""",
        run_id,
    )
    return [RunAnswer(r["block_index"], r["answer"], r["call_size"], r["position"]) for r in rows]


async def save(
    conn: asyncpg.Connection | asyncpg.Pool, calibration: Calibration, sample_document_id: str
) -> None:
    """Store a finished calibration (once: its id is new)."""
    data = calibration.model_dump(mode="json")
    await conn.execute(
        """insert into calibrations (calibration_id, schema_id, model, document_id,
                                     document_name, sample_document_id, sample, seed, target,
                                     sizes, recommended_size, result, created_at)
           values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)""",
        calibration.calibration_id,
        calibration.schema_id,
        calibration.model,
        calibration.document_id,
        calibration.document,
        sample_document_id,
        calibration.sample,
        calibration.seed,
        calibration.target,
        data["sizes"],
        calibration.recommended,
        data,
        calibration.created_at,
    )


async def latest(
    conn: asyncpg.Connection | asyncpg.Pool, schema_id: str, model: str
) -> CalibrationNote | None:
    """The newest calibration of ``schema_id`` on ``model``, as a quote mentions it (one
    across models counts for each candidate model: its row is that model's)."""
    row = await conn.fetchrow(
        """select calibration_id, recommended_size, target::float8 as target, created_at,
                  document_name, result ->> 'reference_model' as reference_model
           from calibrations where schema_id = $1 and model = $2
           order by created_at desc limit 1""",
        schema_id,
        model,
    )
    if row is None:
        return None
    return CalibrationNote(
        calibration_id=row["calibration_id"],
        recommended=row["recommended_size"],
        target=row["target"],
        created_at=row["created_at"],
        document=row["document_name"],
        reference_model=row["reference_model"],
    )


async def escalation_share(
    conn: asyncpg.Connection | asyncpg.Pool, schema_id: str, model: str, to: str, size: int
) -> tuple[float, str] | None:
    """``(share sent up, calibration id)`` of the newest ``calibrate --escalation`` of
    ``schema_id`` on ``model`` against ``to``, at its size nearest ``size``."""
    row = await conn.fetchrow(
        """select calibration_id, result -> 'escalation' as escalation
           from calibrations
           where schema_id = $1 and model = $2 and result ->> 'reference_model' = $3
             and jsonb_array_length(coalesce(result -> 'escalation', '[]')) > 0
           order by created_at desc limit 1""",
        schema_id,
        model,
        to,
    )
    if row is None:
        return None
    entries = row["escalation"]
    if isinstance(entries, str):
        entries = json.loads(entries)
    best = min(entries, key=lambda e: (abs(int(e["size"]) - size), -int(e["size"])))
    asked = int(best.get("compared") or 0) + int(best.get("unanswered") or 0)
    if not asked:
        return None
    return int(best.get("sent_up") or 0) / asked, row["calibration_id"]
