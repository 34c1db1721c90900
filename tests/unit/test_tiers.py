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


def test_no_tier_gives_an_example_a_wall_clock_deadline() -> None:
    # Hypothesis's default (200 ms) fails an example a busy machine slows down, and calls
    # the test flaky when its rerun is quicker (tests/conftest.py).
    for tier in ("deep", "test", "fast"):
        assert hypothesis.settings.get_profile(tier).deadline is None, tier
    assert hypothesis.settings.default is not None
    assert hypothesis.settings.default.deadline is None
