"""Pure rules of batch mode: custom_ids, request params, what follows each result."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from activities.batches import batch_params, custom_id_for, decide

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_custom_id_names_pack_path_attempt_and_run() -> None:
    cid = custom_id_for("20260101-120000-abc123", "3.0.1", 1)
    assert cid.startswith("p3_0_1_a1-") and CUSTOM_ID.match(cid)
    assert cid != custom_id_for("20260101-120000-abc124", "3.0.1", 1)
    assert cid != custom_id_for("20260101-120000-abc123", "3.0.1", 2)


@given(st.integers(0, 10**6), st.lists(st.sampled_from("01"), max_size=16),
       st.integers(1, 99))
def test_custom_id_always_matches_the_api_pattern(index: int, halves: list[str],
                                                  attempt: int) -> None:
    path = ".".join([str(index), *halves])
    assert CUSTOM_ID.match(custom_id_for("run", path, attempt))


def test_batch_params_carry_temperature_in_the_body() -> None:
    params = batch_params({"model": "m", "max_tokens": 5, "extra_body": {"temperature": 0}})
    assert params == {"model": "m", "max_tokens": 5, "temperature": 0}


def test_answer_with_remaining_blocks_splits_a_pack_and_retries_a_single_block() -> None:
    assert decide("succeeded", blocks=8, remaining=0).step == "done"
    assert decide("succeeded", blocks=8, remaining=3, reason="max_tokens").step == "split"
    assert decide("succeeded", blocks=1, remaining=1).step == "retry"
    assert decide("succeeded", blocks=8, remaining=3, stopping=True).step == "keep"


def test_invalid_request_fails_the_blocks_with_the_message() -> None:
    d = decide("errored", blocks=4, error_type="invalid_request_error",
               error_message="tools.0: bad schema")
    assert d.step == "fail" and "tools.0: bad schema" in d.reason


def test_prompt_too_long_splits_until_a_single_block_fails() -> None:
    msg = "prompt is too long: 210000 tokens > 200000 maximum"
    assert decide("errored", blocks=4, error_type="invalid_request_error",
                  error_message=msg).step == "split"
    single = decide("errored", blocks=1, error_type="invalid_request_error", error_message=msg)
    assert single.step == "fail" and "too long" in single.reason


def test_transient_errors_and_expiry_are_resubmitted_up_to_the_limit() -> None:
    for kind, error in (("errored", "api_error"), ("errored", "overloaded_error"),
                        ("expired", None), ("canceled", None), ("missing", None)):
        assert decide(kind, blocks=3, error_type=error, resubmits=0).step == "resubmit"
        last = decide(kind, blocks=3, error_type=error, resubmits=5, max_resubmits=5)
        assert last.step == "fail" and "giving up" in last.reason
        assert decide(kind, blocks=3, error_type=error, stopping=True).step == "keep"


def test_rejected_key_stops_the_run() -> None:
    d = decide("errored", blocks=2, error_type="authentication_error", error_message="bad key")
    assert d.step == "fatal" and "ANTHROPIC_API_KEY" in d.reason
