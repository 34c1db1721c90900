"""Reading order and paragraphs of a PDF page, on runs laid out as real papers lay them out
(issue 34: paragraphs cut mid-sentence on multi-column papers). Each test reproduces one
cause found in the corpus (bench/corpus.py) and names the file it was found in.
"""

from __future__ import annotations

from blockbatch.core.convert.pdf_layout import build_blocks, reading_order
from blockbatch.core.convert.pdf_lines import Run

BODY = 10.0


def run(x0: float, y: float, x1: float, text: str, size: float = BODY) -> Run:
    return Run(1, text, (x0, y, x1, y + 1.1 * size), size)


def order(runs: list[Run]) -> list[str]:
    regions = reading_order(runs, BODY)
    return [r.text for region in regions for r in sorted(region, key=lambda r: r.box[1])]


def column(x0: float, x1: float, top: float, n: int, name: str, pitch: float = 13.0) -> list[Run]:
    return [run(x0, top + pitch * i, x1, f"{name} {i}") for i in range(n)]


def test_a_column_beside_a_figures_labels_is_read_before_them() -> None:
    """unstructured--multi-column.pdf p5: a plot's tick labels and legend beside the left
    column, on lines of their own; the column was read row by row with them."""
    text = column(72, 290, 225, 10, "text")
    labels = [run(326, 222 + 27 * i, 333, str(90 - 10 * i), 6.0) for i in range(5)]
    legend = [run(455, 298 + 10 * i, 494, f"# Train: {k}", 6.4) for i, k in enumerate("1 5 9")]
    flat = order([*labels, *legend, *text])
    assert flat[:10] == [r.text for r in text]


def test_a_column_beside_a_table_of_another_pitch_is_read_before_it() -> None:
    """unstructured--multi-column.pdf p6: a results table beside the left column."""
    text = column(72, 292, 107, 8, "text", pitch=13.5)
    table = [
        run(x, 103 + 10.5 * i, x + 20, f"r{i}c{j}", 9.0)
        for i in range(6)
        for j, x in enumerate((310, 380, 420, 460, 490))
    ]
    flat = order([*table, *text])
    assert flat[:8] == [r.text for r in text]


def test_a_tables_rows_with_long_first_cells_are_read_as_rows() -> None:
    """A table whose first cells are long (a description, then figures) shares its lines
    across the gap: it is read row by row, not all descriptions first."""
    rows = []
    for i in range(6):
        y = 100 + 13 * i
        rows += [run(72, y, 290, f"description of item {i}"), run(320, y, 340, f"{i}.5")]
    flat = order(rows)
    assert flat[:4] == ["description of item 0", "0.5", "description of item 1", "1.5"]


def test_a_column_with_a_formulas_short_pieces_is_still_a_column() -> None:
    """unstructured--multi-column.pdf p3: a display formula's many short pieces inside the
    right column; the columns were read together for the rows below the formula."""
    left = column(72, 290, 100, 12, "left")
    right = column(307, 526, 100, 4, "right")
    formula = [run(310 + 14 * i, 158 + 4 * (i % 4), 318 + 14 * i, f"f{i}", 7.0) for i in range(14)]
    right += column(307, 526, 190, 6, "more")
    flat = order([*left, *right, *formula])
    assert flat[:12] == [r.text for r in left]


def test_notes_set_between_a_listings_lines_are_read_in_turn() -> None:
    """shared-mime-info-spec.pdf p12: a listing whose notes sit on the right, in the gaps
    between its entries, are read where they stand, not after the listing."""
    runs = []
    for k in range(3):
        top = 100 + 90 * k
        runs += [run(120, top + 13 * i, 300, f"entry {k} field {i}") for i in range(4)]
        runs += [run(335, top + 52 + 11 * i, 385, f"note {k} line {i}", 8.0) for i in range(2)]
    flat = order(runs)
    assert flat[:6] == [*(f"entry 0 field {i}" for i in range(4)), "note 0 line 0", "note 0 line 1"]


def test_a_tables_columns_set_like_the_text_are_read_as_rows() -> None:
    """pdfplumber--senate-expenditures.pdf: a table whose cells are set at the text's size,
    its narrow first column not on the baselines of the wide one (cells centred in their
    rows), is still read row by row."""
    rows = []
    for i in range(6):
        y = 100 + 20 * i
        rows += [run(40, y + 4, 90, f"ID{i}"), run(130, y, 400, f"payee and purpose {i}")]
    flat = order(rows)
    assert flat[:4] == ["payee and purpose 0", "ID0", "payee and purpose 1", "ID1"] or flat[:4] == [
        "ID0",
        "payee and purpose 0",
        "ID1",
        "payee and purpose 1",
    ]


def paragraphs(runs: list[Run]) -> list[str]:
    blocks = build_blocks({1: runs}, {1: (595.0, 842.0)})
    return [b.content for b in blocks]


def test_a_paragraphs_indented_first_line_with_indices_below_goes_on() -> None:
    """unstructured--multi-column.pdf p3: "Let D = {...}" (an indented first line) with its
    indices on a line of their own below it; the paragraph was cut after them because the
    indices made the first line look like two lines of an indented block."""
    runs = [
        run(307, 60, 526, "the previous paragraph ends here."),
        run(318, 74, 526, "Let D = {q, p, p} be the", 11.0),
        run(398, 82, 491, "i i,1 i=1", 8.0),
        run(307, 91, 526, "training data that consists of m instances.", 11.0),
    ]
    runs += [run(307, 104 + 13 * i, 526, f"more text {i}", 11.0) for i in range(6)]
    assert paragraphs(runs)[1].startswith("Let D = {q, p, p} be the i i,1 i=1 training data")


def test_a_sentence_going_on_in_small_capitals_is_one_paragraph() -> None:
    """pdfplumber--federal-register-2020-17221.pdf p1: "should be sent to the person
    identified / in the FOR FURTHER INFORMATION / CONTACT section." (the middle line's small
    capitals make it a smaller size); the paragraph was cut at it."""
    runs = [run(399, 600 + 10 * i, 560, f"body text line {i} goes on", 9.0) for i in range(4)]
    runs += [
        run(399, 640, 430, "in the", 9.0),
        run(432, 640, 531, "FOR FURTHER INFORMATION", 7.3),
        run(399, 650, 560, "CONTACT section. Any commentary that", 9.0),
    ]
    assert paragraphs(runs) == [
        "body text line 0 goes on body text line 1 goes on body text line 2 goes on body text "
        "line 3 goes on in the FOR FURTHER INFORMATION CONTACT section. Any commentary that"
    ]


def test_a_footnotes_url_on_an_outdented_line_stays_in_the_footnote() -> None:
    """unstructured--multi-column.pdf p1: "1The code ... released at" then, outdented and in
    another font, "https://github.com/facebookresearch/DPR."."""
    runs = [
        run(88, 713, 159, "*Equal contribution", 9.0),
        run(85, 724, 290, "1The code and trained models have been released at", 9.0),
        run(72, 735, 224, "https://github.com/facebookresearch/DPR.", 9.0),
    ]
    assert paragraphs(runs)[-1].endswith("released at https://github.com/facebookresearch/DPR.")


def test_a_definitions_text_below_its_term_is_not_joined_to_it() -> None:
    """libtasn1.pdf p11: a function's signature, then its parameters indented below it in a
    smaller font, starting in lower case: they stay apart."""
    runs = [
        run(90, 198, 522, "int asn1_parser2tree (const char * file, asn1 node *", 12.0),
        run(140, 211, 319, "definitions, char * error_desc)", 12.0),
        run(119, 225, 481, "file: specify the path of the file with the declarations.", 10.9),
    ]
    assert len(paragraphs(runs)) == 2


def test_footnotes_at_a_columns_foot_wait_for_the_paragraph_they_cut() -> None:
    """pdfplumber--federal-register-2020-17221.pdf p3: the left column's paragraph goes on
    at the top of the right column, below its footnotes (set smaller, at the column's
    foot); note 12 itself goes on at the foot of the right column. The paragraph was cut by
    the notes, and note 12 from its end."""
    runs = [run(45, 500 + 10 * i, 200, f"body left {i} and so", 9.0) for i in range(12)]
    runs += [
        run(45, 640, 200, "12The magnitude of the command varies", 7.0),
        run(45, 648, 200, "according to parameters such as the", 7.0),
    ]
    runs += [run(222, 500 + 10 * i, 380, f"body right {i} and so", 9.0) for i in range(12)]
    runs[-1] = run(222, 610, 380, "the paragraph ends here.", 9.0)
    runs += [
        run(222, 640, 380, "altitude and airspeed of the airplane.", 7.0),
        run(229, 648, 380, "13More than 10 degrees for 10 seconds.", 7.0),
    ]
    blocks = paragraphs(runs)
    assert blocks[0].startswith("body left 0") and blocks[0].endswith("the paragraph ends here.")
    assert "body right 0" in blocks[0]
    assert blocks[1] == (
        "12The magnitude of the command varies according to parameters such as the "
        "altitude and airspeed of the airplane."
    )
    assert blocks[2] == "13More than 10 degrees for 10 seconds."


def test_a_right_to_left_lines_runs_are_read_from_its_right_end() -> None:
    """docling--right_to_left_01.pdf: an Arabic line cut in two runs where an embedded
    Latin word ("Python") sits; the left run was read first, the line's end before its start."""
    start = Run(1, "تعتبر البرمجة بلغة R و", (430, 100, 520, 111), BODY)
    end = Run(1, "Python من األدوات القوية", (300, 100, 415, 111), BODY)
    blocks = build_blocks({1: [end, start]}, {1: (600.0, 800.0)})
    assert [b.content for b in blocks] == ["تعتبر البرمجة بلغة R و Python من األدوات القوية"]


def test_a_left_to_right_line_with_an_arabic_word_is_still_read_from_the_left() -> None:
    left = Run(1, "The word", (72, 100, 140, 111), BODY)
    right = Run(1, "حبيبي means darling", (160, 100, 300, 111), BODY)
    blocks = build_blocks({1: [right, left]}, {1: (600.0, 800.0)})
    assert [b.content for b in blocks] == ["The word حبيبي means darling"]
