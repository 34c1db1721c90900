"""The Parquet export: one row per block, typed columns, for warehouse users.

The columns are the CSV export's (blockbatch/api/review.py ``export_columns``: a CSV or JSONL
input's own columns first, in its order and under its names, then the schema's fields, then
blockbatch's), typed where a warehouse gains from it: a ``string``, ``integer``, ``number``
or ``boolean`` field (alone, in an ``enum`` of its type, or with ``null``) is a column of
that type; any other field (arrays, objects, unions) is its JSON text; evidence spans,
``block_index``, ``source_line``, the provenance's page and char span are integers, its box
and page size lists of doubles (points), its heading path a list of strings;
``last_reviewed_at`` is a UTC timestamp. Rows
are written in batches of :data:`BATCH_ROWS` from one consistent snapshot, so a large run
is never held in memory whole. pyarrow is the optional ``parquet`` extra; without it the
export says how to install it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from blockbatch.api.errors import BadRequest
from blockbatch.api.export import (
    ExportColumn,
    ExportSummary,
    column_value,
    export_summary,
    exported_evidence,
    exported_overlay,
    snapshot_columns,
)
from blockbatch.core.views import ExportRow
from blockbatch.store.reads import export_snapshot

#: Rows per record batch written.
BATCH_ROWS = 5_000

_SCALARS = {"string": "string", "integer": "int64", "number": "float64", "boolean": "bool"}
#: The column kind of each provenance key.
_PROVENANCE_KINDS = {
    "page": "int64",
    "bbox": "points",
    "page_size": "points",
    "heading_path": "strings",
    "char_start": "int64",
    "char_end": "int64",
}


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:  # the optional extra is not installed
        raise BadRequest(
            "the Parquet export needs pyarrow: in the blockbatch checkout, run "
            "pip install -e '.[parquet]' (or pip install pyarrow), or export JSONL or CSV"
        ) from None
    return pyarrow


def field_kind(schema: Mapping[str, Any]) -> str:
    """The column kind of a field: ``string``, ``int64``, ``float64``, ``bool``, or ``json``
    (its JSON text) for anything else."""
    declared = schema.get("type")
    types = declared if isinstance(declared, list) else [declared] if declared else []
    real = [t for t in types if t != "null"]
    if len(real) == 1 and real[0] in _SCALARS:
        return _SCALARS[real[0]]
    members = schema.get("enum")
    if not types and isinstance(members, list) and members:
        kinds = {type(m) for m in members if m is not None}
        if kinds == {str}:
            return "string"
    return "json"


def _value(kind: str, value: Any) -> Any:
    """A value as its column holds it (``None`` stays null)."""
    if value is None:
        return None
    if kind == "json":
        return json.dumps(value, ensure_ascii=False)
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if kind == "int64":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


#: The kind of each of blockbatch's own columns that is not a string.
_OWN_KINDS = {
    "block_index": "int64",
    "review_actions": "int64",
    "last_reviewed_at": "timestamp",
    "reused_from_call_id": "int64",
}
#: Metadata keys that are line or row numbers.
_NUMBER_KEYS = ("source_line", "item_index", "source_row")


class _Columns:
    """The export's columns (blockbatch/api/review.py ``export_columns``) with each one's
    kind."""

    def __init__(self, fields: dict[str, Any], columns: list[ExportColumn]) -> None:
        self.columns = columns
        kinds = {
            name: field_kind(s if isinstance(s, Mapping) else {}) for name, s in fields.items()
        }
        self.kinds = [self._kind(c, kinds) for c in columns]
        self.names_kinds = [(c.name, k) for c, k in zip(columns, self.kinds, strict=True)]

    @staticmethod
    def _kind(column: ExportColumn, fields: dict[str, str]) -> str:
        if column.source == "own":
            return _OWN_KINDS.get(column.key, "string")
        if column.source == "input":
            return "int64" if column.key in _NUMBER_KEYS else "text"
        if column.source == "field":
            return fields[column.key]
        if column.source == "evidence":
            return "int64" if column.part in ("start", "end") else "string"
        if column.source == "provenance":
            return _PROVENANCE_KINDS[column.key]
        return "string"

    def schema(self, pa: Any) -> Any:
        types = {
            "string": pa.string(),
            "text": pa.string(),
            "json": pa.string(),
            "int64": pa.int64(),
            "float64": pa.float64(),
            "bool": pa.bool_(),
            "points": pa.list_(pa.float64()),
            "strings": pa.list_(pa.string()),
            "timestamp": pa.timestamp("us", tz="UTC"),
        }
        return pa.schema([(name, types[kind]) for name, kind in self.names_kinds])

    def row(self, row: ExportRow, overlay: dict[str, Any] | None) -> list[Any]:
        evidence = exported_evidence(row, overlay) or {}
        return [
            _typed(kind, column_value(c, row, overlay, evidence))
            for c, kind in zip(self.columns, self.kinds, strict=True)
        ]


def _typed(kind: str, value: Any) -> Any:
    """A value as a column of ``kind`` holds it."""
    if kind == "text":
        return _text(value)
    if kind == "timestamp":
        return None if value is None else datetime.fromisoformat(value)
    if kind in ("points", "strings"):
        return value
    if kind == "int64" and isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return _value(kind, value)


async def export_parquet(
    pool: asyncpg.Pool, run_id: str, path: str | Path, *, staged: bool = False
) -> ExportSummary:
    """Write ``path`` (Parquet) and ``path.meta.json``; a failed export leaves neither.

    Raises:
        BadRequest: pyarrow is not installed (the ``parquet`` extra).
        NotFound: no run has this id.
    """
    pa = _pyarrow()
    path = Path(path)
    meta_path = Path(f"{path}.meta.json")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        async with export_snapshot(pool, run_id) as snapshot:
            fields = await snapshot.field_schemas()
            columns = _Columns(fields, await snapshot_columns(snapshot, list(fields)))
            schema = columns.schema(pa)
            lines = with_overlay = 0
            batch: list[list[Any]] = []
            with pa.parquet.ParquetWriter(tmp, schema) as writer:
                async for row in snapshot.rows():
                    overlay = exported_overlay(row, staged=staged)
                    batch.append(columns.row(row, overlay))
                    lines += 1
                    with_overlay += overlay is not None
                    if len(batch) >= BATCH_ROWS:
                        writer.write_table(_table(pa, schema, batch))
                        batch = []
                writer.write_table(_table(pa, schema, batch))
            summary = await export_summary(
                snapshot, staged=staged, lines=lines, with_overlay=with_overlay
            )
        meta_path.write_text(json.dumps(summary.meta(), indent=2, ensure_ascii=False) + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return summary


def _table(pa: Any, schema: Any, rows: list[list[Any]]) -> Any:
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    return pa.Table.from_arrays(
        [pa.array(list(c), type=f.type) for c, f in zip(columns, schema, strict=True)],
        schema=schema,
    )
