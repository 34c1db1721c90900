"""Words the page shows and a reader of the PDF's text could lose (issue 34): each test is
the pattern of a public file where the blocks had fewer words than a third PDF engine
(MuPDF) read (``bench/corpus.py``)."""

from __future__ import annotations

from fpdf import FPDF

from blockbatch.core.convert.pdf_lines import clean
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
