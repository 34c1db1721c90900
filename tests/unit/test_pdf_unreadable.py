"""PDF pages whose text cannot be read, among pages that can (issue 34): each is noticed by
page, with what to do, and kept with the document as a set-aside ``unreadable`` block."""

from __future__ import annotations

from typing import Any

import pytest
from fpdf import FPDF
from PIL import Image

from blockbatch.core.blocks import is_set_aside
from blockbatch.core.ingest import IngestError, parse_document


def picture() -> Image.Image:
    return Image.new("RGB", (200, 100), (90, 120, 200))


def mixed_pdf(pages: int, image_pages: set[int]) -> bytes:
    pdf = FPDF(format="A4", unit="pt")
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=10)
    for page in range(1, pages + 1):
        pdf.add_page()
        if page in image_pages:
            pdf.image(picture(), x=40, y=40, w=500)
        else:
            pdf.text(50, 80, f"Page {page} has text.")
    return bytes(pdf.output())


def test_an_image_page_among_text_pages_is_noticed_and_kept() -> None:
    notices: list[str] = []
    blocks = parse_document(mixed_pdf(5, {3}), "pdf", notices=notices)
    assert len(notices) == 1
    assert notices[0].startswith("page 3 of the PDF is an image without text")
    assert "ocrmypdf --skip-text" in notices[0]
    unreadable = [b for b in blocks if b.block_type == "unreadable"]
    assert [b.block_content for b in unreadable] == notices
    assert is_set_aside("unreadable")
    where = unreadable[0].provenance
    assert where is not None and where.page == 3 and where.bbox is not None
    assert where.page_size is not None and where.bbox[2] <= where.page_size[0]
    # In page order: after page 2's text, before page 4's.
    pages = [b.provenance.page or 0 for b in blocks if b.provenance is not None]
    assert pages == sorted(pages)


def test_more_unreadable_pages_than_a_fifth_still_refuse_the_file() -> None:
    with pytest.raises(IngestError, match=r"pages 2, 3 of the PDF are images without text"):
        parse_document(mixed_pdf(5, {2, 3}), "pdf")


def test_a_page_whose_fonts_pdfium_cannot_read_is_noticed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vertical CID font PDFium cannot map gives a few characters for a page of text
    objects. No such font can be made here, so PDFium's count of page 2's text objects is
    stood in for (200 text objects; the page gives a dozen characters)."""
    from blockbatch.core.convert import pdf as pdf_module

    real = pdf_module._page_objects
    seen: list[int] = []

    def objects(page: Any, pdfium: Any, textpage: Any = None) -> tuple[int, int, bool]:
        if textpage is None:
            seen.append(1)
        return (200, 199, False) if len(seen) == 2 else real(page, pdfium, textpage)

    monkeypatch.setattr(pdf_module, "_page_objects", objects)
    notices: list[str] = []
    blocks = parse_document(mixed_pdf(6, set()), "pdf", notices=notices)
    assert len(notices) == 1 and notices[0].startswith("page 2 of the PDF draws far more text")
    assert "ocrmypdf --force-ocr" in notices[0]
    # What PDFium did read of the page is kept, and sent.
    assert "Page 2 has text." in [b.block_content for b in blocks]
    assert [b.provenance.page for b in blocks if b.block_type == "unreadable" and b.provenance] == [
        2
    ]


def test_a_page_drawing_its_glyphs_twice_is_read() -> None:
    """pdfplumber's issue-71-duplicate-chars.pdf: page 2 draws 218 text objects for 99
    characters (each glyph drawn more than once), every object with its text: it is read,
    not refused as fonts PDFium cannot read."""
    pdf = FPDF(format="A4", unit="pt")
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=10)
    pdf.add_page()
    pdf.text(50, 80, "The first page has its text once.")
    pdf.add_page()
    for i in range(12):  # each letter drawn five times over itself: 60 text objects
        for _ in range(5):
            pdf.text(50 + 30 * (i % 6), 100 + 20 * (i // 6), "abcdefghijkl"[i])
    notices: list[str] = []
    blocks = parse_document(bytes(pdf.output()), "pdf", notices=notices)
    assert notices == []
    assert not [b for b in blocks if b.block_type == "unreadable"]
