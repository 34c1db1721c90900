"""The stream trigger rule (blockbatch/core/streams.py): when buffered rows become a pack."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbatch.core.streams import (
    IDLE_RECHECK_S,
    Buffered,
    RowError,
    StreamTriggers,
    due,
    next_check,
    parse_line,
    row_text,
)

T = StreamTriggers(max_rows=10, max_tokens=1000, max_wait_s=2.0)


def test_nothing_buffered_is_never_due_even_when_closed() -> None:
    assert due(Buffered(rows=0, closed=True, oldest_wait_s=99), T) is None
    assert next_check(Buffered(), T) == IDLE_RECHECK_S


@pytest.mark.parametrize(
    ("buffered", "reason"),
    [
        (Buffered(rows=3, closed=True), "closed"),
        (Buffered(rows=10, tokens=5), "rows"),
        (Buffered(rows=2, tokens=1000), "tokens"),
        (Buffered(rows=2, tokens=5, full_pack=True), "pack_full"),
        (Buffered(rows=2, tokens=5, oldest_wait_s=2.0), "wait"),
        (Buffered(rows=9, tokens=999, oldest_wait_s=1.99), None),
    ],
)
def test_the_first_trigger_that_fires_names_the_pack(buffered: Buffered, reason: str) -> None:
    assert due(buffered, T) == reason


def test_without_row_or_token_limits_a_full_pack_or_the_wait_forms_it() -> None:
    loose = StreamTriggers(max_wait_s=5)
    assert due(Buffered(rows=900, tokens=10**6), loose) is None
    assert due(Buffered(rows=900, full_pack=True), loose) == "pack_full"


@given(rows=st.integers(1, 100), waited=st.floats(0, 10), wait=st.floats(0.1, 10))
def test_not_due_means_the_next_look_is_when_the_oldest_row_would_be(
    rows: int, waited: float, wait: float
) -> None:
    t = StreamTriggers(max_wait_s=wait)
    b = Buffered(rows=rows, oldest_wait_s=waited)
    if due(b, t) is None:
        assert waited + next_check(b, t) >= wait
        assert due(Buffered(rows=rows, oldest_wait_s=waited + next_check(b, t)), t) == "wait"


def test_max_rows_above_max_buffered_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot exceed max_buffered"):
        StreamTriggers(max_rows=100, max_buffered=50)


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("{not json", "not a JSON line"),
        ('{"body": "x"}', "no 'text' field"),
        ('{"text": "   "}', "is empty"),
        ("[1, 2]", "must be a JSON object"),
        ('{"text": "a\\u0000b"}', "NUL"),
    ],
)
def test_a_bad_line_is_an_invalid_row_with_a_reason(line: str, needle: str) -> None:
    with pytest.raises(RowError, match=needle) as err:
        parse_line(line, "text")
    assert err.value.reason == "invalid_row"


def test_a_row_is_its_text_field_or_a_string() -> None:
    assert parse_line('{"id": 1, "text": "hello"}', "text") == ({"id": 1, "text": "hello"}, "hello")
    assert row_text({"body": {"a": 1}}, "body") == '{"a": 1}'
    assert row_text("plain", "text") == "plain"
