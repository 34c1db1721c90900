"""markdown-it.rs (the parser blockbatch uses) finds the blocks markdown-it-py (the parser
it used before, walked by tests/markdown_reference.py) found: the same types, texts,
metadata, lines and spans, on every CommonMark spec example and on the repository's own
Markdown (its README and docs: real documents with tables, nested lists, code, non-ASCII
text).

Where they differ, markdown-it-py's walk was wrong: an item of a list that opens on its
parent item's first line (``- - foo``) carried its parents' markers in its text. Checked
by hand on 219 public Markdown files (markdown-it-py's and FastAPI's docs, 18,197 blocks):
the same blocks but for those items and one table whose header line is an HTML block
(``<p>| a |``), which markdown-it.rs reads as HTML as GFM says (docs/benchmarks.md 3.3).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from blockbatch.core.markdown import MAX_NESTING, iter_markdown
from tests.markdown_reference import iter_markdown as reference

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "fixtures" / "commonmark" / "spec-0.31.2.json"
EXAMPLES: list[dict[str, Any]] = json.loads(SPEC.read_text())
#: Spec examples where the reference walk kept the parents' markers, and what is right.
FIXED = {298: "foo", 299: "foo"}
MARKDOWN_FILES = sorted(
    subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e['example']}-{e['section']}")
def test_every_spec_example_gives_the_blocks_it_gave(example: dict[str, Any]) -> None:
    text = example["markdown"]
    ours, before = list(iter_markdown(text)), list(reference(text))
    if example["example"] in FIXED:
        assert [b.content for b in ours] == [FIXED[example["example"]]]
        assert [b.provenance for b in ours] == [b.provenance for b in before]
    else:
        assert ours == before


def test_the_whole_spec_as_one_document_gives_the_blocks_it_gave() -> None:
    text = "\n\n".join(e["markdown"] for e in EXAMPLES if e["example"] not in FIXED)
    assert list(iter_markdown(text)) == list(reference(text))


def test_the_repositorys_markdown_gives_the_blocks_it_gave() -> None:
    assert len(MARKDOWN_FILES) >= 10
    for name in MARKDOWN_FILES:
        text = (ROOT / name).read_text(encoding="utf-8")
        assert list(iter_markdown(text)) == list(reference(text)), name


def test_spans_count_characters_not_bytes() -> None:
    # The parser's source map is in UTF-8 bytes; spans and lines are the text's characters.
    text = "# Übersicht — ünïcödé\n\n- 日本語の項目\n- second\n\n| ä | ö |\n|---|---|\n| ü | ß |\n\nÉnd.\n"
    blocks = list(iter_markdown(text))
    assert blocks == list(reference(text))
    assert [text[b.provenance.char_start : b.provenance.char_end] for b in blocks] == [
        "# Übersicht — ünïcödé",
        "- 日本語の項目",
        "- second\n",  # an item's span has the blank line after it, as it had
        "| ä | ö |\n|---|---|\n| ü | ß |",
        "Énd.",
    ]


def test_lists_nested_deeper_than_the_limit_stay_text_of_the_deepest_item() -> None:
    # 3,000 levels: the walk recurses once a level, so deeper levels are not walked.
    text = "".join("  " * i + f"- item {i}\n" for i in range(3_000))
    blocks = list(iter_markdown(text))
    assert len(blocks) == MAX_NESTING
    assert blocks[-1].metadata["depth"] == MAX_NESTING - 1
    deepest = blocks[-1].content.split("\n")
    assert deepest[0] == f"item {MAX_NESTING - 1}" and deepest[-1].strip() == "- item 2999"
