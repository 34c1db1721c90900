"""Running headers, footers and page numbers of real files set aside (issue 34: "running
headers and footers set aside on every file that has them"), on runs laid out as the
corpus's files lay them out (bench/corpus.py names each file)."""

from __future__ import annotations

from blockbatch.core.blocks import is_set_aside
from blockbatch.core.convert.pdf_layout import build_blocks
from blockbatch.core.convert.pdf_lines import Run

BODY = 9.0
SIZE = (612.0, 792.0)


def body(page: int, top: float = 60.0, lines: int = 40) -> list[Run]:
    return [
        Run(page, f"Body text of page {page} line {i} goes on here.", (72, y, 540, y + 10), BODY)
        for i, y in enumerate(top + 12 * k for k in range(lines))
    ]


def types(pages: dict[int, list[Run]]) -> dict[str, str]:
    return {b.content: b.block_type for b in build_blocks(pages, dict.fromkeys(pages, SIZE))}


def test_a_page_number_set_close_above_the_body_is_a_page_number() -> None:
    """federal-register-2020-17221.pdf: the issue's page number (bold, 11 points) sits 15
    points above the first line, less than one and a half of its heights: it was a
    heading on 8 of 15 pages, sent to the model."""
    pages = {
        p: [Run(p, str(47697 + p), (45, 34, 76, 45), 11.0, bold=True), *body(p)]
        for p in range(1, 4)
    }
    got = types(pages)
    assert [got[str(47697 + p)] for p in range(1, 4)] == ["page_number"] * 3


def test_numbers_at_one_place_that_do_not_follow_the_pages_are_not_page_numbers() -> None:
    """A table's first cells at the top of two pages are close above the rest: not page
    numbers, as they do not go up with the page."""
    pages = {p: [Run(p, str(7 * p), (45, 34, 60, 45), 11.0), *body(p)] for p in (1, 2)}
    got = types(pages)
    assert not any(is_set_aside(got[str(7 * p)]) for p in (1, 2))


def test_a_sections_running_header_on_two_pages_in_a_row_of_a_long_book() -> None:
    """GeoTopo-komprimiert.pdf (117 pages): each section's name heads its pages ("1.4.
    Stetigkeit" on pages 13 and 14); a header on fewer than a tenth of the pages was
    typed a heading, 100 of the book's 160 "headings"."""

    def name(k: int) -> str:  # digits aside, each section's name is its own
        return f"1.{k}. Section {chr(96 + k) * 3}"

    pages = {
        p: [Run(p, name((p + 1) // 2), (300, 30, 540, 40), BODY), *body(p)] for p in range(1, 41)
    }
    got = types(pages)
    assert {got[name(k)] for k in range(1, 21)} == {"page_header"}


def test_a_footer_beside_a_margin_stamp_set_vertically_is_a_footer() -> None:
    """federal-register-2020-17221.pdf: the printer's slug ("VerDate Sep<11>2014 ... Frm
    00001") at the foot of every page, beside a vertical stamp in the margin; the stamp's
    last word counted as body text just above the slug, which was sent on all 15 pages."""
    pages = {
        p: [
            *body(p),
            Run(p, f"VerDate 2014 Frm {p:05d}", (25, 767, 450, 773), 6.5),
            Run(p, "stamp on DSKJLSW7X2PROD", (18, 709, 23, 764), 5.0, kind="vertical_up"),
        ]
        for p in range(1, 4)
    }
    got = types(pages)
    assert {got[f"VerDate 2014 Frm {p:05d}"] for p in range(1, 4)} == {"page_footer"}
