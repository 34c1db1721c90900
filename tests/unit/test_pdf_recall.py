"""Words the page shows and a reader of the PDF's text could lose (issue 34): each test is
the pattern of a public file where the blocks had fewer words than a third PDF engine
(MuPDF) read (``bench/corpus.py``)."""

from __future__ import annotations

from fpdf import FPDF

from blockbatch.core.convert.pdf_lines import Run, clean, glue_touching
from blockbatch.core.ingest import parse_document


def spread_digits_pdf() -> bytes:
    """A row of a statistics table whose two narrow cells "3" and "0" are one string drawn
    with a wide character spacing (``(30) Tj`` with ``4.2 Tc``, as the FBI's NICS table is),
    and a spaced heading drawn the usual way."""
    pdf = FPDF(unit="pt", format="letter")
    pdf.add_page()
    pdf.set_font("Helvetica", size=6)
    pdf.set_xy(40, 100)
    pdf.cell(60, 8, "Guam")
    pdf.set_xy(100, 100)
    pdf.cell(20, 8, "12")
    pdf.set_char_spacing(24)
    pdf.set_xy(130, 100)
    pdf.cell(60, 8, "30")
    pdf.set_char_spacing(0)
    pdf.set_xy(200, 100)
    pdf.cell(20, 8, "171")
    pdf.set_font("Helvetica", size=14)
    pdf.set_char_spacing(2)
    pdf.set_xy(40, 40)
    pdf.cell(300, 16, "Background Checks")
    return bytes(pdf.output())


def test_digits_of_two_cells_drawn_as_one_spaced_string_are_two_words() -> None:
    text = "\n".join(b.block_content for b in parse_document(spread_digits_pdf(), "pdf"))
    words = text.replace("|", " ").split()
    assert "30" not in words  # the page shows a 3 and, a column further, a 0
    assert words[words.index("Guam") :] == ["Guam", "12", "3", "0", "171"]
    assert "Background Checks" in text  # letter-spaced words stay whole


def footnote_pdf() -> bytes:
    """A paragraph, then a footnote whose raised, smaller number touches its first word
    (the Federal Register's notes: "2The flight control system ..." to PDFium)."""
    pdf = FPDF(unit="pt", format="letter")
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    pdf.set_xy(72, 72)
    pdf.multi_cell(400, 13, "The proposal is found in the docket.")
    pdf.set_xy(72, 700)
    pdf.set_font("Helvetica", size=5)
    pdf.char_vpos = "SUP"
    pdf.write(10, "2")
    pdf.char_vpos = "LINE"
    pdf.set_font("Helvetica", size=8)
    pdf.write(10, "The flight control system")
    return bytes(pdf.output())


def test_a_footnotes_raised_number_is_apart_from_its_first_word() -> None:
    text = "\n".join(b.block_content for b in parse_document(footnote_pdf(), "pdf"))
    assert "2 The flight control system" in text


def test_a_fractions_parts_read_apart_are_one_fraction() -> None:
    assert clean("up to 1 \u20444 inch, 3\u2044 8 inch") == "up to 1\u20444 inch, 3\u20448 inch"


def marks_pdf() -> bytes:
    """Authors with their affiliations' raised marks against their names, a figure with its
    note's mark, a formula's lowered index, and a brace set in another font against the
    word before it, each piece drawn where it ends (layout-parser-paper-fast.pdf,
    google-doc-document.pdf)."""
    pdf = FPDF(unit="pt", format="letter")
    pdf.add_page()
    x = 40.0
    for text, font, size, rise in [
        ("Zejiang Shen", "Helvetica", 10, 0),
        ("1", "Helvetica", 7, 4),
        (", Ruochen Zhang", "Helvetica", 10, 0),
        ("2", "Helvetica", 7, 4),
        (" and 273.879.750", "Helvetica", 10, 0),
        ("1", "Helvetica", 7, 4),
        (" at {dell,carlson", "Helvetica", 10, 0),
        ("}@fas.harvard.edu", "Courier", 10, 0),
    ]:
        pdf.set_font(font, size=size)
        pdf.text(x, 100 - rise, text)
        x += pdf.get_string_width(text)
    return bytes(pdf.output())


def test_a_mark_set_against_its_word_stays_against_it_as_the_page_shows() -> None:
    """The other engines glue the mark to the word ("Shen1", "273.879.7501": another name,
    another number); read apart it was a word of its own ("Shen 1"). A raised or lowered
    digit is written raised or lowered (NFKC reads "Shen¹" as "Shen1")."""
    (block,) = parse_document(marks_pdf(), "pdf")
    text = block.block_content
    assert text == (
        "Zejiang Shen\u00b9, Ruochen Zhang\u00b2 and 273.879.750\u00b9 at "
        "{dell,carlson}@fas.harvard.edu"
    )


def run(text: str, x0: float, x1: float, top: float = 100.0, size: float = 10.0) -> Run:
    return Run(1, text, (x0, top, x1, top + 1.2 * size), size)


def test_runs_that_touch_are_one_word_and_a_mark_is_written_raised() -> None:
    """layout-parser-paper-fast.pdf: PDFium ends a run at the smaller mark and at a brace in
    another font; the page shows no space there ("Shen 1", "carlson }@fas" were read)."""
    runs = [
        run("Zejiang Shen", 40, 96),
        run("1", 96, 99.5, top=97, size=7),  # raised, smaller, against the name
        run("( ),", 103, 120),  # a space's width further: apart
        run("H", 130, 137),
        run("2", 137, 141, top=104, size=7),  # lowered: an index
        run("O and x", 141, 175),
        run("ab", 175, 183, top=97, size=7),  # raised letters: not a mark, kept apart
        run("}@fas.harvard.edu", 183, 250),
    ]
    assert [r.text for r in glue_touching(runs)] == [
        "Zejiang Shen\u00b9",
        "( ),",
        "H\u2082O and x",
        "ab}@fas.harvard.edu",
    ]


def list_pdf() -> bytes:
    pdf = FPDF(unit="pt", format="letter")
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    for i, line in enumerate(
        ["1. Open the valve.", "2. Close the door.", "- Wear gloves.", "(a) Sign the log."]
    ):
        pdf.set_xy(72, 72 + 30 * i)
        pdf.cell(300, 13, line)
    return bytes(pdf.output())


def test_a_numbered_items_number_is_in_its_text_a_bullet_is_not() -> None:
    """normal_4pages.pdf, multi_page.pdf: the page shows "1.", and a model answering about
    the blocks cites an item by it (the prompt gives only the type and the text); a bullet
    says nothing. Both stay in ``metadata["marker"]``."""
    blocks = parse_document(list_pdf(), "pdf")
    assert [(b.block_type, b.block_content, b.metadata.get("marker")) for b in blocks] == [
        ("list_item", "1. Open the valve.", "1."),
        ("list_item", "2. Close the door.", "2."),
        ("list_item", "Wear gloves.", "-"),
        ("paragraph", "(a) Sign the log.", None),
    ]


def index_pdf() -> bytes:
    """A letter reaching below the line ("y") and an index set smaller just under the line
    against it, read by PDFium as one word "y1" (GeoTopo p48's "γ1")."""
    pdf = FPDF(unit="pt", format="letter")
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    pdf.text(40, 100, "the path y")
    x = 40 + pdf.get_string_width("the path y")
    pdf.set_font("Helvetica", size=7)
    pdf.text(x, 100.5, "1")
    return bytes(pdf.output())


def test_an_index_under_a_letter_that_reaches_below_the_line_is_not_raised() -> None:
    """The mark's glyph starts above the letter's bottom, but its top is below the letter's:
    an index, not a note's mark ("γ¹" was read for the page's γ with its index 1)."""
    (block,) = parse_document(index_pdf(), "pdf")
    assert "\u00b9" not in block.block_content
    assert block.block_content.replace(" ", "").endswith("y1")
