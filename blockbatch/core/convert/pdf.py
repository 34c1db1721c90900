"""PDF into blocks through pypdfium2 (PDFium, the PDF engine of Chromium).

PDFium gives each page's text in reading order with a box per character; it does no
layout analysis, so this module groups lines into blocks itself, by rules a reader of the
page would see:

- a line belongs to the block above it unless the distance between their baselines is
  wider than the document's usual line pitch at that font size (a paragraph's spacing),
  its font size differs, or it starts a list item (a bullet glyph, ``-``,
  ``*``, or ``1.`` / ``1)``);
- a line set larger than the document's body text (its most common size, by characters)
  is a heading, the larger the size the higher the level;
- a line that is only a page number in the top or bottom margin is not a block.

Each block keeps its page and its box (the union of its lines' boxes, top-left origin,
points). Tables come out as paragraphs of their rows: PDFium does not say where a table is.
"""

from __future__ import annotations

import ctypes
import itertools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from blockbatch.core.blocks import BBox, IngestError, RawBlock, TextBuilder
from blockbatch.core.convert.limits import (
    MAX_PAGE_CHARS,
    MAX_PAGE_SIDE,
    MAX_PAGES,
    check_size,
)

#: A heading's font is at least this much larger than the body's.
HEADING_RATIO = 1.15
#: A baseline distance this much wider than the usual line pitch starts a new block.
PARAGRAPH_PITCH = 1.25
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BULLET = re.compile(r"^([\u2022\u25e6\u25aa\u25cf\u2023\u2043\u2013*-]|\d{1,3}[.)])\s+")
_PAGE_NUMBER = re.compile(r"^(page\s+)?\d{1,5}(\s*(of|/)\s*\d{1,5})?$", re.IGNORECASE)
_MARGIN = 0.08


@dataclass
class _Line:
    page: int
    text: str
    box: BBox
    size: float
    baseline: float  # from the top of the page


def convert_pdf(data: bytes) -> list[RawBlock]:
    """The PDF's blocks in reading order.

    Raises:
        IngestError: encrypted, corrupt, no text layer (a scan), too many pages, a page
            larger than PDF allows, or a page with an implausible amount of text.
    """
    check_size(data, "PDF")
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if exc.err_code == pdfium.raw.FPDF_ERR_PASSWORD:
            raise IngestError(
                "the PDF is password-protected (encrypted); open it with its password, "
                "save or print it to a PDF without one, and upload that file"
            ) from None
        raise IngestError(
            "the PDF is corrupt or not a PDF at all (PDFium cannot read it); open it in a "
            "PDF viewer, save or print it to a new PDF and upload that file"
        ) from None
    try:
        lines, sizes = _read_lines(doc, pdfium)
    finally:
        doc.close()
    if not lines:
        raise IngestError(
            "the PDF has no text layer: its pages are images (a scan or a photo), so "
            "there is no text to send. Run OCR on it first (for example `ocrmypdf in.pdf "
            "out.pdf`) and upload the result"
        )
    return _blocks(lines, sizes)


def _read_lines(doc: Any, pdfium: Any) -> tuple[list[_Line], dict[int, tuple[float, float]]]:
    pages = len(doc)
    if pages > MAX_PAGES:
        raise IngestError(
            f"the PDF has {pages} pages, above the {MAX_PAGES} blockbatch reads at once; "
            "split it into smaller PDFs and upload each"
        )
    lines: list[_Line] = []
    sizes: dict[int, tuple[float, float]] = {}
    for index in range(pages):
        page = doc[index]
        try:
            width, height = page.get_size()
            if max(width, height) > MAX_PAGE_SIDE:
                raise IngestError(
                    f"page {index + 1} of the PDF is {width:.0f} x {height:.0f} points, "
                    f"larger than the {MAX_PAGE_SIDE:.0f} points a PDF page may be; "
                    "it is not a document page. Remove it and upload again"
                )
            sizes[index + 1] = (width, height)
            textpage = page.get_textpage()
            try:
                lines.extend(_page_lines(textpage, index + 1, height, pdfium))
            finally:
                textpage.close()
        finally:
            page.close()
    return lines, sizes


def _page_lines(textpage: Any, page: int, height: float, pdfium: Any) -> list[_Line]:
    count = textpage.count_chars()
    if count > MAX_PAGE_CHARS:
        raise IngestError(
            f"page {page} of the PDF holds {count} characters, above the {MAX_PAGE_CHARS} "
            "a page can plausibly carry; the PDF is malformed or generated to overload a "
            "reader. Check the file and upload a cleaned copy"
        )
    if count <= 0:
        return []
    text = textpage.get_text_range(0, count)
    out = []
    start = 0
    for brk in [*_LINE_BREAK.finditer(text), None]:
        end = brk.start() if brk else len(text)
        segment = text[start:end]
        stripped = segment.strip()
        if stripped:
            first = start + (len(segment) - len(segment.lstrip()))
            box = _box(textpage, start, end - start, height)
            if box is not None:
                size = pdfium.raw.FPDFText_GetFontSize(textpage.raw, first)
                x, y = ctypes.c_double(), ctypes.c_double()
                pdfium.raw.FPDFText_GetCharOrigin(textpage.raw, first, x, y)
                text_ = " ".join(stripped.split())
                out.append(_Line(page, text_, box, round(size, 1), height - y.value))
        start = brk.end() if brk else len(text)
    return out


def _box(textpage: Any, start: int, count: int, height: float) -> BBox | None:
    """The union of a line's character rectangles, flipped to a top-left origin."""
    boxes = [textpage.get_rect(i) for i in range(textpage.count_rects(start, count))]
    if not boxes:
        return None
    left = min(b[0] for b in boxes)
    bottom = min(b[1] for b in boxes)
    right = max(b[2] for b in boxes)
    top = max(b[3] for b in boxes)
    return (left, height - top, right, height - bottom)


def _blocks(lines: list[_Line], sizes: dict[int, tuple[float, float]]) -> list[RawBlock]:
    weight: Counter[float] = Counter()
    for line in lines:
        weight[line.size] += len(line.text)
    body = weight.most_common(1)[0][0]
    heading_sizes = sorted({x.size for x in lines if x.size >= body * HEADING_RATIO}, reverse=True)
    levels = {size: min(i + 1, 6) for i, size in enumerate(heading_sizes)}
    pitch = _usual_pitch(lines)
    out = TextBuilder()
    group: list[_Line] = []

    def flush() -> None:
        if not group:
            return
        head = group[0]
        text = "\n".join(x.text for x in group)
        box: BBox = (
            min(x.box[0] for x in group),
            min(x.box[1] for x in group),
            max(x.box[2] for x in group),
            max(x.box[3] for x in group),
        )
        metadata: dict[str, Any] = {}
        if head.size in levels and len(text) <= 300:
            kind = "heading"
            metadata["level"] = levels[head.size]
        elif m := _BULLET.match(text):
            kind = "list_item"
            marker = m.group(1)
            metadata = {"ordered": marker[0].isalnum(), "marker": marker}
            text = text[m.end() :]
        else:
            kind = "paragraph"
        out.add(kind, text, metadata, page=head.page, bbox=box, page_size=sizes[head.page])
        group.clear()

    for line in lines:
        height = sizes[line.page][1]
        in_margin = line.box[3] < height * _MARGIN or line.box[1] > height * (1 - _MARGIN)
        if in_margin and _PAGE_NUMBER.match(line.text):
            continue
        if group and _starts_block(group[-1], line, pitch):
            flush()
        group.append(line)
    flush()
    return out.blocks


def _usual_pitch(lines: list[_Line]) -> dict[float, float]:
    """The most common baseline distance between consecutive lines, per font size."""
    seen: dict[float, Counter[float]] = {}
    for prev, line in itertools.pairwise(lines):
        if line.page == prev.page and line.size == prev.size:
            step = round(line.baseline - prev.baseline, 1)
            if step > 0:
                seen.setdefault(line.size, Counter())[step] += 1
    return {size: steps.most_common(1)[0][0] for size, steps in seen.items()}


def _starts_block(prev: _Line, line: _Line, pitch: dict[float, float]) -> bool:
    if line.page != prev.page or abs(line.size - prev.size) > 0.5:
        return True
    step = line.baseline - prev.baseline
    usual = pitch.get(line.size, 1.2 * line.size)
    if step > PARAGRAPH_PITCH * usual + 0.5 or step < -line.size:
        return True  # a paragraph's spacing, or a jump back up the page (the next column)
    return bool(_BULLET.match(line.text))
