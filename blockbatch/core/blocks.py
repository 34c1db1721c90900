"""The typed blocks every ingest produces, with where each came from in its file.

Shared by :mod:`blockbatch.core.ingest` (text formats, and the entry point) and the
converters of :mod:`blockbatch.core.convert` (PDF, DOCX, PPTX, HTML, XLSX), so that each
format hands back the same thing: a :class:`RawBlock` per block in document order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: A box on a page: x0, y0, x1, y1 in points, origin top-left.
BBox = tuple[float, float, float, float]


class IngestError(ValueError):
    """The file cannot be turned into blocks; the message says why and what to do."""


@dataclass(frozen=True)
class Provenance:
    """Where a block came from in its file.

    Attributes:
        char_start, char_end: the block's span in the file's *extracted text*. For
            markdown, plain text, JSONL and CSV that is the decoded file itself (newlines
            normalised to ``\\n``), the span covering the block's source lines, markup
            included. For PDF, DOCX, PPTX, HTML and XLSX it is the text the converter
            extracted: every block's content in order, separated by one blank line
            (:func:`extracted_text`), so ``text[char_start:char_end]`` is the content; a
            table's rows or parts (:mod:`blockbatch.core.convert.tables`) keep the span of
            their table.
        page: 1-based page (PDF), slide (PPTX) or sheet (XLSX) number; ``None`` for formats
            without pages.
        bbox: the block's box on its page as ``(x0, y0, x1, y1)`` in PDF points with the
            origin at the page's top-left (PDF and PPTX); ``None`` elsewhere.
        page_size: ``(width, height)`` of that page in points, to draw the box on.
        heading_path: the titles of the headings the block sits under, outermost first
            (a heading's own path holds its parents, not itself).
    """

    char_start: int
    char_end: int
    page: int | None = None
    bbox: BBox | None = None
    page_size: tuple[float, float] | None = None
    heading_path: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The jsonb stored with the block: only the keys that say something."""
        out: dict[str, Any] = {"char_start": self.char_start, "char_end": self.char_end}
        if self.page is not None:
            out["page"] = self.page
        if self.bbox is not None:
            out["bbox"] = [round(v, 2) for v in self.bbox]
        if self.page_size is not None:
            out["page_size"] = [round(v, 2) for v in self.page_size]
        out["heading_path"] = list(self.heading_path)
        return out


@dataclass(frozen=True)
class ParsedBlock:
    """One block of a parsed document.

    Attributes:
        block_index: 0-based position in document order.
        block_type: heading, paragraph, list_item, table, table_row, code, blockquote,
            html, footnote, endnote, speaker_notes (markdown, text, PDF, DOCX, PPTX, HTML),
            a type of :data:`SET_ASIDE_TYPES`, or record / the record's own type (JSONL,
            CSV, XLSX).
        block_content: the block's text.
        metadata: heading ``level``, code ``language``, list ``ordered``/``marker``/``depth``,
            the other JSONL/CSV/XLSX fields, and ``source_line`` (1-based) for text formats.
        provenance: where the block came from (:class:`Provenance`).
    """

    block_index: int
    block_type: str
    block_content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    provenance: Provenance | None = None


@dataclass(frozen=True)
class RawBlock:
    """A block as a parser or converter yields it, before it is numbered.

    ``provenance`` holds the span and the page facts; the heading path is filled in once,
    for every format, by :func:`blockbatch.core.ingest.parse_document`.
    """

    block_type: str
    content: str
    metadata: dict[str, Any]
    provenance: Provenance


@dataclass(frozen=True)
class ConvertOptions:
    """How a converted format is read; the defaults suit most documents.

    Attributes:
        html_all: keep a web page whole, every block sent; by default only the page's
            main content (found by trafilatura) is, and the rest is typed ``navigation``.
        table_rows: one ``table_row`` block per table row, with the header row as its
            context (:mod:`blockbatch.core.convert.tables`); by default a table is one
            block, split by whole rows when it is large.
        pptx_notes: a slide's speaker notes as blocks (``speaker_notes``) after its shapes.
    """

    html_all: bool = False
    table_rows: bool = False
    pptx_notes: bool = False

    def non_default(self) -> dict[str, bool]:
        """The options that differ from the defaults (what makes another document)."""
        return {k: v for k, v in vars(self).items() if v != getattr(ConvertOptions(), k)}


#: Block types that ingest keeps (stored, exported, with provenance) but that a run does not
#: send to the model unless it asks for them (``--include-boilerplate``): running headers and
#: footers and page numbers (text repeated across pages at the same place), text outside the
#: visible page or drawn invisible, a web page's navigation and page furniture, and the notice
#: on a PDF page whose text cannot be read (``unreadable``).
SET_ASIDE_TYPES: frozenset[str] = frozenset(
    {
        "page_header",
        "page_footer",
        "page_number",
        "off_page",
        "invisible_text",
        "navigation",
        "unreadable",  # a PDF page whose text cannot be read: the notice, on that page
    }
)


def is_set_aside(block_type: str) -> bool:
    """Whether a block of this type is kept but not sent to the model by default."""
    return block_type in SET_ASIDE_TYPES


#: What separates two blocks in a converted format's extracted text.
BLOCK_SEPARATOR = "\n\n"


def extracted_text(contents: list[str]) -> str:
    """A converted document's extracted text: its blocks' contents, a blank line apart."""
    return BLOCK_SEPARATOR.join(contents)


@dataclass
class TextBuilder:
    """Builds a converted document's blocks with spans into :func:`extracted_text`."""

    blocks: list[RawBlock] = field(default_factory=list)
    length: int = 0

    def add(
        self,
        block_type: str,
        content: str,
        metadata: dict[str, Any] | None = None,
        *,
        page: int | None = None,
        bbox: BBox | None = None,
        page_size: tuple[float, float] | None = None,
    ) -> None:
        """Append a block; whitespace-only content is not a block and is dropped."""
        content = content.strip()
        if not content:
            return
        start = self.length + (len(BLOCK_SEPARATOR) if self.blocks else 0)
        self.length = start + len(content)
        span = Provenance(start, self.length, page=page, bbox=bbox, page_size=page_size)
        self.blocks.append(RawBlock(block_type, content, metadata or {}, span))
