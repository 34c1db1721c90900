"""Text formats' bytes into text: the encoding (BOM, zero bytes, else UTF-8), files that are
not text named as what they are, and line spans.

Pure, no I/O; used by :mod:`blockbatch.core.ingest` and :mod:`blockbatch.core.records`.
"""

from __future__ import annotations

import codecs
import io
import zipfile

from blockbatch.core.blocks import IngestError, Provenance
from blockbatch.core.commands import option

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


def decode_text(data: bytes, fmt: str = "text") -> str:
    """The text of a text format's bytes, in the encoding its BOM (or its zero bytes) names,
    else UTF-8; a file that is not text at all is named as what it is."""
    refuse_disguised(data, fmt)
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


def refuse_disguised(data: bytes, fmt: str) -> None:
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


def line_starts(text: str) -> list[int]:
    """The offset where each 1-based line starts: ``starts[n - 1]`` for line n."""
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    return starts


def lines_span(starts: list[int], first: int, last: int, text_len: int) -> Provenance:
    """Lines ``first`` to ``last`` (1-based, inclusive) as a span without the last newline."""
    return Provenance(starts[first - 1], min(starts[last] - 1, text_len))
