"""Turn an uploaded file's bytes into blocks.

Text formats are parsed here: markdown (through markdown-it.rs, a CommonMark parser:
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

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from blockbatch.core.blocks import (
    ConvertOptions,
    IngestError,
    ParsedBlock,
    Provenance,
    RawBlock,
    extracted_text,
)
from blockbatch.core.convert.html import convert_html
from blockbatch.core.convert.office import convert_docx, convert_pptx
from blockbatch.core.convert.pdf import convert_pdf
from blockbatch.core.convert.tables import expand_tables
from blockbatch.core.decoding import decode_text, line_starts, lines_span
from blockbatch.core.markdown import iter_markdown
from blockbatch.core.records import (
    OWN_METADATA,
    numbers_text,
    parse_csv,
    parse_jsonl,
    parse_xlsx,
    record_columns,
    refuse_empty,
)

__all__ = [
    "EXTENSIONS",
    "FORMATS",
    "OWN_METADATA",
    "ConvertOptions",
    "IngestError",
    "Parsed",
    "ParsedBlock",
    "Provenance",
    "detect_format",
    "extracted_text",
    "parse_document",
    "parse_records",
    "record_columns",
    "stream_records",
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
#: Formats whose blocks are records with columns of their own (:func:`record_columns`).
_RECORD_FORMATS = frozenset({"csv", "jsonl", "xlsx"})
#: A heading's title in the heading path of the blocks under it, at most this long.
HEADING_PATH_CHARS = 200


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
        return _skipped_text(self.skipped, self.unit)


def _skipped_text(skipped: Sequence[int], unit: str) -> str | None:
    if not skipped:
        return None
    n = len(skipped)
    return (
        f"skipped {n} record{'s' if n != 1 else ''} with an empty text: "
        f"{unit}{'s' if n != 1 else ''} {numbers_text(skipped)}"
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
    streamed = stream_records(
        data, fmt, text_field=text_field, skip_empty=skip_empty, options=options, notices=notices
    )
    blocks = list(streamed.blocks)
    return Parsed(blocks, tuple(streamed.skipped), streamed.unit)


@dataclass
class Streamed:
    """A document's blocks as they are parsed (:func:`stream_records`).

    Attributes:
        blocks: :func:`parse_records`' blocks, one at a time; its errors are raised as the
            iteration meets them, some (an empty record, a document without blocks) only at
            its end: store what it yields in one transaction.
        skipped: :attr:`Parsed.skipped`, complete once ``blocks`` is exhausted.
        unit: :attr:`Parsed.unit`.
    """

    blocks: Iterator[ParsedBlock]
    skipped: list[int] = field(default_factory=list)
    unit: str = "line"
    #: The input's own columns met so far, besides the parsers' (``OWN_METADATA``).
    keys: dict[str, None] = field(default_factory=dict)

    def skipped_text(self) -> str | None:
        """:meth:`Parsed.skipped_text`, once :attr:`blocks` is exhausted."""
        return _skipped_text(self.skipped, self.unit)

    def columns(self, data: bytes, fmt: str, text_field: str) -> list[str] | None:
        """:func:`record_columns` of the blocks streamed so far (all, once exhausted)."""
        return record_columns(data, fmt, [], text_field, later=self.keys)


def stream_records(
    data: bytes,
    fmt: str,
    *,
    text_field: str = "text",
    skip_empty: bool = False,
    options: ConvertOptions | None = None,
    notices: list[str] | None = None,
) -> Streamed:
    """:func:`parse_records` a block at a time, for a caller that stores them as they come.

    Markdown is parsed a window of lines at a time (:func:`blockbatch.core.markdown.iter_markdown`),
    plain text, JSONL and CSV a record at a time: besides the file and its text, what is held
    is a window, not the document's blocks. PDF, DOCX, PPTX, HTML and XLSX are converted
    whole first (their readers work on the whole file, within
    blockbatch/core/convert/limits.py), then handed on a block at a time.

    Raises:
        IngestError: at once for an unknown format, a file that is not text or a converted
            file that cannot be read; the others as :attr:`Streamed.blocks` meets them.
    """
    if fmt not in FORMATS:
        raise IngestError(f"unknown format {fmt!r}; supported formats: {', '.join(FORMATS)}")
    data = bytes(data)
    options = options or ConvertOptions()
    notes = notices if notices is not None else []
    streamed = Streamed(iter(()), unit="row" if fmt == "xlsx" else "line")
    text = ""
    raw: Iterable[RawBlock]
    if fmt == "pdf":  # its pages that cannot be read are noticed, one by one
        raw = _converted(fmt, lambda: convert_pdf(data, notes))
    elif fmt in BINARY_FORMATS:
        raw = _converted(fmt, lambda: BINARY_FORMATS[fmt](data, options))
    elif fmt == "xlsx":
        raw = _converted(
            fmt,
            lambda: list(
                refuse_empty(
                    parse_xlsx(data, text_field, notes),
                    text_field,
                    streamed.skipped,
                    skip_empty,
                    "row",
                )
            ),
        )
    else:
        text = decode_text(data, fmt)
        if fmt == "markdown":
            raw = iter_markdown(text)
        elif fmt == "text":
            raw = _parse_text(text)
        elif fmt == "jsonl":
            raw = refuse_empty(
                parse_jsonl(text, text_field), text_field, streamed.skipped, skip_empty
            )
        else:
            raw = refuse_empty(
                parse_csv(text, text_field), text_field, streamed.skipped, skip_empty
            )

    # A block's text and metadata are cut from the file's text (markdown, plain text), so
    # when the text has no NUL no block has one: checked once, not once a block.
    check_nul = fmt not in ("markdown", "text") or "\x00" in text
    # Only records have columns of their own to give back (Streamed.columns).
    keys = streamed.keys if fmt in _RECORD_FORMATS else None

    def blocks() -> Iterator[ParsedBlock]:
        count = 0
        for r, path in _heading_paths(_expanded(raw, options.table_rows)):
            p = r.provenance
            block = ParsedBlock(
                block_index=count,
                block_type=r.block_type,
                block_content=r.content,
                metadata=r.metadata,
                # The constructor, not dataclasses.replace: this runs once a block.
                provenance=Provenance(p.char_start, p.char_end, p.page, p.bbox, p.page_size, path),
            )
            if check_nul:
                _check_storable(block)
            if keys is not None:
                keys.update(dict.fromkeys(block.metadata))
            count += 1
            yield block
        if not count:
            why = _why_empty(text, data, fmt)
            if streamed.skipped:
                why = f"every record's {text_field!r} is empty ({len(streamed.skipped)} skipped)"
            raise IngestError(f"document has no blocks: {why}")

    streamed.blocks = blocks()
    return streamed


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


def _expanded(raw: Iterable[RawBlock], table_rows: bool) -> Iterator[RawBlock]:
    """``raw`` with its tables expanded (:func:`expand_tables`, which keeps every other
    block as it is)."""
    for block in raw:
        if block.block_type == "table":
            yield from expand_tables([block], table_rows=table_rows)
        else:
            yield block


def _heading_paths(raw: Iterable[RawBlock]) -> Iterator[tuple[RawBlock, tuple[str, ...]]]:
    """Each block with its enclosing headings, outermost first (a heading's: its parents').
    The blocks under one heading share one path (made when a heading opens or closes)."""
    open_headings: list[tuple[int, str]] = []
    path: tuple[str, ...] = ()
    for block in raw:
        if block.block_type != "heading":
            yield block, path
            continue
        level = block.metadata.get("level", 1)
        level = level if isinstance(level, int) else 1
        while open_headings and open_headings[-1][0] >= level:
            open_headings.pop()
        path = tuple(title for _, title in open_headings)
        yield block, path
        title = " ".join(block.content.split())[:HEADING_PATH_CHARS]
        open_headings.append((level, title))
        path = (*path, title)


def _check_storable(block: ParsedBlock) -> None:
    # Postgres text and jsonb reject U+0000, which a JSON string can smuggle in as \u0000.
    if "\x00" in block.block_content or _has_nul(block.metadata):
        line = block.metadata.get("source_line", "?")
        raise IngestError(
            f"block {block.block_index} (line {line}) contains a NUL character (\\u0000), "
            "which cannot be stored; remove it from the file and run again"
        )


def _has_nul(value: object) -> bool:
    """Whether a metadata value holds U+0000 in a string or a key, at any depth (what
    ``json.dumps`` would write as ``\\u0000``; other values are stored as their text)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    if value is None or isinstance(value, int | float):
        return False
    return "\x00" in str(value)


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


# --- plain text ----------------------------------------------------------------------


def _parse_text(text: str) -> Iterator[RawBlock]:
    starts = line_starts(text)
    start: int | None = None
    buf: list[str] = []
    for number, line in enumerate([*text.split("\n"), ""], start=1):
        if line.strip():
            if start is None:
                start = number
            buf.append(line.rstrip())
        elif buf and start is not None:
            span = lines_span(starts, start, number - 1, len(text))
            yield RawBlock("paragraph", "\n".join(buf).strip(), {"source_line": start}, span)
            start, buf = None, []


def document_id_for(fmt: str, raw: bytes, options: ConvertOptions | None = None) -> str:
    """The id a document gets when stored: the same bytes, format and reading options
    (:class:`ConvertOptions` other than the defaults), the same id."""
    read_as = (options or ConvertOptions()).non_default()
    suffix = b"\0" + json.dumps(read_as, sort_keys=True).encode() if read_as else b""
    digest = hashlib.sha256(fmt.encode() + b"\0" + raw + suffix).hexdigest()
    return f"doc-{digest[:12]}"
