"""Confirming staged overlays and exporting a run as JSONL (one line per block)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import asyncpg
from pydantic import BaseModel

from blockbatch.api.errors import BadRequest
from store import overlays
from store.reads import ExportRow, export_snapshot, get_run
from store.repo import NotFound


class ConfirmOutcome(BaseModel):
    run_id: str
    #: Blocks moved from staging to confirmed by this request.
    confirmed: list[str]
    #: Asked-for blocks that were confirmed before (left as they were).
    already_confirmed: list[str]
    #: Confirmed blocks of the run after this request.
    total_confirmed: int


def resolve_block_refs(document_id: str, refs: list[str]) -> list[str]:
    """Block uids from uids or bare block indexes (``7`` means ``<document_id>:7``)."""
    return list(dict.fromkeys(f"{document_id}:{r}" if r.isdigit() else r for r in refs))


async def confirm(
    pool: asyncpg.Pool, run_id: str, block_refs: list[str] | None = None
) -> ConfirmOutcome:
    """Copy staging to confirmed for the given blocks, or for every ``ai_complete`` block.

    All or nothing: an unknown block, or one without an AI result, changes nothing.

    Raises:
        NotFound: unknown run or block uid.
        BadRequest: a block that has no result to confirm (pending, failed, cancelled).
    """
    async with pool.acquire() as conn:
        run = await get_run(conn, run_id)
        uids = resolve_block_refs(run.document_id, block_refs) if block_refs else None
        done = await overlays.confirm(conn, run_id, uids)
    if done.unknown:
        raise NotFound(
            f"run {run_id} has no block {_few(done.unknown)}; nothing was confirmed. "
            f"See the blocks with `python starter.py review {run_id}`"
        )
    if done.unready:
        raise BadRequest(
            f"only blocks with an AI result (ai_complete) can be confirmed, not "
            f"{_few(done.unready)}; nothing was confirmed"
        )
    assert done.total_confirmed is not None  # set whenever the confirm went through
    return ConfirmOutcome(run_id=run_id, confirmed=done.confirmed,
                          already_confirmed=done.already_confirmed,
                          total_confirmed=done.total_confirmed)


def _few(items: list[str], n: int = 5) -> str:
    more = f" and {len(items) - n} more" if len(items) > n else ""
    return ", ".join(items[:n]) + more


class ExportSummary(BaseModel):
    """What an export wrote; also the content of the ``.meta.json`` sidecar."""

    run_id: str
    document: dict[str, Any]
    schema_: dict[str, Any]
    model: str
    status: str
    error: str | None
    overlays: str
    lines: int
    with_overlay: int
    counters: dict[str, Any]
    cost_usd: float
    settings: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None
    exported_at: datetime

    def meta(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["schema"] = data.pop("schema_")
        return data


def export_line(row: ExportRow, *, staged: bool) -> dict[str, Any]:
    """One block as ``{"immutable": {...}, "user_defined": {...} | null[, "status": ...]}``."""
    immutable = {**(row["metadata"] or {}), "block_uid": row["block_uid"],
                 "block_index": row["block_index"], "block_type": row["block_type"],
                 "block_content": row["block_content"]}
    overlay = row["staging"] if staged else row["confirmed"]
    line: dict[str, Any] = {"immutable": immutable, "user_defined": overlay}
    if overlay is None:
        line["status"] = {"status": row["status"] or "not_planned",
                          "last_error": row["last_error"], "reason_code": row["reason_code"]}
    return line


async def export_run(
    pool: asyncpg.Pool, run_id: str, out: TextIO, *, staged: bool = False
) -> ExportSummary:
    """Write the run's blocks as JSONL to ``out`` in block order (a consistent snapshot)."""
    async with export_snapshot(pool, run_id) as snapshot:
        run = snapshot.run
        lines = with_overlay = 0
        async for row in snapshot.rows():
            line = export_line(row, staged=staged)
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
            lines += 1
            with_overlay += line["user_defined"] is not None
        doc = await snapshot.document()
    return ExportSummary(
        run_id=run_id, document=doc,
        schema_={"schema_id": run.schema_id, "name": run.schema_name}, model=run.model,
        status=run.status, error=run.error, overlays="staging" if staged else "confirmed",
        lines=lines, with_overlay=with_overlay,
        counters={"blocks": run.blocks, "blocks_total": run.blocks_total,
                  "pack_count": run.pack_count, "calls": run.calls,
                  "split_events": run.split_events, "input_tokens": run.input_tokens,
                  "output_tokens": run.output_tokens,
                  "cache_creation_input_tokens": run.cache_creation_input_tokens,
                  "cache_read_input_tokens": run.cache_read_input_tokens},
        cost_usd=run.cost_usd, settings=run.settings, created_at=run.created_at,
        finished_at=run.finished_at, exported_at=datetime.now(UTC),
    )


async def export_run_to_file(
    pool: asyncpg.Pool, run_id: str, path: str | Path, *, staged: bool = False
) -> ExportSummary:
    """Write ``path`` (JSONL) and ``path.meta.json``; a failed export leaves neither behind."""
    path = Path(path)
    meta_path = Path(f"{path}.meta.json")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as out:
            summary = await export_run(pool, run_id, out, staged=staged)
        meta_path.write_text(json.dumps(summary.meta(), indent=2, ensure_ascii=False) + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return summary
