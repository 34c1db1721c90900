"""Records: JSONL lines, CSV rows and XLSX sheet rows, one block each, and the input's own
columns for exports.

A record's text is in a field (``text_field``); its other fields go into the block's
metadata. The parsers are generators: a record becomes a block as it is read. A record
whose text is empty is yielded as its line (or row) number, and :func:`refuse_empty` says
what becomes of it. Pure, no I/O.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from blockbatch.core.blocks import IngestError, ParsedBlock, RawBlock, TextBuilder
from blockbatch.core.commands import flag, option
from blockbatch.core.convert.xlsx import read_xlsx
from blockbatch.core.decoding import decode_text, line_starts, lines_span

#: Long text blocks are legitimate CSV cells; the csv module's default limit is 128 KiB.
_CSV_FIELD_LIMIT = 64 * 1024 * 1024


def refuse_empty(
    records: Iterator[RawBlock | int],
    text_field: str,
    skipped: list[int],
    skip_empty: bool,
    unit: str = "line",
) -> Iterator[RawBlock]:
    """The records as they come, then an error naming every line whose text is empty.

    A JSONL/CSV record is a row the user will join results back to by its position or its
    own columns: sending it would pay for an answer about nothing, and leaving it out
    unasked would lose a row without a word. So the upload is refused, and the message
    names the lines to fix, unless the caller asked to skip such records (``skip_empty``):
    then their lines go into ``skipped``, for the caller to say, and every kept block
    keeps its own ``source_line``. A parser yields such a record as its line number. The
    error comes once every record is read (it names them all), after the records with
    text: a caller storing them as they come stores them in the transaction the error
    rolls back, so nothing is stored.
    """
    kept = 0
    empty: list[int] = []
    for record in records:
        if isinstance(record, int):
            empty.append(record)
        else:
            kept += 1
            yield record
    if not empty or skip_empty:
        skipped.extend(empty)
        return
    listed = numbers_text(empty)
    which = f"{unit} {listed} has" if len(empty) == 1 else f"{unit}s {listed} have"
    raise IngestError(
        f"{which} an empty {text_field!r}: every record needs text to send to the model. "
        f"Fill it in or remove the record and run again, or leave such records out with "
        f"{flag('skip_empty')} (nothing is stored); "
        f"{kept} record{'s' if kept != 1 else ''} had text"
    )


def numbers_text(numbers: Sequence[int]) -> str:
    """``"3, 7, 9"``; past ten, ``"... and 4 more"``."""
    return ", ".join(str(n) for n in numbers[:10]) + (
        f" and {len(numbers) - 10} more" if len(numbers) > 10 else ""
    )


# --- JSONL ---------------------------------------------------------------------------


def parse_jsonl(text: str, text_field: str) -> Iterator[RawBlock | int]:
    starts = line_starts(text)
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(
                f"line {number} is not valid JSON ({exc.msg} at column {exc.colno}); "
                f'each line must be one JSON object such as {{"{text_field}": "..."}}'
            ) from None
        if not isinstance(record, dict):
            raise IngestError(
                f"line {number} is a JSON {type(record).__name__}, not an object; each line "
                f'must be one JSON object such as {{"{text_field}": "..."}}'
            )
        content = _record_text(record, text_field, f"line {number}", "key")
        if content is None:
            yield number  # refused by _refuse_empty, with every other such line
            continue
        block_type, metadata = _record_rest(record, text_field)
        metadata.setdefault("source_line", number)
        yield RawBlock(block_type, content, metadata, lines_span(starts, number, number, len(text)))


def _record_text(record: dict[str, Any], text_field: str, where: str, kind: str) -> str | None:
    if text_field not in record:
        keys = ", ".join(repr(k) for k in record) or "(none)"
        samples = {k: [v] for k, v in record.items() if isinstance(v, str)}
        raise IngestError(
            f"{where} has no {text_field!r} {kind}; it has: {keys}. "
            + _name_the_text(text_field, kind, _long_text(samples))
        )
    value = record[text_field]
    if value is None:
        return None
    if not isinstance(value, str):
        raise IngestError(
            f"{where}: {text_field!r} must be a string, got {type(value).__name__}; "
            "put the block text in a JSON string"
        )
    return value.strip() or None


def _name_the_text(text_field: str, kind: str, long_text: str | None) -> str:
    """What to do about a missing text column: the option to name it, and the column that
    holds the long text when one clearly does."""
    advice = (
        f"Name the {kind} that holds the block text with {option('text_field')}, or rename "
        f"it to {text_field!r}"
    )
    if long_text is not None:
        advice += f"; the long text looks to be in {long_text!r}: {option('text_field', long_text)}"
    return advice


#: A column is "clearly the long text" when its cells average this many characters or
#: more, and at least twice those of every other column.
_LONG_TEXT_CHARS = 20
_LONG_TEXT_RATIO = 2.0


def _long_text(columns: dict[str, list[str]]) -> str | None:
    """The one column whose cells are clearly longer than every other's, if there is one."""
    means = sorted(
        (
            (sum(len(v.strip()) for v in values) / len(values), name)
            for name, values in columns.items()
            if values and name
        ),
        reverse=True,
    )
    if not means or means[0][0] < _LONG_TEXT_CHARS:
        return None
    if len(means) > 1 and means[0][0] < _LONG_TEXT_RATIO * means[1][0]:
        return None
    return means[0][1]


def _record_rest(record: dict[str, Any], text_field: str) -> tuple[str, dict[str, Any]]:
    rest = {k: v for k, v in record.items() if k != text_field}
    for key in ("block_type", "type"):
        value = rest.get(key)
        if isinstance(value, str) and value.strip():
            del rest[key]
            return value.strip(), rest
    return "record", rest


# --- CSV -----------------------------------------------------------------------------


def parse_csv(text: str, text_field: str) -> Iterator[RawBlock | int]:
    starts = line_starts(text)
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    row_start = 1
    try:
        for row in reader:
            start, row_start = row_start, reader.line_num + 1
            if not row or not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = _csv_header(row, text_field, "the CSV", lambda: _ahead(reader))
                continue
            if len(row) != len(header):
                raise IngestError(
                    f"line {start}: the row has {len(row)} fields but the header has "
                    f"{len(header)}; quote fields that contain commas or line breaks"
                )
            record = dict(zip(header, row, strict=True))
            content = _record_text(record, text_field, f"line {start}", "column")
            if content is None:
                yield start  # refused by _refuse_empty, with every other such line
                continue
            block_type, metadata = _record_rest(record, text_field)
            metadata.setdefault("source_line", start)
            span = lines_span(starts, start, max(start, reader.line_num), len(text))
            yield RawBlock(block_type, content, metadata, span)
    except csv.Error as exc:
        raise IngestError(
            f"line {reader.line_num}: the CSV cannot be read ({exc}); check its quoting"
        ) from None


#: Rows read ahead to tell which column holds the long text.
_SAMPLE_ROWS = 200


def _ahead(rows: Iterator[list[str]]) -> list[list[str]]:
    """Up to :data:`_SAMPLE_ROWS` of the rows to come (to name a missing column's likely
    stand-in; the file is refused after, so they are not read again)."""
    sample: list[list[str]] = []
    for row in rows:
        sample.append(row)
        if len(sample) >= _SAMPLE_ROWS:
            break
    return sample


def _csv_header(
    row: list[str], text_field: str, where: str, rows: Callable[[], list[list[str]]]
) -> list[str]:
    header = [name.strip() for name in row]
    if where != "the CSV":  # a spreadsheet's header row is often padded with empty cells
        while header and not header[-1]:
            header.pop()
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise IngestError(f"{where}'s header names column {name!r} twice; rename one of them")
        seen.add(name)
    if text_field not in header:
        columns = ", ".join(repr(n) for n in header)
        cells: dict[str, list[str]] = {name: [] for name in header}
        for values in rows():
            for name, value in zip(header, values, strict=False):
                if value.strip():
                    cells[name].append(value)
        raise IngestError(
            f"{where} has no {text_field!r} column; its columns are: {columns}. "
            + _name_the_text(text_field, "column", _long_text(cells))
        )
    return header


# --- XLSX ----------------------------------------------------------------------------


def parse_xlsx(data: bytes, text_field: str, notices: list[str]) -> Iterator[RawBlock | int]:
    """Each sheet read as a CSV: its first row the header, each row below it a record.

    ``text_field`` is a column every sheet that has it is read by (the sheets without it
    are skipped, each named in ``notices``), or ``Sheet!Column``: only that sheet is read.
    A workbook where no sheet has the column is refused, every sheet's columns named.
    """
    only_sheet, _, column = text_field.rpartition("!")
    column = column or text_field
    out = TextBuilder()
    header: tuple[int, list[str] | None] | None = None
    seen: dict[str, list[str]] = {}
    sheets: list[str] = []
    read: list[str] = []
    for row in read_xlsx(data):
        if header is None or header[0] != row.sheet:
            sheets.append(row.sheet_name)
            names: list[str] | None = None
            if not only_sheet or row.sheet_name == only_sheet:
                names = [n.strip() for n in row.cells]
                seen[row.sheet_name] = names
                if column in names:
                    names = _csv_header(row.cells, column, f"sheet {row.sheet_name!r}", list)
                    read.append(row.sheet_name)
                else:
                    names = None
            header = (row.sheet, names)
            continue
        if header[1] is None:  # a sheet not read
            continue
        names = header[1]
        cells = row.cells + [""] * (len(names) - len(row.cells))
        where = f"sheet {row.sheet_name!r} row {row.row}"
        if any(c.strip() for c in cells[len(names) :]):
            raise IngestError(
                f"{where} has a value beyond the header's {len(names)} columns; "
                "give that column a header or clear the cell"
            )
        record = dict(zip(names, cells[: len(names)], strict=True))
        content = _record_text(record, column, where, "column")
        if content is None:
            yield row.row  # refused by _refuse_empty, with every other such row
            continue
        block_type, metadata = _record_rest(record, column)
        metadata.update(sheet=row.sheet_name, source_row=row.row)
        out.add(block_type, content, metadata, page=row.sheet)
        yield out.blocks[-1]
    if only_sheet and only_sheet not in seen:
        raise IngestError(
            f"the XLSX has no sheet {only_sheet!r} with a header row; its sheets with rows "
            f"are: {', '.join(repr(n) for n in sheets) or '(none)'}. Name one as Sheet!Column"
        )
    if not read:
        columns = "; ".join(
            f"sheet {name!r}: {', '.join(repr(c) for c in cols if c)}"
            for name, cols in seen.items()
        )
        raise IngestError(
            f"no sheet of the XLSX has a {column!r} column ({columns or 'no sheet has rows'}). "
            + _name_the_text(column, "column", _xlsx_long_text(data, seen))
            + " (Column, or Sheet!Column for one sheet)"
        )
    why = f"only sheet {only_sheet!r} is read" if only_sheet else f"it has no {column!r} column"
    notices.extend(f"sheet {name!r} was skipped: {why}" for name in sheets if name not in read)


def _xlsx_long_text(data: bytes, headers: dict[str, list[str]]) -> str | None:
    """The column that clearly holds the long text, when one sheet has one (``Sheet!Column``
    where the workbook has several sheets): read again, only on the way to a refusal."""
    cells: dict[str, dict[str, list[str]]] = {n: {c: [] for c in h} for n, h in headers.items()}
    taken: Counter[str] = Counter()
    for row in read_xlsx(data):
        header = headers.get(row.sheet_name)
        if header is None or taken[row.sheet_name] > _SAMPLE_ROWS:
            continue
        taken[row.sheet_name] += 1
        if taken[row.sheet_name] == 1:
            continue  # the header row
        for name, value in zip(header, row.cells, strict=False):
            if value.strip():
                cells[row.sheet_name][name].append(value)
    found = [(sheet, col) for sheet, cols in cells.items() if (col := _long_text(cols))]
    if len(found) != 1:
        return None
    sheet, col = found[0]
    return col if len(headers) == 1 else f"{sheet}!{col}"


# --- the input's columns -------------------------------------------------------------

#: Metadata keys the parsers add themselves (not columns of the user's input).
OWN_METADATA = ("source_line", "item_index", "sheet", "source_row")


def record_columns(
    data: bytes,
    fmt: str,
    blocks: Iterable[ParsedBlock],
    text_field: str = "text",
    *,
    later: Iterable[str] = (),
) -> list[str] | None:
    """The input's own columns in the order the file has them, the text column among them,
    so an export can give each row back its columns under their names and in their order.

    Block metadata does not keep that order once stored (Postgres ``jsonb`` sorts keys),
    and it leaves out the text column. CSV: the header row; JSONL: the first record's keys,
    then keys only later records have; XLSX: the text column, then the other columns as
    the rows have them. ``None`` for formats without columns. ``later``: metadata keys
    already gathered from blocks streamed past (blockbatch/core/ingest.py ``Streamed``).
    """
    if fmt not in ("csv", "jsonl", "xlsx"):
        return None
    first: list[str] = []
    if fmt == "csv":
        for row in csv.reader(io.StringIO(decode_text(data), newline="")):
            if row and any(cell.strip() for cell in row):
                first = [name.strip() for name in row]
                break
    elif fmt == "jsonl":
        for line in decode_text(data).split("\n"):
            if line.strip():
                record = json.loads(line)
                first = list(record) if isinstance(record, dict) else []
                break
    else:
        first = [text_field.rsplit("!", 1)[-1]]  # XLSX "Sheet!Column" names one sheet's column
    keys = itertools.chain(later, (k for b in blocks for k in b.metadata))
    return list(dict.fromkeys([*first, *(k for k in keys if k not in OWN_METADATA)]))
