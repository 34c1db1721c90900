"""Tables in PDFs typed ``table`` so ``--table-rows`` splits them as it does a DOCX's or an
HTML page's (issue 34: a PDF's table was paragraphs of rows, whatever the option said)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fpdf import FPDF

from blockbatch.core.blocks import ConvertOptions
from blockbatch.core.convert.pdf_layout import build_blocks
from blockbatch.core.convert.pdf_lines import Run
from blockbatch.core.ingest import parse_document

BODY = 10.0
SIZE = (612.0, 792.0)

COUNTRIES = [
    ("Country", "Capital", "Population"),
    ("Austria", "Vienna", "8.9"),
    ("Belgium", "Brussels", "11.5"),
    ("Denmark", "Copenhagen", "5.8"),
]


def table_pdf() -> bytes:
    """A paragraph, a table set in aligned columns (no rules), and a paragraph."""
    pdf = FPDF(unit="pt", format="letter")
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    pdf.set_xy(72, 72)
    pdf.multi_cell(400, 13, "The table below gives three countries of the union.")
    for i, row in enumerate(COUNTRIES):
        for x, cell in zip((72, 200, 330), row, strict=True):
            pdf.set_xy(x, 110 + 14 * i)
            pdf.cell(100, 12, cell)
    pdf.set_xy(72, 200)
    pdf.multi_cell(400, 13, "The figures are for the year 2020.")
    return bytes(pdf.output())


def test_an_aligned_table_is_one_table_block_with_its_rows() -> None:
    blocks = parse_document(table_pdf(), "pdf")
    kinds = [b.block_type for b in blocks]
    assert kinds == ["paragraph", "table", "paragraph"]
    table = blocks[1]
    assert table.block_content.split("\n") == ["| " + " | ".join(row) + " |" for row in COUNTRIES]
    where = table.provenance
    assert where is not None and where.page == 1 and where.bbox is not None


def test_table_rows_gives_one_block_per_row_with_the_header_as_context() -> None:
    blocks = parse_document(table_pdf(), "pdf", options=ConvertOptions(table_rows=True))
    rows = [b for b in blocks if b.block_type == "table_row"]
    assert [b.block_content for b in rows] == [
        "Country: Austria\nCapital: Vienna\nPopulation: 8.9",
        "Country: Belgium\nCapital: Brussels\nPopulation: 11.5",
        "Country: Denmark\nCapital: Copenhagen\nPopulation: 5.8",
    ]
    assert all(b.provenance and b.provenance.bbox for b in rows)  # the table's box


def lines(
    rows: list[list[tuple[float, str]]], size: float = BODY, pitch: float = 13.0, top: float = 100
) -> list[Run]:
    return [
        Run(1, text, (x, top + pitch * i, x + 5.5 * len(text), top + pitch * i + 1.1 * size), size)
        for i, row in enumerate(rows)
        for x, text in row
    ]


def kinds(runs: list[Run]) -> list[str]:
    return [b.block_type for b in build_blocks({1: runs}, {1: SIZE})]


def test_a_cell_wrapping_onto_a_line_of_its_own_stays_in_its_row() -> None:
    """senate-expenditures.pdf: a description wraps below its row."""
    runs = lines(
        [
            [(72, "Date"), (150, "Description"), (400, "Amount")],
            [(72, "05/03"), (150, "Airfare for E Johnson"), (400, "903.90")],
            [(150, "and return")],
            [(72, "05/24"), (150, "Train fare"), (400, "553.30")],
        ]
    )
    blocks = build_blocks({1: runs}, {1: SIZE})
    assert [b.block_type for b in blocks] == ["table"]
    assert blocks[0].metadata["cells"][1] == ["05/03", "Airfare for E Johnson and return", "903.90"]


@pytest.mark.parametrize(
    "markers", [["\u2022"] * 4, ["1.", "2.", "3.", "4."], ["(i)", "(ii)", "(iii)", "(iv)"]]
)
def test_a_list_with_its_markers_apart_is_not_a_table(markers: list[str]) -> None:
    """GeoTopo-komprimiert.pdf p60: a proof's points (i), (ii), (iii) were a table."""
    runs = lines([[(72, m), (100, f"step {i}")] for i, m in enumerate(markers)])
    assert "table" not in kinds(runs)


def test_numbered_lines_of_a_transcript_are_not_a_table() -> None:
    """scotus-transcript-p1.pdf: each line's number in the margin, then its text."""
    runs = lines(
        [[(40, str(i)), (72, f"LINE {i} OF THE TRANSCRIPT"), (300, ":")] for i in range(1, 6)]
    )
    assert "table" not in kinds(runs)


def test_a_formulas_symbols_and_indices_are_not_a_table() -> None:
    """GeoTopo-komprimiert.pdf: a display formula's pieces, its indices set small below."""
    runs = []
    for k in range(3):
        top = 100 + 30 * k
        runs += lines([[(100, f"F{k}(u,v) ="), (180, "r cos u"), (260, "r sin u")]], top=top)
        runs += lines([[(185, "0"), (265, "1")]], size=6.0, top=top + 8)
    assert "table" not in kinds(runs)


def test_prose_in_two_columns_read_across_is_not_a_table() -> None:
    left = "the text of the left column goes on"
    right = "and the right column has its own"
    runs = lines([[(72, left), (320, right)] for _ in range(6)])
    assert "table" not in kinds(runs)


def test_code_whose_words_line_up_is_not_a_table() -> None:
    """samples/handbook.pdf: a SQL listing in Courier ("FROM ledger.postings", "WHERE
    created_at > ...") has its keywords and their operands in two columns; it was a table
    cutting the listing in two."""
    rows = [
        ("SELECT", "count(*)"),
        ("FROM", "ledger.postings"),
        ("WHERE", "x > 1"),
        ("LIMIT", "60;"),
    ]
    runs = [
        Run(1, text, (x, 100 + 13 * i, x + 6 * len(text), 111 + 13 * i), BODY, mono=True)
        for i, row in enumerate(rows)
        for x, text in zip((72, 130), row, strict=True)
    ]
    assert "table" not in kinds(runs)
    # the same words in a proportional font, their first column not SQL's keywords: a table
    plain = [
        replace(r, mono=False, text=f"{r.text.lower()}_n" if r.box[0] == 72 else r.text)
        for r in runs
    ]
    assert "table" in kinds(plain)


def test_a_display_formula_with_a_tall_bracket_is_not_a_table() -> None:
    """GeoTopo-komprimiert.pdf p34: a Jacobian matrix, "JF (u, v) =" then the pieces of its
    parentheses (U+F8EB ... U+F8F8 from TeX's extension font) around its entries."""
    runs = lines(
        [
            [(100, "\uf8eb"), (180, "r(v) cos u"), (260, "r0"), (330, "\uf8f6")],
            [
                (40, "JF (u, v) ="),
                (100, "\uf8ec"),
                (180, "r(v) sin u"),
                (260, "r1"),
                (330, "\uf8f7"),
            ],
            [(100, "\uf8ed"), (180, "0"), (260, "1"), (330, "\uf8f8")],
        ]
    )
    assert "table" not in kinds(runs)


def test_a_sql_listing_in_a_proportional_font_is_not_a_table() -> None:
    """redp5110_sampled.pdf p13: "CREATE MASK", "ON", "FOR COLUMN" set before their operands
    in a proportional font (no monospace to tell the listing)."""
    runs = lines(
        [
            [(72, "CREATE MASK"), (180, "HR_SCHEMA.MASK_TAX_ID_ON_EMPLOYEES")],
            [(72, "ON"), (180, "HR_SCHEMA.EMPLOYEES AS EMPLOYEES")],
            [(72, "FOR COLUMN"), (180, "TAX_ID")],
            [(72, "RETURN"), (180, "TAX_ID;")],
        ]
    )
    assert "table" not in kinds(runs)


def test_a_table_whose_first_column_has_some_upper_case_names_stays_a_table() -> None:
    """redp5110_sampled.pdf p8: a catalog view's columns (USAGE, ...) are a table, though
    one of its names (SET) is a SQL keyword."""
    runs = lines(
        [
            [(72, "FUNCTION"), (200, "Varchar"), (320, "The function")],
            [(72, "USAGE"), (200, "Varchar"), (320, "Its setting")],
            [(72, "SET"), (200, "Integer"), (320, "The set")],
            [(72, "TYPE"), (200, "Varchar"), (320, "Its type")],
        ]
    )
    assert kinds(runs) == ["table"]


def test_two_figures_captions_side_by_side_are_read_one_figure_after_the_other() -> None:
    """GeoTopo-komprimiert.pdf p48 (its runs as read): two figures' labels ("a", "b", "γ2")
    and their captions "(a) ..." and "(b) ..." side by side, a gutter narrower than a space
    apart, were a table of 4 rows read across both."""
    runs = [
        Run(1, text, box, size)
        for text, box, size in [
            ("a", (190, 249, 196, 260), 10.9),
            ("b", (294, 250, 298, 261), 10.9),
            ("γ2", (211, 270, 221, 282), 10.9),
            ("(a) γ1", (182, 289, 205, 298), 9.0),
            ("und", (212, 290, 228, 298), 9.1),
            ("γ2", (234, 290, 242, 298), 9.0),
            ("sind homotop,", (249, 290, 310, 298), 9.1),
            ("da man sie zueinander ver\ufffe", (198, 301, 311, 309), 9.0),
            ("schieben kann.", (198, 312, 261, 320), 9.0),
            ("a", (327, 249, 333, 260), 10.9),
            ("b", (431, 250, 435, 261), 10.9),
            ("γ2", (348, 270, 358, 282), 10.9),
            ("(b) γ1", (319, 289, 343, 298), 9.0),
            ("und", (347, 290, 363, 298), 9.1),
            ("γ2", (367, 290, 375, 298), 9.0),
            ("sind wegen dem", (379, 290, 446, 298), 9.1),
            ("Hindernis nicht homotop.", (335, 301, 438, 309), 9.0),
        ]
    ]
    body = "Sei X ein topologischer Raum und a, b Punkte von X, dann heissen zwei Wege"
    text = [Run(1, body, (90, 400 + 14 * i, 526, 411 + 14 * i), 10.9) for i in range(8)]
    blocks = build_blocks({1: runs + text}, {1: SIZE})[:2]
    assert [(b.block_type, b.content) for b in blocks] == [
        ("paragraph", "a b γ2 (a) γ1 und γ2 sind homotop, da man sie zueinander verschieben kann."),
        ("paragraph", "a b γ2 (b) γ1 und γ2 sind wegen dem Hindernis nicht homotop."),
    ]


def test_a_tables_header_row_labelled_in_turn_stays_a_table() -> None:
    """A form's table whose columns are labelled "(a) Description", "(b) Date": its rows
    below are cells, not a figure's labels."""
    runs = lines(
        [
            [(72, "(a) Description"), (250, "(b) Date"), (400, "(c) Amount")],
            [(72, "Airfare"), (250, "05/03"), (400, "903.90")],
            [(72, "Train fare"), (250, "05/24"), (400, "553.30")],
        ]
    )
    assert kinds(runs) == ["table"]
