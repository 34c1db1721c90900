"""Tables as blocks: one block per table, split by rows when large, or one block per row.

The converters (HTML, DOCX, PPTX) and the markdown parser hand a table over as one
``table`` block whose ``metadata["cells"]`` holds its rows of cell texts (markdown: its
source lines, read back here). :func:`expand_tables` then decides, once for every format:

- with ``table_rows`` (``--table-rows``), each row below the header becomes a
  ``table_row`` block whose content is ``Header: value`` lines, so the model sees which
  column each value is in; ``metadata`` has the ``header``, the ``row`` (1-based, the
  header being row 0) and the table's ``rows``;
- otherwise a table whose text is above :data:`MAX_TABLE_TOKENS` is split into parts of
  whole rows, each part repeating the header row (``metadata``: ``part``, ``parts``,
  ``first_row``); a single row above the limit stays whole, never cut;
- otherwise the table stays one block.

A row or part keeps its table's provenance (span, page, box): a row has no box of its
own in the formats that have boxes.
"""

from __future__ import annotations

import re
from dataclasses import fields, replace
from typing import Any

from blockbatch.core.blocks import RawBlock
from blockbatch.core.planning import PlanLimits, estimate_tokens

#: A table larger than this (estimated tokens) is split by rows. A pack's answers must fit
#: its output budget (:class:`blockbatch.core.planning.PlanLimits`, ``output_budget`` at
#: ``safety_margin``), and a table is what schemas most often ask to restate or extract
#: whole, so a part is kept to what one answer can echo.
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(PlanLimits)}
MAX_TABLE_TOKENS = int(_DEFAULTS["output_budget"] * _DEFAULTS["safety_margin"])

_MD_SEPARATOR = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$")
_MD_PIPE = re.compile(r"(?<!\\)\|")


def table_text(rows: list[list[str]]) -> str:
    """A table as pipe-separated rows, each cell's text on one line; empty rows dropped."""
    lines = []
    for cells in rows:
        texts = [" ".join(c.split()) for c in cells]
        if any(texts):
            lines.append("| " + " | ".join(texts) + " |")
    return "\n".join(lines)


def clean_rows(rows: list[list[str]]) -> list[list[str]]:
    """Rows with each cell's whitespace collapsed, rows without any text dropped."""
    out = [[" ".join(c.split()) for c in cells] for cells in rows]
    return [cells for cells in out if any(cells)]


def markdown_rows(content: str) -> list[list[str]]:
    """A GFM table's source lines as rows of cells, without the delimiter row."""
    rows = []
    for line in content.split("\n"):
        line = line.strip()
        if not line or _MD_SEPARATOR.match(line):
            continue
        line = line.removeprefix("|")
        if line.endswith("|") and not line.endswith("\\|"):
            line = line[:-1]
        rows.append([c.strip().replace("\\|", "|") for c in _MD_PIPE.split(line)])
    return rows


def row_text(header: list[str], cells: list[str]) -> str:
    """One row as ``Header: value`` lines; a column without a header is ``Column N``."""
    lines = []
    for n, value in enumerate(cells):
        if not value:
            continue
        name = header[n] if n < len(header) and header[n] else f"Column {n + 1}"
        lines.append(f"{name}: {value}")
    return "\n".join(lines)


def expand_tables(raw: list[RawBlock], *, table_rows: bool) -> list[RawBlock]:
    """Every block as it is, except tables: one per row, split by rows, or whole."""
    out: list[RawBlock] = []
    for block in raw:
        if block.block_type != "table":
            out.append(block)
            continue
        metadata = dict(block.metadata)
        cells = metadata.pop("cells", None)
        rows = clean_rows(cells) if cells is not None else markdown_rows(block.content)
        if not rows:
            out.append(replace(block, metadata=metadata))
            continue
        if table_rows and len(rows) > 1:
            out.extend(_rows(block, metadata, rows))
        elif estimate_tokens(block.content) > MAX_TABLE_TOKENS and len(rows) > 2:
            out.extend(_parts(block, metadata, rows))
        else:
            out.append(replace(block, metadata=metadata))
    return out


def _rows(block: RawBlock, metadata: dict[str, Any], rows: list[list[str]]) -> list[RawBlock]:
    header = rows[0]
    out = []
    for number, cells in enumerate(rows[1:], start=1):
        text = row_text(header, cells)
        if text:
            info = {**metadata, "header": header, "row": number, "rows": len(rows)}
            out.append(replace(block, block_type="table_row", content=text, metadata=info))
    return out


def _parts(block: RawBlock, metadata: dict[str, Any], rows: list[list[str]]) -> list[RawBlock]:
    header_line = table_text([rows[0]])
    budget = MAX_TABLE_TOKENS - estimate_tokens(header_line)
    groups: list[tuple[int, list[str]]] = []
    lines: list[str] = []
    first, used = 1, 0
    for number, cells in enumerate(rows[1:], start=1):
        line = table_text([cells])
        cost = estimate_tokens(line)
        if lines and used + cost > budget:
            groups.append((first, lines))
            lines, first, used = [], number, 0
        lines.append(line)
        used += cost
    if lines:
        groups.append((first, lines))
    return [
        replace(
            block,
            content="\n".join([header_line, *part]),
            metadata={
                **metadata,
                "rows": len(part) + 1,
                "part": n,
                "parts": len(groups),
                "first_row": start,
            },
        )
        for n, (start, part) in enumerate(groups, start=1)
    ]
