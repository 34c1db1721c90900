"""A PDF's running headers, footers and page numbers, typed to be set aside.

Pure logic on :class:`~blockbatch.core.convert.pdf_lines.Run` values, called by
:func:`blockbatch.core.convert.pdf_layout.build_blocks` before the reading order.
"""

from __future__ import annotations

import math
import re

from blockbatch.core.convert.pdf_lines import Run, is_vertical

#: Share of the page height at the top and at the bottom where running headers and footers sit.
MARGIN_BAND = 0.15
#: Text repeated at the same place on at least this share of the pages (and on 2) is boilerplate
#: (low: a book's running header changes with each chapter).
REPEAT_SHARE = 0.1

_PAGE_NUMBER = re.compile(
    r"^(page\s+)?(\d{1,5}|[ivxlc]{1,7})(\s*(of|/)\s*\d{1,5})?$|^[-\u2013\u2014]\s*\d{1,5}\s*[-\u2013\u2014]$",
    re.IGNORECASE,
)


def classify_boilerplate(
    pages: dict[int, list[Run]], heights: dict[int, float], body: float
) -> None:
    """Type the runs that are running headers, footers or page numbers (in place).

    A header or footer is text less than half again the body's size, standing apart from
    the body in the top or bottom :data:`MARGIN_BAND` of the page, found (digits aside) at
    the same height on at least two pages and :data:`REPEAT_SHARE` of them, or on two
    pages in a row (a book's running header changes with each section). A page number is
    a number alone there, standing apart, or a number at the same place on two pages
    that goes up with the page (close above the body, as a journal's is).
    """
    seen: dict[str, list[tuple[int, float]]] = {}
    candidates: list[tuple[Run, str]] = []
    numbers: list[Run] = []
    for page, runs in pages.items():
        height = heights[page]
        flat = [r for r in runs if not is_vertical(r)]  # a margin stamp set vertically is not body
        for run in runs:
            if run.kind != "text":
                continue
            top = run.box[3] <= height * MARGIN_BAND
            bottom = run.box[1] >= height * (1 - MARGIN_BAND)
            if not (top or bottom) or run.size > body * 1.5:
                continue
            if _PAGE_NUMBER.match(run.text.strip()):
                if _apart(run, flat, top):
                    run.kind = "page_number"
                elif run.text.strip().isdigit():
                    numbers.append(run)
                continue
            if not _apart(run, flat, top):
                continue
            key = re.sub(r"\d+", "#", " ".join(run.text.lower().split()))
            seen.setdefault(key, []).append((page, run.cy))
            candidates.append((run, key))
    if len(pages) < 2:
        return
    need = max(2, math.ceil(REPEAT_SHARE * len(pages)))
    for run, key in candidates:
        near = {p for p, cy in seen[key] if abs(cy - run.cy) <= 8}
        if len(near) >= need or {run.page - 1, run.page + 1} & near:
            run.kind = "page_header" if run.cy < heights[run.page] / 2 else "page_footer"
    for run in numbers:
        offset = int(run.text) - run.page
        if any(
            other.page != run.page
            and int(other.text) - other.page == offset
            and abs(other.cy - run.cy) <= 8
            for other in numbers
        ):
            run.kind = "page_number"


def _apart(run: Run, runs: list[Run], top: bool) -> bool:
    """Whether ``run`` stands apart from the body (``runs``: the page's, without text set
    vertically): the nearest text on another line towards the middle of the page is at
    least one and a half of its heights away (a table row in the margin band is not)."""
    height = run.box[3] - run.box[1]
    if top:
        gaps = [r.box[1] - run.box[3] for r in runs if r.box[1] >= run.box[3] - 0.3 * height]
    else:
        gaps = [run.box[1] - r.box[3] for r in runs if r.box[3] <= run.box[1] + 0.3 * height]
    return not gaps or min(gaps) >= 1.5 * height
