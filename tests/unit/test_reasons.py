"""Reason codes with their counts, written one way everywhere."""

from blockbatch.core.reasons import counts_text


def test_counts_text_most_first_then_by_code() -> None:
    text = counts_text({"truncated": 1, "refused": 3, "invalid_value": 1})
    assert text == "3 refused, 1 invalid_value, 1 truncated"


def test_counts_text_of_nothing_is_empty() -> None:
    assert counts_text({}) == ""
