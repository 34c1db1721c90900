"""Exporting a run as JSONL or CSV: one line per block, review acts included, a
``.meta.json`` sidecar beside a file (Parquet: blockbatch/api/parquet.py)."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TextIO

import asyncpg
from pydantic import BaseModel

from blockbatch.api.errors import BadRequest
from blockbatch.core.ingest import OWN_METADATA
from blockbatch.core.views import ExportRow
from blockbatch.store.reads import ExportSnapshot, export_snapshot


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
    #: Who answered the run's calls (blockbatch/core/endpoint.py labels), and whether the simulator
    #: did: simulated answers are never passed off as Claude's, exported or not.
    endpoints: list[str] = []
    simulated: bool = False

    def meta(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["schema"] = data.pop("schema_")
        return data


def export_line(
    row: ExportRow, *, staged: bool, record: tuple[list[str], str] | None = None
) -> dict[str, Any]:
    """One block as ``{"immutable": {...}, "user_defined": {...} | null[, "status": ...]}``,
    with ``"record"`` (the input's row as its file has it: :func:`exported_record`) for a
    CSV, JSONL or XLSX input whose columns were stored (``record``: its columns and text
    column), ``"provenance"`` (where the block is in its file: source, char span, page, box,
    page size, heading path) when it was stored with one, and ``"evidence"`` (each value's
    quote and span) when the schema asks for it.

    ``immutable`` is blockbatch's view of the block (``block_uid``, ``block_index``,
    ``block_type``, ``block_content``) over its metadata, so an input column of one of those
    names is there only in ``"record"``."""
    immutable = {
        **(row["metadata"] or {}),
        "block_uid": row["block_uid"],
        "block_index": row["block_index"],
        "block_type": row["block_type"],
        "block_content": row["block_content"],
    }
    overlay = exported_overlay(row, staged=staged)
    line: dict[str, Any] = {"immutable": immutable, "user_defined": overlay}
    if record is not None:
        line["record"] = exported_record(row, record)
    if overlay is None:
        line["status"] = {
            "status": row["status"] or "not_planned",
            "last_error": row["last_error"],
            "reason_code": row["reason_code"],
        }
    if row["reused_from_run_id"] is not None:
        line["reused"] = {
            "run_id": row["reused_from_run_id"],
            "call_id": row["reused_from_call_id"],
        }
    if row["review"]:
        line["review"] = row["review"]
    if row["provenance"] is not None:
        line["provenance"] = row["provenance"]
    evidence = exported_evidence(row, overlay)
    if evidence is not None:
        line["evidence"] = evidence
    return line


def exported_record(row: ExportRow, record: tuple[list[str], str]) -> dict[str, Any]:
    """The input's row as its file has it, to join back on the user's own keys: its columns
    in file order under their names, the text column holding the block's text. A JSONL
    record keeps only the keys it had."""
    names, text_column = record
    metadata = row["metadata"] or {}
    out: dict[str, Any] = {}
    for name in names:
        if name == text_column:
            out[name] = row["block_content"]
        elif name in metadata:
            out[name] = metadata[name]
        elif name in _TYPE_COLUMNS and row["block_type"] != _RECORD_TYPE:
            out[name] = row["block_type"]  # ingest made this column the block's type
    return out


def exported_evidence(row: ExportRow, overlay: dict[str, Any] | None) -> dict[str, Any] | None:
    """Each exported value's quote and span (``{field: {quote, match, start, end}}``), for
    the values that are still the model's own: a value a person edited has no quote."""
    evidence = row["evidence"]
    if overlay is None or not evidence:
        return None
    model = row["model_answer"]
    return {
        name: e
        for name, e in evidence.items()
        if name in overlay and (model is None or model.get(name) == overlay[name])
    }


#: The columns of one field's evidence in the CSV and Parquet exports, after the fields.
EVIDENCE_PARTS = ("quote", "match", "start", "end")


def evidence_columns(fields: list[str]) -> list[tuple[str, str, str]]:
    """(field, part, column) of each field's evidence: ``evidence_<field>_start`` ..."""
    return [(f, part, f"evidence_{f}_{part}") for f in fields for part in EVIDENCE_PARTS]


#: The CSV and Parquet columns of a block's provenance (its keys in
#: blockbatch/core/blocks.py ``Provenance``), after the evidence: (key, column).
PROVENANCE_COLUMNS = (
    ("page", "provenance_page"),
    ("bbox", "provenance_bbox"),
    ("page_size", "provenance_page_size"),
    ("heading_path", "provenance_heading_path"),
    ("char_start", "provenance_char_start"),
    ("char_end", "provenance_char_end"),
)


def provenance_values(row: ExportRow) -> list[Any]:
    """The row's provenance in :data:`PROVENANCE_COLUMNS` order (``None`` where absent)."""
    prov = row["provenance"] or {}
    return [prov.get(key) for key, _ in PROVENANCE_COLUMNS]


def exported_overlay(row: ExportRow, *, staged: bool) -> dict[str, Any] | None:
    """The exported values: confirmed (or staging); a rejected result exports none."""
    if row["status"] == "rejected":
        return None
    value: dict[str, Any] | None = row["staging"] if staged else row["confirmed"]
    return value


#: The CSV columns before the schema's fields, and after them.
CSV_HEAD = (
    "block_uid",
    "block_index",
    "block_type",
    "block_content",
    "status",
    "reason_code",
    "last_error",
)
CSV_TAIL = (
    "review_actions",
    "last_reviewer",
    "last_reviewed_at",
    "reused_from_run_id",
    "reused_from_call_id",
)


def field_columns(
    fields: list[str], spans: list[tuple[str, str, str]]
) -> tuple[list[str], set[str]]:
    """Each schema field's CSV and Parquet column, and every column name they leave taken.

    A field named like one of blockbatch's own columns (``samples/extract.json`` has a
    ``block_type`` field) gets a ``field_`` prefix, so no two columns share a name: a
    reader that looks columns up by name (pandas, pyarrow's ``read_table``) would refuse
    the file or silently pick one of them.
    """
    taken = {
        *CSV_HEAD,
        *(c for _, _, c in spans),
        *(c for _, c in PROVENANCE_COLUMNS),
        *CSV_TAIL,
    }
    columns: list[str] = []
    for field in fields:
        column = field
        while column in taken:
            column = f"field_{column}"
        taken.add(column)
        columns.append(column)
    return columns, taken


#: Metadata keys blockbatch adds itself: after the input's own columns.
_OWN_METADATA = OWN_METADATA


def input_columns(keys: list[str], taken: set[str]) -> list[tuple[str, str]]:
    """(metadata key, CSV column) for the input's own columns, then the keys blockbatch
    adds (``source_line`` ...); a key named like an export column gets an ``input_`` prefix.
    The layout of a document stored without its columns (:func:`export_columns`)."""
    ordered = [k for k in keys if k not in _OWN_METADATA] + [k for k in _OWN_METADATA if k in keys]
    columns: list[tuple[str, str]] = []
    for key in ordered:
        column = key
        while column in taken:
            column = f"input_{column}"
        taken.add(column)
        columns.append((key, column))
    return columns


@dataclass(frozen=True)
class ExportColumn:
    """One column of the CSV and Parquet exports: its name, and where a row's value comes
    from: ``own`` (blockbatch's: ``block_uid``, ``status`` ...), ``input`` (a metadata key),
    ``text`` (the input's text column: the block's content), ``field`` (a schema field),
    ``evidence`` (a field's ``part``), ``provenance`` (a provenance key)."""

    name: str
    source: Literal["own", "input", "text", "field", "evidence", "provenance"]
    key: str
    part: str = ""


def export_columns(
    fields: list[str],
    spans: list[tuple[str, str, str]],
    metadata_keys: list[str],
    record: tuple[list[str], str] | None,
) -> list[ExportColumn]:
    """The CSV and Parquet exports' columns, every name different.

    A CSV, JSONL or XLSX input whose columns were stored (``record``: its columns in file
    order and its text column, blockbatch/core/ingest.py ``record_columns``) gets its rows
    back as the file has them: its columns first, in their order and under their names, the
    text column too; then the schema's fields; then blockbatch's columns (``block_uid``,
    ``block_index``, ``block_type``, ``status``, ``reason_code``, ``last_error``, then
    ``source_line`` ...), each field's evidence, the provenance and :data:`CSV_TAIL`. One of
    ours named like an input column becomes ``blockbatch_<name>``; a field named like any
    column before it, ``field_<name>``.

    Any other document (markdown, PDF ... or one stored without its columns) has
    :data:`CSV_HEAD` first (``block_content`` the text), then its metadata keys
    (:func:`input_columns`), the fields, evidence, provenance and :data:`CSV_TAIL`.
    """
    if record is None:
        named, taken = field_columns(fields, spans)
        inputs = input_columns(metadata_keys, taken)
        return [
            *(ExportColumn(c, "own", c) for c in CSV_HEAD),
            *(ExportColumn(c, "input", k) for k, c in inputs),
            *(ExportColumn(c, "field", f) for f, c in zip(fields, named, strict=True)),
            *(ExportColumn(c, "evidence", f, part) for f, part, c in spans),
            *(ExportColumn(c, "provenance", k) for k, c in PROVENANCE_COLUMNS),
            *(ExportColumn(c, "own", c) for c in CSV_TAIL),
        ]
    names, text_column = record
    taken = set(names)

    def ours(name: str) -> str:
        while name in taken:
            name = f"blockbatch_{name}"
        taken.add(name)
        return name

    head = [ExportColumn(ours(c), "own", c) for c in CSV_HEAD if c != "block_content"]
    added = [ExportColumn(ours(k), "input", k) for k in _OWN_METADATA if k in metadata_keys]
    evidence = [ExportColumn(ours(c), "evidence", f, part) for f, part, c in spans]
    places = [ExportColumn(ours(c), "provenance", k) for k, c in PROVENANCE_COLUMNS]
    tail = [ExportColumn(ours(c), "own", c) for c in CSV_TAIL]
    answers: list[ExportColumn] = []
    for field in fields:
        column = field
        while column in taken:
            column = f"field_{column}"
        taken.add(column)
        answers.append(ExportColumn(column, "field", field))
    given = [ExportColumn(c, "text" if c == text_column else "input", c) for c in names]
    return [*given, *answers, *head, *added, *evidence, *places, *tail]


#: An input column ingest turns into the block's type (blockbatch/core/ingest.py
#: ``_record_rest``): a row without it in its metadata had its type there.
_TYPE_COLUMNS = ("block_type", "type")
#: The type of a record that had no such column (blockbatch/core/records.py ``_record_rest``).
_RECORD_TYPE = "record"


def column_value(
    column: ExportColumn,
    row: ExportRow,
    overlay: dict[str, Any] | None,
    evidence: dict[str, Any],
) -> Any:
    """The row's value in ``column`` (``None``: empty), as Python: strings, numbers, JSON
    values; the last review's time as its ISO text."""
    key = column.key
    if column.source == "text":
        return row["block_content"]
    if column.source == "input":
        metadata = row["metadata"] or {}
        if key in metadata:
            return metadata[key]
        return row["block_type"] if key in _TYPE_COLUMNS else None
    if column.source == "field":
        return overlay.get(key) if overlay else None
    if column.source == "evidence":
        return (evidence.get(key) or {}).get(column.part)
    if column.source == "provenance":
        return (row["provenance"] or {}).get(key)
    review = row["review"] or []
    if key == "status":
        return row["status"] or "not_planned"
    if key == "review_actions":
        return len(review)
    if key == "last_reviewer":
        return review[-1]["reviewer"] if review else None
    if key == "last_reviewed_at":
        return review[-1]["at"] if review else None
    return row[key]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


async def snapshot_columns(snapshot: ExportSnapshot, fields: list[str]) -> list[ExportColumn]:
    """The export's columns for this snapshot's run (:func:`export_columns`)."""
    spans = evidence_columns(fields) if await snapshot.asks_evidence() else []
    return export_columns(
        fields, spans, await snapshot.metadata_keys(), await snapshot.record_columns()
    )


async def export_csv(
    pool: asyncpg.Pool, run_id: str, out: TextIO, *, staged: bool = False
) -> ExportSummary:
    """Write the run as CSV: one row per block in order, the columns of
    :func:`export_columns` (a CSV input's rows come back with their own columns first, in
    their order and under their names, then the schema's fields, then blockbatch's).

    Schema fields are strings as they are, other values as JSON, empty without an exported
    value; evidence (when the schema asks for it) is each value's quote, how it matched, its
    start and end in the block's text; the provenance's page, box and page size are JSON
    arrays of points, its heading path a JSON array; the tail says how many review acts,
    the last reviewer and when, and the run and call whose answer a reused overlay took.
    The JSONL export carries every act in full.
    """
    async with export_snapshot(pool, run_id) as snapshot:
        fields = await snapshot.fields()
        columns = await snapshot_columns(snapshot, fields)
        writer = csv.writer(out)
        writer.writerow([c.name for c in columns])
        lines = with_overlay = 0
        async for row in snapshot.rows():
            overlay = exported_overlay(row, staged=staged)
            evidence = exported_evidence(row, overlay) or {}
            writer.writerow([_cell(column_value(c, row, overlay, evidence)) for c in columns])
            lines += 1
            with_overlay += overlay is not None
        return await export_summary(snapshot, staged=staged, lines=lines, with_overlay=with_overlay)


async def export_run(
    pool: asyncpg.Pool, run_id: str, out: TextIO, *, staged: bool = False
) -> ExportSummary:
    """Write the run's blocks as JSONL to ``out`` in block order (a consistent snapshot)."""
    async with export_snapshot(pool, run_id) as snapshot:
        record = await snapshot.record_columns()
        lines = with_overlay = 0
        async for row in snapshot.rows():
            line = export_line(row, staged=staged, record=record)
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
            lines += 1
            with_overlay += line["user_defined"] is not None
        return await export_summary(snapshot, staged=staged, lines=lines, with_overlay=with_overlay)


async def export_summary(
    snapshot: ExportSnapshot, *, staged: bool, lines: int, with_overlay: int
) -> ExportSummary:
    run = snapshot.run
    doc = await snapshot.document()
    return ExportSummary(
        run_id=run.run_id,
        document=doc,
        schema_={"schema_id": run.schema_id, "name": run.schema_name},
        model=run.model,
        status=run.status,
        error=run.error,
        overlays="staging" if staged else "confirmed",
        lines=lines,
        with_overlay=with_overlay,
        counters={
            "blocks": run.blocks,
            "blocks_total": run.blocks_total,
            "pack_count": run.pack_count,
            "calls": run.calls,
            "split_events": run.split_events,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cache_creation_input_tokens": run.cache_creation_input_tokens,
            "cache_read_input_tokens": run.cache_read_input_tokens,
            "blocks_reused": run.blocks_reused,
            "reuse_saved_usd": run.reuse_saved_usd,
        },
        cost_usd=run.cost_usd,
        settings=run.settings,
        created_at=run.created_at,
        finished_at=run.finished_at,
        exported_at=datetime.now(UTC),
        endpoints=run.endpoints,
        simulated=run.simulated,
    )


ExportFormat = Literal["jsonl", "csv", "parquet"]


async def export_to(
    pool: asyncpg.Pool,
    run_id: str,
    out: TextIO,
    *,
    staged: bool = False,
    fmt: ExportFormat = "jsonl",
) -> ExportSummary:
    """:func:`export_run` (JSONL) or :func:`export_csv` to ``out``.

    Raises:
        BadRequest: ``parquet``, which is binary: it is written to a file
            (``blockbatch.api.parquet.export_parquet``).
    """
    if fmt == "parquet":
        raise BadRequest("a Parquet export is written to a file: give a path (--out FILE)")
    if fmt == "csv":
        return await export_csv(pool, run_id, out, staged=staged)
    return await export_run(pool, run_id, out, staged=staged)


async def export_run_to_file(
    pool: asyncpg.Pool,
    run_id: str,
    path: str | Path,
    *,
    staged: bool = False,
    fmt: ExportFormat = "jsonl",
) -> ExportSummary:
    """Write ``path`` (JSONL or CSV) and ``path.meta.json``; a failed export leaves neither
    behind."""
    path = Path(path)
    meta_path = Path(f"{path}.meta.json")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="") as out:
            summary = await export_to(pool, run_id, out, staged=staged, fmt=fmt)
        meta_path.write_text(json.dumps(summary.meta(), indent=2, ensure_ascii=False) + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return summary
