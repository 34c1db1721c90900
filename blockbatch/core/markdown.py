"""Markdown into blocks through markdown-it.rs (``markdown-it-pyrs``), a Rust port of
markdown-it, the CommonMark parser.

The parser decides the block structure (CommonMark 0.31 plus GFM tables); this module
only says which of its nodes is one of our blocks and what text it carries:

| parser node | our block | content |
|---|---|---|
| ``heading`` (ATX), ``lheading`` (setext) | ``heading`` (``level``) | the heading's inline text |
| ``paragraph`` | ``paragraph`` | its lines, each stripped |
| ``list_item`` | ``list_item`` (``ordered``, ``marker``, ``number``, ``depth``) | its source lines without the marker and the item's indent; a nested list is not part of it but blocks of its own, one level deeper |
| ``fence``, ``code_block`` | ``code`` (``language``, ``fence``) | the code as written |
| ``blockquote`` | ``blockquote`` | its source lines without one level of ``>`` (whatever it holds stays inside) |
| ``table`` (GFM) | ``table`` (``rows``) | its source lines, each stripped |
| ``html_block`` | ``html`` | the raw HTML as written |
| ``hr``, ``definition`` (link reference), YAML front matter | none | |

The parser's source map is a byte span; a block's lines and span are the lines the node
covers, a list item's with the blank line after it that markdown-it-py's maps counted (the
parser before this one: ``tests/unit/test_markdown_parity.py`` checks that both give the
same blocks). A node whose text is only whitespace is not a block. ``tests/unit/test_commonmark_spec.py``
checks this segmentation against every example of the CommonMark spec.

A long document is parsed a window of lines at a time (:func:`iter_markdown`), so the
parser's tokens never cover more than a window whatever the document's size: a window's
top-level blocks are final except its last, which may go on past the window, so the next
window starts at that block's first line. A top-level block begins in a state that owes
nothing to the lines before it (the blocks before it are closed), so parsing from there
finds what parsing the whole would. ``tests/unit/test_markdown_windows.py`` checks it on
every CommonMark spec example cut in windows of every size.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any, overload

from markdown_it_pyrs import MarkdownIt, Node

from blockbatch.core.blocks import IngestError, Provenance, RawBlock

if TYPE_CHECKING:
    from markdown_it_pyrs.markdown_it_pyrs import _PLUGIN_NAME

#: Lists nested deeper than this stay text of the innermost item that is a block (the
#: walk recurses once a level; markdown-it-py's guard was 100 levels too).
MAX_NESTING = 100
#: An ordered list item's number and delimiter, or a bullet (CommonMark 5.2).
_MARKER = re.compile(r"[0-9]{1,9}[.)]|[-+*]")
#: Lines parsed at once by :func:`iter_markdown` (a window grows when one block is longer).
WINDOW_LINES = 20_000


_YAML_KEY = re.compile(r"^[A-Za-z_][\w.-]*[ \t]*:(\s|$)")


#: The parser's rules: CommonMark's block rules and GFM tables, none of its inline rules.
#: Our blocks are cut from the source lines and the nodes' ``meta``, never from inline
#: content, and the block structure is settled before any inline rule runs (CommonMark
#: 0.31, appendix "Phase 1: block structure"). Without them the parser also cannot fall
#: into markdown-it.rs 0.6's inline ``backticks`` rule, which panics (a Rust panic, a
#: ``BaseException`` no handler catches) on a ``[`` with an unmatched backtick after it on
#: its line: ``see [the `x option``. ``tests/unit/test_markdown_blocks_only.py`` checks
#: that both rule sets give the same blocks wherever the full one does not panic.
BLOCK_RULES: tuple[_PLUGIN_NAME, ...] = (
    "blockquote",
    "code",
    "fence",
    "heading",
    "hr",
    "lheading",
    "list",
    "paragraph",
    "reference",
    "html_block",
    "table",
)


def _parser() -> MarkdownIt:
    return MarkdownIt("zero").enable_many(list(BLOCK_RULES))


class ParserCrash(IngestError):
    """The Markdown parser crashed (a Rust panic) on a window of the file's lines."""


def _tree(parser: MarkdownIt, source: str, first: int) -> Sequence[Node]:
    """The top-level nodes of ``source``, the file's lines from ``first`` (0-based) on.

    Raises:
        ParserCrash: the parser panicked. A Rust panic reaches Python as pyo3's
            ``PanicException``, a ``BaseException`` that no ``except Exception`` stops:
            it would pass every handler that turns a bad file into a clear error. Every
            other exception goes on unchanged.
    """
    try:
        return parser.tree(source).children
    except BaseException as exc:
        if type(exc).__module__ != "pyo3_runtime":  # KeyboardInterrupt, a cancellation
            raise
        last = first + len(source.splitlines())
        raise ParserCrash(
            f"the Markdown parser (markdown-it.rs) crashed on lines {first + 1}-{last} "
            f"({str(exc)[:120]}): a bug in the parser, not in the file. Ingest the file as "
            "plain text until blockbatch is upgraded (`--format text`: a block per "
            "paragraph), and report the lines"
        ) from None


def _indent(line: str) -> int:
    """Leading whitespace in columns, a tab counting to the next multiple of 4."""
    col = 0
    for ch in line:
        if ch == " ":
            col += 1
        elif ch == "\t":
            col += 4 - col % 4
        else:
            break
    return col


def _dedent(line: str, columns: int) -> str:
    """Remove up to ``columns`` columns of leading whitespace."""
    col = i = 0
    while i < len(line) and col < columns and line[i] in " \t":
        col += 1 if line[i] == " " else 4 - col % 4
        i += 1
    return line[i:]


def _from_column(line: str, column: int) -> str:
    """What of ``line`` starts at ``column``: a list nested on its parent item's first
    line starts after the parent's marker, not after whitespace."""
    col = i = 0
    while i < len(line) and col < column:
        col += 4 - col % 4 if line[i] == "\t" else 1
        i += 1
    return line[i:]


class _Lines(Sequence[str]):
    """A file's lines, each cut from its text when asked for."""

    def __init__(self, walk: _Walk) -> None:
        self.walk = walk

    def __len__(self) -> int:
        return self.walk.total

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            raise TypeError("lines are read one at a time")
        if not 0 <= i < self.walk.total:
            raise IndexError(i)
        return self.walk.source(i, i + 1)


def _front_matter_end(lines: Sequence[str]) -> int:
    """Lines of a leading YAML front matter block: metadata about the file, not a block.

    It opens with ``---``, closes with ``---`` or ``...``, and its first line is a YAML
    ``key:``; otherwise the ``---`` is CommonMark's (a rule, or a setext underline).
    """
    if lines and lines[0].rstrip() == "---" and len(lines) > 1 and _YAML_KEY.match(lines[1]):
        for j in range(2, len(lines)):
            if lines[j].rstrip() in ("---", "..."):
                return j + 1
    return 0


class _Walk:
    """Our blocks from the parser's nodes, over the lines of one window at a time
    (:meth:`window`); line numbers are the file's."""

    def __init__(self, text: str) -> None:
        self.text = text
        # Where each line starts, one machine integer per line (not a Python string or int
        # object each): held for the whole file, a small part of its size. The last entry
        # is where a line after the last would start.
        self.starts = array("q", [0])
        at = text.find("\n")
        while at != -1:
            self.starts.append(at + 1)
            at = text.find("\n", at + 1)
        self.starts.append(len(text) + 1)
        self.total = len(self.starts) - 1
        self.text_len = len(text)
        self.base = 0
        self.lines: list[str] = []
        self.byte_starts: list[int] = [0]
        self.out: list[RawBlock] = []

    def source(self, first: int, end: int) -> str:
        """Lines ``first`` to ``end`` (exclusive) as they are in the file."""
        return self.text[self.starts[first] : self.starts[end] - 1]

    def window(self, first: int, end: int) -> str:
        """Hold lines ``first`` to ``end`` (exclusive) for :meth:`visit`; their source."""
        source = self.source(first, end)
        self.base, self.lines = first, source.split("\n")
        # Where each of the window's lines starts in its UTF-8 (the parser's offsets).
        lengths = map(len, self.lines if source.isascii() else source.encode().split(b"\n"))
        self.byte_starts = list(accumulate(map((1).__add__, lengths), initial=0))
        return source

    def line(self, i: int) -> str:
        return self.lines[i - self.base]

    def rows(self, first: int, end: int) -> list[str]:
        return self.lines[first - self.base : end - self.base]

    def span(self, first: int, end: int) -> Provenance:
        """Lines ``first`` to ``end`` (exclusive) as a character span, without the last
        newline."""
        end = max(end, first + 1)
        return Provenance(self.starts[first], min(self.starts[end] - 1, self.text_len))

    def emit(self, kind: str, content: str, metadata: dict[str, Any], first: int, end: int) -> None:
        if content.strip():
            metadata["source_line"] = first + 1
            self.out.append(RawBlock(kind, content, metadata, self.span(first, end)))

    def lines_of(self, node: Node) -> tuple[int, int]:
        """The file's lines ``first`` to ``end`` (exclusive) that ``node`` spans: the
        parser's source map is a byte span in the window's UTF-8."""
        assert node.srcmap is not None  # every block node has one
        start, stop = node.srcmap
        first = bisect_right(self.byte_starts, start) - 1
        last = bisect_right(self.byte_starts, max(stop - 1, start)) - 1
        return self.base + first, self.base + last + 1

    def item_lines(self, node: Node) -> tuple[int, int]:
        """A list's or list item's lines, with the one blank line after it that the
        CommonMark reference parsers count as the item's (markdown-it's maps, which the
        blocks' spans have always followed)."""
        first, end = self.lines_of(node)
        # A window's last line, when empty, ends the one before it: not a line of its own.
        limit = self.base + len(self.lines) - (self.lines[-1] == "")
        if end < limit and not self.line(end).strip(" \t"):
            end += 1
        return first, end

    def visit(self, node: Node, depth: int = 0, column: int = 0) -> None:
        kind = node.name
        if kind in ("bullet_list", "ordered_list"):
            for item in node.children:
                self.list_item(item, kind == "ordered_list", depth, column)
            return
        if kind in ("hr", "definition") or node.srcmap is None:
            return
        first, end = self.lines_of(node)
        if kind == "heading":
            level = int(node.meta["level"])
            self.emit("heading", _atx_text(self.line(first)), {"level": level}, first, end)
        elif kind == "lheading":
            text = _stripped_lines(self.rows(first, end - 1))
            self.emit("heading", text, {"level": int(node.meta["level"])}, first, end)
        elif kind == "paragraph":
            self.emit("paragraph", _stripped_lines(self.rows(first, end)), {}, first, end)
        elif kind == "fence":
            info = node.meta.get("info", "").strip()
            metadata = {
                "language": info.split()[0] if info else None,
                "fence": node.meta["marker"] * int(node.meta["marker_len"]),
            }
            content = node.meta.get("content", "").removesuffix("\n")
            self.emit("code", content, metadata, first, end)
        elif kind == "code_block":
            content = node.meta.get("content", "").rstrip("\n")
            self.emit("code", content, {"language": None}, first, end)
        elif kind == "html_block":
            self.emit("html", node.meta.get("content", "").strip("\n"), {}, first, end)
        elif kind == "table":
            rows = [line.strip() for line in self.rows(first, end)]
            self.emit("table", "\n".join(rows), {"rows": len(rows)}, first, end)
        elif kind == "blockquote" and _holds_content(node):
            self.emit("blockquote", self.blockquote(first, end), {}, first, end)

    def blockquote(self, first: int, end: int) -> str:
        body = []
        for line in self.rows(first, end):
            stripped = _dedent(line, 3) if _indent(line) <= 3 else line
            if stripped.startswith(">"):
                rest = stripped[1:]
                # One optional space (or a tab's first column) after the marker.
                body.append(rest[1:] if rest[:1] == " " else _dedent(rest, 1))
            else:
                body.append(line.strip())  # a lazy continuation line
        return "\n".join(b.rstrip() for b in body).strip()

    def list_item(self, item: Node, ordered: bool, depth: int, column: int) -> None:
        """One item, then its nested lists; ``column``: where its list's container's
        content starts (a nested list may open on its parent item's first line)."""
        first, end = self.item_lines(item)
        nested = [c for c in item.children if c.name in ("bullet_list", "ordered_list")]
        if depth + 1 >= MAX_NESTING:
            nested = []  # lists nested deeper stay text of this item, not blocks
        skip: set[int] = set()
        for child in nested:
            skip.update(range(*self.item_lines(child)))
        opening = _from_column(self.line(first), column)
        lead = column + _indent(opening)
        after = _dedent(opening, lead - column)
        found = _MARKER.match(after)
        marker = found.group(0) if found else ""
        after = after[len(marker) :]
        gap = _indent(after)
        content_indent = lead + len(marker) + (gap if 0 < gap <= 4 else 1)
        body: list[str] = []
        for i in range(first, end):
            if i in skip:
                continue
            line = self.line(i)
            if i == first:
                body.append(_dedent(after, gap if gap <= 4 else 1).rstrip())
            elif _indent(line) >= content_indent or not line.strip():
                body.append(_dedent(line, content_indent).rstrip())
            else:
                body.append(line.strip())  # a lazy continuation line
        metadata: dict[str, Any] = {"ordered": ordered, "marker": marker, "depth": depth}
        if ordered:
            metadata["number"] = int(marker[:-1])
        if _holds_content(item, besides=nested):
            self.emit("list_item", "\n".join(body).strip(), metadata, first, end)
        for child in nested:
            self.visit(child, depth + 1, content_indent)


def _holds_content(node: Node, besides: Sequence[Node] = ()) -> bool:
    """Whether a container holds anything but rules and link reference definitions (and
    ``besides``): a quote or an item of only those has no text to send."""
    return any(c.name not in ("hr", "definition") and c not in besides for c in node.children)


def _stripped_lines(lines: Sequence[str]) -> str:
    """A paragraph's or setext heading's text: its lines, each stripped."""
    return "\n".join([line.strip() for line in lines]).strip()


def _atx_text(line: str) -> str:
    """An ATX heading's text: after its opening ``#``s, without a closing sequence of
    ``#``s that follows a space or a tab (CommonMark 4.2)."""
    text = line.lstrip(" ").lstrip("#").rstrip(" \t")
    trimmed = text.rstrip("#")
    if trimmed[-1:] in (" ", "\t"):
        text = trimmed
    return text.strip()


def parse_markdown(text: str) -> list[RawBlock]:
    """Split markdown text (newlines already ``\\n``) into blocks in document order."""
    return list(iter_markdown(text))


def iter_markdown(text: str, window_lines: int | None = None) -> Iterator[RawBlock]:
    """:func:`parse_markdown`'s blocks as they are found, a window of ``window_lines``
    (default :data:`WINDOW_LINES`) lines parsed at a time (the module docstring says why
    that finds the same blocks)."""
    window_lines = window_lines or WINDOW_LINES
    walk = _Walk(text)
    total = walk.total
    # The front matter is left out, not parsed: lines and offsets stay the file's.
    start = _front_matter_end(_Lines(walk))
    size = window_lines
    parser = _parser()
    while start < total:
        end = min(total, start + size)
        nodes = _tree(parser, walk.window(start, end), start)
        if end < total:
            # The last block may go on past the window: the next window starts with it.
            at = next((i for i in range(len(nodes) - 1, -1, -1) if nodes[i].srcmap), None)
            last = start if at is None else walk.lines_of(nodes[at])[0]
            if last <= start:
                size *= 2  # one block longer than the window: a larger window
                continue
            nodes = nodes[:at]  # the blocks before the last (each starts on an earlier line)
        else:
            last = total
        for node in nodes:
            walk.visit(node)
        yield from walk.out
        walk.out.clear()
        start, size = last, window_lines
