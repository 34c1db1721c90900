"""Layout of a PDF's text: runs of characters into lines, columns, paragraphs and headings.

Pure logic on :class:`Run` values (no PDFium here; :mod:`blockbatch.core.convert.pdf` reads
them), so each rule is tested on its own:

- **Reading order** by recursive XY-cut: a page region is split at a vertical gutter that
  runs its whole height when the text on both sides reads as prose (lines at least six body
  sizes long, not a table's cells), or on one side when the other side's runs sit on lines
  of their own (a figure's labels, or a table, beside a column of text), left before right;
  otherwise at the horizontal gaps between its rows, top to bottom, where consecutive rows that share a gutter are kept together (so a title above
  two columns is read first, then the left column, then the right one).
- **Paragraphs** continue across lines, and across a column or page break when the text
  before the break does not end a sentence. A new one starts at wider spacing than the
  document's usual line pitch, a change of font size or weight, an indented first line, a
  list marker, or after a short line that ends a sentence; but never at a line that goes
  on with the sentence in lower case at the usual pitch (small capitals, a URL's font).
  Hyphenation is repaired ("Ex-" + "isting" is "Existing"; PDFium's U+FFFE soft hyphen is
  removed) and no control character is left.
- **Headings**: text set larger than the body (its most common size, by characters), the
  larger the higher the level; short bold lines, and "1 Background" / "Abstract" style lines
  in bold, at the level below the sized ones.
- **Boilerplate**, kept but typed to be set aside (:data:`blockbatch.core.blocks.SET_ASIDE_TYPES`):
  text repeated in the top or bottom margin of several pages at the same place
  (``page_header`` / ``page_footer``), a page number in the margin (``page_number``), text off
  the visible page (``off_page``, its box clipped to the page) and invisible text
  (``invisible_text``, PDF text render mode 3). Text set vertically (a margin stamp) is a
  block of its own per page, outside the flow.

A block's box covers its lines in its first column (or page); when a paragraph continues in
another column or page, ``metadata["parts"]`` lists every part as ``[page, x0, y0, x1, y1]``,
so no box ever spans two columns.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter
from typing import Any

from blockbatch.core.blocks import BBox, RawBlock, TextBuilder
from blockbatch.core.convert.pdf_boilerplate import classify_boilerplate
from blockbatch.core.convert.pdf_lines import (
    Line,
    Run,
    clean,
    glue_touching,
    is_vertical,
    join_lines,
    union,
)
from blockbatch.core.convert.pdf_rules import RuledTable, Rules, ruled_tables, table_box
from blockbatch.core.convert.tables import table_text

#: A heading's font is at least this much larger than the body's.
HEADING_RATIO = 1.15
#: A baseline distance this much wider than the usual line pitch starts a new block.
PARAGRAPH_PITCH = 1.25
#: Footnotes are set at most this share of the body's size ...
FOOTNOTE_RATIO = 0.85
#: ... in this lower share of the page.
FOOTNOTE_BAND = 0.4
#: A table is at least this many lines in a row whose cells (runs apart) sit in the same
#: columns, at least two of them a line.
TABLE_ROWS = 3
#: A table's cells are short: their median width is below this many body sizes (prose
#: in columns read across is not a table).
TABLE_CELL_WIDTH = 6.0
#: At least this share of a table's cells hold text (a formula's or a figure's pieces
#: scattered over many columns leave most empty).
TABLE_FILL = 0.4
#: Two runs of characters on a line further apart than this many font sizes are separate runs
#: (a column gutter or a table's cells, never a space between words).
RUN_GAP = 1.0

_BULLET = re.compile(
    r"^([\u2022\u25e6\u25aa\u25cf\u2023\u2043\u2013\u25a0\u00b7*-]|\d{1,3}[.)])\s+"
)
#: The pieces a tall bracket, brace or parenthesis is drawn of (Unicode's, and the private-use
#: ones of the Symbol font and TeX's extension font as PDFium maps them): a display formula's.
_DELIMITER_PIECE = re.compile(r"[\u239b-\u23b3\uf8e5-\uf8fe]")
#: SQL's keywords that begin a clause: a listing's first column when it is set in columns.
_SQL_WORDS = frozenset(
    [
        "SELECT",
        "FROM",
        "WHERE",
        "AND",
        "OR",
        "ORDER",
        "GROUP",
        "BY",
        "HAVING",
        "LIMIT",
        "OFFSET",
        "UNION",
        "ALL",
        "JOIN",
        "LEFT",
        "RIGHT",
        "INNER",
        "OUTER",
        "ON",
        "AS",
        "INSERT",
        "INTO",
        "VALUES",
        "UPDATE",
        "SET",
        "DELETE",
        "CREATE",
        "ALTER",
        "DROP",
        "TABLE",
        "VIEW",
        "INDEX",
        "MASK",
        "PERMISSION",
        "FOR",
        "COLUMN",
        "ROWS",
        "RETURN",
        "CASE",
        "WHEN",
        "THEN",
        "ELSE",
        "END",
        "ENABLE",
        "DISABLE",
        "GRANT",
        "REVOKE",
        "TO",
        "WITH",
        "CALL",
        "BEGIN",
        "DECLARE",
    ]
)
_LIST_MARKER = re.compile(
    r"^([\u2022\u25e6\u25aa\u25cf\u2023\u2043\u2013\u25a0\u00b7*-]|\d{1,3}[.)]|[a-z][.)]|\((\d{1,3}|[a-z]|[ivx]{1,5})\))$"
)
#: A sentence's end, then closing quotes and brackets and a note's raised mark ("2020.¹").
#: A subfigure's caption: "(a) ...".
_SUBFIGURE = re.compile(r"^\(([a-h])\)\s")
_SENTENCE_END = re.compile(
    r"[.!?:;\u2026][\"'\u201d\u2019)\]\u00b9\u00b2\u00b3\u2070-\u207f*\u2020]*$"
)
_NUMBERED_HEADING = re.compile(r"^(\d{1,2}(\.\d{1,2})*\.?|[IVX]{1,4}\.|[A-Z]\.)\s+\S.{0,80}$")
_NAMED_HEADING = re.compile(
    r"^(abstract|introduction|background|related work|conclusions?|discussion|results|methods?"
    r"|references|bibliography|acknowledge?ments?|appendix( [a-z0-9]+)?|summary|contents)$",
    re.IGNORECASE,
)
#: A footnote's first line: its mark (a number, an asterisk, a dagger), then its text.
_NOTE_MARK = re.compile(r"^(\d{1,3}|[*\u2217\u2020\u2021\u00a7\u00b6])\s?\w")
_SHOWN = ("text", "vertical", "vertical_up")
#: The kind of the run that stands for a ruled table in the reading order.
_RULED = "ruled_table"


# --------------------------------------------------------------------------- reading order


def _is_column(runs: list[Run], body: float) -> bool:
    """Runs that read as prose (lines at least six body sizes long), not a table's cells.

    The median run is that long, among runs of three characters or more (a formula's
    symbols and indices inside a column of text leave it prose)."""
    if len(runs) < 2:
        return False
    widths = sorted(r.box[2] - r.box[0] for r in runs if len(r.text) >= 3) or [0.0]
    return widths[len(widths) // 2] >= 6 * body


def vertical_cut(runs: list[Run], body: float) -> float | None:
    """The x of a gutter running the whole height of ``runs`` with columns on both sides."""
    spans = sorted((r.box[0], r.box[2]) for r in runs)
    gaps: list[tuple[float, float]] = []
    reach = spans[0][1]
    for x0, x1 in spans[1:]:
        if x0 - reach >= 0.8 * body:
            gaps.append((x0 - reach, (x0 + reach) / 2))
        reach = max(reach, x1)
    for _, x in sorted(gaps, reverse=True)[:4]:  # the widest few: a table has many
        left = [r for r in runs if r.box[2] <= x]
        right = [r for r in runs if r.box[0] >= x]
        prose_left, prose_right = _is_column(left, body), _is_column(right, body)
        if prose_left and prose_right:
            return x
        if (prose_left and _beside(right, left)) or (prose_right and _beside(left, right)):
            return x  # prose beside a figure's labels or a table set on lines of its own
    return None


def _median_size(runs: list[Run]) -> float:
    """The font size of the median character of ``runs``."""
    by_size = sorted(runs, key=lambda r: r.size)
    half = sum(len(r.text) for r in runs) / 2
    seen = 0
    for run in by_size:
        seen += len(run.text)
        if seen >= half:
            return run.size
    return by_size[-1].size


def _beside(side: list[Run], prose: list[Run]) -> bool:
    """Whether ``side``, set smaller than ``prose``, has most of its runs beside the lines of
    ``prose`` on lines of their own (a figure's labels, a table of another pitch beside a
    column: read apart), rather than on the same lines (a table's cells or a list's labels
    beside their text: read as rows) or between its lines (notes set in the gaps of a
    listing: read in turn with it). A side set at the text's size is a table's columns."""
    if not side or _median_size(side) > 0.9 * _median_size(prose):
        return False  # set like the text: a table's columns, not a figure or a smaller table
    centres = sorted(r.cy for r in prose)
    by_top = sorted(prose, key=lambda r: r.box[1])
    tops = [r.box[1] for r in by_top]
    beside = 0
    for run in side:
        tolerance = 0.25 * run.size
        i = bisect.bisect_left(centres, run.cy - tolerance)
        if i < len(centres) and centres[i] <= run.cy + tolerance:
            continue  # on a line of the prose
        j = bisect.bisect_left(tops, run.box[3])  # prose runs starting above its bottom
        if any(r.box[3] > run.box[1] for r in by_top[max(0, j - 3) : j]):
            beside += 1
    return 2 * beside > len(side)


def _bands(runs: list[Run]) -> list[list[Run]]:
    """``runs`` split at the horizontal gaps between them, top to bottom."""
    ordered = sorted(runs, key=lambda r: r.core[0])
    bands: list[list[Run]] = [[ordered[0]]]
    reach = ordered[0].core[1]
    for run in ordered[1:]:
        if run.core[0] > reach:
            bands.append([run])
        else:
            bands[-1].append(run)
        reach = max(reach, run.core[1])
    return bands


def reading_order(runs: list[Run], body: float) -> list[list[Run]]:
    """The leaf regions of one page's runs, in reading order (columns left to right)."""
    if not runs:
        return []
    out: list[list[Run]] = []
    _cut(runs, body, out, 0)
    return out


def _cut(runs: list[Run], body: float, out: list[list[Run]], depth: int) -> None:
    if len(runs) < 4 or depth > 40:
        out.append(runs)
        return
    x = vertical_cut(runs, body)
    if x is not None:
        _cut([r for r in runs if r.box[2] <= x], body, out, depth + 1)
        _cut([r for r in runs if r.box[2] > x], body, out, depth + 1)
        return
    bands = _bands(runs)
    if len(bands) == 1:
        out.append(runs)
        return
    merged: list[list[Run]] = [bands[0]]
    for band in bands[1:]:
        if vertical_cut(merged[-1] + band, body) is not None:
            merged[-1] = merged[-1] + band
        else:
            merged.append(band)
    if len(merged) == 1:
        # Rows sharing a gutter, but no cut over all of them: read them as rows.
        out.extend(bands)
        return
    for part in merged:
        _cut(part, body, out, depth + 1)


def _lines(region: list[Run], column: int) -> list[Line]:
    """A leaf region's runs as lines (runs whose middles overlap), top to bottom; a ruled
    table's mark is a line of its own, read where its box starts."""
    lines: list[Line] = []
    current: list[Run] = []
    lo = hi = 0.0
    for run in sorted(region, key=lambda r: (r.box[1] if r.kind == _RULED else r.cy, r.box[0])):
        if run.kind == _RULED:
            if current:
                lines.append(Line(current, column))
                current = []
            lines.append(Line([run], column))
            continue
        if current and lo <= run.cy <= hi:
            current.append(run)
            continue
        if current:
            lines.append(Line(current, column))
        current = [run]
        lo, hi = run.core
    if current:
        lines.append(Line(current, column))
    return lines


# --------------------------------------------------------------------------- blocks


def build_blocks(
    pages: dict[int, list[Run]],
    sizes: dict[int, tuple[float, float]],
    rules: dict[int, Rules] | None = None,
) -> list[RawBlock]:
    """Every page's runs as typed blocks in reading order (see the module's docstring);
    ``rules``: each page's horizontal and vertical lines, for tables drawn with them."""
    weight: Counter[float] = Counter()
    for runs in pages.values():
        for run in runs:
            if run.kind == "text":
                weight[run.size] += len(run.text)
    body = weight.most_common(1)[0][0] if weight else 10.0
    # Tables drawn with lines first: their cells' text is the table's, never a running
    # header (a table's header row repeated on every page) nor a line of the flow.
    ruled: list[RuledTable] = []
    marks: dict[int, list[Run]] = {}
    for page, page_rules in sorted((rules or {}).items()):
        found = ruled_tables(page_rules, pages.get(page, []))
        if not found:
            continue
        taken = {id(r) for t in found for r in t.runs}
        pages[page] = [r for r in pages[page] if id(r) not in taken]
        for table in found:
            # where the table stands in the reading order: a run of its box
            marks.setdefault(page, []).append(
                Run(page, str(len(ruled)), table_box(table), body, kind=_RULED)
            )
            ruled.append(table)
    classify_boilerplate(pages, {p: s[1] for p, s in sizes.items()}, body)
    weight = Counter()
    for runs in pages.values():
        for run in runs:
            if run.kind == "text":
                weight[run.size] += len(run.text)
    heading_sizes = sorted({s for s in weight if s >= body * HEADING_RATIO}, reverse=True)
    levels = {size: min(i + 1, 6) for i, size in enumerate(heading_sizes)}
    minor_level = min(len(heading_sizes) + 1, 6)

    flow: list[Line] = []
    aside: dict[int, list[Run]] = {}
    column = 0
    vertical: dict[int, list[Run]] = {}
    for page in sorted(pages):
        shown = [r for r in pages[page] if r.kind in _SHOWN]
        text_runs = glue_touching([r for r in shown if not is_vertical(r)]) + marks.get(page, [])
        vertical[page] = [r for r in shown if is_vertical(r)]
        aside[page] = [r for r in pages[page] if r.kind not in _SHOWN]
        for region in reading_order(text_runs, body):
            flow.extend(_lines(region, column))
            column += 1
    pitch = _usual_pitch(flow)
    flow = defer_footnotes(flow, body, {p: s[1] for p, s in sizes.items()})

    out = TextBuilder()
    group: list[Line] = []
    emitted_pages: set[int] = set()

    def emit_aside(up_to: int) -> None:
        for page in sorted(aside):
            if page <= up_to and page not in emitted_pages:
                emitted_pages.add(page)
                if vertical[page]:  # a margin stamp or a side label: its own block
                    runs = sorted(vertical[page], key=lambda r: (r.box[0], r.box[1]))
                    text = clean(" ".join(r.text for r in runs))
                    box = union(r.box for r in runs)
                    out.add("paragraph", text, {}, page=page, bbox=box, page_size=sizes[page])
                for run in sorted(aside[page], key=lambda r: (r.box[1], r.box[0])):
                    text = clean(run.text)
                    out.add(run.kind, text, {}, page=page, bbox=run.box, page_size=sizes[page])

    def flush() -> None:
        if not group:
            return
        _add_block(out, group, body, levels, minor_level, sizes)
        group.clear()

    tables = find_tables(flow, body)
    skip_to = 0
    for i, line in enumerate(flow):
        if i < skip_to:
            continue
        if line.runs[0].kind == _RULED:
            flush()
            emit_aside(line.page - 1)
            for mark in line.runs:  # (two tables side by side read as one line)
                table = ruled[int(mark.text)]
                out.add(
                    "table",
                    table_text(table.rows),
                    {"cells": table.rows, "ruled": True},
                    page=line.page,
                    bbox=_on_page(table_box(table), sizes[line.page]),
                    page_size=sizes[line.page],
                )
            continue
        if i in tables:
            flush()
            emit_aside(line.page - 1)
            end, rows, figures = tables[i]
            skip_to = end
            for text, box in figures:  # figures side by side: each one's text in turn
                out.add("paragraph", text, {}, page=line.page, bbox=box, page_size=sizes[line.page])
            if figures:
                continue
            box = union(x.box for x in flow[i:end])
            meta = {"cells": rows}
            out.add(
                "table",
                table_text(rows),
                meta,
                page=line.page,
                bbox=box,
                page_size=sizes[line.page],
            )
            skip_to = end
            continue
        if group and _starts_block(group, line, pitch, body):
            flush()
        if not group:
            emit_aside(line.page - 1)
        group.append(line)
    flush()
    emit_aside(max(pages) if pages else 0)
    return out.blocks


def find_tables(
    flow: list[Line], body: float
) -> dict[int, tuple[int, list[list[str]], list[tuple[str, BBox]]]]:
    """The tables in ``flow``: for each table's first line, the index after its last line,
    its rows of cells, and, when its lines are figures side by side with their captions
    rather than a table, each figure's text and box (read one after the other), its rows
    then empty.

    A table is at least :data:`TABLE_ROWS` lines in a row on one page, each of at least two
    runs (cells set apart by more than a space), a line's height to two and a half apart
    (not a formula's indices),
    whose cells are short (their median width below :data:`TABLE_CELL_WIDTH` body sizes)
    and fall into at least two columns: the spans of the x axis that the cells cover, with
    a gap between them all the way down. A line of one cell right of the first column is a
    cell's text wrapping, joined to the row above. A list (every first cell a bullet or a
    number with a stop) is not a table, nor are lines numbered in turn beside one column of
    text (a transcript, a listing), nor lines set mostly in a monospaced font (code whose
    words line up)."""
    tables: dict[int, tuple[int, list[list[str]], list[tuple[str, BBox]]]] = {}
    i = 0
    while i < len(flow):
        if len(flow[i].runs) < 2:
            i += 1
            continue
        j = i + 1
        while j < len(flow) and _table_goes_on(flow[j - 1], flow[j]):
            j += 1
        lines_end = j
        while j > i and len(flow[j - 1].runs) < 2:  # a table ends on a row of cells
            j -= 1
        rows = _table_rows(flow[i:j], body)
        if rows is not None and _subfigure_captions(rows):
            spans = _spans([r for x in flow[i:j] for r in x.runs])
            while (
                lines_end < len(flow)
                and flow[lines_end].page == flow[i].page
                and len(flow[lines_end].runs) == 1
                and any(a <= flow[lines_end].box[0] < flow[lines_end].box[2] <= b for a, b in spans)
                and 0 < flow[lines_end].cy - flow[lines_end - 1].cy <= 2.5 * flow[lines_end].size
            ):  # a caption's last line, on a line of its own under its column
                lines_end += 1
            tables[i] = (lines_end, [], _columns(flow[i:lines_end]))
            i = lines_end
        elif rows is not None:
            tables[i] = (j, rows, [])
            i = j
        else:
            i += 1
    return tables


def _table_goes_on(prev: Line, line: Line) -> bool:
    return (
        line.page == prev.page
        and line.runs[0].kind != _RULED
        # a row's height apart at least: a formula's indices sit closer below their line
        and 0.8 * max(line.size, prev.size) <= line.cy - prev.cy <= 2.5 * max(line.size, prev.size)
        and (len(line.runs) >= 2 or line.box[0] > prev.runs[0].box[2])
    )


def _table_rows(lines: list[Line], body: float) -> list[list[str]] | None:
    """The lines' cells as rows in their columns, or None when they are not a table."""
    multi = [x for x in lines if len(x.runs) >= 2]
    if len(multi) < TABLE_ROWS:
        return None
    runs = [r for x in lines for r in x.runs]
    widths = sorted(r.box[2] - r.box[0] for r in runs)
    if widths[len(widths) // 2] >= TABLE_CELL_WIDTH * body:
        return None
    if 2 * sum(1 for r in runs if r.mono) > len(runs):
        return None  # a code listing set in columns
    usual = _median_size(runs)
    if 3 * sum(1 for r in runs if r.size < 0.8 * usual) > len(runs):
        return None  # a formula's symbols and indices
    firsts = [x.runs[0].text.strip() for x in multi]
    if all(_LIST_MARKER.match(t) for t in firsts):
        return None
    spans = _spans(runs)
    if len(spans) < 2:
        return None
    if all(t.isdigit() for t in firsts) and len(spans) <= 3:
        numbers = [int(t) for t in firsts]
        if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return None  # numbered lines (a transcript's, a listing's), not a table
    starts = [s[0] for s in spans]

    def column(run: Run) -> int:
        return bisect.bisect_right(starts, run.box[0]) - 1

    cells_apart = [{column(r) for r in x.runs if clean(r.text)} for x in multi]
    if sum(1 for c in cells_apart if len(c) >= 2) < TABLE_ROWS:
        return None
    rows: list[list[str]] = []
    for line in lines:
        cells = [""] * len(spans)
        for r in line.runs:
            k = column(r)
            cells[k] = (cells[k] + " " + clean(r.text)).strip()
        if len(line.runs) < 2 and rows:  # a cell's text wrapping onto a line of its own
            rows[-1] = [(a + " " + b).strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    filled = sum(1 for row in rows for c in row if c)
    if filled < TABLE_FILL * len(rows) * len(spans):
        return None  # mostly empty: a formula's or a figure's pieces, not a table's grid
    if any(_DELIMITER_PIECE.search(c) or c.endswith("=") for row in rows for c in row):
        return None  # a display formula: a tall bracket's pieces, "JF(u, v) =" before a matrix
    heads = [row[0] for row in rows if row[0]]
    if len(heads) >= 2 and all(_SQL_WORDS.issuperset(h.upper().split()) for h in heads):
        return None  # a SQL listing in a proportional font: its keywords, then their operands
    return rows


def _columns(lines: list[Line]) -> list[tuple[str, BBox]]:
    """Each column of ``lines`` (the x spans their runs cover) as one text, top to bottom,
    hyphenation repaired, with its box."""
    runs = [r for x in lines for r in x.runs]
    starts = [s[0] for s in _spans(runs)]
    columns: dict[int, list[Run]] = {}
    for line in lines:
        for run in line.runs:
            columns.setdefault(bisect.bisect_right(starts, run.box[0]) - 1, []).append(run)
    return [
        (join_lines(r.text for r in column), union(r.box for r in column))
        for _, column in sorted(columns.items())
    ]


def _spans(runs: list[Run]) -> list[list[float]]:
    """The spans of the x axis that ``runs`` cover, left to right."""
    spans: list[list[float]] = []
    for r in sorted(runs, key=lambda r: r.box[0]):
        if spans and r.box[0] < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], r.box[2])
        else:
            spans.append([r.box[0], r.box[2]])
    return spans


def _on_page(box: BBox, size: tuple[float, float]) -> BBox:
    """``box`` clipped to the page (a table's lines may be drawn past its edge)."""
    x0, y0 = min(max(box[0], 0.0), size[0] - 1), min(max(box[1], 0.0), size[1] - 1)
    return (x0, y0, min(max(box[2], x0 + 1), size[0]), min(max(box[3], y0 + 1), size[1]))


def _subfigure_captions(rows: list[list[str]]) -> bool:
    """Whether ``rows`` are figures side by side: a row of captions labelled in turn
    ("(a) ...", "(b) ...") below rows of the figures' labels only (a few characters a
    cell: "a b", "γ2"). GeoTopo-komprimiert.pdf p48: two figures and their captions."""
    for n, row in enumerate(rows):
        filled = [c for c in row if c]
        labels = [_SUBFIGURE.match(c) for c in filled]
        if len(filled) < 2 or not all(labels):
            continue
        letters = [m.group(1) for m in labels if m]
        in_turn = letters == [chr(ord(letters[0]) + k) for k in range(len(letters))]
        above = [c for r in rows[:n] for c in r if c]
        if in_turn and above and all(len(c) <= 4 for c in above):
            return True
    return False


def defer_footnotes(flow: list[Line], body: float, heights: dict[int, float]) -> list[Line]:
    """``flow`` with each page's footnotes after the sentence that the page's text ends in.

    A footnote is a run of lines set at most :data:`FOOTNOTE_RATIO` of the body's size at
    the foot of a column (in the page's lower :data:`FOOTNOTE_BAND`, below the column's
    text, nothing of the column after it), its first line starting with a note's mark. Read where they stand, they cut the paragraph
    that goes on in the next column or page, and a note that goes on in the next column's
    foot is cut from its end; moved, the paragraph reads through and the notes follow one
    another."""
    small = [x.size <= FOOTNOTE_RATIO * body for x in flow]
    notes: set[int] = set()
    noted = 0  # the page a note was last found on, at a column's foot
    i = 0
    while i < len(flow):
        if not small[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(flow) and small[j + 1] and flow[j + 1].page == flow[i].page:
            j += 1
        first, last = flow[i], flow[j]
        above = flow[i - 1] if i else None
        after = flow[j + 1] if j + 1 < len(flow) else None
        if (
            above is not None
            # a note's mark, or a note going on from the previous column's foot
            and (_NOTE_MARK.match(first.text) or (first.text[:1].islower() and noted == first.page))
            and not small[i - 1]
            and above.page == first.page
            and first.box[1] >= (1 - FOOTNOTE_BAND) * heights[first.page]
            and _same_flow(above, first)
            and (after is None or not _same_flow(last, after))
        ):
            notes.update(range(i, j + 1))
            noted = first.page
        i = j + 1
    if not notes:
        return flow
    last_text = {x.page: k for k, x in enumerate(flow) if k not in notes}
    out: list[Line] = []
    held: list[Line] = []
    for k, line in enumerate(flow):
        if k in notes:
            held.append(line)
            continue
        out.append(line)
        page_done = all(last_text.get(x.page, -1) <= k for x in held)
        if held and page_done and _SENTENCE_END.search(line.text):
            out.extend(held)
            held.clear()
    return out + held


def _usual_pitch(flow: list[Line]) -> dict[float, float]:
    """The most common baseline distance between lines of one column, per font size."""
    seen: dict[float, Counter[float]] = {}
    for prev, line in itertools.pairwise(flow):
        if line.column == prev.column and abs(line.size - prev.size) <= 0.5:
            step = round(line.cy - prev.cy, 1)
            if 0.9 * line.size <= step <= 2.5 * line.size:  # not a sub/superscript or a gap
                seen.setdefault(line.size, Counter())[step] += 1
    return {size: steps.most_common(1)[0][0] for size, steps in seen.items()}


def _heading_like(line: Line, body: float) -> bool:
    return line.size >= body * HEADING_RATIO or (line.bold and len(line.text) <= 120)


def _overlap(a: BBox, b: BBox) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _same_flow(prev: Line, line: Line) -> bool:
    """``line`` reads on below ``prev`` in the same column (no column or page break)."""
    return (
        line.page == prev.page
        and line.cy > prev.cy
        and line.box[0] < prev.box[2]
        and prev.box[0] < line.box[2]
    )


def _starts_block(group: list[Line], line: Line, pitch: dict[float, float], body: float) -> bool:
    big = max(x.size for x in group[-2:])
    for near in group[-2:]:
        small = min(line.size, near.size) < 0.8 * max(line.size, near.size)
        if small and line.page == near.page and _overlap(near.box, line.box):
            return False  # a sub- or superscript (a formula's indices) beside its line
    last = group[-1]
    if (
        line.text[:1].islower()
        and _same_flow(last, line)
        and not _SENTENCE_END.search(last.text)
        and not _heading_like(last, body)
        and not _BULLET.match(group[0].text)
        # not indented (a definition's text below its term), below a full line
        and line.box[0] < min(last.box[0], group[0].box[0]) + 0.8 * line.size
        and last.box[2] >= max(x.box[2] for x in group[-3:]) - 2.5 * line.size
        and 0.75 * last.size <= line.size <= last.size / 0.75
        and line.cy - last.cy <= PARAGRAPH_PITCH * pitch.get(last.size, 1.2 * last.size) + 0.5
    ):
        return False  # the sentence goes on, in small capitals, a URL's font, an outdent
    similar = [x for x in group[-4:] if abs(x.size - line.size) <= 0.5]
    prev = similar[-1] if similar and line.size >= 0.8 * big else group[-1]
    if abs(line.size - prev.size) > 0.5:
        return True
    if line.bold != prev.bold and not line.text[:1].islower():
        return True  # bold to regular or back, unless the sentence goes on in lower case
    if _BULLET.match(line.text):
        return True
    same_flow = _same_flow(prev, line)
    ends = bool(_SENTENCE_END.search(prev.text))
    if not same_flow:
        # A column or page break: the paragraph goes on unless its sentence has ended.
        return ends or _heading_like(line, body) or _heading_like(prev, body)
    # From the line above, unless it is a formula's index (a line in small capitals counts).
    above = last if _same_flow(last, line) and last.size >= 0.75 * line.size else prev
    step = line.cy - max(prev.cy, above.cy)
    usual = pitch.get(line.size, 1.2 * line.size)
    if step > PARAGRAPH_PITCH * usual + 0.5:
        return True
    if _heading_like(prev, body) and len(group) >= 3:
        return True
    # A formula's indices set on lines of their own are neither lines nor a margin here.
    text_lines = [x for x in group if x.size >= 0.8 * line.size] or group
    # The margin of this column (a paragraph continued from another column has another).
    column = [x for x in text_lines if x.page == line.page and _beside_x(x, line)] or text_lines
    left = min(x.box[0] for x in column)
    deep = line.box[0] < left - 2.5 * line.size  # more than a first line's indent
    short = prev.box[2] < line.box[2] - 2.5 * line.size
    if line.box[0] < left - 0.8 * line.size and (len(column) >= 2 or (deep and short)):
        return True  # an outdented line: the indented block above (code, a quote) ended
    list_item = bool(_BULLET.match(group[0].text))
    right = max(x.box[2] for x in group[-3:])
    short_prev = prev.box[2] < right - 2.5 * line.size
    indented = line.box[0] - left > 0.8 * line.size and prev.box[0] - left < 0.5 * line.size
    if not list_item and indented and (ends or short_prev):
        return True  # an indented first line after a sentence's end
    return ends and short_prev


def _beside_x(a: Line, b: Line) -> bool:
    """Whether two lines share some of their width (one above the other in a column)."""
    return a.box[0] < b.box[2] and b.box[0] < a.box[2]


def _add_block(
    out: TextBuilder,
    group: list[Line],
    body: float,
    levels: dict[float, int],
    minor_level: int,
    sizes: dict[int, tuple[float, float]],
) -> None:
    head = group[0]
    text = join_lines(x.text for x in group)
    if not text:
        return
    parts: list[list[Line]] = []
    for line in group:
        if parts and _same_flow(parts[-1][-1], line):
            parts[-1].append(line)
        else:
            parts.append([line])
    box = union(x.box for x in parts[0])
    metadata: dict[str, Any] = {}
    if len(parts) > 1:
        metadata["parts"] = [
            [p[0].page, *(round(v, 2) for v in union(x.box for x in p))] for p in parts
        ]
    single = len(group) <= 2 and len(text) <= 150 and not text.endswith(".")
    kind = "paragraph"
    if head.size in levels and len(text) <= 300:
        kind = "heading"
        metadata["level"] = levels[head.size]
    elif (head.bold and single and any(c.isalpha() for c in text)) or (
        len(group) == 1 and _NAMED_HEADING.match(text)
    ):
        kind = "heading"
        metadata["level"] = minor_level
    elif m := _BULLET.match(text):
        kind = "list_item"
        marker = m.group(1)
        ordered = marker[0].isalnum()
        metadata = {**metadata, "ordered": ordered, "marker": marker}
        if not ordered:  # a bullet says nothing; a number ("3.") is how the item is cited
            text = text[m.end() :]
    elif len(group) == 1 and _NUMBERED_HEADING.match(text) and head.size > body + 0.5:
        kind = "heading"
        metadata["level"] = minor_level
    out.add(kind, text, metadata, page=head.page, bbox=box, page_size=sizes[head.page])
