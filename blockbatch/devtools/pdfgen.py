"""PDFs with a real text layer, made with fpdf2 (a dev dependency): the sample, the bench's
long report and the tests' corpus.

Deterministic: the same arguments give the same pages, text and layout (the file's
creation date is fixed), so tests can expect block counts and page numbers.
"""

from __future__ import annotations

import datetime as dt
import random

from fpdf import FPDF

from blockbatch.core.blocks import ParsedBlock

_FIXED_DATE = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
_HEADING_SIZES = {1: 20, 2: 16, 3: 13, 4: 12, 5: 12, 6: 12}
_WORDS = [
    "the",
    "service",
    "rotation",
    "incident",
    "pager",
    "escalation",
    "runbook",
    "owner",
    "review",
    "latency",
    "budget",
    "deploy",
    "rollback",
    "alert",
    "threshold",
    "customer",
    "impact",
    "timeline",
    "action",
    "item",
    "severity",
    "primary",
    "secondary",
    "handoff",
    "dashboard",
    "error",
    "rate",
    "capacity",
    "database",
    "queue",
    "worker",
]


class _Pdf(FPDF):
    def footer(self) -> None:
        self.set_y(-12)
        self.set_font("Helvetica", "", 9)
        self.cell(0, 6, str(self.page_no()), align="C")


def _new() -> _Pdf:
    pdf = _Pdf(format="A4")
    pdf.set_creation_date(_FIXED_DATE)
    pdf.set_auto_page_break(True, margin=18)
    pdf.set_margins(20, 18, 20)
    return pdf


def _latin1(text: str) -> str:
    # The PDF core fonts (no font file to ship) cover Latin-1; other characters become "?".
    return text.encode("latin-1", "replace").decode("latin-1")


def _write(pdf: _Pdf, kind: str, text: str, level: int = 1) -> None:
    text = _latin1(text)
    if kind == "heading":
        pdf.ln(3)
        pdf.set_font("Helvetica", "B", _HEADING_SIZES.get(level, 12))
        pdf.multi_cell(0, _HEADING_SIZES.get(level, 12) * 0.5, text, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(2)
    elif kind in ("code", "table"):
        pdf.set_font("Courier", "", 9)
        pdf.multi_cell(0, 4.5, text, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)
    elif kind == "list_item":
        pdf.set_font("Helvetica", "", 11)
        pdf.set_x(pdf.l_margin + 4)
        pdf.multi_cell(0, 5.5, "- " + text, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(1.5)
    else:
        pdf.set_font("Helvetica", "", 11)
        pdf.multi_cell(0, 5.5, text, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)


def blocks_pdf(blocks: list[ParsedBlock]) -> bytes:
    """Parsed blocks (of a markdown file, say) typeset as a PDF, in order."""
    pdf = _new()
    pdf.add_page()
    for block in blocks:
        level = block.metadata.get("level", 1) if block.block_type == "heading" else 1
        _write(pdf, block.block_type, block.block_content, level)
    return bytes(pdf.output())


def report_pdf(pages: int, seed: int = 0) -> bytes:
    """A report of ``pages`` pages: each a section heading, three paragraphs and a list."""
    rng = random.Random(seed)
    pdf = _new()

    def sentence() -> str:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 16))]
        return " ".join(words).capitalize() + "."

    for page in range(1, pages + 1):
        pdf.add_page()
        _write(pdf, "heading", f"Section {page}: {rng.choice(_WORDS).title()} review")
        for _ in range(3):
            _write(pdf, "paragraph", " ".join(sentence() for _ in range(5)))
        for _ in range(3):
            _write(pdf, "list_item", sentence())
    return bytes(pdf.output())
