"""DOCX and PPTX into blocks through python-docx and python-pptx.

Both files are zips, checked by :func:`blockbatch.core.convert.limits.check_zip` before a
parser opens them. DOCX has no fixed pages (its layout is the word processor's), so its
blocks carry no page; a PPTX slide is a page, and each shape's position is its box.

A DOCX's footnotes and endnotes are blocks of their own (``footnote``, ``endnote``), each
right after the paragraph that refers to it, with ``note`` (its number as the document
shows it, counted in order of reference) and ``hangs_on`` (the start of that paragraph).
A PPTX text frame is one block (a code box is one ``code`` block, a bulleted body one
``list`` block with its levels as indentation); speaker notes are blocks when asked.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any, TypedDict

from blockbatch.core.blocks import BBox, ConvertOptions, IngestError, RawBlock, TextBuilder
from blockbatch.core.convert.limits import check_zip
from blockbatch.core.convert.tables import clean_rows, table_text

_HEADING_STYLE = re.compile(r"^heading (\d)$", re.IGNORECASE)
#: ``List Bullet 2``, ``List Number 3``: a list style's level in its name.
_LIST_STYLE_LEVEL = re.compile(r"^list\b.*?(\d)$", re.IGNORECASE)
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
#: The DOCX parts that hold notes, the element of one note, its block type.
_NOTES = (
    ("footnotes", "footnote", "footnote"),
    ("endnotes", "endnote", "endnote"),
)
#: Fonts a code box is set in: a frame whose every run is in one of them is ``code``.
_MONOSPACE = frozenset(
    {
        "consolas", "courier", "courier new", "menlo", "monaco", "lucida console",
        "lucida sans typewriter", "source code pro", "fira code", "fira mono",
        "dejavu sans mono", "roboto mono", "ubuntu mono", "inconsolata", "cascadia code",
        "cascadia mono", "jetbrains mono", "andale mono", "sf mono", "liberation mono",
    }
)  # fmt: skip
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


def _add_table(out: TextBuilder, rows: list[list[str]], **where: Any) -> None:
    """A table block; its cells ride in ``metadata`` for :mod:`.tables` to lay out."""
    cells = clean_rows(rows)
    out.add("table", table_text(cells), {"rows": len(cells), "cells": cells}, **where)


def convert_docx(data: bytes, options: ConvertOptions | None = None) -> list[RawBlock]:
    """The DOCX body's paragraphs and tables in order, each note after its paragraph.

    A paragraph styled ``Title`` or ``Heading N`` is a heading (level 1 and N), one with
    list numbering or a ``List ...`` style a list item (``depth`` its level, from the
    paragraph's numbering, its style's, or the style's name), any other a paragraph.

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
        items = list(_body_items(document.element.body, document._body))
    except (KeyError, ValueError, etree.LxmlError, PackageNotFoundError):
        raise _corrupt("DOCX") from None
    notes = _docx_notes(document)
    numbers: dict[tuple[str, str], int] = {}
    paragraphs = 0
    out = TextBuilder()
    for item in items:
        if isinstance(item, Table):
            _add_table(out, [_docx_row(row) for row in item.rows])
            continue
        paragraphs += 1
        style = item.style.name if item.style is not None else ""
        text = item.text
        if style == "Title":
            out.add("heading", text, {"level": 1})
        elif m := _HEADING_STYLE.match(style):
            out.add("heading", text, {"level": int(m.group(1))})
        elif (depth := _list_level(item)) is not None or style.startswith("List"):
            out.add("list_item", text, {"depth": depth or 0, "style": style})
        else:
            out.add("paragraph", text)
        for part, kind, block_type in _NOTES:
            for ref in item._p.iter(f"{_W}{kind}Reference"):
                note_id = ref.get(f"{_W}id") or ""
                body = notes.get((part, note_id))
                if body is None or (part, note_id) in numbers:
                    continue
                numbers[(part, note_id)] = len([k for k in numbers if k[0] == part]) + 1
                out.add(
                    block_type,
                    body,
                    {
                        "note": numbers[(part, note_id)],
                        "paragraph": paragraphs,
                        "hangs_on": " ".join(text.split())[:120],
                    },
                )
    return out.blocks


def _body_items(container: Any, parent: Any) -> Iterator[Any]:
    """The body's paragraphs and tables in order, those inside content controls
    (``w:sdt``, which Word wraps around templated sections) and custom XML too."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for child in container.iterchildren():
        if child.tag == f"{_W}p":
            yield Paragraph(child, parent)
        elif child.tag == f"{_W}tbl":
            yield Table(child, parent)
        elif child.tag == f"{_W}sdt":
            for content in child.iterchildren(f"{_W}sdtContent"):
                yield from _body_items(content, parent)
        elif child.tag == f"{_W}customXml":
            yield from _body_items(child, parent)


def _docx_notes(document: Any) -> dict[tuple[str, str], str]:
    """``(part, note id) -> text`` of every footnote and endnote (separators left out)."""
    from lxml import etree

    found: dict[tuple[str, str], str] = {}
    for rel in document.part.rels.values():
        part = rel.reltype.rsplit("/", 1)[-1]
        kind = {"footnotes": "footnote", "endnotes": "endnote"}.get(part)
        if kind is None or rel.is_external:
            continue
        root = etree.fromstring(rel.target_part.blob)
        for note in root.iter(f"{_W}{kind}"):
            if note.get(f"{_W}type") in (
                "separator",
                "continuationSeparator",
                "continuationNotice",
            ):
                continue
            paragraphs = [
                "".join(t.text or "" for t in p.iter(f"{_W}t")) for p in note.iter(f"{_W}p")
            ]
            text = "\n".join(" ".join(p.split()) for p in paragraphs if p.strip())
            if text:
                found[(part, note.get(f"{_W}id") or "")] = text
    return found


def _docx_row(row: Any) -> list[str]:
    """A row's cell texts; a cell merged across columns is written once."""
    texts, previous = [], None
    for cell in row.cells:
        if cell._tc is not previous:
            texts.append(cell.text)
        previous = cell._tc
    return texts


def _list_level(paragraph: Any) -> int | None:
    """The paragraph's list level (0 outermost), ``None`` when it is not in a list."""
    ppr = paragraph._p.pPr
    if ppr is not None and ppr.numPr is not None:
        ilvl = ppr.numPr.ilvl
        return int(ilvl.val) if ilvl is not None and ilvl.val is not None else 0
    style = paragraph.style
    while style is not None:  # the style's name, its numbering, or a base style's
        # ``List Bullet 2`` numbers its own list from level 0, indented: its name says 2.
        if m := _LIST_STYLE_LEVEL.match(style.name or ""):
            return int(m.group(1)) - 1
        num_pr = style.element.find(f"{_W}pPr/{_W}numPr")
        if num_pr is not None:
            ilvl_el = num_pr.find(f"{_W}ilvl")
            value = ilvl_el.get(f"{_W}val") if ilvl_el is not None else None
            return int(value) if value is not None and value.isdigit() else 0
        style = style.base_style
    return None


def convert_pptx(data: bytes, options: ConvertOptions | None = None) -> list[RawBlock]:
    """Each slide's shapes, top to bottom then left to right; with ``pptx_notes`` its
    speaker notes after them.

    Each text frame is one block: a slide's title a heading (level 1); a frame set in a
    monospace font ``code``; a body placeholder, or a frame with indented paragraphs,
    ``list`` (one line per paragraph, indented two spaces a level; ``metadata["items"]``);
    other text a paragraph. A table is one table block. Each block's page is its slide and
    its box the shape's; speaker notes (``speaker_notes``) have the slide but no box.

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
        notes = options is not None and options.pptx_notes
        for number, slide in enumerate(deck.slides, start=1):
            for shape in _reading_order(slide.shapes):
                _add_shape(out, shape, number, size)
            if notes and slide.has_notes_slide:
                frame = slide.notes_slide.notes_text_frame
                if frame is not None:
                    out.add("speaker_notes", frame.text, {"slide": number}, page=number)
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
        _add_table(
            out, [[_lines(cell.text) for cell in row.cells] for row in shape.table.rows], **where
        )
        return
    if not getattr(shape, "has_text_frame", False) or not shape.has_text_frame:
        return
    kind = shape.placeholder_format.type if shape.is_placeholder else None
    if kind in (PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE):
        out.add("heading", _lines(shape.text_frame.text), {"level": 1}, **where)
        return
    frame = shape.text_frame
    paragraphs = [p for p in frame.paragraphs if p.text.strip()]
    if not paragraphs:
        return
    if _monospace(paragraphs):
        out.add("code", "\n".join(_lines(p.text).rstrip() for p in frame.paragraphs), {}, **where)
        return
    body = kind in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT)
    if body or any(p.level > 0 for p in paragraphs):
        lines = ["  " * p.level + _lines(p.text).strip() for p in paragraphs]
        out.add("list", "\n".join(lines), {"items": len(lines)}, **where)
    else:
        out.add("paragraph", "\n".join(_lines(p.text).strip() for p in paragraphs), **where)


def _lines(text: str) -> str:
    """A PPTX text with its line breaks (``<a:br/>``, which python-pptx gives as a vertical
    tab) as new lines: no control character in a block."""
    return text.replace("\v", "\n")


def _monospace(paragraphs: list[Any]) -> bool:
    """Whether every run with text is set in a monospace font (a code box)."""
    fonts = [
        (run.font.name or "").lower() for p in paragraphs for run in p.runs if run.text.strip()
    ]
    return bool(fonts) and all(f in _MONOSPACE for f in fonts)
