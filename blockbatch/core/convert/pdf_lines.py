"""A PDF's text as runs and lines, and the clean text of a line or a paragraph.

Pure values and string rules (no PDFium, no layout): :class:`Run` is what
:mod:`blockbatch.core.convert.pdf` reads off a page, :class:`Line` a line of runs in reading
order (a right-to-left line from its right end), and :func:`clean` / :func:`join_lines` the
text without stray characters, hyphenation repaired. :mod:`~blockbatch.core.convert.pdf_layout`
builds blocks from them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from blockbatch.core.blocks import BBox

_STRAY = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff\ufffd]")
_SOFT_HYPHENS = "\ufffe\u00ad\x02"
#: Letters of the right-to-left scripts (Hebrew, Arabic, Syriac, Thaana, N'Ko, their
#: presentation forms).
_RTL = re.compile(r"[\u0590-\u07ff\u0860-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]")
_LATIN = r"[A-Za-z\u00c0-\u024f]"
#: A Latin word against a right-to-left one with nothing between them: PDFium reads an
#: embedded left-to-right word in its logical place but without the space the eye sees.
_SCRIPT_CHANGE = re.compile(rf"(?<={_LATIN})(?={_RTL.pattern})|(?<={_RTL.pattern})(?={_LATIN})")
#: A combining mark (Arabic harakat, combining accents) after a space, before a letter:
#: PDFium reads a mark drawn apart from its letter as a word of its own before the letter
#: it sits on ("أي ًضا" for "أيضًا"); it goes back after that letter.
_MARK = r"[\u0300-\u036f\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed]"
_MARKS = re.compile(rf"\s{_MARK}")
_LOOSE_MARK = re.compile(rf"\s+({_MARK}+)([^\W\d_])")
#: U+2044 FRACTION SLASH with space around it: it always joins the digits either side (a
#: fraction set with a raised numerator is read in two runs).
_FRACTION = re.compile(r"(?<=\d)\s*\u2044\s*(?=\d)")


@dataclass
class Run:
    """Characters on one line of a page without a wide gap between them.

    ``box`` is in points from the top-left of the page as it is shown (its /Rotate applied).
    ``kind`` is ``text``, ``off_page`` (outside the visible page) or ``invisible_text``.
    """

    page: int
    text: str
    box: BBox
    size: float
    bold: bool = False
    kind: str = "text"
    mono: bool = False  # set in a monospaced font (a code listing's)

    @property
    def cy(self) -> float:
        return (self.box[1] + self.box[3]) / 2

    @property
    def core(self) -> tuple[float, float]:
        """The middle of the run's height: loose boxes of tight lines overlap, their cores do not."""
        half = 0.3 * (self.box[3] - self.box[1])
        return (self.cy - half, self.cy + half)


@dataclass
class Line:
    runs: list[Run]
    column: int  # the leaf region it was read in, numbered in reading order
    text: str = ""
    box: BBox = (0.0, 0.0, 0.0, 0.0)
    size: float = 0.0  # of its longest run
    bold: bool = False  # every run is

    def __post_init__(self) -> None:
        if right_to_left(r.text for r in self.runs):
            self.runs.sort(key=lambda r: -r.box[2])
        else:
            self.runs.sort(key=lambda r: r.box[0])
        self.text = " ".join(r.text for r in self.runs)
        self.box = union(r.box for r in self.runs)
        self.size = max(self.runs, key=lambda r: len(r.text)).size
        self.bold = all(r.bold for r in self.runs)

    @property
    def page(self) -> int:
        return self.runs[0].page

    @property
    def cy(self) -> float:
        return (self.box[1] + self.box[3]) / 2


@dataclass
class Group:
    lines: list[Line] = field(default_factory=list)


def right_to_left(texts: Iterable[str]) -> bool:
    """Whether most letters of ``texts`` are of a right-to-left script (a line of them is
    read from its right end)."""
    text = "".join(texts)
    if not _RTL.search(text):  # most lines: no letter of those scripts at all
        return False
    rtl = len(_RTL.findall(text))
    return 2 * rtl > sum(1 for c in text if c.isalpha())


def union(boxes: Iterable[BBox]) -> BBox:
    b = list(boxes)
    return (min(x[0] for x in b), min(x[1] for x in b), max(x[2] for x in b), max(x[3] for x in b))


def clean(text: str) -> str:
    """Text without stray characters: soft hyphens, U+FFFE/U+FFFF/U+FFFD, C0 and C1 controls."""
    text = re.sub(r"[\ufffe\u00ad\x02](?=\w)", "", text)
    if _RTL.search(text):
        text = _SCRIPT_CHANGE.sub(" ", text)
    if _MARKS.search(text):
        text = _LOOSE_MARK.sub(r"\2\1", text)
    if "\u2044" in text:  # a fraction's numerator and denominator set apart ("1 ⁄4" is 1⁄4)
        text = _FRACTION.sub("\u2044", text)
    return " ".join(_STRAY.sub("", text).split())


def join_lines(lines: Iterable[str]) -> str:
    """Lines of one paragraph as one text, hyphenation repaired."""
    out = ""
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        broken_word = out[-1:] in ("-", "\u2010") and out[-2:-1].isalpha() and line[0].islower()
        if (out and out[-1] in _SOFT_HYPHENS) or broken_word:
            out = out[:-1] + line
        else:
            out += (" " if out else "") + line
    return clean(out)


def is_vertical(run: Run) -> bool:
    """Text set vertically (a margin stamp, a side label): taller than two lines, narrow."""
    if run.kind in ("vertical", "vertical_up"):
        return True
    height = run.box[3] - run.box[1]
    return height > 2.2 * run.size and run.box[2] - run.box[0] < 1.6 * run.size
