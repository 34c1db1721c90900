"""blockbatch.core.markdown parses with CommonMark's block rules and GFM tables only
(``BLOCK_RULES``): the blocks are those the full rule set gives, and a ``[`` followed by an
unmatched backtick, on which markdown-it.rs 0.6's inline ``backticks`` rule panics, is text
like any other. Should the parser panic on something else, ingest says so as an
``IngestError``.

The panic was found by the stress report's `make test` runs (docs/testing.md, "The suite
under stress"): Hypothesis drew ``ñ[\\x1eT`v`` for
``test_ingest.py::test_markdown_never_crashes_and_never_yields_blank_blocks``.
``bench/markdown_rules.py`` compares the two rule sets at scale: 0 differences on the 652
CommonMark spec examples, 314 Markdown files installed on the machine (Debian's and the
Python packages' docs) and 20,000 random texts over Markdown's punctuation, on 2,559 of
which the full rule set panicked (``bench/results/markdown_rules.json``).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it_pyrs import MarkdownIt

import blockbatch.core.markdown as markdown
from bench.markdown_rules import CHARS, PANIC, blocks, full_rules
from blockbatch.core.blocks import IngestError
from blockbatch.core.ingest import parse_document
from tests.helpers import examples


@settings(max_examples=examples(400), deadline=None)
@given(st.text(alphabet=CHARS, max_size=80))
@example("[`")
@example("see [the `x option\n\nand more")
def test_the_block_rules_give_the_full_rules_blocks_and_never_panic(text: str) -> None:
    ours = blocks(text, markdown._parser)
    assert ours != PANIC
    full = blocks(text, full_rules)
    if full != PANIC:  # where the full rules panic they cannot say; ours parsed it
        assert ours == full


def test_a_bracket_then_an_unmatched_backtick_is_ingested_as_text() -> None:
    text = (
        "# Options [`beta`]\n\n"
        "see [the `x option for more\n\n"
        "- an item [a`\n"
        "- another\n\n"
        "> quoted [`\n\n"
        "| a | b |\n|---|---|\n| [` | 2 |\n"
    )
    blocks = parse_document(text.encode(), "markdown")
    assert [(b.block_type, b.block_content) for b in blocks] == [
        ("heading", "Options [`beta`]"),
        ("paragraph", "see [the `x option for more"),
        ("list_item", "an item [a`"),
        ("list_item", "another"),
        ("blockquote", "quoted [`"),
        ("table", "| a | b |\n|---|---|\n| [` | 2 |"),
    ]


def test_the_parser_runs_no_inline_rule() -> None:
    inline = {
        "autolink",
        "backticks",
        "emphasis",
        "entity",
        "escape",
        "image",
        "link",
        "newline",
        "html_inline",
    }
    assert set(markdown.BLOCK_RULES) <= set(MarkdownIt.list_plugins())
    assert not inline & set(markdown.BLOCK_RULES)


def test_a_parser_panic_is_an_ingest_error_that_names_the_lines(monkeypatch) -> None:
    # A real panic: the full rule set on the text it panics on. pyo3's PanicException is a
    # BaseException; ingest must turn it into the IngestError every caller handles.
    monkeypatch.setattr(markdown, "_parser", full_rules)
    text = "# Title\n\nfine\n\nsee [the `x option\n"
    with pytest.raises(IngestError, match=r"crashed on lines 1-5 .*--format text") as info:
        parse_document(text.encode(), "markdown")
    assert isinstance(info.value, markdown.ParserCrash)


def test_other_exceptions_from_the_parser_pass_unchanged(monkeypatch) -> None:
    class Interrupting:
        def tree(self, source: str) -> None:
            raise KeyboardInterrupt

    monkeypatch.setattr(markdown, "_parser", Interrupting)
    with pytest.raises(KeyboardInterrupt):
        parse_document(b"# Title\n", "markdown")
