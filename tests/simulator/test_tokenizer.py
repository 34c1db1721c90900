"""The simulator's tokenizer generations (contract §0 rule 8): exact, additive, and cut
where the count says."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from blockbatch.core.registry import get_model
from blockbatch.simulator.tokenizer import NEW, OLD, count_tokens, iter_token_spans, tokenizer_for


def test_each_model_gets_its_generations_tokenizer():
    assert tokenizer_for(get_model("claude-haiku-5-5")) is NEW
    assert tokenizer_for(get_model("claude-opus-4-7")) is NEW
    assert tokenizer_for(get_model("claude-sonnet-4-6")) is OLD
    assert tokenizer_for(get_model("claude-haiku-4-5")) is OLD


def test_scaling_is_exact_not_float_rounded():
    assert [NEW.scaled(n) for n in (0, 1, 10, 100, 1000)] == [0, 2, 13, 130, 1300]
    assert OLD.scaled(10) == 10


@given(st.text(max_size=300), st.text(max_size=300))
def test_new_counts_are_the_old_ones_scaled_up_per_piece(a, b):
    old = count_tokens(a)
    assert NEW.count(a) == -(-old * 13 // 10)
    # pieces add up within one token each of the whole
    joined = NEW.count(a + " " + b)
    assert NEW.count(a) + NEW.count(b) - 2 <= joined <= NEW.count(a) + NEW.count(b) + 1


@given(st.text(max_size=300), st.integers(min_value=0, max_value=200))
def test_truncation_keeps_the_longest_prefix_that_fits(text, limit):
    for tokenizer in (OLD, NEW):
        cut = tokenizer.truncate(text, limit)
        assert text.startswith(cut)
        assert tokenizer.count(cut) <= limit
        following = [end for _, end in iter_token_spans(text) if end > len(cut)]
        if following:  # one more token would not fit
            assert tokenizer.count(text[: following[0]]) > limit
