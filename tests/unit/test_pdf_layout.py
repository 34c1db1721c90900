"""PDF layout on generated PDFs: columns, paragraphs across breaks, hyphenation, headings,
boilerplate (running headers, footers, page numbers, off-page and invisible text), rotated
pages and unreadable pages. Every PDF is made here with fpdf2 (and /Rotate set with
pypdfium2), each reproducing one layout a real document has.
"""

from __future__ import annotations

import io
from collections import Counter

import pypdfium2 as pdfium
import pytest
from fpdf import FPDF
from fpdf.enums import TextMode
from PIL import Image

from blockbatch.core.blocks import BBox, is_set_aside
from blockbatch.core.convert.pdf_layout import reading_order
from blockbatch.core.convert.pdf_lines import Run, join_lines
from blockbatch.core.ingest import IngestError, ParsedBlock, parse_document

TEXT = (
    "the review of each incident names an owner who writes the timeline and lists the "
    "actions that follow from it so that the next rotation knows what changed and why "
    "every alert has a runbook and every runbook has a date when someone last read it"
)
WORDS = TEXT.split(" ")


def sentence_text(seed: int, words: int = 60) -> str:
    picked = [WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(words)]
    return " ".join(picked).capitalize() + "."


def new_pdf() -> FPDF:
    pdf = FPDF(format="A4", unit="pt")
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=10)
    return pdf


def lines_of(text: str, pdf: FPDF, width: float) -> list[str]:
    """``text`` broken into lines of at most ``width`` points in the current font."""
    lines: list[str] = []
    for word in text.split():
        if lines and pdf.get_string_width(lines[-1] + " " + word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def columns_pdf(columns: int) -> tuple[bytes, list[str]]:
    """One page of ``columns`` columns, one paragraph each, drawn row by row across the
    columns (as a booklet's file does: each row's lines share a baseline)."""
    pdf = new_pdf()
    pdf.add_page()
    gutter, margin = 18.0, 50.0
    width = (pdf.w - 2 * margin - (columns - 1) * gutter) / columns
    texts = [sentence_text(c, 70) for c in range(columns)]
    broken = [lines_of(t, pdf, width) for t in texts]
    for row in range(max(len(b) for b in broken)):
        for c, lines in enumerate(broken):
            if row < len(lines):
                pdf.text(margin + c * (width + gutter), 80 + 13 * row, lines[row])
    return bytes(pdf.output()), texts


def content(blocks: list[ParsedBlock]) -> list[ParsedBlock]:
    return [b for b in blocks if not is_set_aside(b.block_type)]


def box(block: ParsedBlock) -> BBox:
    assert block.provenance is not None and block.provenance.bbox is not None
    return block.provenance.bbox


@pytest.mark.parametrize("columns", [2, 3])
def test_columns_are_read_one_after_the_other(columns: int) -> None:
    data, texts = columns_pdf(columns)
    blocks = content(parse_document(data, "pdf"))
    assert [b.block_content for b in blocks] == texts
    page_width = pdfium.PdfDocument(data)[0].get_size()[0]
    for block in blocks:
        x0, _, x1, _ = box(block)
        assert x1 - x0 < 0.6 * page_width / (columns - 1)  # never a box over two columns


def test_hyphenated_word_across_lines_is_joined() -> None:
    pdf = new_pdf()
    pdf.add_page()
    pdf.text(50, 80, "The platform keeps the ledger of every run. Ex-")
    pdf.text(50, 93, "isting records are never rewritten, only appended to.")
    blocks = parse_document(bytes(pdf.output()), "pdf")
    assert [b.block_content for b in blocks] == [
        "The platform keeps the ledger of every run. Existing records are never rewritten, "
        "only appended to."
    ]


def test_paragraph_continues_across_a_page_break() -> None:
    pdf = new_pdf()
    text = sentence_text(3, 40)
    lines = lines_of(text, pdf, 400)
    pdf.add_page()
    pdf.text(50, 760, lines[0])
    pdf.text(50, 773, lines[1])
    pdf.add_page()
    for i, line in enumerate(lines[2:]):
        pdf.text(50, 80 + 13 * i, line)
    blocks = parse_document(bytes(pdf.output()), "pdf")
    assert [b.block_content for b in blocks] == [text]
    parts = blocks[0].metadata["parts"]
    assert [p[0] for p in parts] == [1, 2]  # a box on each page, none across the break
    assert blocks[0].provenance is not None and blocks[0].provenance.page == 1


def running_pdf(pages: int = 4) -> bytes:
    pdf = new_pdf()
    for page in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", size=9)
        pdf.text(50, 40, "Master Services Agreement - Confidential")
        pdf.text(50, 810, "Acme Legal Department")
        pdf.text(pdf.w - 70, 810, str(page))
        pdf.set_font("Helvetica", size=10)
        for i, line in enumerate(lines_of(sentence_text(page, 50), pdf, 450)):
            pdf.text(50, 100 + 13 * i, line)
    return bytes(pdf.output())


def test_running_headers_footers_and_page_numbers_are_set_aside() -> None:
    blocks = parse_document(running_pdf(4), "pdf")
    kinds = Counter(b.block_type for b in blocks)
    assert kinds == {"paragraph": 4, "page_header": 4, "page_footer": 4, "page_number": 4}
    numbers = [b for b in blocks if b.block_type == "page_number"]
    assert [(b.block_content, b.provenance.page) for b in numbers if b.provenance] == [
        ("1", 1),
        ("2", 2),
        ("3", 3),
        ("4", 4),
    ]
    for block in blocks:  # kept with their provenance
        assert block.provenance is not None and block.provenance.bbox is not None


def test_text_off_the_page_is_typed_and_its_box_clipped() -> None:
    pdf = new_pdf()
    pdf.add_page()
    pdf.text(50, 80, "The body of the page, inside it.")
    pdf.text(-120, 400, "CROP MARK 1234")  # a printer's mark left of the page
    blocks = parse_document(bytes(pdf.output()), "pdf")
    off = [b for b in blocks if b.block_type == "off_page"]
    assert [b.block_content for b in off] == ["CROP MARK 1234"]
    for block in blocks:
        assert block.provenance is not None and block.provenance.page_size is not None
        x0, y0, x1, y1 = box(block)
        width, height = block.provenance.page_size
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height


def test_invisible_text_is_typed() -> None:
    pdf = new_pdf()
    pdf.add_page()
    pdf.text(50, 80, "Visible terms of the contract.")
    pdf.text_mode = TextMode.INVISIBLE
    pdf.text(50, 300, "hidden keywords for search engines")
    pdf.text_mode = TextMode.FILL
    blocks = parse_document(bytes(pdf.output()), "pdf")
    assert [(b.block_type, b.block_content) for b in blocks] == [
        ("paragraph", "Visible terms of the contract."),
        ("invisible_text", "hidden keywords for search engines"),
    ]


def picture() -> io.BytesIO:
    out = io.BytesIO()
    Image.new("RGB", (400, 500), (120, 110, 100)).save(out, format="PNG")
    out.seek(0)
    return out


def test_image_only_pdf_with_an_invisible_ocr_layer_is_refused_like_a_scan() -> None:
    pdf = new_pdf()
    for _ in range(2):
        pdf.add_page()
        pdf.image(picture(), x=40, y=40, w=500)
        pdf.text_mode = TextMode.INVISIBLE
        pdf.text(60, 100, "scanned words under the picture")
        pdf.text_mode = TextMode.FILL
    with pytest.raises(IngestError, match="ocrmypdf") as caught:
        parse_document(bytes(pdf.output()), "pdf")
    assert "invisible text layer" in str(caught.value)


def test_image_only_pages_among_text_pages_are_refused_by_page() -> None:
    pdf = new_pdf()
    for page in range(4):
        pdf.add_page()
        if page < 2:
            pdf.text(50, 80, f"Page {page + 1} has text.")
        else:
            pdf.image(picture(), x=40, y=40, w=500)
    with pytest.raises(IngestError, match=r"pages 3, 4 of the PDF are images without text"):
        parse_document(bytes(pdf.output()), "pdf")


def rotated_pdf(rotation: int) -> bytes:
    pdf = new_pdf()
    pdf.add_page()
    pdf.set_font("Helvetica", size=28)
    pdf.text(60, 120, "ROTATED HEADLINE")
    doc = pdfium.PdfDocument(bytes(pdf.output()))
    doc[0].set_rotation(rotation)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_box_on_a_rotated_page_covers_the_text_as_shown(rotation: int) -> None:
    data = rotated_pdf(rotation)
    (block,) = parse_document(data, "pdf")
    assert block.block_content == "ROTATED HEADLINE"
    assert block.provenance is not None and block.provenance.page_size is not None
    page = pdfium.PdfDocument(data)[0]
    assert block.provenance.page_size == pytest.approx(page.get_size())
    # Render the page as a viewer shows it (rotation applied) and find the ink.
    image = page.render(scale=1).to_pil().convert("L")
    ink = image.point(lambda v: 255 if v < 128 else 0).getbbox()
    assert ink is not None
    x0, y0, x1, y1 = box(block)
    assert x0 - 2 <= ink[0] and ink[2] <= x1 + 2 and y0 - 2 <= ink[1] and ink[3] <= y1 + 2
    assert (x1 - x0) * (y1 - y0) < 3 * (ink[2] - ink[0]) * (ink[3] - ink[1])


def test_bold_numbered_and_named_headings_fill_the_heading_path() -> None:
    pdf = new_pdf()
    pdf.add_page()
    y = 80.0
    for title, text in [("Abstract", sentence_text(1, 30)), ("1 Background", sentence_text(2))]:
        pdf.set_font("Helvetica", "B", 10)
        pdf.text(50, y, title)
        y += 16
        pdf.set_font("Helvetica", size=10)
        for line in lines_of(text, pdf, 450):
            pdf.text(50, y, line)
            y += 13
        y += 10
    blocks = parse_document(bytes(pdf.output()), "pdf")
    assert [(b.block_type, b.block_content[:12]) for b in blocks] == [
        ("heading", "Abstract"),
        ("paragraph", sentence_text(1, 30)[:12]),
        ("heading", "1 Background"),
        ("paragraph", sentence_text(2)[:12]),
    ]
    assert blocks[3].provenance is not None
    assert blocks[3].provenance.heading_path == ("1 Background",)


# --------------------------------------------------------------------------- pure logic


@pytest.mark.parametrize(
    ("lines", "joined"),
    [
        (["Ex-", "isting rows"], "Existing rows"),
        (["Ex\ufffe", "isting rows"], "Existing rows"),
        (["state-of-the-", "Art"], "state-of-the- Art"),  # a capital: not a broken word
        (["a\x07b\x1fc", "d"], "abc d"),
        # an embedded Latin word against the Arabic word after it (right_to_left_01.pdf)
        (["بلغة R و Pythonمن األدوات"], "بلغة R و Python من األدوات"),
        # a mark drawn apart from its letter, read as a word before it
        (["يؤدي أي ًضا إلى"], "يؤدي أيضًا إلى"),
    ],
)
def test_join_lines_repairs_hyphens_and_drops_stray_characters(
    lines: list[str], joined: str
) -> None:
    assert join_lines(lines) == joined


def test_a_control_character_between_glyphs_separates_words() -> None:
    """sample-files--habibi-rotated.pdf: PDFium reads a ligature's glyph as U+0003 between
    two words; it joined them ("ϲΒϴΒhabibi" once the control character was dropped)."""
    from blockbatch.core.convert.pdf import _TOKEN

    assert _TOKEN.findall("ϲΒϴΒ\x03habibi و") == ["ϲΒϴΒ", "habibi", "و"]


def test_reading_order_reads_a_title_then_the_left_column_then_the_right() -> None:
    def run(x0: float, y: float, x1: float, text: str) -> Run:
        return Run(1, text, (x0, y, x1, y + 11), 10.0)

    title = run(50, 40, 545, "title")
    left = [run(50, 80 + 13 * i, 290, f"left {i}") for i in range(5)]
    right = [run(310, 80 + 13 * i, 545, f"right {i}") for i in range(5)]
    regions = reading_order([*right, title, *left], 10.0)
    flat = [r.text for region in regions for r in sorted(region, key=lambda r: r.box[1])]
    assert flat == ["title", *(r.text for r in left), *(r.text for r in right)]


@pytest.mark.parametrize("rotation", [90, 270])
def test_columns_of_a_page_shown_turned_are_read_in_their_text_direction(rotation: int) -> None:
    data, texts = columns_pdf(2)
    doc = pdfium.PdfDocument(data)
    doc[0].set_rotation(rotation)
    out = io.BytesIO()
    doc.save(out)
    blocks = parse_document(out.getvalue(), "pdf")
    assert [b.block_content for b in blocks] == texts
    width, height = pdfium.PdfDocument(out.getvalue())[0].get_size()
    first, second = (box(b) for b in blocks)
    # As shown, the text runs down (90) or up (270) the page: the columns are stacked.
    assert first[2] - first[0] < 0.3 * width and second[2] - second[0] < 0.3 * width
    assert (first[1] < second[1]) == (rotation == 90)
    for x0, y0, x1, y1 in (first, second):
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height


def test_page_drawing_far_more_text_than_pdfium_reads_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A vertical CID font PDFium cannot map gives a few characters for a page of text
    objects. No such font can be made here, so PDFium's count of the page's text objects is
    stood in for: 200 text objects, while the page gives 23 characters."""
    pdf = new_pdf()
    pdf.add_page()
    pdf.text(50, 80, "Only these words come out.")
    monkeypatch.setattr(
        "blockbatch.core.convert.pdf._page_objects",
        lambda page, pdfium, textpage=None: (200, 199, False),
    )
    with pytest.raises(IngestError, match=r"PDFium cannot read the text on page 1\b.*ocrmypdf"):
        parse_document(bytes(pdf.output()), "pdf")
