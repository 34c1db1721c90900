"""Turn an uploaded file's bytes into blocks.

Text formats are parsed here: markdown (through markdown-it-py, a CommonMark parser:
:mod:`blockbatch.core.markdown`), plain text, JSONL and CSV. PDF, DOCX, PPTX and HTML go
through the converters of :mod:`blockbatch.core.convert`, and XLSX is read like a CSV per
sheet. Every format yields the same typed blocks (:class:`ParsedBlock`), each with its
:class:`Provenance`: its span in the file's text, its page and box where the format has
pages, and the headings it sits under.

Pure parsing, no I/O: the caller hands over the bytes and stores the blocks. Text formats
keep each block's 1-based ``source_line`` in ``metadata``. Errors a user can hit are
:class:`IngestError` with a message that says what is wrong and what to do about it; a file
that fails is refused whole, before anything is stored.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Any

from blockbatch.core.blocks import (
    ConvertOptions,
    IngestError,
    ParsedBlock,
    Provenance,
    RawBlock,
    TextBuilder,
    extracted_text,
)
from blockbatch.core.commands import flag, option
from blockbatch.core.convert.html import convert_html
from blockbatch.core.convert.office import convert_docx, convert_pptx
from blockbatch.core.convert.pdf import convert_pdf
from blockbatch.core.convert.tables import expand_tables
from blockbatch.core.convert.xlsx import read_xlsx
from blockbatch.core.markdown import parse_markdown

__all__ = [
    "EXTENSIONS",
    "FORMATS",
    "ConvertOptions",
    "IngestError",
    "Parsed",
    "ParsedBlock",
    "Provenance",
    "detect_format",
    "extracted_text",
    "parse_document",
    "parse_records",
]

#: File extension -> format name.
EXTENSIONS: dict[str, str] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".xlsx": "xlsx",
}
FORMATS: tuple[str, ...] = (
    "markdown",
    "text",
    "jsonl",
    "csv",
    "pdf",
    "docx",
    "pptx",
    "html",
    "xlsx",
)
#: Formats read from their bytes by a converter; the others are UTF-8 text.
BINARY_FORMATS: dict[str, Callable[[bytes, ConvertOptions], list[RawBlock]]] = {
    "pdf": lambda data, _options: convert_pdf(data),
    "docx": convert_docx,
    "pptx": convert_pptx,
    "html": convert_html,
}
#: What to do with a file of a format blockbatch does not read.
_SAVE_AS: dict[str, str] = {
    ".doc": "save it as .docx",
    ".rtf": "save it as .docx",
    ".odt": "save it as .docx",
    ".ppt": "save it as .pptx",
    ".odp": "save it as .pptx",
    ".xls": "save it as .xlsx",
    ".ods": "save it as .xlsx",
    ".png": "run OCR on it and give the text or a searchable PDF",
    ".jpg": "run OCR on it and give the text or a searchable PDF",
    ".jpeg": "run OCR on it and give the text or a searchable PDF",
    ".tif": "run OCR on it and give the text or a searchable PDF",
    ".tiff": "run OCR on it and give the text or a searchable PDF",
}
#: A heading's title in the heading path of the blocks under it, at most this long.
HEADING_PATH_CHARS = 200

#: Long text blocks are legitimate CSV cells; the csv module's default limit is 128 KiB.
_CSV_FIELD_LIMIT = 64 * 1024 * 1024


def detect_format(filename: str) -> str:
    """Return the format name for ``filename`` from its extension.

    Raises:
        IngestError: the extension is not one blockbatch reads; lists the ones it does.
    """
    suffix = PurePath(filename).suffix.lower()
    try:
        return EXTENSIONS[suffix]
    except KeyError:
        supported = ", ".join(EXTENSIONS)
        hint = f" For a {suffix} file, {_SAVE_AS[suffix]}." if suffix in _SAVE_AS else ""
        raise IngestError(
            f"cannot tell the format of {filename!r} from its extension "
            f"{suffix or '(none)'!r}; supported extensions: {supported}.{hint} "
            "Rename the file or pass the format explicitly."
        ) from None


@dataclass(frozen=True)
class Parsed:
    """A document's blocks, and the records skipped for having no text.

    Attributes:
        blocks: in document order, numbered from 0.
        skipped: the 1-based lines (XLSX: sheet rows) of JSONL/CSV/XLSX records whose text
            was empty, skipped because the caller asked for it (``skip_empty``).
        unit: what ``skipped`` counts: ``"line"`` or ``"row"``.
    """

    blocks: list[ParsedBlock]
    skipped: tuple[int, ...] = ()
    unit: str = "line"

    def skipped_text(self) -> str | None:
        """``"skipped 2 records with an empty text: lines 3, 9"``; ``None``: none skipped."""
        if not self.skipped:
            return None
        n = len(self.skipped)
        return (
            f"skipped {n} record{'s' if n != 1 else ''} with an empty text: "
            f"{self.unit}{'s' if n != 1 else ''} {_numbers(self.skipped)}"
        )


def parse_document(
    data: bytes,
    fmt: str,
    *,
    text_field: str = "text",
    skip_empty: bool = False,
    options: ConvertOptions | None = None,
    notices: list[str] | None = None,
) -> list[ParsedBlock]:
    """Split a document's bytes into blocks: :func:`parse_records`' blocks."""
    return parse_records(
        data, fmt, text_field=text_field, skip_empty=skip_empty, options=options, notices=notices
    ).blocks


def parse_records(
    data: bytes,
    fmt: str,
    *,
    text_field: str = "text",
    skip_empty: bool = False,
    options: ConvertOptions | None = None,
    notices: list[str] | None = None,
) -> Parsed:
    """Split a document's bytes into blocks.

    Args:
        data: the file's raw bytes; text formats are UTF-8, UTF-8 with a BOM, or UTF-16
            or UTF-32 with a BOM (UTF-16 without one is recognised by its zero bytes).
        fmt: one of :data:`FORMATS` (see :func:`detect_format`).
        text_field: for JSONL, CSV and XLSX, the key / column holding each block's text;
            for XLSX also ``Sheet!Column``, that sheet's column (the other sheets are
            skipped), and a plain column skips the sheets without it.
        skip_empty: skip JSONL/CSV/XLSX records whose text is empty (they are listed in
            :attr:`Parsed.skipped`) instead of refusing the file.
        options: how HTML, DOCX, PPTX and tables are read (:class:`ConvertOptions`).
        notices: where to append what a reader should know about the file that is not an
            error (sheets skipped, PDF pages whose text cannot be read); the caller shows
            them.

    Returns:
        Blocks in document order, numbered from 0, each with its provenance;
        whitespace-only blocks are skipped (blank lines of JSONL and CSV too: they are not
        records).

    Raises:
        IngestError: unknown format, bytes that are not text (a zip container or a PDF is
            named as what it is), malformed JSONL/CSV, a missing text field, a
            JSONL/CSV/XLSX record whose text is empty unless ``skip_empty`` (every such
            line named), a document without any block, and for converted formats: an
            encrypted, corrupt or oversized file, a zip bomb, a PDF without a text layer.
    """
    if fmt not in FORMATS:
        raise IngestError(f"unknown format {fmt!r}; supported formats: {', '.join(FORMATS)}")
    data = bytes(data)
    options = options or ConvertOptions()
    notes = notices if notices is not None else []
    text = ""
    skipped: list[int] = []
    unit = "line"
    if fmt == "pdf":  # its pages that cannot be read are noticed, one by one
        raw = _converted(fmt, lambda: convert_pdf(data, notes))
    elif fmt in BINARY_FORMATS:
        raw = _converted(fmt, lambda: BINARY_FORMATS[fmt](data, options))
    elif fmt == "xlsx":
        unit = "row"
        raw = _converted(
            fmt,
            lambda: _refuse_empty(
                _parse_xlsx(data, text_field, notes), text_field, skipped, skip_empty, "row"
            ),
        )
    else:
        text = _decode(data, fmt)
        if fmt == "markdown":
            raw = parse_markdown(text)
        elif fmt == "text":
            raw = list(_parse_text(text))
        elif fmt == "jsonl":
            raw = _refuse_empty(_parse_jsonl(text, text_field), text_field, skipped, skip_empty)
        else:
            raw = _refuse_empty(_parse_csv(text, text_field), text_field, skipped, skip_empty)
    raw = expand_tables(raw, table_rows=options.table_rows)
    blocks = [
        ParsedBlock(
            block_index=i,
            block_type=r.block_type,
            block_content=r.content,
            metadata=r.metadata,
            provenance=replace(r.provenance, heading_path=path),
        )
        for i, (r, path) in enumerate(zip(raw, _heading_paths(raw), strict=True))
    ]
    if not blocks:
        why = _why_empty(text, data, fmt)
        if skipped:
            why = f"every record's {text_field!r} is empty ({len(skipped)} skipped)"
        raise IngestError(f"document has no blocks: {why}")
    for block in blocks:
        _check_storable(block)
    return Parsed(blocks, tuple(skipped), unit)


def _converted(fmt: str, convert: Callable[[], list[RawBlock]]) -> list[RawBlock]:
    """A converter's blocks; whatever else a parsing library raises on a damaged file
    becomes an :class:`IngestError` that says so (their own exceptions are many and
    undocumented, and a damaged upload must not read as a crash)."""
    try:
        return convert()
    except (IngestError, ImportError):
        raise  # an ImportError is a broken install, not a damaged file
    except (MemoryError, RecursionError) as exc:
        raise IngestError(
            f"the {fmt.upper()} is too complex to read ({type(exc).__name__}); it is not an "
            "ordinary document. Save it again from its application, or split it"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a parsing library on a damaged upload
        raise IngestError(
            f"the {fmt.upper()} is damaged and cannot be read ({type(exc).__name__}: "
            f"{str(exc)[:120]}); open it in its application, save it again and run "
            "again with the new file"
        ) from None


def _heading_paths(raw: list[RawBlock]) -> Iterator[tuple[str, ...]]:
    """Each block's enclosing headings, outermost first (a heading's: its parents')."""
    open_headings: list[tuple[int, str]] = []
    for block in raw:
        if block.block_type != "heading":
            yield tuple(title for _, title in open_headings)
            continue
        level = block.metadata.get("level", 1)
        level = level if isinstance(level, int) else 1
        while open_headings and open_headings[-1][0] >= level:
            open_headings.pop()
        yield tuple(title for _, title in open_headings)
        title = " ".join(block.content.split())[:HEADING_PATH_CHARS]
        open_headings.append((level, title))


# --- decoding and checks -------------------------------------------------------------


#: Byte-order marks, longest first (UTF-32's begins with UTF-16's).
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
#: The top folder of an Office Open XML zip, by what it holds.
_OOXML_PARTS: tuple[tuple[str, str, str], ...] = (
    ("xl/", "xlsx", "an Excel workbook (.xlsx)"),
    ("word/", "docx", "a Word document (.docx)"),
    ("ppt/", "pptx", "a PowerPoint deck (.pptx)"),
)


def _decode(data: bytes, fmt: str = "text") -> str:
    """The text of a text format's bytes, in the encoding its BOM (or its zero bytes) names,
    else UTF-8; a file that is not text at all is named as what it is."""
    _refuse_disguised(data, fmt)
    encoding = _encoding(data)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise IngestError(
            f"the file is not valid {_ENCODING_NAMES.get(encoding, encoding)}: byte "
            f"0x{data[exc.start]:02x} at byte offset {exc.start} (line {line}) cannot be "
            "decoded; it may be in another encoding (such as Windows-1252): re-save the file as "
            "UTF-8 and run again"
        ) from None
    if text.startswith("\ufeff"):  # utf-16 and utf-32 keep nothing of the BOM; be sure
        text = text[1:]
    if "\x00" in text:
        offset = data.index(b"\x00")
        raise IngestError(
            f"the file contains a NUL byte at byte offset {offset}; it looks binary. "
            "Give a text file (markdown, plain text, JSONL or CSV) saved as UTF-8"
        )
    # One line convention for every parser; str.splitlines would also split on \f, \x1c...
    return text.replace("\r\n", "\n").replace("\r", "\n")


_ENCODING_NAMES = {"utf-8-sig": "UTF-8", "utf-16": "UTF-16", "utf-32": "UTF-32"}


def _encoding(data: bytes) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    # UTF-16 without a BOM: text in Latin script has a zero byte in every other position.
    head = data[:4096]
    if len(head) >= 8 and len(head) % 2 == 0:
        even, odd = head[0::2].count(0), head[1::2].count(0)
        half = len(head) // 2
        if odd >= 0.4 * half and even == 0:
            return "utf-16-le"
        if even >= 0.4 * half and odd == 0:
            return "utf-16-be"
    return "utf-8-sig"


def _refuse_disguised(data: bytes, fmt: str) -> None:
    """Refuse a zip container or a PDF given as a text format, saying what it is and how
    to read it (an .xlsx renamed .csv, a PDF saved as .txt)."""
    if data.startswith(b"%PDF-"):
        raise IngestError(
            f"the file is not {fmt.upper()} text: it is a PDF (it starts with %PDF). Read it "
            f"as one with {option('fmt', 'pdf')}, or give it a .pdf name"
        )
    if not data.startswith(b"PK\x03\x04"):
        return
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, ValueError, OSError):
        names = []
    for folder, kind, what in _OOXML_PARTS:
        if any(name.startswith(folder) for name in names):
            raise IngestError(
                f"the file is not {fmt.upper()} text: it is {what}, a zip container. Read "
                f"it as one with {option('fmt', kind)}, or give it a .{kind} name"
                + (", or save it from Excel as CSV UTF-8" if kind == "xlsx" else "")
            )
    raise IngestError(
        f"the file is not {fmt.upper()} text: it is a zip archive. Unpack it and give the "
        "file inside"
    )


def _check_storable(block: ParsedBlock) -> None:
    # Postgres text and jsonb reject U+0000, which a JSON string can smuggle in as \u0000.
    if "\x00" in block.block_content or "\\u0000" in json.dumps(block.metadata, default=str):
        line = block.metadata.get("source_line", "?")
        raise IngestError(
            f"block {block.block_index} (line {line}) contains a NUL character (\\u0000), "
            "which cannot be stored; remove it from the file and run again"
        )


def _why_empty(text: str, data: bytes, fmt: str) -> str:
    if fmt in BINARY_FORMATS or fmt == "xlsx":
        if fmt == "xlsx":
            return "no sheet has a header row with rows below it; add the rows to process"
        return f"the {fmt.upper()} holds no text; give a file with some text"
    if not text.strip():
        return "the file is empty or contains only whitespace; give a file with some text"
    if fmt == "csv":
        return "it has a header row but no rows below it; add the rows to process"
    if fmt == "jsonl":
        return "it has no JSON lines; add one JSON object per line"
    return "it contains no text outside markup; give a file with some text"


def _line_starts(text: str) -> list[int]:
    """The offset where each 1-based line starts: ``starts[n - 1]`` for line n."""
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    return starts


def _lines_span(starts: list[int], first: int, last: int, text_len: int) -> Provenance:
    """Lines ``first`` to ``last`` (1-based, inclusive) as a span without the last newline."""
    return Provenance(starts[first - 1], min(starts[last] - 1, text_len))


def _refuse_empty(
    records: Iterator[RawBlock | int],
    text_field: str,
    skipped: list[int],
    skip_empty: bool,
    unit: str = "line",
) -> list[RawBlock]:
    """The records, or an error naming every line whose text is empty.

    A JSONL/CSV record is a row the user will join results back to by its position or its
    own columns: sending it would pay for an answer about nothing, and leaving it out
    unasked would lose a row without a word. So the upload is refused before anything is
    stored, and the message names the lines to fix, unless the caller asked to skip such
    records (``skip_empty``): then their lines go into ``skipped``, for the caller to say,
    and every kept block keeps its own ``source_line``. A parser yields such a record as
    its line number.
    """
    kept: list[RawBlock] = []
    empty: list[int] = []
    for record in records:
        if isinstance(record, int):
            empty.append(record)
        else:
            kept.append(record)
    if not empty or skip_empty:
        skipped.extend(empty)
        return kept
    which = (
        f"{unit} {_numbers(empty)} has" if len(empty) == 1 else f"{unit}s {_numbers(empty)} have"
    )
    raise IngestError(
        f"{which} an empty {text_field!r}: every record needs text to send to the model. "
        f"Fill it in or remove the record and run again, or leave such records out with "
        f"{flag('skip_empty')} (nothing is stored); "
        f"{len(kept)} record{'s' if len(kept) != 1 else ''} had text"
    )


def _numbers(numbers: Sequence[int]) -> str:
    """``"3, 7, 9"``; past ten, ``"... and 4 more"``."""
    return ", ".join(str(n) for n in numbers[:10]) + (
        f" and {len(numbers) - 10} more" if len(numbers) > 10 else ""
    )


# --- plain text ----------------------------------------------------------------------


def _parse_text(text: str) -> Iterator[RawBlock]:
    starts = _line_starts(text)
    start: int | None = None
    buf: list[str] = []
    for number, line in enumerate([*text.split("\n"), ""], start=1):
        if line.strip():
            if start is None:
                start = number
            buf.append(line.rstrip())
        elif buf and start is not None:
            span = _lines_span(starts, start, number - 1, len(text))
            yield RawBlock("paragraph", "\n".join(buf).strip(), {"source_line": start}, span)
            start, buf = None, []


# --- JSONL ---------------------------------------------------------------------------


def _parse_jsonl(text: str, text_field: str) -> Iterator[RawBlock | int]:
    starts = _line_starts(text)
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
        yield RawBlock(
            block_type, content, metadata, _lines_span(starts, number, number, len(text))
        )


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


def _parse_csv(text: str, text_field: str) -> Iterator[RawBlock | int]:
    starts = _line_starts(text)
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
            span = _lines_span(starts, start, max(start, reader.line_num), len(text))
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


def _parse_xlsx(data: bytes, text_field: str, notices: list[str]) -> Iterator[RawBlock | int]:
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


def document_id_for(fmt: str, raw: bytes, options: ConvertOptions | None = None) -> str:
    """The id a document gets when stored: the same bytes, format and reading options
    (:class:`ConvertOptions` other than the defaults), the same id."""
    read_as = (options or ConvertOptions()).non_default()
    suffix = b"\0" + json.dumps(read_as, sort_keys=True).encode() if read_as else b""
    digest = hashlib.sha256(fmt.encode() + b"\0" + raw + suffix).hexdigest()
    return f"doc-{digest[:12]}"


# --- the input's columns -------------------------------------------------------------

#: Metadata keys the parsers add themselves (not columns of the user's input).
OWN_METADATA = ("source_line", "item_index", "sheet", "source_row")


def record_columns(
    data: bytes, fmt: str, blocks: list[ParsedBlock], text_field: str = "text"
) -> list[str] | None:
    """The input's own columns in the order the file has them, the text column among them,
    so an export can give each row back its columns under their names and in their order.

    Block metadata does not keep that order once stored (Postgres ``jsonb`` sorts keys),
    and it leaves out the text column. CSV: the header row; JSONL: the first record's keys,
    then keys only later records have; XLSX: the text column, then the other columns as
    the rows have them. ``None`` for formats without columns.
    """
    if fmt not in ("csv", "jsonl", "xlsx"):
        return None
    first: list[str] = []
    if fmt == "csv":
        for row in csv.reader(io.StringIO(_decode(data), newline="")):
            if row and any(cell.strip() for cell in row):
                first = [name.strip() for name in row]
                break
    elif fmt == "jsonl":
        for line in _decode(data).split("\n"):
            if line.strip():
                record = json.loads(line)
                first = list(record) if isinstance(record, dict) else []
                break
    else:
        first = [text_field.rsplit("!", 1)[-1]]  # XLSX "Sheet!Column" names one sheet's column
    later = (k for b in blocks for k in b.metadata if k not in OWN_METADATA)
    return list(dict.fromkeys([*first, *later]))
