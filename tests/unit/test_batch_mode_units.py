"""Pure rules of batch mode: custom_ids, request params, parts, ledger rows, and what the\none pack policy (``blockbatch.core.policy.decide``) makes of each batch result."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbatch.core.batch_types import BatchOptions
from blockbatch.core.batching import (
    PartCutter,
    batch_params,
    custom_id_for,
    request_size,
    result_row,
)
from blockbatch.core.claude_errors import classify
from blockbatch.core.policy import Decision, decide, split_pack
from blockbatch.core.prompt import build_request
from blockbatch.core.registry import Usage, cost_usd, get_model
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_custom_id_names_pack_path_attempt_and_run() -> None:
    cid = custom_id_for("20260101-120000-abc123", "3.0.1", 1)
    assert cid.startswith("p3_0_1_a1-") and CUSTOM_ID.match(cid)
    assert cid != custom_id_for("20260101-120000-abc124", "3.0.1", 1)
    assert cid != custom_id_for("20260101-120000-abc123", "3.0.1", 2)


@given(st.integers(0, 10**6), st.lists(st.sampled_from("01"), max_size=16), st.integers(1, 99))
def test_custom_id_always_matches_the_api_pattern(
    index: int, halves: list[str], attempt: int
) -> None:
    path = ".".join([str(index), *halves])
    assert CUSTOM_ID.match(custom_id_for("run", path, attempt))


def test_batch_params_are_the_sync_request_without_sampling_parameters() -> None:
    spec = load_schema(
        {
            "properties": {"s": {"type": "string"}},
            "prompt_config": {"system_instructions": "x", "temperature": 0},
        }
    )
    request = build_request(
        spec, [{"block_uid": "d:0", "block_type": "p", "block_content": "c"}], max_tokens=5
    )
    params = batch_params(request)
    assert params == request and "temperature" not in json.dumps(params)
    # Batches take neither a streamed request nor a max_tokens 0 warm-up (contract §5).
    for wrong in ({**request, "max_tokens": 0}, {**request, "stream": True}):
        with pytest.raises(ValueError, match="batch"):
            batch_params(wrong)


def after_result(
    result_type: str,
    *,
    blocks: int,
    remaining: int = 0,
    reason: str = "",
    error_type: str | None = None,
    error_message: str = "",
    resubmits: int = 0,
    max_resubmits: int = 5,
    stopping: bool = False,
) -> Decision:
    """What ``apply_round`` asks the pack policy for one batch result."""
    retries_left = resubmits < max_resubmits
    if result_type == "succeeded":
        return decide(
            "answered", blocks=blocks, remaining=remaining, reason=reason, stopping=stopping
        )
    if result_type == "errored":
        return decide(
            "errored",
            blocks=blocks,
            error=classify(None, error_type, error_message),
            retries_left=retries_left,
            stopping=stopping,
        )
    return decide(
        "not_processed",
        blocks=blocks,
        reason=result_type,
        retries_left=retries_left,
        stopping=stopping,
    )


def test_answer_with_remaining_blocks_splits_a_pack_and_retries_a_single_block() -> None:
    assert after_result("succeeded", blocks=8, remaining=0).step == "done"
    assert after_result("succeeded", blocks=8, remaining=3, reason="max_tokens").step == "split"
    assert after_result("succeeded", blocks=1, remaining=1).step == "retry"
    assert after_result("succeeded", blocks=8, remaining=3, stopping=True).step == "keep"


def test_invalid_request_is_halved_until_a_single_block_fails_with_the_message() -> None:
    several = after_result(
        "errored", blocks=4, error_type="invalid_request_error", error_message="tools.0: bad schema"
    )
    assert several.step == "split"
    d = after_result(
        "errored", blocks=1, error_type="invalid_request_error", error_message="tools.0: bad schema"
    )
    assert d.step == "fail" and "tools.0: bad schema" in d.reason


def test_prompt_too_long_splits_until_a_single_block_fails() -> None:
    msg = "prompt is too long: 210000 tokens > 200000 maximum"
    assert (
        after_result(
            "errored", blocks=4, error_type="invalid_request_error", error_message=msg
        ).step
        == "split"
    )
    single = after_result(
        "errored", blocks=1, error_type="invalid_request_error", error_message=msg
    )
    assert single.step == "fail" and "too long" in single.reason


def test_transient_errors_and_expiry_are_resubmitted_up_to_the_limit() -> None:
    for kind, error in (
        ("errored", "api_error"),
        ("errored", "overloaded_error"),
        ("expired", None),
        ("canceled", None),
        ("missing", None),
    ):
        assert after_result(kind, blocks=3, error_type=error, resubmits=0).step == "resubmit"
        last = after_result(kind, blocks=3, error_type=error, resubmits=5, max_resubmits=5)
        assert last.step == "fail" and "failed after retries" in last.reason
        assert after_result(kind, blocks=3, error_type=error, stopping=True).step == "keep"


def test_rejected_key_stops_the_run() -> None:
    d = after_result(
        "errored", blocks=2, error_type="authentication_error", error_message="bad key"
    )
    assert d.step == "fatal" and "ANTHROPIC_API_KEY" in d.reason


def test_parts_are_cut_at_the_request_count_and_the_byte_limit() -> None:
    request = {"custom_id": "p0_a1-00000000", "params": {"text": "x" * 4_000}}
    size = request_size(request)
    cutter = PartCutter(BatchOptions(max_requests_per_batch=10, max_batch_bytes=10_000))
    closed = [cutter.add(request, {}) for _ in range(4)]
    assert [c.index if c else None for c in closed] == [None, None, 0, None]
    assert closed[2] is not None and len(closed[2].requests) == 2
    assert closed[2].nbytes == 2 * size <= 10_000
    last = cutter.last()
    assert last is not None and (last.index, len(last.requests)) == (1, 2)
    by_count = PartCutter(BatchOptions(max_requests_per_batch=3))
    closed = [by_count.add(request, {}) for _ in range(7)]
    assert [len(c.requests) for c in closed if c] == [3, 3]
    assert PartCutter(BatchOptions()).last() is None


def test_split_pack_halves_into_numbered_children() -> None:
    assert split_pack("3.1", ["a", "b", "c"]) == [("3.1.0", ["a", "b"]), ("3.1.1", ["c"])]
    assert split_pack("2", ["a"]) == [("2.0", ["a"])]


def test_result_rows_price_answers_at_batch_rates_and_explain_the_rest() -> None:
    model = get_model(RunOptions().model)
    usage = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 50}
    ok = result_row(
        7,
        "p0_a1-x",
        {"type": "succeeded", "message": {"stop_reason": "tool_use", "usage": usage}},
        model,
        1500,
    )
    assert (ok.status, ok.http_status, ok.stop_reason, ok.latency_ms) == (
        "succeeded",
        200,
        "tool_use",
        1500,
    )
    assert ok.cost_usd == cost_usd(model, Usage(**usage), batch=True)
    errored = result_row(
        8,
        "p1_a1-x",
        {
            "type": "errored",
            "error": {
                "request_id": "req_1",
                "error": {"type": "overloaded_error", "message": "busy"},
            },
        },
        model,
        None,
    )
    assert (
        errored.status,
        errored.http_status,
        errored.error_type,
        errored.error_message,
        errored.request_id,
    ) == ("failed", 529, "overloaded_error", "busy", "req_1")
    canceled = result_row(9, "p2_a1-x", {"type": "canceled"}, model, None)
    assert (canceled.result_type, canceled.status) == ("canceled", "abandoned")
    odd = result_row(10, "p3_a1-x", {"type": "surprise"}, model, None)
    assert (odd.result_type, odd.status, odd.cost_usd) == ("missing", "failed", 0.0)


def test_a_batch_lines_spend_cap_stops_the_run_like_a_synchronous_one() -> None:
    # The line's error.details.error_code is kept (ledger: llm_calls.error_code) and read by
    # the classifier: a spend cap ends the run's calls instead of being resubmitted.
    model = get_model(RunOptions().model)
    line = result_row(
        11,
        "p4_a1-x",
        {
            "type": "errored",
            "error": {
                "error": {
                    "type": "rate_limit_error",
                    "message": "spend cap",
                    "details": {"error_code": "enforced_spend_limit_reached"},
                }
            },
        },
        model,
        None,
    )
    assert (line.http_status, line.error_code) == (429, "enforced_spend_limit_reached")
    error = classify(None, line.error_type, line.error_message or "", error_code=line.error_code)
    assert (error.kind, error.code) == ("fatal", "spend_limit")
    step = decide("errored", blocks=12, error=error, retries_left=True)
    assert (step.step, step.code) == ("fatal", "spend_limit")
    plain = result_row(
        12,
        "p5_a1-x",
        {
            "type": "errored",
            "error": {"error": {"type": "rate_limit_error", "message": "slow down"}},
        },
        model,
        None,
    )
    assert plain.error_code is None
    assert (
        decide(
            "errored",
            blocks=12,
            retries_left=True,
            error=classify(None, plain.error_type, "slow down"),
        ).step
        == "resubmit"
    )
