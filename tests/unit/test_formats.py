"""Issue 34's non-PDF formats: HTML main content and navigation set aside, nested layout
tables once, concatenated HTML, tables by rows or split by rows, DOCX notes and list levels,
PPTX frames and speaker notes, XLSX bounded by its data and sheets of different columns.

Every file is built here (python-docx, python-pptx, openpyxl, or written as text).
"""

from __future__ import annotations

import io
import re
import zipfile
from collections import Counter

import docx
import openpyxl
import pptx
import pytest
from pptx.util import Inches, Pt

from blockbatch.core.blocks import ConvertOptions, is_set_aside
from blockbatch.core.convert import xlsx as xlsx_module
from blockbatch.core.convert.tables import MAX_TABLE_TOKENS
from blockbatch.core.ingest import IngestError, ParsedBlock, document_id_for, parse_document
from blockbatch.core.planning import estimate_tokens
from blockbatch.core.run_types import RunResult
from blockbatch.report import summary_lines


def kinds(blocks: list[ParsedBlock]) -> list[tuple[str, str]]:
    return [(b.block_type, b.block_content) for b in blocks]


def sent(blocks: list[ParsedBlock]) -> list[ParsedBlock]:
    return [b for b in blocks if not is_set_aside(b.block_type)]


# --------------------------------------------------------------------------- HTML

_ARTICLE = " ".join(
    f"<p>Paragraph {n} of the article tells how the harbour town rebuilt its sea wall "
    f"after the storm of the winter, stone by stone, with the help of {n} volunteers.</p>"
    for n in range(1, 9)
)
_MENU = "".join(f'<li><a href="/s{n}">Section {n}</a></li>' for n in range(1, 30))
_NEWS_PAGE = f"""<!doctype html><html><head><title>Sea wall rebuilt</title></head><body>
<header><nav><ul>{_MENU}</ul></nav></header>
<main><article><h1>Sea wall rebuilt</h1>{_ARTICLE}</article></main>
<aside><h3>Most read</h3><ul><li><a href="/a">Cats elect a mayor</a></li>
<li><a href="/b">Weather: more rain</a></li></ul></aside>
<footer><p>Copyright 2026 The Harbour Gazette. All rights reserved.</p>
<ul><li><a href="/privacy">Privacy</a></li><li><a href="/terms">Terms</a></li></ul></footer>
</body></html>"""


def test_html_navigation_menus_and_footer_are_set_aside_not_the_article() -> None:
    blocks = parse_document(_NEWS_PAGE.encode(), "html")
    kept = sent(blocks)
    assert [b.block_type for b in kept] == ["heading"] + ["paragraph"] * 8
    assert kept[0].block_content == "Sea wall rebuilt"
    aside = [b for b in blocks if b.block_type == "navigation"]
    assert {b.block_content for b in aside} >= {"Section 1", "Section 29", "Privacy"}
    # What the block would have been is kept, and it stays in the document with its span.
    menu_item = next(b for b in aside if b.block_content == "Section 1")
    assert menu_item.metadata["content_type"] == "list_item"
    assert menu_item.provenance is not None


def test_html_all_keeps_the_whole_page_as_it_reads() -> None:
    blocks = parse_document(_NEWS_PAGE.encode(), "html", options=ConvertOptions(html_all=True))
    assert not [b for b in blocks if b.block_type == "navigation"]
    assert "Section 1" in [b.block_content for b in blocks]


def test_nested_layout_tables_give_each_text_once() -> None:
    page = """<html><body><table><tr><td>
      <table><tr><td><p>Left column text about tides.</p></td>
        <td><table><tr><th>port</th><th>depth</th></tr><tr><td>Brest</td><td>12</td></tr>
        </table></td></tr></table>
    </td><td><p>Right column about ferries.</p></td></tr></table></body></html>"""
    blocks = parse_document(page.encode(), "html", options=ConvertOptions(html_all=True))
    assert kinds(blocks) == [
        ("paragraph", "Left column text about tides."),
        ("table", "| port | depth |\n| Brest | 12 |"),
        ("paragraph", "Right column about ferries."),
    ]
    text = " ".join(b.block_content for b in blocks)
    assert text.count("Brest") == 1 and text.count("tides") == 1


def test_concatenated_html_documents_are_all_read() -> None:
    one = "<!DOCTYPE html><html><body><h1>First</h1><p>Alpha text.</p></body></html>"
    two = "<!doctype html>\n<html><body><h1>Second</h1><p>Beta text.</p></body></html>"
    three = "<html><body><p>Gamma text.</p></body></html>"
    data = (one + "\n" + two + three).encode()
    blocks = parse_document(data, "html", options=ConvertOptions(html_all=True))
    assert [b.block_content for b in blocks] == [
        "First",
        "Alpha text.",
        "Second",
        "Beta text.",
        "Gamma text.",
    ]
    assert [b.metadata["document"] for b in blocks] == [1, 1, 2, 2, 3]


# --------------------------------------------------------------------------- tables

_TABLE_PAGE = """<html><body><table>
<tr><th>city</th><th>population</th><th>river</th></tr>
<tr><td>Lyon</td><td>522,000</td><td>Rhône</td></tr>
<tr><td>Nantes</td><td>320,000</td><td></td></tr>
</table></body></html>"""


def test_table_rows_give_one_block_per_row_with_the_header_as_context() -> None:
    blocks = parse_document(
        _TABLE_PAGE.encode(), "html", options=ConvertOptions(html_all=True, table_rows=True)
    )
    assert kinds(blocks) == [
        ("table_row", "city: Lyon\npopulation: 522,000\nriver: Rhône"),
        ("table_row", "city: Nantes\npopulation: 320,000"),
    ]
    assert blocks[1].metadata == {
        "header": ["city", "population", "river"],
        "row": 2,
        "rows": 3,
    }
    # A row's provenance is its table's.
    assert blocks[0].provenance is not None and blocks[1].provenance is not None
    assert blocks[0].provenance.char_start == blocks[1].provenance.char_start


def test_table_rows_apply_to_markdown_and_docx_tables() -> None:
    markdown = "# Ports\n\n| port | depth |\n|---|--:|\n| Brest | 12 |\n| Sète \\| Hérault | 9 |\n"
    blocks = parse_document(markdown.encode(), "markdown", options=ConvertOptions(table_rows=True))
    assert kinds(blocks)[1:] == [
        ("table_row", "port: Brest\ndepth: 12"),
        ("table_row", "port: Sète | Hérault\ndepth: 9"),
    ]
    assert blocks[1].provenance is not None
    assert blocks[1].provenance.heading_path == ("Ports",)
    document = docx.Document()
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate([("name", "role"), ("Ada", "engineer")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    blocks = parse_document(out.getvalue(), "docx", options=ConvertOptions(table_rows=True))
    assert kinds(blocks) == [("table_row", "name: Ada\nrole: engineer")]


def test_a_table_above_the_pack_budget_is_split_by_whole_rows_with_its_header() -> None:
    rows = "".join(
        f"<tr><td>day {n}</td><td>{'sunny and warm with a light breeze ' * 6}</td></tr>"
        for n in range(400)
    )
    page = f"<html><body><table><tr><th>day</th><th>weather</th></tr>{rows}</table></body></html>"
    blocks = parse_document(page.encode(), "html", options=ConvertOptions(html_all=True))
    assert len(blocks) > 1
    assert all(b.block_type == "table" for b in blocks)
    for n, block in enumerate(blocks, start=1):
        lines = block.block_content.split("\n")
        assert lines[0] == "| day | weather |"  # the header repeated in every part
        assert all(line.startswith("| day ") and line.endswith(" |") for line in lines[1:])
        assert estimate_tokens(block.block_content) <= MAX_TABLE_TOKENS
        assert (block.metadata["part"], block.metadata["parts"]) == (n, len(blocks))
    days = [line for b in blocks for line in b.block_content.split("\n")[1:]]
    assert len(days) == 400 and days[0].startswith("| day 0 ") and days[-1].startswith("| day 399")


# --------------------------------------------------------------------------- DOCX

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_NOTES_XML = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    f'<w:{{kind}}s xmlns:w="{_W}">'
    '<w:{kind} w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:{kind}>'
    '<w:{kind} w:type="continuationSeparator" w:id="0"><w:p><w:r><w:continuationSeparator/>'
    "</w:r></w:p></w:{kind}>"
    "{notes}</w:{kind}s>"
)


def _note(kind: str, note_id: int, text: str) -> str:
    return f'<w:{kind} w:id="{note_id}"><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:{kind}>'


def _docx_with_notes() -> bytes:
    document = docx.Document()
    document.add_heading("Treaty", 1)
    first = document.add_paragraph("The parties agree on the border.")
    document.add_paragraph("Top level item", style="List Bullet")
    document.add_paragraph("Nested item", style="List Bullet 2")
    document.add_paragraph("Deeper item", style="List Bullet 3")
    second = document.add_paragraph("Ratified in spring.")
    for paragraph, kind, note_id in ((first, "footnote", 1), (first, "footnote", 2)):
        run = paragraph.add_run()
        ref = run._r.makeelement(f"{{{_W}}}{kind}Reference", {f"{{{_W}}}id": str(note_id)})
        run._r.append(ref)
    run = second.add_run()
    run._r.append(run._r.makeelement(f"{{{_W}}}endnoteReference", {f"{{{_W}}}id": "1"}))
    out = io.BytesIO()
    document.save(out)
    return _add_note_parts(
        out.getvalue(),
        {
            "footnote": _note("footnote", 1, "Signed at Geneva.")
            + _note("footnote", 2, "See annex B for the map."),
            "endnote": _note("endnote", 1, "Ratification record, volume 3."),
        },
    )


def _add_note_parts(data: bytes, notes: dict[str, str]) -> bytes:
    """The DOCX with footnotes and endnotes parts, related to the document as Word does."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    ooxml = "http://schemas.openxmlformats.org"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            body = source.read(info.filename)
            if info.filename == "[Content_Types].xml":
                overrides = "".join(
                    f'<Override PartName="/word/{k}s.xml" ContentType="application/'
                    f'vnd.openxmlformats-officedocument.wordprocessingml.{k}s+xml"/>'
                    for k in notes
                )
                body = body.replace(b"</Types>", overrides.encode() + b"</Types>")
            elif info.filename == "word/_rels/document.xml.rels":
                rels = "".join(
                    f'<Relationship Id="rIdNote{k}" Type="{ooxml}/officeDocument/2006/'
                    f'relationships/{k}s" Target="{k}s.xml"/>'
                    for k in notes
                )
                body = body.replace(b"</Relationships>", rels.encode() + b"</Relationships>")
            target.writestr(info, body)
        for kind, xml in notes.items():
            target.writestr(f"word/{kind}s.xml", _NOTES_XML.format(kind=kind, notes=xml))
    return out.getvalue()


def test_docx_footnotes_and_endnotes_are_blocks_after_the_paragraph_they_hang_on() -> None:
    blocks = parse_document(_docx_with_notes(), "docx")
    assert kinds(blocks) == [
        ("heading", "Treaty"),
        ("paragraph", "The parties agree on the border."),
        ("footnote", "Signed at Geneva."),
        ("footnote", "See annex B for the map."),
        ("list_item", "Top level item"),
        ("list_item", "Nested item"),
        ("list_item", "Deeper item"),
        ("paragraph", "Ratified in spring."),
        ("endnote", "Ratification record, volume 3."),
    ]
    assert blocks[3].metadata == {
        "note": 2,
        "paragraph": 2,
        "hangs_on": "The parties agree on the border.",
    }
    assert blocks[8].metadata["note"] == 1
    assert blocks[8].metadata["hangs_on"] == "Ratified in spring."
    assert [b.metadata["depth"] for b in blocks[4:7]] == [0, 1, 2]
    assert blocks[2].provenance is not None
    assert blocks[2].provenance.heading_path == ("Treaty",)


# --------------------------------------------------------------------------- PPTX


def _deck_with_code_and_notes() -> bytes:
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    slide.shapes.title.text = "Deploying"
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(3)).text_frame
    lines = ["kubectl apply -f app.yaml", "kubectl rollout status deploy/app", "echo done"]
    box.text = lines[0]
    for line in lines[1:]:
        box.add_paragraph().text = line
    for paragraph in box.paragraphs:
        for run in paragraph.runs:
            run.font.name = "Consolas"
            run.font.size = Pt(12)
    slide.notes_slide.notes_text_frame.text = "Mention the rollback command."
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def test_pptx_code_box_is_one_block_and_speaker_notes_only_when_asked() -> None:
    data = _deck_with_code_and_notes()
    code = "kubectl apply -f app.yaml\nkubectl rollout status deploy/app\necho done"
    assert kinds(parse_document(data, "pptx")) == [("heading", "Deploying"), ("code", code)]
    blocks = parse_document(data, "pptx", options=ConvertOptions(pptx_notes=True))
    assert kinds(blocks)[-1] == ("speaker_notes", "Mention the rollback command.")
    assert blocks[-1].provenance is not None and blocks[-1].provenance.page == 1
    assert blocks[-1].metadata == {"slide": 1}


# --------------------------------------------------------------------------- XLSX


def _xlsx(rows_by_sheet: dict[str, list[list[object]]]) -> bytes:
    book = openpyxl.Workbook()
    first = book.active
    assert first is not None
    book.remove(first)
    for name, rows in rows_by_sheet.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _claim_dimension(data: bytes, ref: str) -> bytes:
    """The workbook with every sheet's ``<dimension>`` set to ``ref``."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            body = source.read(info.filename)
            if info.filename.startswith("xl/worksheets/sheet"):
                body, n = re.subn(
                    rb'<dimension ref="[^"]*"', f'<dimension ref="{ref}"'.encode(), body
                )
                assert n == 1
            target.writestr(info, body)
    return out.getvalue()


def test_xlsx_claiming_the_whole_grid_reads_only_its_real_cells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _claim_dimension(_xlsx({"s": [["text", "id"], ["a", 1], ["b", 2]]}), "A1:XFD1048576")
    converted = 0
    real_cell = xlsx_module._cell

    def counted(value: object) -> str:
        nonlocal converted
        converted += 1
        if converted > 1000:  # the padded grid is 17 billion cells: stop, do not wait
            raise AssertionError("read_xlsx converts cells the sheet does not hold")
        return real_cell(value)

    monkeypatch.setattr(xlsx_module, "_cell", counted)
    blocks = parse_document(data, "xlsx")
    assert [(b.block_content, b.metadata["id"]) for b in blocks] == [("a", "1"), ("b", "2")]
    assert converted == 6  # the three rows of two cells the sheet holds


def test_xlsx_sheets_without_the_column_are_skipped_with_a_notice() -> None:
    data = _xlsx(
        {
            "notes": [["text", "author"], ["first note", "ann"]],
            "totals": [["quarter", "amount"], ["Q1", 10]],
            "more": [["id", "text"], [7, "second note"]],
        }
    )
    notices: list[str] = []
    blocks = parse_document(data, "xlsx", notices=notices)
    assert [b.block_content for b in blocks] == ["first note", "second note"]
    assert notices == ["sheet 'totals' was skipped: it has no 'text' column"]


def test_xlsx_sheet_and_column_reads_that_sheet_only() -> None:
    data = _xlsx(
        {
            "notes": [["text"], ["first note"]],
            "totals": [["quarter", "label"], ["Q1", "a good quarter"], ["Q2", "flat"]],
        }
    )
    notices: list[str] = []
    blocks = parse_document(data, "xlsx", text_field="totals!label", notices=notices)
    assert [(b.block_content, b.metadata["quarter"]) for b in blocks] == [
        ("a good quarter", "Q1"),
        ("flat", "Q2"),
    ]
    assert notices == ["sheet 'notes' was skipped: only sheet 'totals' is read"]
    with pytest.raises(IngestError, match=r"no sheet 'sums' .* 'notes', 'totals'"):
        parse_document(data, "xlsx", text_field="sums!label")


# --------------------------------------------------------------------------- identity


def test_the_same_bytes_read_another_way_are_another_document() -> None:
    data = _NEWS_PAGE.encode()
    default = document_id_for("html", data)
    assert document_id_for("html", data, ConvertOptions()) == default
    assert document_id_for("html", data, ConvertOptions(html_all=True)) != default
    counts = Counter(b.block_type for b in parse_document(data, "html"))
    assert counts["navigation"] > 0


# --------------------------------------------------------------------------- summary


def test_the_summary_says_how_many_blocks_were_set_aside_and_what_sending_them_costs() -> None:
    result = RunResult(
        run_id="r1",
        status="completed",
        model="claude-haiku-5-5",
        blocks_total=9,
        blocks_ai_complete=9,
        calls=2,
        pack_count=1,
        cost_usd=0.01,
        blocks_set_aside=36,
        set_aside_usd=0.0123,
    )
    lines = summary_lines(result, baseline=None, links={"run": "u", "packs": "p"})
    [row] = [line for line in lines if "set aside" in line]
    assert "36 blocks set aside, not sent" in row and "~$0.0123" in row
    assert "9 ok · 0 failed · 0 cancelled · 9 total" in "\n".join(lines)
    quiet = summary_lines(
        result.model_copy(update={"blocks_set_aside": 0}),
        baseline=None,
        links={"run": "u", "packs": "p"},
    )
    assert not [line for line in quiet if "set aside" in line]


def test_docx_paragraphs_and_tables_inside_content_controls_are_read() -> None:
    document = docx.Document()
    document.add_paragraph("Before the control.")
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate([("feature", "action"), ("clause order", "reorganise")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    inside = document.add_paragraph("Inside the control.")
    body = document.element.body
    sdt = body.makeelement(f"{{{_W}}}sdt", {})
    content = sdt.makeelement(f"{{{_W}}}sdtContent", {})
    sdt.append(content)
    table._tbl.addprevious(sdt)
    content.append(table._tbl)  # moves the table and the paragraph into the control
    content.append(inside._p)
    out = io.BytesIO()
    document.save(out)
    assert kinds(parse_document(out.getvalue(), "docx")) == [
        ("paragraph", "Before the control."),
        ("table", "| feature | action |\n| clause order | reorganise |"),
        ("paragraph", "Inside the control."),
    ]
