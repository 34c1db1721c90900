"""DOCX and PPTX into blocks through python-docx and python-pptx.

Both files are zips, checked by :func:`blockbatch.core.convert.limits.check_zip` before a
parser opens them. DOCX has no fixed pages (its layout is the word processor's), so its
blocks carry no page; a PPTX slide is a page, and each shape's position is its box.
"""

from __future__ import annotations

import io
import re
from typing import Any, TypedDict

from blockbatch.core.blocks import BBox, IngestError, RawBlock, TextBuilder
from blockbatch.core.convert.limits import check_zip

_HEADING_STYLE = re.compile(r"^heading (\d)$", re.IGNORECASE)
#: English Microsoft Office units: 12700 EMU to a point.
_EMU_PER_POINT = 12700


class _Where(TypedDict):
    """Where a PPTX shape's blocks are: the keywords of :meth:`TextBuilder.add`."""

    page: int
    bbox: BBox | None
    page_size: tuple[float, float]


def _corrupt(kind: str) -> IngestError:
    return IngestError(
        f"the {kind} is corrupt (its parts are not the XML a {kind} holds); open it in "
        "its application, save it again and upload the new file"
    )


def _table_text(rows: list[list[str]]) -> str:
    """A table as pipe-separated rows, each cell's text on one line."""
    lines = []
    for cells in rows:
        texts = [" ".join(c.split()) for c in cells]
        if any(texts):
            lines.append("| " + " | ".join(texts) + " |")
    return "\n".join(lines)


def convert_docx(data: bytes) -> list[RawBlock]:
    """The DOCX body's paragraphs and tables in order.

    A paragraph styled ``Title`` or ``Heading N`` is a heading (level 1 and N), one with
    list numbering or a ``List ...`` style a list item, any other a paragraph.

    Raises:
        IngestError: corrupt, encrypted, or a zip bomb.
    """
    check_zip(data, "DOCX")
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from lxml import etree

    try:
        document = docx.Document(io.BytesIO(data))
        items = list(document.iter_inner_content())
    except (KeyError, ValueError, etree.LxmlError, PackageNotFoundError):
        raise _corrupt("DOCX") from None
    out = TextBuilder()
    for item in items:
        if isinstance(item, Table):
            rows = [_docx_row(row) for row in item.rows]
            out.add("table", _table_text(rows), {"rows": len(rows)})
            continue
        style = item.style.name if item.style is not None else ""
        text = item.text
        if style == "Title":
            out.add("heading", text, {"level": 1})
        elif m := _HEADING_STYLE.match(style):
            out.add("heading", text, {"level": int(m.group(1))})
        elif (numbering := _list_level(item)) is not None or style.startswith("List"):
            out.add("list_item", text, {"depth": numbering or 0, "style": style})
        else:
            out.add("paragraph", text)
    return out.blocks


def _docx_row(row: Any) -> list[str]:
    """A row's cell texts; a cell merged across columns is written once."""
    texts, previous = [], None
    for cell in row.cells:
        if cell._tc is not previous:
            texts.append(cell.text)
        previous = cell._tc
    return texts


def _list_level(paragraph: Any) -> int | None:
    ppr = paragraph._p.pPr
    if ppr is None or ppr.numPr is None:
        return None
    ilvl = ppr.numPr.ilvl
    return int(ilvl.val) if ilvl is not None and ilvl.val is not None else 0


def convert_pptx(data: bytes) -> list[RawBlock]:
    """Each slide's shapes, top to bottom then left to right.

    A slide's title is a heading (level 1); the paragraphs of a body placeholder, and
    indented ones anywhere, are list items (``depth`` their indent level); other text is a
    paragraph; a table is one table block. Each block's page is its slide and its box the
    shape's.

    Raises:
        IngestError: corrupt, encrypted, or a zip bomb.
    """
    check_zip(data, "PPTX")
    import pptx
    from lxml import etree
    from pptx.exc import PackageNotFoundError

    try:
        deck = pptx.Presentation(io.BytesIO(data))
        size = (
            (deck.slide_width or 0) / _EMU_PER_POINT,
            (deck.slide_height or 0) / _EMU_PER_POINT,
        )
        out = TextBuilder()
        for number, slide in enumerate(deck.slides, start=1):
            for shape in _reading_order(slide.shapes):
                _add_shape(out, shape, number, size)
    except (KeyError, ValueError, etree.LxmlError, PackageNotFoundError):
        raise _corrupt("PPTX") from None
    return out.blocks


def _reading_order(shapes: Any) -> list[Any]:
    from pptx.shapes.group import GroupShape

    flat: list[Any] = []
    for shape in shapes:
        if isinstance(shape, GroupShape):  # a group: its members, each with its own box
            flat.extend(_reading_order(shape.shapes))
        else:
            flat.append(shape)
    return sorted(flat, key=lambda s: (s.top or 0, s.left or 0))


def _add_shape(out: TextBuilder, shape: Any, page: int, size: tuple[float, float]) -> None:
    from pptx.enum.shapes import PP_PLACEHOLDER

    box: BBox | None = None
    if None not in (shape.left, shape.top, shape.width, shape.height):
        left, top = shape.left / _EMU_PER_POINT, shape.top / _EMU_PER_POINT
        box = (left, top, left + shape.width / _EMU_PER_POINT, top + shape.height / _EMU_PER_POINT)
    where: _Where = {"page": page, "bbox": box, "page_size": size}
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
        out.add("table", _table_text(rows), {"rows": len(rows)}, **where)
        return
    if not getattr(shape, "has_text_frame", False) or not shape.has_text_frame:
        return
    kind = shape.placeholder_format.type if shape.is_placeholder else None
    if kind in (PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE):
        out.add("heading", shape.text_frame.text, {"level": 1}, **where)
        return
    body = kind in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT)
    for paragraph in shape.text_frame.paragraphs:
        if body or paragraph.level > 0:
            out.add("list_item", paragraph.text, {"depth": paragraph.level}, **where)
        else:
            out.add("paragraph", paragraph.text, **where)
