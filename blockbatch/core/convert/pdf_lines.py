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


#: Digits and signs set raised (a footnote's mark, an exponent) or lowered (an index) as
#: Unicode writes them: "Shen¹", "10⁻³", "H₂O". NFKC maps them back to plain digits.
_RAISED = str.maketrans("0123456789+-\u2212=()n", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁻⁼⁽⁾ⁿ")
_LOWERED = str.maketrans("0123456789+-\u2212=()", "₀₁₂₃₄₅₆₇₈₉₊₋₋₌₍₎")
_SCRIPT = re.compile(r"^[0-9+\-\u2212=()n,]+$")
#: Marks of a note that need no conversion: set against their word, they stay against it.
_NOTE_SIGNS = re.compile(r"^[*\u2217\u2020\u2021\u00a7\u00b6,]+$")
#: Two runs on one line this close (a share of the smaller's size) touch: no space between.
TOUCH_GAP = 0.1


def raise_digits(text: str) -> str:
    """Digits (and signs) written raised: "1" is "¹"."""
    return text.translate(_RAISED)


def glue_touching(runs: list[Run]) -> list[Run]:
    """``runs`` with each run that touches the one before it on its line joined to it
    without a space: a footnote's mark or an exponent set smaller against its word
    ("Shen" and a raised "1" is "Shen¹", as the page shows it: not "Shen 1", nor "Shen1",
    another name), an index ("H₂O"), or a brace in another font ("carlson}@fas"). PDFium
    ends a run at every change of font; its text has no space there, and the eye sees
    none. Only consecutive runs are looked at (a mark is drawn right after its word);
    a right-to-left run is left as it is."""
    if len(runs) < 2:
        return runs
    out = [runs[0]]
    for run in runs[1:]:
        prev = out[-1]
        joined = _touching(prev, run)
        if joined is None:
            out.append(run)
            continue
        out[-1] = Run(
            prev.page,
            prev.text + joined,
            union((prev.box, run.box)),
            prev.size if prev.size >= run.size else run.size,
            prev.bold,
            prev.kind,
            prev.mono,
        )
    return out


def _touching(prev: Run, run: Run) -> str | None:
    """``run``'s text as it joins ``prev`` with no space, or None when it does not touch."""
    if run.kind != "text" or prev.kind != "text" or run.page != prev.page:
        return None
    small = min(prev.size, run.size)
    gap = run.box[0] - prev.box[2]
    if not (-TOUCH_GAP * small <= gap <= TOUCH_GAP * small):
        return None
    height = prev.box[3] - prev.box[1]
    if not (prev.box[1] - 0.2 * height <= run.cy <= prev.box[3] + 0.2 * height):
        return None  # not on its line
    if _RTL.search(prev.text) or _RTL.search(run.text):
        return None
    text = run.text.strip()
    if not text or not prev.text.strip():
        return None
    if run.size < 0.8 * prev.size:  # set smaller: raised, lowered, or a small capital
        raised = run.box[3] < prev.box[3] - 0.15 * height
        lowered = run.box[1] > prev.box[1] + 0.15 * height
        if (raised or lowered) and _NOTE_SIGNS.match(text):
            return text
        if (raised or lowered) and _SCRIPT.match(text):
            if lowered:  # ("n" has no lowered form: kept apart)
                return text.translate(_LOWERED) if "n" not in text else None
            return text.translate(_RAISED)  # "1,2": two marks, "¹,²"
        if raised or lowered:
            return None  # a letter index ("x" and a raised "ab"): kept apart, as before
    return run.text


def is_vertical(run: Run) -> bool:
    """Text set vertically (a margin stamp, a side label): taller than two lines, narrow."""
    if run.kind in ("vertical", "vertical_up"):
        return True
    height = run.box[3] - run.box[1]
    return height > 2.2 * run.size and run.box[2] - run.box[0] < 1.6 * run.size
