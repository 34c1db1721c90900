"""XLSX rows through openpyxl (read-only, cached values: formulas are not evaluated).

A workbook is read like a CSV per sheet: each sheet's first non-empty row is its header,
each row below it a record. Only the cells the sheet's XML holds are read: a sheet's
``<dimension>`` (which a writer may set to the whole grid, A1:XFD1048576) is ignored, so
the work is bounded by the file's real data, and every row the XML holds counts towards
:data:`MAX_ROWS`, empty or not. This module only reads cells as text; which column is the
block's text, and what a record without text means, is decided where CSV is
(:mod:`blockbatch.core.ingest`).
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterator
from dataclasses import dataclass

from blockbatch.core.blocks import IngestError
from blockbatch.core.convert.limits import check_zip

#: Rows read from one workbook, all sheets together.
MAX_ROWS = 1_000_000


@dataclass(frozen=True)
class SheetRow:
    """One non-empty row: its sheet (1-based number and name), 1-based row, cells as text."""

    sheet: int
    sheet_name: str
    row: int
    cells: list[str]


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def read_xlsx(data: bytes) -> Iterator[SheetRow]:
    """Every non-empty row of every worksheet, in order.

    Raises:
        IngestError: corrupt, encrypted, a zip bomb, or more than :data:`MAX_ROWS` rows.
    """
    check_zip(data, "XLSX")
    import openpyxl
    from lxml import etree

    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except (KeyError, ValueError, OSError, etree.LxmlError) as exc:
        raise IngestError(
            "the XLSX is corrupt (openpyxl cannot read its workbook: "
            f"{type(exc).__name__}); open it in a spreadsheet application, save it again "
            "and upload the new file"
        ) from None
    seen = 0
    try:
        for number, sheet in enumerate(book.worksheets, start=1):
            # Without its claimed dimension a read-only sheet yields each row as long as
            # its last written cell, and a missing row as an empty tuple (no padding).
            if hasattr(sheet, "reset_dimensions"):
                sheet.reset_dimensions()
            for r, values in enumerate(sheet.iter_rows(values_only=True), start=1):
                if not values:  # a row the XML skips: yielded empty, at no cost
                    continue
                seen += 1
                if seen > MAX_ROWS:
                    raise IngestError(
                        f"the XLSX has more than {MAX_ROWS} rows; split it or export the "
                        "rows as JSONL and upload that"
                    )
                if not any(v is not None for v in values):
                    continue
                cells = [_cell(v) for v in values]
                while cells and not cells[-1].strip():
                    cells.pop()
                if not cells:
                    continue
                yield SheetRow(number, sheet.title, r, cells)
    finally:
        book.close()
