"""bench/markdown_rules.py: both rule sets' blocks compared, panics counted."""

from __future__ import annotations

from bench.markdown_rules import PANIC, blocks, compare, full_rules


def test_compare_counts_the_full_rules_panic_and_no_difference() -> None:
    counts = compare(["[`", "# a\n\npara [x] `y`", "- one\n- two\n\n| a |\n|---|\n| b |"])
    assert counts == {"texts": 3, "full_panics": 1, "block_panics": 0, "differ": 0}


def test_blocks_says_panic_only_for_a_panic() -> None:
    assert blocks("see [the `x option", full_rules) == PANIC
    assert blocks("see the x option", full_rules) != PANIC
