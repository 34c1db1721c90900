"""A block's page rendered from a generated PDF, its box drawn where the block is."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from blockbatch.core.ingest import parse_document
from blockbatch.core.page_image import (
    BOX_COLOUR,
    DEFAULT_WIDTH,
    MAX_HEIGHT,
    MAX_WIDTH,
    MIN_WIDTH,
    PageImageError,
    bounded_width,
    box_pixels,
    render_block_page,
)
from blockbatch.devtools.pdfgen import report_pdf

PDF = report_pdf(3)
BLOCKS = parse_document(PDF, "pdf")


def _picture(png: bytes) -> Image.Image:
    picture = Image.open(io.BytesIO(png))
    assert picture.format == "PNG"
    return picture.convert("RGB")


def _box_colour_at(picture: Image.Image) -> set[tuple[int, int]]:
    width = picture.width
    return {(i % width, i // width) for i, p in enumerate(picture.getdata()) if p == BOX_COLOUR}


@pytest.mark.parametrize("index", [0, 9, len(BLOCKS) - 1])
def test_the_box_is_drawn_around_the_block_and_nowhere_else(index: int) -> None:
    prov = BLOCKS[index].provenance
    assert prov is not None and prov.page is not None and prov.bbox is not None
    assert prov.page_size is not None
    picture = _picture(render_block_page(PDF, prov.page, prov.bbox))
    assert picture.width == DEFAULT_WIDTH
    scale = picture.width / prov.page_size[0]
    x0, y0, x1, y1 = box_pixels(prov.bbox, scale, picture.size)
    coloured = _box_colour_at(picture)
    # The outline runs along all four sides of the scaled box ...
    for x in range(x0, x1 + 1, 7):
        assert (x, y0) in coloured and (x, y1) in coloured
    for y in range(y0, y1 + 1, 7):
        assert (x0, y) in coloured and (x1, y) in coloured
    # ... and nothing outside it has the box's colour.
    assert all(x0 <= x <= x1 and y0 <= y <= y1 for x, y in coloured)
    # The block's own text inside the box is still there (dark pixels), under the wash.
    inside = picture.crop((x0 + 5, y0 + 5, x1 - 5, y1 - 5)).convert("L")
    assert min(inside.getdata()) < 70


def test_a_block_on_another_page_gets_that_page() -> None:
    pictures: dict[int, bytes] = {}
    for block in BLOCKS:
        prov = block.provenance
        if block.block_type == "heading" and prov and prov.page and prov.bbox:
            pictures[prov.page] = render_block_page(PDF, prov.page, prov.bbox)
    assert sorted(pictures) == [1, 2, 3]
    assert len(set(pictures.values())) == 3


def test_the_width_is_bounded() -> None:
    prov = BLOCKS[0].provenance
    assert prov is not None and prov.bbox is not None
    assert bounded_width(None) == DEFAULT_WIDTH
    assert bounded_width(10) == MIN_WIDTH
    assert bounded_width(10**6) == MAX_WIDTH
    assert _picture(render_block_page(PDF, 1, prov.bbox, width=10**6)).width == MAX_WIDTH
    small = _picture(render_block_page(PDF, 1, prov.bbox, width=300))
    assert small.width == 300
    assert BOX_COLOUR in {small.getpixel((x, y)) for x in range(300) for y in range(small.height)}


def test_a_very_tall_page_renders_no_taller_than_the_bound() -> None:
    from fpdf import FPDF

    pdf = FPDF(format=(200, 5000))
    pdf.add_page()
    pdf.set_font("Helvetica", "", 11)
    pdf.cell(0, 10, "a narrow, very tall page")
    picture = _picture(render_block_page(bytes(pdf.output()), 1, (10, 10, 100, 30)))
    assert picture.height <= MAX_HEIGHT
    assert picture.width < DEFAULT_WIDTH


def test_a_page_the_pdf_does_not_have_is_refused() -> None:
    with pytest.raises(PageImageError, match="3 pages, not a page 4"):
        render_block_page(PDF, 4, (0, 0, 10, 10))
    with pytest.raises(PageImageError, match="3 pages, not a page 0"):
        render_block_page(PDF, 0, (0, 0, 10, 10))


def test_a_file_that_is_not_a_pdf_is_refused() -> None:
    with pytest.raises(PageImageError, match="not a PDF"):
        render_block_page(b"%PDF-1.7 not really", 1, (0, 0, 10, 10))
