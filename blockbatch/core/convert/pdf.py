"""PDF into blocks through pypdfium2 (PDFium, the PDF engine of Chromium).

PDFium gives each character with its box, font and render mode; it does no layout analysis
that a reader would agree with (it reads a three-column page row by row when the file draws
it that way). So this module reads the characters into runs (characters on one line with no
wide gap between them, in the page's shown orientation: /Rotate applied, origin top-left)
and :mod:`blockbatch.core.convert.pdf_layout` orders them into columns, paragraphs and
headings, and types running headers, footers, page numbers, off-page and invisible text as
boilerplate to set aside.

Pages whose text cannot be read: a document with no visible text at all (a scan, or a scan
under an invisible OCR layer) is refused like a scan. Image-only pages among text pages, and
pages where PDFium reads far fewer characters than the page draws text objects (fonts it
cannot map to text, such as some vertical CID fonts), are refused, naming them, when they
are more than :data:`IMAGE_PAGE_SHARE` of the pages; fewer are read with a notice per page
saying what to do (given to the caller's ``notices``, and kept with the document as an
``unreadable`` block on that page, set aside like boilerplate).
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections import Counter
from dataclasses import replace
from typing import Any

from blockbatch.core.blocks import BBox, IngestError, RawBlock
from blockbatch.core.convert.limits import (
    MAX_PAGE_CHARS,
    MAX_PAGE_SIDE,
    MAX_PAGES,
    check_size,
)
from blockbatch.core.convert.pdf_layout import RUN_GAP, build_blocks
from blockbatch.core.convert.pdf_lines import Run, raise_digits
from blockbatch.core.convert.pdf_rules import MIN_LENGTH, SNAP, Rules, Segment

#: Unreadable pages (image-only, or fonts PDFium cannot read) among text pages above this
#: share of the pages refuse the file; fewer are read with a notice per page.
IMAGE_PAGE_SHARE = 0.2
#: A page drawing text objects that give fewer characters than this share of their number
#: lost text (every text object draws at least one glyph).
READ_OBJECT_SHARE = 0.5
# A word, or a line break. PDFium joins a word hyphenated across two lines into one, with a
# U+FFFE (or U+0002) where the line broke: that ends the word (and the run) so each line
# keeps its box. Other control characters (a ligature's U+0003) separate words.
_TOKEN = re.compile(r"\r\n|[\r\n]|[^\s\x00-\x1f\ufffe]+[\ufffe\x02]?|[\ufffe\x02]")
_INVISIBLE_MODES = (3, 7)
_SHOWN = ("text", "vertical", "vertical_up")  # PDF text render modes that paint nothing
#: Path segments read for ruling lines on one page at most (a chart or a map draws many).
_MAX_RULE_SEGMENTS = 20_000
#: Font names of monospaced fonts whose descriptor does not say FixedPitch.
_MONO_NAMES = ("mono", "courier", "consol", "menlo", "cmtt", "code")
_OCR_ADVICE = (
    "Run OCR on it first (for example `ocrmypdf --force-ocr in.pdf out.pdf`) and upload the result"
)


def convert_pdf(data: bytes, notices: list[str] | None = None) -> list[RawBlock]:
    """The PDF's blocks in reading order; ``notices`` receives one line per page whose text
    cannot be read (what is lost and what to do), each also kept as an ``unreadable`` block.

    Raises:
        IngestError: encrypted, corrupt, no readable text (a scan, a scan under an invisible
            OCR layer, fonts PDFium cannot read), too many pages, a page larger than PDF
            allows, or a page with an implausible amount of text.
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
        if pdfium.raw.FPDF_GetFormType(doc.raw) != pdfium.raw.FORMTYPE_NONE:
            doc.init_forms()  # before any page is loaded: the fields' values are read
        pages, sizes, trouble, turns, rules = _read_pages(doc, pdfium)
    finally:
        doc.close()
    for page, notice in _check_readable(pages, trouble).items():
        if notices is not None:
            notices.append(notice)
        width, height = sizes[page]
        pages[page].append(Run(page, notice, (0.0, 0.0, width, height), 0.0, kind="unreadable"))
    blocks = build_blocks(pages, sizes, rules)
    return [_unturned(b, turns, sizes) for b in blocks] if turns else blocks


def _check_readable(pages: dict[int, list[Run]], trouble: dict[str, list[int]]) -> dict[int, str]:
    """Refuse a PDF whose text cannot be read; the notice for each page that cannot be read
    in a PDF that is read."""
    visible = any(r.kind != "invisible_text" for runs in pages.values() for r in runs)
    if not visible:
        hidden = (
            " (only an invisible text layer, as OCR leaves over page images)"
            if any(pages.values())
            else ""
        )
        raise IngestError(
            f"the PDF has no text layer that shows{hidden}: its pages are images (a scan or a "
            f"photo), so there is no text to send. {_OCR_ADVICE}"
        )
    lost, images = trouble["lost"], trouble["image"]
    if len(lost) + len(images) > IMAGE_PAGE_SHARE * len(pages):
        if lost:
            raise IngestError(
                f"PDFium cannot read the text on {_pages(lost)}: it draws far more text than "
                "comes out as characters (fonts without a map to Unicode, such as some "
                "vertical CJK fonts). Print the PDF to a new PDF, or OCR those pages "
                "(`ocrmypdf --force-ocr in.pdf out.pdf`), and upload the result"
            )
        raise IngestError(
            f"{_pages(images)} of the PDF are images without text (scanned, or text hidden "
            f"under the picture), {len(images)} of {len(pages)} pages; their text would be "
            f"lost. {_OCR_ADVICE}"
        )
    notices = {
        page: f"page {page} of the PDF draws far more text than PDFium reads from it (a font "
        "without a map to Unicode, such as a vertical CJK font): its text is missing from the "
        "blocks. To read it, print the PDF to a new PDF, or OCR it "
        "(`ocrmypdf --force-ocr in.pdf out.pdf`), and upload the result"
        for page in lost
    }
    notices.update(
        {
            page: f"page {page} of the PDF is an image without text (a scan, or a figure): "
            "any text it shows is missing from the blocks. To read it, OCR the pages without "
            "text (`ocrmypdf --skip-text in.pdf out.pdf`) and upload the result"
            for page in images
        }
    )
    return dict(sorted(notices.items()))


def _pages(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10]) + (" ..." if len(numbers) > 10 else "")
    return f"page{'s' if len(numbers) > 1 else ''} {shown}"


def _read_pages(
    doc: Any, pdfium: Any
) -> tuple[
    dict[int, list[Run]],
    dict[int, tuple[float, float]],
    dict[str, list[int]],
    dict[int, str],
    dict[int, Rules],
]:
    count = len(doc)
    if count > MAX_PAGES:
        raise IngestError(
            f"the PDF has {count} pages, above the {MAX_PAGES} blockbatch reads at once; "
            "split it into smaller PDFs and upload each"
        )
    pages: dict[int, list[Run]] = {}
    sizes: dict[int, tuple[float, float]] = {}
    trouble: dict[str, list[int]] = {"lost": [], "image": []}
    turns: dict[int, str] = {}
    rules: dict[int, Rules] = {}
    for index in range(count):
        page = doc[index]
        try:
            geometry = _Geometry(page, pdfium)
            width, height = geometry.size
            if max(width, height) > MAX_PAGE_SIDE:
                raise IngestError(
                    f"page {index + 1} of the PDF is {width:.0f} x {height:.0f} points, "
                    f"larger than the {MAX_PAGE_SIDE:.0f} points a PDF page may be; "
                    "it is not a document page. Remove it and upload again"
                )
            sizes[index + 1] = (width, height)
            textpage = page.get_textpage()
            try:
                runs, chars_read = _page_runs(textpage, index + 1, geometry, pdfium)
                turn = _reading_turn(runs)
                if turn:  # read again, turned so that its text runs left to right
                    geometry.turn(turn)
                    runs, chars_read = _page_runs(textpage, index + 1, geometry, pdfium)
                    turns[index + 1] = turn
                    sizes[index + 1] = geometry.size
                if doc.formenv is not None:
                    runs.extend(
                        _field_runs(page, doc.formenv.raw, index + 1, geometry, runs, pdfium)
                    )
                text_objects, _, drawn = _page_objects(page, pdfium)
                if drawn:
                    rules[index + 1] = _page_rules(page, geometry, pdfium)
                lost = text_objects >= 20 and chars_read < READ_OBJECT_SHARE * text_objects
                if lost:  # or the same glyphs drawn over and over (a fake bold): is it?
                    _, unread, _ = _page_objects(page, pdfium, textpage)
                    lost = unread > READ_OBJECT_SHARE * text_objects
            finally:
                textpage.close()
            if lost:
                trouble["lost"].append(index + 1)
            elif drawn and not any(r.kind in _SHOWN for r in runs):
                trouble["image"].append(index + 1)
            pages[index + 1] = runs
        finally:
            page.close()
    return pages, sizes, trouble, turns, rules


def _page_rules(page: Any, geo: _Geometry, pdfium: Any) -> Rules:
    """The page's straight horizontal and vertical lines as drawn (shown coordinates):
    stroked lines, and the edges of rectangles (a thin filled one is a line; a filled cell's
    edges are its borders); and the length and middle of each slanted line and curve's
    piece (a figure's). Paths neither stroked nor filled, or in white, give none."""
    raw = pdfium.raw
    horizontal: list[Segment] = []
    vertical: list[Segment] = []
    matrix = raw.FS_MATRIX()
    fill, stroke = ctypes.c_int(), ctypes.c_int()
    x, y = ctypes.c_float(), ctypes.c_float()
    left, bottom, right, top = (ctypes.c_float() for _ in range(4))
    bounds = [ctypes.byref(v) for v in (left, bottom, right, top)]
    rgba = [ctypes.c_uint() for _ in range(4)]
    drawing: list[Segment] = []  # (length, x, y) of slanted lines and curves: a figure's
    budget = _MAX_RULE_SEGMENTS

    def add(p: tuple[float, float], q: tuple[float, float]) -> None:
        if abs(p[1] - q[1]) <= 0.5:
            if abs(p[0] - q[0]) >= MIN_LENGTH:
                horizontal.append(((p[1] + q[1]) / 2, min(p[0], q[0]), max(p[0], q[0])))
        elif abs(p[0] - q[0]) <= 0.5:
            if abs(p[1] - q[1]) >= MIN_LENGTH:
                vertical.append(((p[0] + q[0]) / 2, min(p[1], q[1]), max(p[1], q[1])))
        else:
            length = ((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2) ** 0.5
            drawing.append((length, (p[0] + q[0]) / 2, (p[1] + q[1]) / 2))

    for i in range(raw.FPDFPage_CountObjects(page.raw)):
        obj = raw.FPDFPage_GetObject(page.raw, i)
        if raw.FPDFPageObj_GetType(obj) != raw.FPDF_PAGEOBJ_PATH:
            continue
        if not raw.FPDFPath_GetDrawMode(obj, ctypes.byref(fill), ctypes.byref(stroke)):
            continue
        filled = bool(fill.value) and _shows(raw.FPDFPageObj_GetFillColor, obj, rgba)
        stroked = bool(stroke.value) and _shows(raw.FPDFPageObj_GetStrokeColor, obj, rgba)
        if not filled and not stroked:
            continue  # a clipping path's shape, or white or clear: draws nothing to see
        if not raw.FPDFPageObj_GetBounds(obj, *bounds):
            continue
        x0, y0 = geo.point(left.value, top.value)
        x1, y1 = geo.point(right.value, bottom.value)
        w, h = abs(x1 - x0), abs(y1 - y0)
        if h <= SNAP and w >= MIN_LENGTH:  # a thin rule, however it is drawn
            horizontal.append(((y0 + y1) / 2, min(x0, x1), max(x0, x1)))
            continue
        if w <= SNAP and h >= MIN_LENGTH:
            vertical.append(((x0 + x1) / 2, min(y0, y1), max(y0, y1)))
            continue
        count = raw.FPDFPath_CountSegments(obj)
        if count <= 1 or count > budget or not raw.FPDFPageObj_GetMatrix(obj, matrix):
            continue
        budget -= count
        a, b, c, d, e, f = matrix.a, matrix.b, matrix.c, matrix.d, matrix.e, matrix.f
        start = last = None
        for k in range(count):
            seg = raw.FPDFPath_GetPathSegment(obj, k)
            if not raw.FPDFPathSegment_GetPoint(seg, ctypes.byref(x), ctypes.byref(y)):
                continue
            point = geo.point(a * x.value + c * y.value + e, b * x.value + d * y.value + f)
            kind = raw.FPDFPathSegment_GetType(seg)
            if kind == raw.FPDF_SEGMENT_LINETO and last is not None:
                add(last, point)
            elif kind != raw.FPDF_SEGMENT_MOVETO and last is not None:  # a curve's piece
                length = ((point[0] - last[0]) ** 2 + (point[1] - last[1]) ** 2) ** 0.5
                drawing.append((length, (point[0] + last[0]) / 2, (point[1] + last[1]) / 2))
            if kind == raw.FPDF_SEGMENT_MOVETO:
                start = point
            last = point
            if raw.FPDFPathSegment_GetClose(seg) and start is not None:
                add(point, start)
    return horizontal, vertical, drawing


def _shows(get_color: Any, obj: Any, rgba: list[Any]) -> bool:
    """Whether a path's fill or stroke colour shows on white paper (not white, not clear)."""
    if not get_color(obj, *(ctypes.byref(v) for v in rgba)):
        return True
    r, g, b, a = (v.value for v in rgba)
    return a > 0 and min(r, g, b) < 245


def _field_runs(
    page: Any, form: Any, number: int, geo: _Geometry, runs: list[Run], pdfium: Any
) -> list[Run]:
    """The values filled in the page's form fields (text fields, combo and list boxes), a
    run per line where the field sits, so a value reads with its label ("First Name Alice").
    PDFium's text has only the page's own text, not the fields' (they are annotations). A
    value the page already shows as text at that place is not read twice; check boxes and
    radio buttons (a drawn mark, "Off"/"On" to PDFium) and empty fields give nothing."""
    raw = pdfium.raw
    kinds = (raw.FPDF_FORMFIELD_TEXTFIELD, raw.FPDF_FORMFIELD_COMBOBOX, raw.FPDF_FORMFIELD_LISTBOX)
    out: list[Run] = []
    rect = raw.FS_RECTF()
    size = ctypes.c_float()
    for i in range(raw.FPDFPage_GetAnnotCount(page.raw)):
        annot = raw.FPDFPage_GetAnnot(page.raw, i)
        try:
            if (
                raw.FPDFAnnot_GetSubtype(annot) != raw.FPDF_ANNOT_WIDGET
                or raw.FPDFAnnot_GetFormFieldType(form, annot) not in kinds
                or not raw.FPDFAnnot_GetRect(annot, rect)
            ):
                continue
            length = raw.FPDFAnnot_GetFormFieldValue(form, annot, None, 0)
            if length <= 2:
                continue
            buffer = ctypes.create_string_buffer(length)
            raw.FPDFAnnot_GetFormFieldValue(
                form, annot, ctypes.cast(buffer, ctypes.POINTER(raw.FPDF_WCHAR)), length
            )
            value = buffer.raw[: length - 2].decode("utf-16-le", errors="replace")
            lines = [" ".join(x.split()) for x in value.splitlines()]
            lines = [x for x in lines if x]
            if not lines:
                continue
            box = geo.box(rect.left, rect.bottom, rect.right, rect.top)
            if not raw.FPDFAnnot_GetFontSize(form, annot, ctypes.byref(size)) or size.value <= 0:
                size.value = 0.7 * (box[3] - box[1]) / len(lines)  # auto-sized: fits the box
            shown = round(min(max(size.value, 4.0), 24.0), 1)
            if any(r.text.strip() == " ".join(lines) and _inside(r.box, box) for r in runs):
                continue  # already on the page as text (a flattened copy)
            pitch = (box[3] - box[1]) / len(lines)
            for n, line in enumerate(lines):
                top = box[1] + n * pitch
                line_box = (box[0], top, box[2], top + min(pitch, 1.2 * shown))
                kind = "text" if geo.on_page(line_box) else "off_page"
                out.append(Run(number, line, geo.clip(line_box), shown, False, kind))
        finally:
            raw.FPDFPage_CloseAnnot(annot)
    return out


def _inside(inner: BBox, outer: BBox) -> bool:
    cx, cy = (inner[0] + inner[2]) / 2, (inner[1] + inner[3]) / 2
    return outer[0] <= cx <= outer[2] and outer[1] <= cy <= outer[3]


def _reading_turn(runs: list[Run]) -> str:
    """``down`` or ``up`` when most of a page's text runs down or up the page as shown
    (a landscape page shown turned): the page is then read turned so that text runs left
    to right, and the boxes are turned back (:func:`_unturned`). ``""`` otherwise."""
    letters: Counter[str] = Counter()
    for run in runs:
        letters[run.kind] += len(run.text)
    across = letters["text"] + letters["invisible_text"]
    if letters["vertical"] > across and letters["vertical"] >= letters["vertical_up"]:
        return "down"
    if letters["vertical_up"] > across:
        return "up"
    return ""


def _unturn_box(box: BBox, turn: str, width: float, height: float) -> BBox:
    """A box read turned (:meth:`_Geometry.turn`) on the page as shown (``width`` x ``height``)."""
    u0, v0, u1, v1 = box
    if turn == "down":  # (u, v) -> (width - v, u)
        return (width - v1, u0, width - v0, u1)
    return (v0, height - u1, v1, height - u0)  # up: (u, v) -> (v, height - u)


def _unturned(
    block: RawBlock, turns: dict[int, str], sizes: dict[int, tuple[float, float]]
) -> RawBlock:
    """A block of a turned page with its box (and its parts' boxes) on the page as shown."""
    where = block.provenance
    page = where.page
    if page not in turns or where.bbox is None:
        return block
    turned_w, turned_h = sizes[page]
    shown = (turned_h, turned_w)
    box = _unturn_box(where.bbox, turns[page], *shown)
    metadata = block.metadata
    if "parts" in metadata:
        metadata = {
            **metadata,
            "parts": [
                [p, *(round(v, 2) for v in _unturn_box(tuple(b), turns[p], *reversed(sizes[p])))]
                if p in turns
                else [p, *b]
                for p, *b in metadata["parts"]
            ],
        }
    return replace(block, metadata=metadata, provenance=replace(where, bbox=box, page_size=shown))


def _page_objects(page: Any, pdfium: Any, textpage: Any = None) -> tuple[int, int, bool]:
    """How many text objects the page draws, how many of them PDFium reads no text from
    (counted when ``textpage`` is given: fonts it cannot map to text; a glyph drawn again
    over itself, as a fake bold does, gives no text either but sits on one that does, and
    is not counted), and whether it draws anything else."""
    raw = pdfium.raw
    text = 0
    other = False
    empty: list[tuple[float, float]] = []
    read: set[tuple[int, int]] = set()  # 10-point cells covered by objects with text
    left, bottom, right, top = (ctypes.c_float() for _ in range(4))
    bounds = [ctypes.byref(v) for v in (left, bottom, right, top)]
    for i in range(raw.FPDFPage_CountObjects(page.raw)):
        obj = raw.FPDFPage_GetObject(page.raw, i)
        if raw.FPDFPageObj_GetType(obj) != raw.FPDF_PAGEOBJ_TEXT:
            other = True
            continue
        text += 1
        if textpage is None or not raw.FPDFPageObj_GetBounds(obj, *bounds):
            continue
        # The length in bytes of the object's text as UTF-16 with its terminating NUL.
        if raw.FPDFTextObj_GetText(obj, textpage.raw, None, 0) <= 2:
            empty.append(((left.value + right.value) / 2, (bottom.value + top.value) / 2))
        else:
            read.update(
                (x, y)
                for x in range(int(left.value // 10), int(right.value // 10) + 1)
                for y in range(int(bottom.value // 10), int(top.value // 10) + 1)
            )
    unread = sum(1 for x, y in empty if (int(x // 10), int(y // 10)) not in read)
    return text, unread, other


class _Geometry:
    """From PDF user space to points from the top-left of the page as shown (/Rotate applied)."""

    def __init__(self, page: Any, pdfium: Any) -> None:
        # The crop box within the media box, inherited attributes resolved (what is shown).
        self.left, self.bottom, self.right, self.top = page.get_bbox()
        self.rotation = page.get_rotation() % 360
        w, h = self.right - self.left, self.top - self.bottom
        self.w, self.h = w, h
        self.size = (h, w) if self.rotation in (90, 270) else (w, h)
        self.shown = self.size
        self.turned = ""

    def turn(self, turn: str) -> None:
        """Read the page turned a quarter (``down``: its text runs down the page as shown;
        ``up``: up it), so that the text runs left to right; :func:`_unturn_box` undoes it."""
        self.turned = turn
        self.shown = self.size
        self.size = (self.size[1], self.size[0])

    def point(self, x: float, y: float) -> tuple[float, float]:
        u, v = x - self.left, self.top - y
        if self.rotation == 90:
            u, v = self.h - v, u
        elif self.rotation == 180:
            u, v = self.w - u, self.h - v
        elif self.rotation == 270:
            u, v = v, self.w - u
        if self.turned == "down":  # (x, y) -> (y, width - x), on the page as shown
            return v, self.shown[0] - u
        if self.turned == "up":  # (x, y) -> (height - y, x)
            return self.shown[1] - v, u
        return u, v

    def affine(self) -> tuple[float, float, float, float, float, float]:
        """``(ax, bx, cx, ay, by, cy)``: shown x = ax*x + bx*y + cx, y = ay*x + by*y + cy."""
        ox, oy = self.point(0.0, 0.0)
        ex, ey = self.point(1.0, 0.0)
        fx, fy = self.point(0.0, 1.0)
        return ex - ox, fx - ox, ox, ey - oy, fy - oy, oy

    def box(self, left: float, bottom: float, right: float, top: float) -> BBox:
        x0, y0 = self.point(left, top)
        x1, y1 = self.point(right, bottom)
        return (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))

    def on_page(self, box: BBox) -> bool:
        cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        return 0 <= cx <= self.size[0] and 0 <= cy <= self.size[1]

    def clip(self, box: BBox) -> BBox:
        w, h = self.size
        x0 = min(max(box[0], 0.0), w - 1)
        y0 = min(max(box[1], 0.0), h - 1)
        return (x0, y0, min(max(box[2], x0 + 1), w), min(max(box[3], y0 + 1), h))


def _page_runs(textpage: Any, page: int, geo: _Geometry, pdfium: Any) -> tuple[list[Run], int]:
    """The page's characters as runs, and how many characters (not spaces) they hold."""
    raw = pdfium.raw
    tp = textpage.raw
    count = textpage.count_chars()
    if count > MAX_PAGE_CHARS:
        raise IngestError(
            f"page {page} of the PDF holds {count} characters, above the {MAX_PAGE_CHARS} "
            "a page can plausibly carry; the PDF is malformed or generated to overload a "
            "reader. Check the file and upload a cleaned copy"
        )
    if count <= 0:
        return [], 0
    text = textpage.get_text_range(0, count)
    if len(text) != count:
        text = "".join(chr(raw.FPDFText_GetUnicode(tp, i) or 32) for i in range(count))
    fast = _fast(pdfium)
    handle = ctypes.c_void_p(ctypes.cast(tp, ctypes.c_void_p).value)
    text_object, loose_box = fast.text_object, fast.loose_box
    rect = raw.FS_RECTF()
    ref = ctypes.byref(rect)
    # user space to the shown page: x' = ax*x + bx*y + cx, y' = ay*x + by*y + cy
    ax, bx, cx, ay, by, cy = geo.affine()
    styles: dict[int | None, tuple[float, bool, str, bool]] = {}
    runs: list[Run] = []
    words: list[str] = []
    x0 = y0 = x1 = y1 = 0.0  # the current run's box
    last_x0 = last_x1 = 0.0  # the last word's
    bold = 0
    letters = 0
    style: tuple[float, bool, str, bool] = (0.0, False, "text", False)

    def close() -> None:
        nonlocal bold, letters
        if words:
            box = (x0, y0, x1, y1)
            kind = style[2]
            if kind in _SHOWN and not geo.on_page(box):
                kind = "off_page"
            box = geo.clip(box)  # a box is on its page, even for text that bleeds off it
            runs.append(
                Run(page, " ".join(words), box, style[0], bold * 2 > letters, kind, style[3])
            )
        words.clear()
        bold = letters = 0

    # Words, not characters: the first and last character of each give its box, and a run
    # breaks only between words (PDFium puts a space or a line break between glyphs apart).
    tokens = [match.span() for match in _TOKEN.finditer(text)]
    tokens.reverse()
    while tokens:
        start, end = tokens.pop()
        word = text[start:end]
        if word[0] in "\r\n":
            close()
            continue
        key = text_object(handle, start)
        current = styles.get(key)
        if current is None:
            current = _style(raw, tp, start, key, (ax, bx, ay, by))
            styles[key] = current
        loose_box(handle, start, ref)
        lft, t, r, b = rect.left, rect.top, rect.right, rect.bottom
        if end - start > 1:
            loose_box(handle, end - 1, ref)
            # a word whose last letter sits above or below its first is written vertically
            dx = (rect.left + rect.right - lft - r) / 2
            dy = (rect.top + rect.bottom - t - b) / 2
            down = ay * dx + by * dy
            if abs(down) > abs(ax * dx + bx * dy) and current[2] == "text":
                turned = "vertical" if down > 0 else "vertical_up"
                current = (current[0], current[1], turned, current[3])
            # (comparisons, not min/max: this runs for every word of the file)
            lft = rect.left if rect.left < lft else lft
            t = rect.top if rect.top > t else t
            r = rect.right if rect.right > r else r
            b = rect.bottom if rect.bottom < b else b
            if word[0].isdigit() and (cut := _raised_number(word, raw, tp, start)):
                # a footnote's raised number against its first word ("2The flight"): PDFium
                # reads one word, the page shows the mark, then the note
                word = f"{word[:cut]} {word[cut:]}"
            elif word[-1].isdigit() and (cut := _raised_tail(word, raw, tp, start, end)):
                # a note's raised number against the word it follows ("Shen1", a figure's
                # "273.879.7501"): read as one word, the page shows a word and a mark
                word = word[:cut] + raise_digits(word[cut:])
            if r - lft > _SPREAD * (end - start) * (t - b):
                # glyphs set far apart in one string (a table's narrow cells written as
                # "(30) Tj" with a wide character spacing): PDFium reads one word, the page
                # shows two
                pieces = _spread_pieces(handle, loose_box, rect, start, end)
                if len(pieces) > 1:
                    tokens.extend(reversed(pieces))
                    continue
        px0, px1 = ax * lft + bx * t + cx, ax * r + bx * b + cx
        py0, py1 = ay * lft + by * t + cy, ay * r + by * b + cy
        if px0 > px1:
            px0, px1 = px1, px0
        if py0 > py1:
            py0, py1 = py1, py0
        if words:
            size = style[0] if style[0] > current[0] else current[0]
            size = size if size > 1.0 else 1.0
            mid = (py0 + py1) / 2
            if (
                (current is not style and (current[0] != style[0] or current[2] != style[2]))
                or px0 - last_x1 > RUN_GAP * size
                or px1 < last_x0 - size
                or not (y0 - 0.2 * size <= mid <= y1 + 0.2 * size)
            ):
                close()
        if not words:
            x0, y0, x1, y1 = px0, py0, px1, py1
        else:
            x0 = px0 if px0 < x0 else x0
            y0 = py0 if py0 < y0 else y0
            x1 = px1 if px1 > x1 else x1
            y1 = py1 if py1 > y1 else y1
        style = current
        last_x0, last_x1 = px0, px1
        words.append(word)
        letters += len(word)
        if current[1]:
            bold += len(word)
        if word[-1] in "\ufffe\x02":
            close()
    close()
    return runs, sum(len(r.text) - r.text.count(" ") for r in runs)


#: A word wider than this many heights a character is looked at glyph by glyph (the widest
#: glyphs are about one height wide).
_SPREAD = 1.2
#: A gap between two glyphs of one word wider than this share of their height cuts it (a
#: space is about a quarter of it).
_GLYPH_GAP = 0.6


def _raised_number(word: str, raw: Any, tp: Any, start: int) -> int:
    """Where a word that starts with a number set raised and smaller (a footnote's mark) goes
    on in letters of the text's size: the length of the number, or 0. The glyphs' own boxes
    tell (a PDF may scale one font size for all its text, and loose boxes are the font's)."""
    digits = len(word) - len(word.lstrip("0123456789"))
    if digits >= len(word) or not word[digits].isalpha():
        return 0
    box = [ctypes.c_double() for _ in range(4)]  # left, right, bottom, top
    refs = [ctypes.byref(v) for v in box]
    raw.FPDFText_GetCharBox(tp, start + digits, *refs)
    bottom, height = box[2].value, box[3].value - box[2].value
    raw.FPDFText_GetCharBox(tp, start, *refs)
    small = box[3].value - box[2].value < 0.8 * height
    return digits if small and box[2].value > bottom + 0.15 * height else 0


def _raised_tail(word: str, raw: Any, tp: Any, start: int, end: int) -> int:
    """Where the raised, smaller digits a word ends in (a note's mark against its word)
    begin, or 0: the first glyph is the word's size and on its line, the last is set
    smaller and higher."""
    digits = len(word) - len(word.rstrip("0123456789"))
    if len(word) - digits < 1 and len(word) < 4:
        return 0  # a short number: nothing to tell its mark from
    # the first letter or digit is the line's size (a bracket reaches below it)
    first = next((i for i, ch in enumerate(word) if ch.isalnum()), len(word))
    if first >= len(word) - 1:
        return 0
    box = [ctypes.c_double() for _ in range(4)]  # left, right, bottom, top
    refs = [ctypes.byref(v) for v in box]
    raw.FPDFText_GetCharBox(tp, start + first, *refs)
    bottom, height, right = box[2].value, box[3].value - box[2].value, box[1].value
    if height <= 0:
        return 0

    top = bottom + height

    def raised(i: int) -> bool:
        # in user space the line runs left to right (a turned page's text runs up or down:
        # its glyphs' heights there are their widths); above the letter's bottom and not
        # below its top (a letter reaching below the line, "γ" before an index, is not a
        # mark's)
        raw.FPDFText_GetCharBox(tp, start + i, *refs)
        small = box[3].value - box[2].value < 0.8 * height
        up = box[2].value > bottom + 0.15 * height and box[3].value >= top
        return small and up and box[0].value >= right

    if not raised(len(word) - 1):
        return 0
    cut = len(word) - 1
    while cut > first + 1 and len(word) - cut < 3 and word[cut - 1].isdigit() and raised(cut - 1):
        cut -= 1
    return cut


def _spread_pieces(
    handle: Any, loose_box: Any, rect: Any, start: int, end: int
) -> list[tuple[int, int]]:
    """The pieces of the word ``start:end`` between the gaps that part its glyphs."""
    ref = ctypes.byref(rect)
    pieces = []
    piece = start
    loose_box(handle, start, ref)
    right, height = rect.right, rect.top - rect.bottom
    for i in range(start + 1, end):
        loose_box(handle, i, ref)
        if rect.left - right > _GLYPH_GAP * height:
            pieces.append((piece, i))
            piece = i
        right, height = rect.right, rect.top - rect.bottom
    pieces.append((piece, end))
    return pieces


class _Fast:
    """Two PDFium calls made per character, bound without pypdfium2's argument conversion
    (the same library, already loaded; about 3x faster per call)."""

    def __init__(self, pdfium: Any) -> None:
        from pypdfium2_raw import bindings  # type: ignore[import-untyped]

        lib = bindings._libs["pdfium"]  # indexing a CDLL makes a new function object
        self.text_object = lib["FPDFText_GetTextObject"]
        self.text_object.restype = ctypes.c_void_p
        self.loose_box = lib["FPDFText_GetLooseCharBox"]
        self.loose_box.restype = ctypes.c_int


@functools.cache
def _fast(pdfium: Any) -> _Fast:
    return _Fast(pdfium)


def _style(
    raw: Any, tp: Any, index: int, obj: int | None, turn: tuple[float, float, float, float]
) -> tuple[float, bool, str, bool]:
    """A character's font size, whether it is bold, ``text``, ``vertical`` (written up or
    down the page as shown, ``turn`` being the page's rotation) or ``invisible_text``, and
    whether its font is monospaced (a code listing's)."""
    # The size as drawn: the font's size times the text matrix's scale (many files set a
    # 1-point font and scale it with the matrix).
    matrix = raw.FS_MATRIX()
    scale = 1.0
    vertical = upward = False
    if raw.FPDFText_GetMatrix(tp, index, matrix):
        scale = abs(matrix.a * matrix.d - matrix.b * matrix.c) ** 0.5 or 1.0
        dx = turn[0] * matrix.a + turn[1] * matrix.b
        dy = turn[2] * matrix.a + turn[3] * matrix.b
        vertical = abs(dy) > abs(dx)
        upward = dy < 0
    size = round(float(raw.FPDFText_GetFontSize(tp, index)) * scale, 1)
    weight = raw.FPDFText_GetFontWeight(tp, index)
    buf = ctypes.create_string_buffer(128)
    flags = ctypes.c_int()
    n = raw.FPDFText_GetFontInfo(tp, index, buf, 128, ctypes.byref(flags))
    name = buf.raw[: max(0, min(n, 128) - 1)].decode("latin-1").lower()
    bold = weight >= 600 or any(w in name for w in ("bold", "black", "heavy", "semibold", "cmbx"))
    bold = bold or bool(flags.value & (1 << 18))  # ForceBold
    mono = bool(flags.value & 1) or any(w in name for w in _MONO_NAMES)  # FixedPitch
    kind = ("vertical_up" if upward else "vertical") if vertical else "text"
    if (
        obj
        and raw.FPDFTextObj_GetTextRenderMode(
            ctypes.cast(ctypes.c_void_p(obj), raw.FPDF_PAGEOBJECT)
        )
        in _INVISIBLE_MODES
    ):
        kind = "invisible_text"
    return size, bold, kind, mono
