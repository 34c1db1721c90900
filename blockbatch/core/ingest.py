"""Turn an uploaded file's bytes into blocks: markdown, plain text, JSONL or CSV.

Pure parsing, no I/O: the caller hands over the bytes and stores the blocks.
Every block keeps its 1-based ``source_line`` in ``metadata`` so a reviewer can find it
in the original file. Errors a user can hit are :class:`IngestError` with a message that
says what is wrong and what to do about it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

#: File extension -> format name.
EXTENSIONS: dict[str, str] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
}
FORMATS: tuple[str, ...] = ("markdown", "text", "jsonl", "csv")

#: Long text blocks are legitimate CSV cells; the csv module's default limit is 128 KiB.
_CSV_FIELD_LIMIT = 64 * 1024 * 1024


class IngestError(ValueError):
    """The file cannot be turned into blocks; the message says why and what to do."""


@dataclass(frozen=True)
class ParsedBlock:
    """One block of a parsed document.

    Attributes:
        block_index: 0-based position in document order.
        block_type: heading, paragraph, list_item, table, code, blockquote (markdown and
            text), or record / the record's own type (JSONL and CSV).
        block_content: the block's text.
        metadata: heading ``level``, code ``language``, list ``ordered``/``marker``/``depth``,
            the other JSONL/CSV fields, and ``source_line`` (1-based).
    """

    block_index: int
    block_type: str
    block_content: str
    metadata: dict[str, Any] = field(default_factory=dict)


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
        raise IngestError(
            f"cannot tell the format of {filename!r} from its extension "
            f"{suffix or '(none)'!r}; supported extensions: {supported}. "
            "Rename the file or pass the format explicitly."
        ) from None


def parse_document(data: bytes, fmt: str, *, text_field: str = "text") -> list[ParsedBlock]:
    """Split a document's bytes into blocks.

    Args:
        data: the file's raw bytes, UTF-8 (a leading BOM is ignored).
        fmt: one of ``markdown``, ``text``, ``jsonl``, ``csv`` (see :func:`detect_format`).
        text_field: for JSONL and CSV, the key / column holding each block's text.

    Returns:
        Blocks in document order, numbered from 0; whitespace-only markdown and text
        blocks are skipped (blank lines of JSONL and CSV too: they are not records).

    Raises:
        IngestError: unknown format, bytes that are not UTF-8, malformed JSONL/CSV, a
            missing text field, a JSONL/CSV record whose text is empty (every such line
            named), or a document without any block.
    """
    if fmt not in FORMATS:
        raise IngestError(f"unknown format {fmt!r}; supported formats: {', '.join(FORMATS)}")
    text = _decode(bytes(data))
    if fmt == "markdown":
        raw = list(_parse_markdown(text))
    elif fmt == "text":
        raw = list(_parse_text(text))
    elif fmt == "jsonl":
        raw = _refuse_empty(_parse_jsonl(text, text_field), text_field)
    else:
        raw = _refuse_empty(_parse_csv(text, text_field), text_field)
    blocks = [
        ParsedBlock(block_index=i, block_type=t, block_content=c, metadata=m)
        for i, (t, c, m) in enumerate(raw)
    ]
    if not blocks:
        raise IngestError(f"document has no blocks: {_why_empty(text, fmt)}")
    for block in blocks:
        _check_storable(block)
    return blocks


# --- decoding and checks -------------------------------------------------------------


def _decode(data: bytes) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise IngestError(
            f"the file is not valid UTF-8: byte 0x{data[exc.start]:02x} at byte offset "
            f"{exc.start} (line {line}) cannot be decoded; re-save the file as UTF-8 "
            "and upload it again"
        ) from None
    if "\x00" in text:
        offset = data.index(b"\x00")
        raise IngestError(
            f"the file contains a NUL byte at byte offset {offset}; it looks binary. "
            "Upload a text file (markdown, plain text, JSONL or CSV) saved as UTF-8"
        )
    # One line convention for every parser; str.splitlines would also split on \f, \x1c...
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _check_storable(block: ParsedBlock) -> None:
    # Postgres text and jsonb reject U+0000, which a JSON string can smuggle in as \u0000.
    if "\x00" in block.block_content or "\\u0000" in json.dumps(block.metadata, default=str):
        line = block.metadata.get("source_line", "?")
        raise IngestError(
            f"block {block.block_index} (line {line}) contains a NUL character (\\u0000), "
            "which cannot be stored; remove it from the file and upload it again"
        )


def _why_empty(text: str, fmt: str) -> str:
    if not text.strip():
        return "the file is empty or contains only whitespace; upload a file with some text"
    if fmt == "csv":
        return "it has a header row but no rows below it; add the rows to process"
    if fmt == "jsonl":
        return "it has no JSON lines; add one JSON object per line"
    return "it contains no text outside markup; upload a file with some text"


_Raw = tuple[str, str, dict[str, Any]]


def _refuse_empty(records: Iterator[_Raw | int], text_field: str) -> list[_Raw]:
    """The records, or an error naming every line whose text is empty.

    A JSONL/CSV record is a row the user will join results back to by its position or its
    own columns: dropping one would shift every later block index off its row, and sending
    it would pay for an answer about nothing. So the upload is refused before anything is
    stored, and the message names the lines to fix. A parser yields such a record as its
    line number.
    """
    kept: list[_Raw] = []
    empty: list[int] = []
    for record in records:
        if isinstance(record, int):
            empty.append(record)
        else:
            kept.append(record)
    if not empty:
        return kept
    shown = ", ".join(str(n) for n in empty[:10]) + (
        f" and {len(empty) - 10} more" if len(empty) > 10 else ""
    )
    which = f"line {shown} has" if len(empty) == 1 else f"lines {shown} have"
    raise IngestError(
        f"{which} an empty {text_field!r}: every record needs text to send to the model. "
        "Fill it in or remove the record, then upload again (nothing is stored); "
        f"{len(kept)} record{'s' if len(kept) != 1 else ''} had text"
    )


# --- plain text ----------------------------------------------------------------------


def _parse_text(text: str) -> Iterator[_Raw]:
    start: int | None = None
    buf: list[str] = []
    for number, line in enumerate([*text.split("\n"), ""], start=1):
        if line.strip():
            if start is None:
                start = number
            buf.append(line.rstrip())
        elif buf:
            yield "paragraph", "\n".join(buf).strip(), {"source_line": start}
            start, buf = None, []


# --- JSONL ---------------------------------------------------------------------------


def _parse_jsonl(text: str, text_field: str) -> Iterator[_Raw | int]:
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
        yield block_type, content, metadata


def _record_text(record: dict[str, Any], text_field: str, where: str, kind: str) -> str | None:
    if text_field not in record:
        keys = ", ".join(repr(k) for k in record) or "(none)"
        raise IngestError(
            f"{where} has no {text_field!r} {kind}; it has: {keys}. Name the {kind} that "
            f"holds the block text with text_field, or rename it to {text_field!r}"
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


def _record_rest(record: dict[str, Any], text_field: str) -> tuple[str, dict[str, Any]]:
    rest = {k: v for k, v in record.items() if k != text_field}
    for key in ("block_type", "type"):
        value = rest.get(key)
        if isinstance(value, str) and value.strip():
            del rest[key]
            return value.strip(), rest
    return "record", rest


# --- CSV -----------------------------------------------------------------------------


def _parse_csv(text: str, text_field: str) -> Iterator[_Raw | int]:
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
                header = _csv_header(row, text_field)
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
            yield block_type, content, metadata
    except csv.Error as exc:
        raise IngestError(
            f"line {reader.line_num}: the CSV cannot be read ({exc}); check its quoting"
        ) from None


def _csv_header(row: list[str], text_field: str) -> list[str]:
    header = [name.strip() for name in row]
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise IngestError(f"the CSV header names column {name!r} twice; rename one of them")
        seen.add(name)
    if text_field not in header:
        columns = ", ".join(repr(n) for n in header)
        raise IngestError(
            f"the CSV has no {text_field!r} column; its columns are: {columns}. Name the "
            f"column that holds the block text with text_field, or rename it to {text_field!r}"
        )
    return header


# --- markdown ------------------------------------------------------------------------

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_BREAK = re.compile(r"^ {0,3}([-*_])[ \t]*(?:\1[ \t]*){2,}$")
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_QUOTE = re.compile(r"^ {0,3}> ?(.*)$")
_ITEM = re.compile(r"^([ \t]*)([-*+]|\d{1,9}[.)])(?:([ \t]+)(.*))?$")
_DELIMITER_CELL = re.compile(r"^:?-+:?$")


def _indent(line: str) -> int:
    """Leading whitespace in columns, a tab counting to the next multiple of 4."""
    col = 0
    for ch in line:
        if ch == " ":
            col += 1
        elif ch == "\t":
            col += 4 - col % 4
        else:
            break
    return col


def _dedent(line: str, columns: int) -> str:
    """Remove up to ``columns`` columns of leading whitespace."""
    col = i = 0
    while i < len(line) and col < columns and line[i] in " \t":
        col += 1 if line[i] == " " else 4 - col % 4
        i += 1
    return line[i:]


def _is_delimiter_row(line: str) -> bool:
    """A GFM table's second row, such as ``--- | :---:``."""
    cells = line.strip().strip("|").split("|")
    return "|" in line and all(_DELIMITER_CELL.match(c.strip()) for c in cells)


def _blank(line: str) -> bool:
    return not line.strip()


class _Markdown:
    """A line-based block splitter for the CommonMark/GFM block constructs users write."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.out: list[_Raw] = []
        self.list_indents: list[int] = []  # marker columns of the open list items

    def emit(self, kind: str, content: str, metadata: dict[str, Any]) -> None:
        if kind != "list_item":
            self.list_indents = []
        if content.strip():
            self.out.append((kind, content, metadata))

    def fence_at(self, i: int) -> re.Match[str] | None:
        m = _FENCE.match(self.lines[i])
        if m and m.group(2)[0] == "`" and "`" in m.group(3):
            return None  # a backtick fence's info string may not contain backticks
        return m

    def item_at(self, i: int) -> re.Match[str] | None:
        line = self.lines[i]
        m = _ITEM.match(line)
        if not m or _BREAK.match(line):
            return None
        return m

    def table_at(self, i: int) -> bool:
        line = self.lines[i]
        if line.strip().startswith("|"):
            return True
        nxt = self.lines[i + 1] if i + 1 < len(self.lines) else ""
        return "|" in line and _is_delimiter_row(nxt)

    def interrupts(self, i: int) -> bool:
        """Whether line ``i`` starts a new block instead of continuing a paragraph."""
        line = self.lines[i]
        if _blank(line) or _indent(line) >= 4:
            return _blank(line)
        if self.fence_at(i) or _ATX.match(line) or _BREAK.match(line) or _QUOTE.match(line):
            return True
        m = self.item_at(i)
        if m and m.group(4) and m.group(4).strip():
            marker = m.group(2)
            # As in CommonMark, only "1." may interrupt a paragraph: "in 1999. we" is prose.
            return not marker[0].isdigit() or int(marker[:-1]) == 1
        return self.table_at(i)

    def parse(self) -> list[_Raw]:
        i = self.front_matter()
        n = len(self.lines)
        while i < n:
            line = self.lines[i]
            if _blank(line):
                i += 1
            elif self.fence_at(i):
                i = self.code_fence(i)
            elif self.item_at(i) and (_indent(line) <= 3 or self.list_indents):
                i = self.list_item(i)
            elif _indent(line) >= 4:
                i = self.indented_code(i)
            elif m := _ATX.match(line):
                content = _ATX_CLOSE.sub("", (m.group(2) or "").strip()).strip()
                self.emit("heading", content, {"level": len(m.group(1)), "source_line": i + 1})
                i += 1
            elif _BREAK.match(line):
                self.list_indents = []
                i += 1
            elif _QUOTE.match(line):
                i = self.blockquote(i)
            elif self.table_at(i):
                i = self.table(i)
            else:
                i = self.paragraph(i)
        return self.out

    def front_matter(self) -> int:
        """Skip a YAML front matter block: it is metadata about the file, not a block."""
        if self.lines and self.lines[0].rstrip() == "---":
            for j in range(1, len(self.lines)):
                if self.lines[j].rstrip() in ("---", "..."):
                    return j + 1
        return 0

    def code_fence(self, i: int) -> int:
        m = self.fence_at(i)
        assert m is not None
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(self.lines) and not close.match(self.lines[j]):
            body.append(_dedent(self.lines[j], indent))
            j += 1
        language = info.split()[0] if info else None
        metadata = {"language": language, "fence": fence, "source_line": i + 1}
        self.emit("code", "\n".join(body), metadata)
        return j + 1

    def indented_code(self, i: int) -> int:
        body: list[str] = []
        j = i
        while j < len(self.lines) and (_blank(self.lines[j]) or _indent(self.lines[j]) >= 4):
            body.append(_dedent(self.lines[j], 4))
            j += 1
        while body and _blank(body[-1]):
            body.pop()
        self.emit("code", "\n".join(body), {"language": None, "source_line": i + 1})
        return j

    def list_item(self, i: int) -> int:
        m = self.item_at(i)
        assert m is not None
        indent = _indent(m.group(1))
        marker = m.group(2)
        gap = len((m.group(3) or " ").expandtabs(4))
        content_indent = indent + len(marker) + (gap if gap <= 4 else 1)
        while self.list_indents and self.list_indents[-1] >= indent:
            self.list_indents.pop()
        depth = len(self.list_indents)
        body = [(m.group(4) or "").strip()]
        j = i + 1
        n = len(self.lines)
        while j < n:
            line = self.lines[j]
            if _blank(line):
                k = j
                while k < n and _blank(self.lines[k]):
                    k += 1
                if k < n and _indent(self.lines[k]) >= content_indent and not self.item_at(k):
                    body.extend([""] * (k - j))
                    j = k
                    continue
                break
            if self.item_at(j):
                break
            if _indent(line) >= content_indent:
                if self.fence_at_text(_dedent(line, content_indent)):
                    j = self.nested_fence(j, content_indent, body)
                    continue
                body.append(_dedent(line, content_indent).rstrip())
            elif body[-1] and not self.interrupts(j) and _indent(line) < 4:
                body.append(line.strip())  # lazy continuation of the item's paragraph
            else:
                break
            j += 1
        metadata: dict[str, Any] = {
            "ordered": marker[0].isdigit(),
            "marker": marker,
            "depth": depth,
            "source_line": i + 1,
        }
        if marker[0].isdigit():
            metadata["number"] = int(marker[:-1])
        self.emit("list_item", "\n".join(body).strip(), metadata)
        self.list_indents.append(indent)
        return j

    @staticmethod
    def fence_at_text(text: str) -> bool:
        m = _FENCE.match(text)
        return bool(m) and not (m.group(2)[0] == "`" and "`" in m.group(3))  # type: ignore[union-attr]

    def nested_fence(self, j: int, content_indent: int, body: list[str]) -> int:
        """Copy a fenced code block inside a list item verbatim, markers and all."""
        opening = _dedent(self.lines[j], content_indent)
        fence = _FENCE.match(opening).group(2)  # type: ignore[union-attr]
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body.append(opening.rstrip())
        j += 1
        while j < len(self.lines):
            body.append(_dedent(self.lines[j], content_indent).rstrip())
            j += 1
            if close.match(self.lines[j - 1]):
                break
        return j

    def blockquote(self, i: int) -> int:
        body: list[str] = []
        j = i
        while j < len(self.lines):
            m = _QUOTE.match(self.lines[j])
            if m:
                body.append(m.group(1).rstrip())
            elif body and body[-1].strip() and not self.interrupts(j):
                body.append(self.lines[j].strip())  # lazy continuation
            else:
                break
            j += 1
        self.emit("blockquote", "\n".join(body).strip(), {"source_line": i + 1})
        return j

    def table(self, i: int) -> int:
        leading_pipe = self.lines[i].strip().startswith("|")
        j = i
        while j < len(self.lines):
            line = self.lines[j].strip()
            if not line or not (line.startswith("|") if leading_pipe else "|" in line):
                break
            j += 1
        rows = [line.strip() for line in self.lines[i:j]]
        self.emit("table", "\n".join(rows), {"rows": len(rows), "source_line": i + 1})
        return j

    def paragraph(self, i: int) -> int:
        body = [self.lines[i].strip()]
        j = i + 1
        while j < len(self.lines):
            line = self.lines[j]
            if m := _SETEXT.match(line):
                level = 1 if m.group(1)[0] == "=" else 2
                self.emit("heading", "\n".join(body), {"level": level, "source_line": i + 1})
                return j + 1
            if self.interrupts(j):
                break
            body.append(line.strip())
            j += 1
        self.emit("paragraph", "\n".join(body), {"source_line": i + 1})
        return j


def _parse_markdown(text: str) -> list[_Raw]:
    return _Markdown(text).parse()


def document_id_for(fmt: str, raw: bytes) -> str:
    """The id a document gets when stored: the same bytes and format, the same id."""
    digest = hashlib.sha256(fmt.encode() + b"\0" + raw).hexdigest()
    return f"doc-{digest[:12]}"
