"""A long Markdown document parsed a window of lines at a time finds the blocks (types,
texts, lines and spans) that parsing it whole does (blockbatch/core/markdown.py
``iter_markdown``), wherever the windows fall."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from blockbatch.core import markdown
from blockbatch.core.ingest import stream_records
from blockbatch.core.markdown import iter_markdown

SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "commonmark" / "spec-0.31.2.json"
EXAMPLES: list[dict[str, Any]] = json.loads(SPEC.read_text())
WHOLE = 10**9  # a window larger than any document here: parsed whole


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e['example']}-{e['section']}")
def test_every_spec_example_in_windows_of_every_size(example: dict[str, Any]) -> None:
    text = example["markdown"]
    whole = list(iter_markdown(text, WHOLE))
    for window in range(1, text.count("\n") + 2):
        assert list(iter_markdown(text, window)) == whole, window


@pytest.mark.parametrize("window", [1, 2, 3, 5, 8, 13, 64, 500])
def test_the_whole_spec_as_one_document_in_windows(window: int) -> None:
    # Every example after the other: a window boundary meets each construct next to others
    # (open fences, HTML blocks, lists, setext underlines, tables, lazy lines).
    text = "\n\n".join(e["markdown"] for e in EXAMPLES)
    assert list(iter_markdown(text, window)) == list(iter_markdown(text, WHOLE))


def test_a_block_longer_than_the_window_is_read_whole() -> None:
    code = "\n".join(f"line {i}" for i in range(50))
    text = f"# Title\n\n```\n{code}\n```\n\nAfter.\n"
    blocks = list(iter_markdown(text, 4))
    assert [b.block_type for b in blocks] == ["heading", "code", "paragraph"]
    assert blocks[1].content == code
    assert blocks[2].metadata["source_line"] == 56


def test_front_matter_is_left_out_and_lines_stay_the_files() -> None:
    text = "---\ntitle: x\n---\n\nFirst.\n\nSecond.\n"
    blocks = list(iter_markdown(text, 1))
    assert [(b.content, b.metadata["source_line"]) for b in blocks] == [
        ("First.", 5),
        ("Second.", 7),
    ]
    assert text[blocks[1].provenance.char_start : blocks[1].provenance.char_end] == "Second."


def test_a_streamed_document_hands_out_blocks_before_it_is_parsed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The parser's tokens cover a window, not the document: the first blocks come out of
    # stream_records when only the first window has been parsed.
    monkeypatch.setattr(markdown, "WINDOW_LINES", 40)
    parsed: list[int] = []
    parser = markdown._parser

    class Counted:
        def __init__(self) -> None:
            self.inner = parser()

        def tree(self, src: str) -> Any:
            parsed.append(src.count("\n") + 1)
            return self.inner.tree(src)

    monkeypatch.setattr(markdown, "_parser", Counted)
    text = "\n\n".join(f"Paragraph {i}." for i in range(5_000))
    streamed = stream_records(text.encode(), "markdown")
    first = next(streamed.blocks)
    assert first.block_content == "Paragraph 0."
    assert parsed == [40]
    rest = list(streamed.blocks)
    assert len(rest) == 4_999 and rest[-1].block_index == 4_999
    assert max(parsed) <= 40
