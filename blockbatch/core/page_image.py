"""A block's page as a PNG with the block's box drawn on it, rendered from the PDF itself.

PDFium (pypdfium2, the engine the PDF converter reads with) renders the page; Pillow draws
the box: a translucent wash over the block and an opaque :data:`BOX_COLOUR` outline just
outside it, so the text stays readable and the box is found at a glance. The box is the
block's provenance (blockbatch/core/blocks.py ``Provenance.bbox``: points, top-left origin),
scaled by the rendered width over the page's width in points.

The picture is bounded: :data:`MIN_WIDTH` to :data:`MAX_WIDTH` pixels wide, and never more
than :data:`MAX_HEIGHT` tall (a very tall page renders narrower instead), so no request can
ask for a huge render. PDFium is not thread-safe: call this from one thread at a time.
"""

from __future__ import annotations

import io

from blockbatch.core.blocks import BBox

#: The outline's colour (RGB): a red that body text, rules and white paper never use.
BOX_COLOUR = (230, 30, 90)
#: The wash over the block: the outline's colour at this opacity (0-255).
WASH_ALPHA = 36
#: Points between the block's text and its outline, so the outline never covers a glyph.
PAD_POINTS = 3.0
DEFAULT_WIDTH = 900
MIN_WIDTH = 200
MAX_WIDTH = 1600
MAX_HEIGHT = 2400


class PageImageError(ValueError):
    """The page cannot be rendered (no such page, or the file is not a readable PDF)."""


def bounded_width(width: int | None) -> int:
    """A requested width in pixels, brought within :data:`MIN_WIDTH`..:data:`MAX_WIDTH`."""
    if width is None:
        return DEFAULT_WIDTH
    return max(MIN_WIDTH, min(MAX_WIDTH, width))


def render_block_page(pdf: bytes, page: int, bbox: BBox, *, width: int | None = None) -> bytes:
    """Page ``page`` (1-based) of ``pdf`` as PNG bytes, with ``bbox`` outlined.

    Args:
        pdf: the PDF file's bytes.
        page: 1-based page number.
        bbox: the block's box, ``(x0, y0, x1, y1)`` in points from the page's top-left.
        width: the picture's width in pixels (bounded by :func:`bounded_width`).

    Raises:
        PageImageError: ``pdf`` is not a readable PDF, or it has no page ``page``.
    """
    import pypdfium2 as pdfium
    from PIL import Image, ImageDraw

    try:
        doc = pdfium.PdfDocument(pdf)
    except pdfium.PdfiumError:
        raise PageImageError("the stored file is not a PDF PDFium can read") from None
    try:
        if not 1 <= page <= len(doc):
            raise PageImageError(f"the PDF has {len(doc)} pages, not a page {page}")
        pdf_page = doc[page - 1]
        try:
            page_w, page_h = pdf_page.get_size()
            scale = min(bounded_width(width) / page_w, MAX_HEIGHT / page_h)
            bitmap = pdf_page.render(scale=scale)
            try:
                picture = bitmap.to_pil().convert("RGBA")
            finally:
                bitmap.close()
        finally:
            pdf_page.close()
    finally:
        doc.close()
    x0, y0, x1, y1 = box_pixels(bbox, scale, picture.size)
    wash = Image.new("RGBA", picture.size, (0, 0, 0, 0))
    ImageDraw.Draw(wash).rectangle((x0, y0, x1, y1), fill=(*BOX_COLOUR, WASH_ALPHA))
    picture = Image.alpha_composite(picture, wash).convert("RGB")
    ImageDraw.Draw(picture).rectangle(
        (x0, y0, x1, y1), outline=BOX_COLOUR, width=outline_width(scale)
    )
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def outline_width(scale: float) -> int:
    """The outline's width in pixels at ``scale`` pixels per point: about 1.5 points."""
    return max(2, round(1.5 * scale))


def box_pixels(bbox: BBox, scale: float, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The outline's rectangle in pixels: ``bbox`` padded by :data:`PAD_POINTS`, scaled,
    and kept on the picture (its ``size``); the outline is drawn inward from this edge."""
    width, height = size
    edge = outline_width(scale)
    x0, y0, x1, y1 = ((v - PAD_POINTS if i < 2 else v + PAD_POINTS) for i, v in enumerate(bbox))
    return (
        max(0, min(width - 1, round(x0 * scale) - edge)),
        max(0, min(height - 1, round(y0 * scale) - edge)),
        max(0, min(width - 1, round(x1 * scale) + edge)),
        max(0, min(height - 1, round(y1 * scale) + edge)),
    )
