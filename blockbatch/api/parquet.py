"""The Parquet export: one row per block, typed columns, for warehouse users.

The columns are the CSV export's (blockbatch/api/review.py: ``CSV_HEAD``, the input's own
columns, the schema's fields (``field_columns``), each field's evidence, the block's provenance,
``CSV_TAIL``), typed where a warehouse gains from it: a ``string``, ``integer``, ``number``
or ``boolean`` field (alone, in an ``enum`` of its type, or with ``null``) is a column of
that type; any other field (arrays, objects, unions) is its JSON text; evidence spans,
``block_index``, the provenance's page and char span are integers, its box and page size
lists of doubles (points), its heading path a list of strings. Rows
are written in batches of :data:`BATCH_ROWS` from one consistent snapshot, so a large run
is never held in memory whole. pyarrow is the optional ``parquet`` extra; without it the
export says how to install it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import asyncpg

from blockbatch.api.errors import BadRequest
from blockbatch.api.review import (
    PROVENANCE_COLUMNS,
    ExportSummary,
    evidence_columns,
    export_summary,
    exported_evidence,
    exported_overlay,
    field_columns,
    input_columns,
    provenance_values,
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
            "the Parquet export needs pyarrow: pip install 'blockbatch[parquet]' "
            "(or export JSONL or CSV)"
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


class _Columns:
    """The export's columns: (name, kind, how a row gives its value)."""

    def __init__(
        self,
        fields: dict[str, Any],
        named: list[str],
        inputs: list[tuple[str, str]],
        spans: list[tuple[str, str, str]],
    ) -> None:
        self.fields = fields
        self.inputs = inputs
        self.spans = spans
        kinds = {
            name: field_kind(s if isinstance(s, Mapping) else {}) for name, s in fields.items()
        }
        self.kinds = kinds
        self.names_kinds: list[tuple[str, str]] = [
            ("block_uid", "string"),
            ("block_index", "int64"),
            ("block_type", "string"),
            ("block_content", "string"),
            ("status", "string"),
            ("reason_code", "string"),
            ("last_error", "string"),
            *((column, "string") for _, column in inputs),
            *(
                (column, "json" if kinds[name] == "json" else kinds[name])
                for name, column in zip(fields, named, strict=True)
            ),
            *(
                (column, "int64" if part in ("start", "end") else "string")
                for _, part, column in spans
            ),
            *((column, _PROVENANCE_KINDS[key]) for key, column in PROVENANCE_COLUMNS),
            ("review_actions", "int64"),
            ("last_reviewer", "string"),
            ("last_reviewed_at", "string"),
            ("reused_from_run_id", "string"),
            ("reused_from_call_id", "int64"),
        ]

    def schema(self, pa: Any) -> Any:
        types = {
            "string": pa.string(),
            "json": pa.string(),
            "int64": pa.int64(),
            "float64": pa.float64(),
            "bool": pa.bool_(),
            "points": pa.list_(pa.float64()),
            "strings": pa.list_(pa.string()),
        }
        return pa.schema([(name, types[kind]) for name, kind in self.names_kinds])

    def row(self, row: ExportRow, overlay: dict[str, Any] | None) -> list[Any]:
        evidence = exported_evidence(row, overlay) or {}
        review = row["review"] or []
        metadata = row["metadata"] or {}
        return [
            row["block_uid"],
            row["block_index"],
            row["block_type"],
            row["block_content"],
            row["status"] or "not_planned",
            row["reason_code"],
            row["last_error"],
            *(_text(metadata.get(key)) for key, _ in self.inputs),
            *(_value(self.kinds[f], overlay.get(f)) if overlay else None for f in self.fields),
            *((evidence.get(f) or {}).get(part) for f, part, _ in self.spans),
            *provenance_values(row),
            len(review),
            review[-1]["reviewer"] if review else None,
            review[-1]["at"] if review else None,
            row["reused_from_run_id"],
            row["reused_from_call_id"],
        ]


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
            names = list(fields)
            spans = evidence_columns(names) if await snapshot.asks_evidence() else []
            named, taken = field_columns(names, spans)
            inputs = input_columns(await snapshot.metadata_keys(), taken)
            columns = _Columns(fields, named, inputs, spans)
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
