"""Tables drawn with lines (ruled tables): the page's ruling lines into grids, and the
text in each grid's cells.

Pure logic on line segments and :class:`~blockbatch.core.convert.pdf_lines.Run` values
(:mod:`blockbatch.core.convert.pdf` reads the segments off the page's path objects, in the
same shown coordinates as the runs). A table found by its aligned columns
(:func:`blockbatch.core.convert.pdf_layout.find_tables`) needs a gap wider than a space
between its cells; a ruled table's cells often touch, so the lines tell them apart, as
they do the reader:

- horizontal and vertical segments (strokes, and the edges of thin or filled rectangles)
  are snapped to :data:`SNAP` points and joined where they meet or overlap;
- segments that cross or touch form a grid; a grid with at least three vertical and three
  horizontal lines (two columns, two rows) is a table when text fills at least
  :data:`MIN_FILL` of its cells (a chart's gridlines hold no text);
- a cell whose vertical line is missing on a row is merged with the cell before it (a
  heading over two columns, "No results" across the table); rows and columns without text
  are dropped.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from blockbatch.core.blocks import BBox
from blockbatch.core.convert.pdf_lines import Run, glue_touching, join_lines, union

#: Segments this close (points) are on one line; ends this close meet.
SNAP = 2.0
#: A segment shorter than this (points) is not a ruling line (a glyph's stroke, a tick).
MIN_LENGTH = 4.0
#: A line this short (points) whose middle is on a line across it is a plot's tick mark.
TICK = 12.0
#: At least this share of a grid's cells hold text (a chart's gridlines hold none).
MIN_FILL = 0.3

#: A table's cells hold a few lines each: when the median cell that holds text holds more,
#: the lines frame a page's columns (a layout), not a table.
MAX_CELL_LINES = 6
#: Slanted lines and curves inside a grid longer than this share of its width and height
#: together: a figure (a plot's axes and gridlines, a diagram), not a table. A rounded
#: table's corners stay well below it.
FIGURE_INK = 0.25

#: A horizontal segment ``(y, x0, x1)`` or a vertical one ``(x, y0, y1)``; in a page's
#: drawing, a slanted line's or a curve's piece ``(length, x, y)`` (its middle).
Segment = tuple[float, float, float]
#: A page's horizontal lines, vertical lines and drawing.
Rules = tuple[list[Segment], list[Segment], list[Segment]]


@dataclass
class RuledTable:
    box: BBox
    rows: list[list[str]]
    runs: list[Run]  # the runs its cells hold (taken out of the page's flow)


def _join(segments: list[Segment]) -> list[Segment]:
    """Segments on one line (within :data:`SNAP`) that overlap or meet, as one."""
    out: list[list[float]] = []
    for pos, a, b in sorted(segments):
        for seg in reversed(out[-8:]):  # the lines just before, at about this position
            if abs(seg[0] - pos) <= SNAP and a <= seg[2] + SNAP and seg[1] <= b + SNAP:
                seg[1], seg[2] = min(seg[1], a), max(seg[2], b)
                break
        else:
            out.append([pos, a, b])
    return [(p, a, b) for p, a, b in out if b - a >= MIN_LENGTH]


def _no_ticks(lines: list[Segment], across: list[Segment]) -> list[Segment]:
    """``lines`` without a plot's tick marks: short lines whose middle sits on a line
    across them (an axis); a table's lines end at the lines they meet."""
    out = []
    for pos, a, b in lines:
        middle = (a + b) / 2
        if b - a <= TICK and any(
            abs(p - middle) <= SNAP and c - SNAP <= pos <= d + SNAP for p, c, d in across
        ):
            continue
        out.append((pos, a, b))
    return out


def _positions(values: list[float]) -> list[float]:
    """Sorted positions, those within :data:`SNAP` of the one before merged."""
    out: list[float] = []
    for v in sorted(values):
        if out and v - out[-1] <= SNAP:
            continue
        out.append(v)
    return out


def grids(
    horizontal: list[Segment], vertical: list[Segment]
) -> list[tuple[list[Segment], list[Segment]]]:
    """The ruling lines as grids: groups of horizontal and vertical lines that cross or
    touch one another, each with at least three of each."""
    hs, vs = _join(horizontal), _join(vertical)
    hs, vs = _no_ticks(hs, vs), _no_ticks(vs, hs)
    if len(hs) < 3 or len(vs) < 3:
        return []
    parent = list(range(len(hs) + len(vs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, (y, x0, x1) in enumerate(hs):
        for j, (x, y0, y1) in enumerate(vs):
            if x0 - SNAP <= x <= x1 + SNAP and y0 - SNAP <= y <= y1 + SNAP:
                parent[find(i)] = find(len(hs) + j)
    groups: dict[int, tuple[list[Segment], list[Segment]]] = {}
    for i, seg in enumerate(hs):
        groups.setdefault(find(i), ([], []))[0].append(seg)
    for j, seg in enumerate(vs):
        groups.setdefault(find(len(hs) + j), ([], []))[1].append(seg)
    return [
        (h, v)
        for h, v in groups.values()
        if len(_positions([s[0] for s in h])) >= 3 and len(_positions([s[0] for s in v])) >= 3
    ]


def _covers(lines: list[Segment], pos: float, at: float) -> bool:
    """Whether a line of ``lines`` runs at ``pos`` across ``at``."""
    return any(abs(p - pos) <= SNAP and a - SNAP <= at <= b + SNAP for p, a, b in lines)


def ruled_tables(rules: Rules, runs: list[Run]) -> list[RuledTable]:
    """The tables the ruling lines draw around ``runs`` (one page's), top to bottom."""
    horizontal, vertical, drawing = rules
    out: list[RuledTable] = []
    free = [r for r in runs if r.kind == "text"]
    for hs, vs in grids(horizontal, vertical):
        x0, x1 = min(s[1] for s in hs), max(s[2] for s in hs)
        y0, y1 = min(s[1] for s in vs), max(s[2] for s in vs)
        ink = sum(n for n, x, y in drawing if x0 <= x <= x1 and y0 <= y <= y1)
        if ink > FIGURE_INK * ((x1 - x0) + (y1 - y0)):
            continue  # a plot or a diagram drawn over the lines
        table = _table(hs, vs, free)
        if table is not None:
            out.append(table)
            taken = {id(r) for r in table.runs}
            free = [r for r in free if id(r) not in taken]
    return sorted(out, key=lambda t: t.box[1])


def _table(hs: list[Segment], vs: list[Segment], runs: list[Run]) -> RuledTable | None:
    ys = _positions([s[0] for s in hs])
    xs = _positions([s[0] for s in vs])
    box = (xs[0], ys[0], xs[-1], ys[-1])
    inside = [
        r
        for r in runs
        if box[0] <= (r.box[0] + r.box[2]) / 2 <= box[2] and box[1] <= r.cy <= box[3]
    ]
    if not inside:
        return None
    crossed = sum(1 for r in inside if _crossed(r, hs, vs))
    if 3 * crossed > len(inside):
        return None  # lines through the text: a plot's gridlines through its tick labels
    cells: dict[tuple[int, int], list[Run]] = {}
    for run in (piece for r in inside for piece in _split(r, vs)):
        row = min(bisect.bisect_right(ys, run.cy) - 1, len(ys) - 2)
        col = min(bisect.bisect_right(xs, (run.box[0] + run.box[2]) / 2) - 1, len(xs) - 2)
        middle = (ys[row] + ys[row + 1]) / 2
        while col > 0 and not _covers(vs, xs[col], middle):
            col -= 1  # no line between this cell and the one before on this row: merged
        cells.setdefault((row, col), []).append(run)
    spans = 0
    for row in range(len(ys) - 1):
        middle = (ys[row] + ys[row + 1]) / 2
        spans += 1 + sum(1 for x in xs[1:-1] if _covers(vs, x, middle))
    if len(cells) < MIN_FILL * spans:
        return None  # mostly empty: a chart's gridlines, a form's boxes
    depth = sorted(_line_count(runs) for runs in cells.values())
    if depth[len(depth) // 2] > MAX_CELL_LINES:
        return None  # columns of text framed by lines: a page's layout
    used_rows = sorted({r for r, _ in cells})
    used_cols = sorted({c for _, c in cells})
    if len(used_rows) < 2 or len(used_cols) < 2:
        return None  # one row or one column of text: a box around a paragraph, a list
    rows = [[_cell_text(cells.get((r, c), [])) for c in used_cols] for r in used_rows]
    if not any(ch.isalnum() for row in rows for cell in row for ch in cell):
        return None  # marks in a drawn grid (a figure's), no words nor figures
    return RuledTable(box, rows, inside)


def _crossed(run: Run, hs: list[Segment], vs: list[Segment]) -> bool:
    """Whether a line runs through ``run``'s glyphs: a horizontal line through its middle,
    or a vertical one through a run without a space (a table's lines run between cells)."""
    lo, hi = run.core
    cx = (run.box[0] + run.box[2]) / 2
    if any(lo < y < hi and a <= cx <= b for y, a, b in hs):
        return True
    if " " in run.text:
        return False
    return any(run.box[0] + SNAP < x < run.box[2] - SNAP and a <= run.cy <= b for x, a, b in vs)


def _split(run: Run, vs: list[Segment]) -> list[Run]:
    """``run`` cut at each vertical line that crosses it (PDFium reads two cells whose
    texts come close as one run: "Huntington Beach 65"), at the space nearest the line,
    each piece's box estimated from its share of the characters."""
    x0, x1 = run.box[0], run.box[2]
    cross = sorted(
        x for x, a, b in vs if x0 + SNAP < x < x1 - SNAP and a - SNAP <= run.cy <= b + SNAP
    )
    if not cross or " " not in run.text:
        return [run]
    text = run.text
    per_char = (x1 - x0) / len(text)
    cuts: list[int] = []
    for x in cross:
        spaces = [i for i, ch in enumerate(text) if ch == " " and (not cuts or i > cuts[-1])]
        if spaces:
            cuts.append(min(spaces, key=lambda i: abs(x0 + per_char * (i + 0.5) - x)))
    pieces = []
    begin = 0
    for end in [*cuts, len(text)]:
        piece = text[begin:end].strip()
        if piece:
            left, right = x0 + per_char * begin, x0 + per_char * end
            box = (left, run.box[1], right, run.box[3])
            pieces.append(Run(run.page, piece, box, run.size, run.bold, run.kind, run.mono))
        begin = end + 1
    return pieces


def _line_count(runs: list[Run]) -> int:
    """How many lines ``runs`` are set on (their middles a line's height apart)."""
    count, last = 0, None
    for run in sorted(runs, key=lambda r: r.cy):
        if last is None or run.cy - last > 0.5 * max(run.size, 1.0):
            count += 1
            last = run.cy
    return count


def _cell_text(runs: list[Run]) -> str:
    """A cell's runs as one text: line by line, each left to right."""
    if not runs:
        return ""
    ordered = sorted(runs, key=lambda r: (r.cy, r.box[0]))
    lines: list[list[Run]] = []
    for run in ordered:
        last = lines[-1][-1] if lines else None
        if last is not None and abs(run.cy - last.cy) <= 0.5 * max(run.size, last.size, 1.0):
            lines[-1].append(run)
        else:
            lines.append([run])
    texts = []
    for line in lines:
        line.sort(key=lambda r: r.box[0])
        texts.append(" ".join(r.text for r in glue_touching(line)))
    return join_lines(texts)


def table_box(table: RuledTable) -> BBox:
    return union([table.box, *(r.box for r in table.runs)])
