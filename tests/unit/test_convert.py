"""PDF, DOCX, PPTX, HTML and XLSX into typed blocks with provenance; bad and hostile files
refused with a message that says what to do.

Every file here is built by the test (fpdf2, python-docx, python-pptx, openpyxl) or read
in place from the machine image's Debian packages (see the corpus tests), never fetched.
"""

from __future__ import annotations

import io
import zipfile
from collections import Counter
from pathlib import Path

import docx
import openpyxl
import pptx
import pytest
from fpdf import FPDF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pptx.util import Inches, Pt

from blockbatch.core.blocks import BLOCK_SEPARATOR, BBox, Provenance, extracted_text
from blockbatch.core.convert import limits
from blockbatch.core.ingest import IngestError, ParsedBlock, detect_format, parse_document
from blockbatch.devtools.pdfgen import report_pdf

ROOT = Path(__file__).resolve().parents[2]


def kinds(blocks: list[ParsedBlock]) -> list[tuple[str, str]]:
    return [(b.block_type, b.block_content) for b in blocks]


def prov(block: ParsedBlock) -> Provenance:
    """The block's provenance, which parse_document gives every block."""
    assert block.provenance is not None, block
    return block.provenance


def bbox(block: ParsedBlock) -> BBox:
    """The block's box on its page, which every block of a paged format has."""
    box = prov(block).bbox
    assert box is not None, block
    return box


def assert_spans_cover_the_extracted_text(blocks: list[ParsedBlock]) -> None:
    text = extracted_text([b.block_content for b in blocks])
    for block in blocks:
        assert block.provenance is not None
        assert text[block.provenance.char_start : block.provenance.char_end] == (
            block.block_content
        )


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("filename", "fmt"),
    [
        ("a.pdf", "pdf"),
        ("A.DOCX", "docx"),
        ("deck.pptx", "pptx"),
        ("page.html", "html"),
        ("page.htm", "html"),
        ("book.xlsx", "xlsx"),
    ],
)
def test_detect_format_reads_the_converted_formats(filename: str, fmt: str) -> None:
    assert detect_format(filename) == fmt


@pytest.mark.parametrize(
    ("filename", "advice"),
    [("old.doc", "save it as .docx"), ("old.xls", "save it as .xlsx"), ("scan.png", "OCR")],
)
def test_a_format_we_do_not_read_says_what_to_save_it_as(filename: str, advice: str) -> None:
    with pytest.raises(IngestError, match="supported extensions") as err:
        detect_format(filename)
    assert advice in str(err.value)


# --------------------------------------------------------------------------- PDF


def test_pdf_report_gives_headings_paragraphs_and_items_with_pages_and_boxes() -> None:
    blocks = parse_document(report_pdf(3), "pdf")
    # Each page: a heading, three paragraphs and three list items; the page number in the
    # footer is kept, typed to be set aside.
    assert Counter(b.block_type for b in blocks) == {
        "heading": 3,
        "paragraph": 9,
        "list_item": 9,
        "page_number": 3,
    }
    assert [prov(b).page for b in blocks if b.block_type == "heading"] == [1, 2, 3]
    assert [b.block_index for b in blocks] == list(range(24))
    for block in blocks:
        where = block.provenance
        assert where is not None and where.bbox is not None and where.page_size is not None
        x0, y0, x1, y1 = where.bbox
        width, height = where.page_size
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height
    heading = blocks[0]
    assert heading.block_content.startswith("Section 1:")
    assert heading.metadata["level"] == 1
    assert prov(blocks[1]).heading_path == (heading.block_content,)
    assert blocks[4].block_type == "list_item" and blocks[4].metadata["marker"] == "-"
    assert not blocks[4].block_content.startswith("-")
    assert_spans_cover_the_extracted_text(blocks)


def test_pdf_blocks_are_in_reading_order_down_the_page() -> None:
    blocks = [b for b in parse_document(report_pdf(2), "pdf") if prov(b).page == 1]
    tops = [bbox(b)[1] for b in blocks]
    assert tops == sorted(tops)


def test_sample_pdf_is_the_handbook() -> None:
    """samples/handbook.pdf is samples/handbook.md typeset (samples/make_pdf.py)."""
    blocks = parse_document((ROOT / "samples" / "handbook.pdf").read_bytes(), "pdf")
    markdown = parse_document((ROOT / "samples" / "handbook.md").read_bytes(), "markdown")
    assert len(blocks) == 155  # 145 and a page number on each of the 10 pages
    assert prov(blocks[-1]).page == 10
    # Every heading of the markdown comes out a heading of the PDF, at the same level.
    assert [
        (b.block_content, b.metadata["level"]) for b in blocks if b.block_type == "heading"
    ] == [(b.block_content, b.metadata["level"]) for b in markdown if b.block_type == "heading"]
    assert sum(b.block_type == "list_item" for b in blocks) == sum(
        b.block_type == "list_item" for b in markdown
    )


def test_encrypted_pdf_is_refused_with_what_to_do() -> None:
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(0, 10, "quarterly numbers")
    pdf.set_encryption(owner_password="owner", user_password="user")
    with pytest.raises(IngestError, match="password-protected") as err:
        parse_document(bytes(pdf.output()), "pdf")
    assert "without one" in str(err.value)


def test_scanned_pdf_without_a_text_layer_says_to_run_ocr() -> None:
    pdf = FPDF()
    for _ in range(2):
        pdf.add_page()
        pdf.rect(20, 20, 150, 200, style="F")  # a page that is only a picture
    with pytest.raises(IngestError, match="no text layer") as err:
        parse_document(bytes(pdf.output()), "pdf")
    assert "OCR" in str(err.value)


@pytest.mark.parametrize(
    "data",
    [b"hello, not a pdf", b"%PDF-1.7\n" + b"\x00" * 200, b""],
    ids=["text", "header-only", "empty"],
)
def test_corrupt_pdf_is_refused(data: bytes) -> None:
    with pytest.raises(IngestError, match="corrupt or not a PDF"):
        parse_document(data, "pdf")


def test_huge_page_is_refused() -> None:
    pdf = FPDF(format=(6000, 300))  # millimetres: 17,000 points wide
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(0, 10, "a banner")
    with pytest.raises(IngestError, match="page 1 of the PDF is 17008 x 850 points"):
        parse_document(bytes(pdf.output()), "pdf")


def test_page_with_implausibly_many_characters_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("blockbatch.core.convert.pdf.MAX_PAGE_CHARS", 500)
    with pytest.raises(IngestError, match=r"page 1 of the PDF holds \d+ characters"):
        parse_document(report_pdf(1), "pdf")


def test_too_many_pages_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("blockbatch.core.convert.pdf.MAX_PAGES", 2)
    with pytest.raises(IngestError, match="has 3 pages, above the 2"):
        parse_document(report_pdf(3), "pdf")


def test_file_too_large_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 1000)
    with pytest.raises(IngestError, match="split it into smaller files"):
        parse_document(report_pdf(1), "pdf")


# --------------------------------------------------------------------------- DOCX


def _docx() -> bytes:
    document = docx.Document()
    document.add_heading("Incident review", 0)
    document.add_paragraph("What happened, in order.")
    document.add_heading("Timeline", 1)
    document.add_paragraph("Paged the primary.", style="List Bullet")
    document.add_paragraph("Rolled back the deploy.", style="List Number")
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate([("time", "event"), ("09:00", "alert")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("   ")  # blank: no block
    document.add_heading("Actions", 2)
    document.add_paragraph("Add a canary stage.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_docx_gives_headings_paragraphs_items_and_tables_in_order() -> None:
    blocks = parse_document(_docx(), "docx")
    assert kinds(blocks) == [
        ("heading", "Incident review"),
        ("paragraph", "What happened, in order."),
        ("heading", "Timeline"),
        ("list_item", "Paged the primary."),
        ("list_item", "Rolled back the deploy."),
        ("table", "| time | event |\n| 09:00 | alert |"),
        ("heading", "Actions"),
        ("paragraph", "Add a canary stage."),
    ]
    assert [b.metadata.get("level") for b in blocks if b.block_type == "heading"] == [1, 1, 2]
    assert prov(blocks[-1]).heading_path == ("Timeline", "Actions")
    assert prov(blocks[3]).heading_path == ("Timeline",)
    assert all(prov(b).page is None and prov(b).bbox is None for b in blocks)
    assert_spans_cover_the_extracted_text(blocks)


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def test_zip_bomb_docx_is_refused_before_parsing() -> None:
    # 64 MiB of zeros deflate to ~64 KiB: a 1000x ratio no document has.
    bomb = _zip({"[Content_Types].xml": b"<Types/>", "word/document.xml": bytes(64 * 2**20)})
    assert len(bomb) < 2**20
    with pytest.raises(IngestError, match="zip bomb") as err:
        parse_document(bomb, "docx")
    assert "word/document.xml" in str(err.value)


def test_office_file_inflating_past_the_total_cap_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "MAX_UNZIPPED_BYTES", 20_000)
    with pytest.raises(IngestError, match="inflates to more than"):
        parse_document(_docx(), "docx")


def test_password_protected_docx_is_refused() -> None:
    # Office writes an encrypted document as an OLE compound file, not a zip.
    ole = bytes.fromhex("d0cf11e0a1b11ae1") + bytes(4096)
    with pytest.raises(IngestError, match="password-protected"):
        parse_document(ole, "docx")


@pytest.mark.parametrize("fmt", ["docx", "pptx", "xlsx"])
def test_corrupt_office_file_is_refused(fmt: str) -> None:
    with pytest.raises(IngestError, match="corrupt"):
        parse_document(b"PK\x03\x04 not really a zip", fmt)
    with pytest.raises(IngestError, match="corrupt"):
        parse_document(_docx()[:3000], fmt)  # cut short
    with pytest.raises(IngestError, match="corrupt"):
        parse_document(_zip({"hello.txt": b"a zip, but not an office file"}), fmt)


# --------------------------------------------------------------------------- PPTX


def _pptx() -> bytes:
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
    slide.shapes.title.text = "Quarterly review"
    body = slide.placeholders[1].text_frame
    body.text = "Revenue up"
    sub = body.add_paragraph()
    sub.text = "mostly from renewals"
    sub.level = 1
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    slide.shapes.title.text = "Risks"
    box = slide.shapes.add_textbox(Inches(1), Inches(3), Inches(6), Inches(1))
    box.text_frame.text = "Churn in the enterprise tier."
    box.text_frame.paragraphs[0].runs[0].font.size = Pt(14)
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(5), Inches(6), Inches(1)).table
    for r, row in enumerate([("risk", "owner"), ("churn", "sales")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def test_pptx_gives_each_slide_as_a_page_with_shape_boxes() -> None:
    blocks = parse_document(_pptx(), "pptx")
    assert kinds(blocks) == [
        ("heading", "Quarterly review"),
        ("list", "Revenue up\n  mostly from renewals"),
        ("heading", "Risks"),
        ("paragraph", "Churn in the enterprise tier."),
        ("table", "| risk | owner |\n| churn | sales |"),
    ]
    assert [prov(b).page for b in blocks] == [1, 1, 2, 2, 2]
    assert blocks[1].metadata["items"] == 2
    assert prov(blocks[3]).bbox == pytest.approx((72, 216, 504, 288))
    assert prov(blocks[3]).page_size == pytest.approx((720, 540))
    assert prov(blocks[3]).heading_path == ("Risks",)
    assert_spans_cover_the_extracted_text(blocks)


def test_pptx_text_inside_a_group_keeps_its_own_box() -> None:
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[6])  # blank
    group = slide.shapes.add_group_shape()
    box = group.shapes.add_textbox(Inches(1), Inches(1), Inches(3), Inches(1))
    box.text_frame.text = "in a group"
    out = io.BytesIO()
    deck.save(out)
    [block] = parse_document(out.getvalue(), "pptx")
    assert (block.block_content, prov(block).bbox) == ("in a group", (72, 72, 288, 144))


# --------------------------------------------------------------------------- HTML

_PAGE = """<!doctype html><html><head><title>not content</title>
<style>p { color: red }</style><script>var x = "<p>not content</p>";</script></head>
<body><nav>Home | Docs</nav>
<h1>Runbook</h1>
<p>Check   the
dashboard first.<br>Then page.</p>
<ul><li>Primary<ul><li>Secondary</li></ul></li><li>Lead</li></ul>
<pre><code class="language-sh">kubectl get pods
  -n ledger</code></pre>
<table><tr><th>sev</th><th>page</th></tr><tr><td>1</td><td>yes</td></tr></table>
<div>Loose text <b>in</b> a div<p>and a paragraph</p>after it</div>
<blockquote><p>Quoted</p></blockquote>
<h2>Caf\u00e9 notes</h2><p>d\u00e9j\u00e0 vu</p>
</body></html>"""


def test_html_gives_typed_blocks_in_document_order() -> None:
    blocks = parse_document(_PAGE.encode(), "html")
    assert kinds(blocks) == [
        ("paragraph", "Home | Docs"),
        ("heading", "Runbook"),
        ("paragraph", "Check the dashboard first.\nThen page."),
        ("list_item", "Primary"),
        ("list_item", "Secondary"),
        ("list_item", "Lead"),
        ("code", "kubectl get pods\n  -n ledger"),
        ("table", "| sev | page |\n| 1 | yes |"),
        ("paragraph", "Loose text in a div"),
        ("paragraph", "and a paragraph"),
        ("paragraph", "after it"),
        ("blockquote", "Quoted"),
        ("heading", "Caf\u00e9 notes"),
        ("paragraph", "d\u00e9j\u00e0 vu"),
    ]
    assert [b.metadata.get("depth") for b in blocks[3:6]] == [0, 1, 0]
    assert blocks[6].metadata["language"] == "sh"
    assert prov(blocks[-1]).heading_path == ("Runbook", "Caf\u00e9 notes")
    assert_spans_cover_the_extracted_text(blocks)


def test_html_in_a_declared_legacy_charset_is_decoded_by_its_meta() -> None:
    page = '<html><head><meta charset="windows-1252"></head><body><p>na\u00efve \u2013 ok</p>'
    blocks = parse_document(page.encode("cp1252"), "html")
    assert kinds(blocks) == [("paragraph", "na\u00efve \u2013 ok")]


def test_html_without_text_has_no_blocks() -> None:
    with pytest.raises(IngestError, match="document has no blocks: the HTML holds no text"):
        parse_document(b"<html><body><script>x()</script><img src=a.png></body></html>", "html")


def test_deeply_nested_html_is_read_to_its_end() -> None:
    page = "<div>" * 250 + "deep text" + "</div>" * 250 + "<p>after</p>"
    blocks = parse_document(page.encode(), "html")
    assert [b.block_content for b in blocks] == ["deep text", "after"]


def test_html_nested_past_what_the_parser_reads_is_refused_not_cut_short() -> None:
    page = "<div>" * 5000 + "deep text" + "</div>" * 5000 + "<p>after</p>"
    with pytest.raises(IngestError, match="nests elements more than 256 deep"):
        parse_document(page.encode(), "html")


# --------------------------------------------------------------------------- XLSX


def _xlsx(rows_by_sheet: dict[str, list[list[object]]]) -> bytes:
    book = openpyxl.Workbook()
    first = book.active  # a new workbook's one sheet
    assert first is not None
    book.remove(first)
    for name, rows in rows_by_sheet.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_xlsx_reads_each_sheet_like_a_csv() -> None:
    data = _xlsx(
        {
            "tickets": [["id", "text", "priority"], [1, "Login fails", "high"], [2, "Slow", None]],
            "more": [["text"], ["Export broken"]],
        }
    )
    blocks = parse_document(data, "xlsx")
    assert kinds(blocks) == [
        ("record", "Login fails"),
        ("record", "Slow"),
        ("record", "Export broken"),
    ]
    assert blocks[0].metadata == {
        "id": "1",
        "priority": "high",
        "sheet": "tickets",
        "source_row": 2,
    }
    assert [prov(b).page for b in blocks] == [1, 1, 2]


def test_xlsx_without_the_text_column_names_the_sheet_and_its_columns() -> None:
    with pytest.raises(
        IngestError, match=r"no sheet .* has a 'text' column \(sheet 'data': 'id', 'body'\)"
    ):
        parse_document(_xlsx({"data": [["id", "body"], [1, "x"]]}), "xlsx")


def test_xlsx_rows_with_empty_text_are_refused_by_row_number() -> None:
    data = _xlsx({"s": [["text", "n"], ["ok", 1], [None, 2], ["also ok", 3], [" ", 4]]})
    with pytest.raises(IngestError, match=r"^rows 3, 5 have an empty 'text'"):
        parse_document(data, "xlsx")


# --------------------------------------------------------------------------- real-world corpus

#: Documentation files of Debian packages in the machine image (GPL/GFDL; read in place,
#: never copied into the repo): real PDFs with a text layer and real HTML pages, made by
#: other people's tool chains (DocBook/FOP, Texinfo/TeX, debiandoc).
CORPUS = [
    # path, format, blocks, last page, headings, (a heading, its page)
    # 258: the cache file's record layouts (size, type, field in aligned columns) are 9
    # tables, no longer runs of one paragraph per row
    (
        "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf",
        "pdf",
        258,
        17,
        28,
        ("2.3. The MEDIA/SUBTYPE.xml files", 6),
    ),
    # 541: two sentences that go on below a line in another font are one paragraph each;
    # 542: each chapter's running header ("Chapter 3: Utilities", on the chapter's pages in
    # a row) is a page_header, no longer a paragraph or the end of one (its ASN.1 listings,
    # set in aligned columns in a monospaced font, are code, not tables)
    ("/usr/share/doc/libtasn1-doc/libtasn1.pdf", "pdf", 542, 36, 80, ("1 Introduction", 4)),
    (
        "/usr/share/doc/base-passwd/users-and-groups.html",
        "html",
        131,
        None,
        6,
        ("Users and Groups in the Debian System", None),
    ),
    ("/usr/share/doc/libffi8/html/The-Basics.html", "html", 14, None, 1, ("2.1 The Basics", None)),
]


@pytest.mark.parametrize(
    ("path", "fmt", "count", "pages", "headings", "heading"), CORPUS, ids=lambda v: str(v)
)
def test_real_world_documents_give_their_expected_blocks(
    path: str,
    fmt: str,
    count: int,
    pages: int | None,
    headings: int,
    heading: tuple[str, int | None],
) -> None:
    source = Path(path)
    if not source.is_file():
        pytest.skip(f"{path} is not on this machine (its Debian package is missing)")
    blocks = parse_document(source.read_bytes(), fmt)
    assert len(blocks) == count
    assert max((prov(b).page or 0) for b in blocks) == (pages or 0)
    found = [b for b in blocks if b.block_type == "heading"]
    assert len(found) == headings
    assert heading in [(b.block_content, prov(b).page) for b in found]
    assert all(b.block_content.strip() for b in blocks)
    assert_spans_cover_the_extracted_text(blocks)


def test_block_separator_is_what_the_spans_assume() -> None:
    assert extracted_text(["a", "b"]) == "a" + BLOCK_SEPARATOR + "b"


# --------------------------------------------------------------------------- damaged files

_VALID = {"pdf": report_pdf(1), "docx": _docx(), "pptx": _pptx(), "html": _PAGE.encode()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(sorted(_VALID)),
    cuts=st.lists(st.tuples(st.integers(0, 10**6), st.binary(max_size=8)), max_size=6),
)
def test_a_damaged_file_gives_blocks_or_an_ingest_error_never_a_crash(
    fmt: str, cuts: list[tuple[int, bytes]]
) -> None:
    data = bytearray(_VALID[fmt])
    for at, junk in cuts:
        at %= len(data)
        data[at : at + len(junk)] = junk
    try:
        blocks = parse_document(bytes(data), fmt)
    except IngestError as err:
        assert str(err)
        return
    assert all(b.block_content.strip() for b in blocks)
