"""Our markdown segmentation against the CommonMark spec's own examples.

For every example of the spec (tests/fixtures/commonmark/, with its license), the blocks
:func:`blockbatch.core.ingest.parse_document` makes of the markdown must be the blocks the
spec's *expected HTML* holds, read tag by tag with the standard library's HTML parser under the mapping
of blockbatch/core/markdown.py's docstring: each ``h1``-``h6``, ``p``, ``pre`` and
``blockquote`` is one block (a blockquote whole), each ``li`` one block without its nested
lists, whose items follow one level deeper; ``hr`` is none; raw HTML passes through the
spec's output verbatim, so each of our ``html`` blocks must appear there as written.
Elements whose text is only whitespace are not blocks, as ours are not.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from blockbatch.core.ingest import IngestError, ParsedBlock, parse_document

SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "commonmark" / "spec-0.31.2.json"
EXAMPLES: list[dict[str, Any]] = json.loads(SPEC.read_text())


def _ours(markdown: str) -> list[ParsedBlock]:
    try:
        return parse_document(markdown.encode(), "markdown")
    except IngestError as err:
        assert str(err).startswith("document has no blocks"), err
        return []


_STRUCTURE = {"h1", "h2", "h3", "h4", "h5", "h6", "p", "pre", "blockquote", "ul", "ol", "li"}


class _Reader(HTMLParser):
    """The spec's expected HTML as our blocks, read tag by tag.

    Only the elements CommonMark produces open a frame; any other tag (raw HTML, which may
    be left unclosed) only counts as content of the frame it sits in, so an unclosed
    ``<div>`` cannot swallow what follows it as a tree builder would. A blockquote, and
    whatever an ``li`` holds besides its nested lists, is opaque: content of one block.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[tuple[Any, ...] | None] = []
        self.frames: list[dict[str, Any]] = []
        self.lists = 0
        self.opaque: list[Any] | None = None  # [tag, depth, closes a frame]

    def content(self, tag: str) -> None:
        if self.frames and tag != "hr":
            self.frames[-1]["content"] = True

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if self.opaque is not None:
            self.opaque[1] += tag == self.opaque[0]
            self.content(tag)
            return
        if tag in ("ul", "ol"):
            self.lists += 1
            self.frames.append({"tag": tag, "slot": None, "content": False, "text": ""})
            return
        if tag not in _STRUCTURE:
            self.content(tag)
            return
        if self.frames and self.frames[-1]["tag"] == "li" and tag != "li":
            self.opaque = [tag, 1, False]
            self.content(tag)
            return
        self.frames.append({"tag": tag, "slot": len(self.out), "content": False, "text": ""})
        self.out.append(None)
        if tag == "blockquote":
            self.opaque = [tag, 1, True]

    def handle_startendtag(self, tag: str, attrs: Any) -> None:
        self.content(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.opaque is not None:
            if tag != self.opaque[0]:
                self.content(tag)
                return
            self.opaque[1] -= 1
            if self.opaque[1]:
                return
            closes, self.opaque = self.opaque[2], None
            if not closes:
                return
        elif tag not in _STRUCTURE or not any(f["tag"] == tag for f in self.frames):
            self.content(tag)
            return
        while (frame := self.frames.pop())["tag"] != tag:
            pass
        if tag in ("ul", "ol"):
            self.lists -= 1
            return
        text = frame["text"]
        if not (frame["content"] or text.strip()) or (tag == "pre" and not text.strip()):
            return
        if tag[0] == "h":
            self.out[frame["slot"]] = ("heading", int(tag[1]))
        elif tag == "p":
            self.out[frame["slot"]] = ("paragraph",)
        elif tag == "pre":
            self.out[frame["slot"]] = ("code", text)
        elif tag == "blockquote":
            self.out[frame["slot"]] = ("blockquote",)
        else:
            self.out[frame["slot"]] = ("list_item", self.lists - 1)

    def handle_data(self, data: str) -> None:
        if self.frames:
            self.frames[-1]["text"] += data


def _expected(html: str) -> list[tuple[Any, ...]]:
    reader = _Reader()
    # HTML5's abruptly closed empty comments (<!--> and <!--->), which this Python's
    # HTMLParser reads as opening a comment that runs on; written out in full, they are
    # the same comment to any reader.
    reader.feed(html.replace("<!--->", "<!---->").replace("<!-->", "<!---->"))
    reader.close()
    return [entry for entry in reader.out if entry is not None]


def _structure(block: ParsedBlock) -> tuple[Any, ...]:
    if block.block_type == "heading":
        return ("heading", block.metadata["level"])
    if block.block_type == "code":
        return ("code", block.block_content + "\n")
    if block.block_type == "list_item":
        return ("list_item", block.metadata["depth"])
    return (block.block_type,)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e['example']}-{e['section']}")
def test_segmentation_agrees_with_the_spec(example: dict[str, Any]) -> None:
    ours = _ours(example["markdown"])
    expected_html = example["html"]
    for block in ours:
        if block.block_type == "html":
            assert block.block_content in expected_html, "raw HTML not passed through verbatim"
            expected_html = expected_html.replace(block.block_content, "", 1)
    expected = _expected(expected_html)
    got = [_structure(b) for b in ours if b.block_type != "html"]
    assert got == expected
