"""Tables drawn with lines (issue 34): a ruled table's cells often touch, so only its
lines tell them apart; the lines also tell a table from a page's frame, a plot's axes or a
figure's drawn grid. PDFs made with fpdf2 (cells with borders), and the pure logic of
:mod:`blockbatch.core.convert.pdf_rules` on its patterns."""

from __future__ import annotations

from fpdf import FPDF

from blockbatch.core.blocks import ConvertOptions
from blockbatch.core.convert.pdf_layout import build_blocks
from blockbatch.core.convert.pdf_lines import Run
from blockbatch.core.convert.pdf_rules import Rules, Segment, ruled_tables
from blockbatch.core.ingest import parse_document

# WARN-report style: cells set as tight as their text, the city against the count.
ROWS = [
    ("Company", "City", "No.", "Kind"),
    ("Boeing Company", "Huntington Beach", "65", "Layoff Permanent"),
    ("Safeway Inc.", "Pleasanton", "15", "Closure Permanent"),
    ("Maxim Integrated Product", "San Jose", "150", "Layoff Unknown"),
]


def ruled_pdf(color: int = 0, pages: int = 1) -> bytes:
    """A paragraph, then a table whose cells are drawn with lines, each a little wider than
    its column's longest text (a space's width between cells, not the font size the
    aligned-columns finder needs)."""
    pdf = FPDF(unit="pt", format="letter")
    pdf.set_font("Helvetica", size=9)
    pdf.c_margin = 1.5
    widths = [max(pdf.get_string_width(row[k]) for row in ROWS) + 3 for k in range(4)]
    for page in range(pages):
        pdf.add_page()
        pdf.set_draw_color(color)
        pdf.set_xy(72, 72)
        pdf.multi_cell(400, 12, f"Part {page + 1}: the notices received, by company and city.")
        pdf.set_xy(72, 100)
        for row in ROWS:
            pdf.set_x(72)
            for width, text in zip(widths, row, strict=True):
                pdf.cell(width, 12, text, border=1)
            pdf.ln(12)
        pdf.set_xy(72, 200)
        pdf.multi_cell(400, 12, "Notices are published twice a month.")
    return bytes(pdf.output())


def test_a_table_whose_cells_touch_is_found_by_its_lines() -> None:
    """ca-warn-report.pdf: "Huntington Beach" runs into "65" (one run to PDFium); the
    gap-based finder read the rows as paragraphs, or the city and the count as one cell."""
    blocks = parse_document(ruled_pdf(), "pdf")
    assert [b.block_type for b in blocks] == ["paragraph", "table", "paragraph"]
    table = blocks[1]
    assert table.block_content.split("\n") == ["| " + " | ".join(row) + " |" for row in ROWS]
    assert table.metadata["ruled"] is True
    where = table.provenance
    assert where is not None and where.bbox is not None and where.bbox[1] >= 99


def test_table_rows_gives_a_ruled_tables_rows_with_its_header() -> None:
    blocks = parse_document(ruled_pdf(), "pdf", options=ConvertOptions(table_rows=True))
    rows = [b.block_content for b in blocks if b.block_type == "table_row"]
    assert (
        rows[0]
        == "Company: Boeing Company\nCity: Huntington Beach\nNo.: 65\nKind: Layoff Permanent"
    )
    assert len(rows) == 3


def test_a_tables_header_repeated_on_every_page_is_not_a_running_header() -> None:
    """ca-warn-report.pdf: the table's counts at the same place on several pages were typed
    page numbers (17 of them), its repeated rows running headers."""
    blocks = parse_document(ruled_pdf(pages=3), "pdf")
    assert [b.block_type for b in blocks].count("table") == 3
    aside = [b for b in blocks if b.block_type in ("page_header", "page_footer", "page_number")]
    assert all(b.block_content.startswith("Part ") for b in aside)  # the section's header
    assert all(
        b.block_content.startswith("| Company | City |") for b in blocks if b.block_type == "table"
    )


def test_white_lines_draw_no_table() -> None:
    """unstructured's list-item-example.pdf: a Word layout table with white borders is two
    columns of text, not a table."""
    blocks = parse_document(ruled_pdf(color=255), "pdf")
    assert not any(b.metadata.get("ruled") for b in blocks if b.block_type == "table")


def cells(
    x0: float, y0: float, widths: list[float], heights: list[float]
) -> tuple[list[Segment], list[Segment]]:
    """The lines of a full grid: horizontal ``(y, x0, x1)``, vertical ``(x, y0, y1)``."""
    xs = [x0 + sum(widths[:k]) for k in range(len(widths) + 1)]
    ys = [y0 + sum(heights[:k]) for k in range(len(heights) + 1)]
    return [(y, xs[0], xs[-1]) for y in ys], [(x, ys[0], ys[-1]) for x in xs]


def run(text: str, x: float, y: float, size: float = 9.0) -> Run:
    return Run(1, text, (x, y, x + 4.5 * len(text), y + 1.1 * size), size)


def test_a_cell_over_two_columns_is_one_cell() -> None:
    """pr-138-example.pdf: a heading over two columns, no line between them on its row."""
    hs, vs = cells(100, 100, [80, 80, 80], [14, 14, 14])
    vs = [v for v in vs if v[0] != 260] + [(260, 114, 142)]  # no line on the first row
    runs = [run("Name", 102, 102), run("Rates per year", 182, 102)]
    runs += [run(t, 102 + 80 * k, 116 + 14 * r) for r in range(2) for k, t in enumerate("abc")]
    (table,) = ruled_tables((hs, vs, []), runs)
    assert table.rows == [["Name", "Rates per year", ""], ["a", "b", "c"], ["a", "b", "c"]]


def test_columns_of_text_framed_by_lines_are_a_layout_not_a_table() -> None:
    """la-precinct-bulletin-2014-p1.pdf: a frame with lines between the page's columns."""
    hs, vs = cells(30, 20, [180, 180, 180], [30, 500])
    runs = [run(f"line {i}", 32 + 180 * k, 52 + 12 * i) for k in range(3) for i in range(30)]
    runs += [run("RUN 12/3/2014", 32, 22), run("PAGE 1", 392, 22)]
    assert ruled_tables((hs, vs, []), runs) == []


def test_a_plots_axes_and_ticks_are_not_a_table() -> None:
    """GeoTopo-komprimiert.pdf p10: two axes with tick marks across them, numbers beside."""
    hs = [(160.0, 110.0, 400.0)] + [(y, 215.0, 219.0) for y in (85.0, 120.0, 200.0, 235.0)]
    vs = [(217.0, 70.0, 250.0)] + [(x, 158.0, 162.0) for x in (135.0, 176.0, 258.0, 299.0)]
    runs = [run(t, x, 163) for t, x in (("-4", 133), ("-2", 174), ("2", 256), ("4", 297))]
    runs += [run(t, 205, y - 4) for t, y in (("4", 85), ("2", 120), ("-2", 200))]
    assert ruled_tables((hs, vs, []), runs) == []


def test_a_drawn_grid_of_marks_is_a_figure_not_a_table() -> None:
    """GeoTopo-komprimiert.pdf p56: a lattice with a mark in each square."""
    hs, vs = cells(113, 400, [26] * 6, [26] * 6)
    runs = [run("*", 123 + 26 * k, 408 + 26 * r) for r in range(6) for k in range(6)]
    assert ruled_tables((hs, vs, []), runs) == []


def test_lines_under_a_plots_curves_are_not_a_table() -> None:
    """A chart's gridlines around its labels, with its curves drawn over them."""
    hs, vs = cells(100, 100, [60, 60, 60], [40, 40, 40])
    runs = [run(f"{k}{r}", 110 + 60 * k, 110 + 40 * r) for r in range(3) for k in range(3)]
    assert len(ruled_tables((hs, vs, []), runs)) == 1
    curve = [(3.0, 100.0 + 2 * i, 100.0 + i) for i in range(60)]  # 180 points of slanted ink
    assert ruled_tables((hs, vs, curve), runs) == []


def test_a_tables_box_stays_on_its_page_when_its_lines_run_past_the_edge() -> None:
    """A table whose lines are drawn past the page's edge (a bleed): its box is clipped."""
    hs, vs = cells(-20, 700, [316, 316], [40, 40, 40])
    runs = [run(f"cell {r}{k}", 10 + 316 * k, 710 + 40 * r) for r in range(3) for k in range(2)]
    pages = {1: runs}
    rules: dict[int, Rules] = {1: (hs, vs, [])}
    (block,) = build_blocks(pages, {1: (612.0, 792.0)}, rules)
    box = block.provenance.bbox
    assert block.block_type == "table" and box is not None
    assert 0 <= box[0] < box[2] <= 612 and 0 <= box[1] < box[3] <= 792
