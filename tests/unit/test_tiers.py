"""The three tiers draw different numbers of property-test examples (docs/testing.md)."""

from __future__ import annotations

import hypothesis

from tests.helpers import TIER, examples


def test_make_test_deep_draws_every_example_a_test_names() -> None:
    assert examples(300, "deep") == 300
    assert examples(60, "deep") == 60


def test_make_test_draws_a_quarter_and_make_test_fast_a_tenth_never_more_than_named() -> None:
    assert examples(300, "") == 75 and examples(300, "fast") == 30
    # Floors keep small counts meaningful, but never above what the test names.
    assert examples(100, "") == 50 and examples(100, "fast") == 20
    assert examples(30, "") == 30 and examples(10, "fast") == 10


def test_tests_without_a_count_of_their_own_follow_the_tier_profile() -> None:
    assert hypothesis.settings.default is not None
    drawn = hypothesis.settings.default.max_examples
    assert drawn == {"deep": 100, "fast": 25}.get(TIER, 50)
