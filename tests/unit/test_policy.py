"""The pack policy and the Claude error classifier: one set of rules for sync and batch."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from blockbatch.core.call_types import CallOutcome
from blockbatch.core.claude_errors import (
    HTTP_STATUS,
    RETRY_AFTER_JITTER,
    ClaudeError,
    classify,
    fatal_code_of,
    retry_delay_s,
)
from blockbatch.core.policy import (
    CALL_RESULTS,
    AttemptResult,
    Decision,
    attempt_limit,
    decide,
    decide_call,
)

TOO_LONG = "prompt is too long: 210000 tokens > 200000 maximum"


SELF_SET_LIMIT = "You have reached your specified workspace API usage limits."


@pytest.mark.parametrize(
    ("status", "error_type", "message", "error_code", "kind", "code"),
    [
        (401, "authentication_error", "invalid x-api-key", None, "fatal", "key_rejected"),
        (403, "permission_error", "no access", None, "fatal", "key_rejected"),
        (403, "permission_error", "scope", "api_key_scope_missing", "fatal", "key_rejected"),
        # Spend caps: a tier's or a contract's (429), a linked organisation's (402), and the
        # limit set in the Console (400, no error_code: the one case read from the message).
        (429, "rate_limit_error", "cap", "enforced_spend_limit_reached", "fatal", "spend_limit"),
        (429, "rate_limit_error", "cap", "contract_spend_limit_reached", "fatal", "spend_limit"),
        (
            402,
            "billing_error",
            "cap",
            "linked_organization_spend_limit_reached",
            "fatal",
            "spend_limit",
        ),
        (400, "invalid_request_error", SELF_SET_LIMIT, None, "fatal", "spend_limit"),
        (
            400,
            "invalid_request_error",
            "You have reached your specified API usage limits.",
            None,
            "fatal",
            "spend_limit",
        ),
        (402, "billing_error", "no credit", None, "fatal", "billing"),
        (
            402,
            "billing_error",
            "unavailable",
            "linked_organization_billing_unavailable",
            "fatal",
            "billing",
        ),
        (404, "not_found_error", "model: claude-opus-4-1", None, "fatal", "model_unavailable"),
        # A 404 with a code names something else (a file, an environment): no model fault.
        (404, "not_found_error", "file expired", "file_expired", "rejected", None),
        (429, "rate_limit_error", "slow down", None, "retryable", None),
        (429, "rate_limit_error", "too sharp", "ramp_limit_exceeded", "retryable", None),
        (529, "overloaded_error", "overloaded", None, "retryable", None),
        (500, "api_error", "oops", None, "retryable", None),
        (503, "api_error", "x", "registration_pending", "retryable", None),
        (504, "timeout_error", "use streaming", None, "retryable", None),
        (408, "timeout", "", None, "retryable", None),
        (None, "APIConnectionError", "connection refused", None, "retryable", None),
        (None, "APITimeoutError", "Request timed out", None, "retryable", None),
        (400, "invalid_request_error", TOO_LONG, None, "overflow", None),
        (413, "request_too_large", "too big", None, "overflow", None),
        (413, "request_too_large", "x", "request_body_too_large_after_decoding", "overflow", None),
        (400, "invalid_request_error", "tools.0: bad schema", None, "rejected", None),
        (400, "invalid_request_error", "bad", "image_dimensions_too_large", "rejected", None),
        # Batch result lines carry only the error type: the status follows from it.
        (None, "invalid_request_error", TOO_LONG, None, "overflow", None),
        (None, "authentication_error", "bad key", None, "fatal", "key_rejected"),
        (None, "billing_error", "no credit", None, "fatal", "billing"),
        (None, "not_found_error", "no such model", None, "fatal", "model_unavailable"),
        (None, "overloaded_error", "busy", None, "retryable", None),
        (None, "timeout_error", "slow", None, "retryable", None),
    ],
)
def test_every_claude_error_gets_one_kind(
    status: int | None,
    error_type: str,
    message: str,
    error_code: str | None,
    kind: str,
    code: str | None,
) -> None:
    error = classify(status, error_type, message, error_code=error_code)
    assert (error.kind, error.code) == (kind, code)


def test_a_missing_batch_is_no_missing_model() -> None:
    error = classify(404, "not_found_error", "no such batch", model_call=False)
    assert (error.kind, error.code) == ("rejected", None)


def test_the_status_of_a_batch_line_error_type() -> None:
    assert HTTP_STATUS["billing_error"] == 402 and HTTP_STATUS["timeout_error"] == 504


def test_fatal_messages_say_what_to_do_and_the_code_reads_back() -> None:
    cap = classify(429, "rate_limit_error", "cap", error_code="enforced_spend_limit_reached")
    assert "raise the limit in the Claude Console" in cap.describe()
    # Stored and read later, by any front door: the console script's command.
    assert "`blockbatch retry RUN_ID --cancelled`" in cap.describe()
    assert "enforced_spend_limit_reached" in cap.describe()
    billing = classify(402, "billing_error", "no credit")
    assert "Billing" in billing.describe() and "retry RUN_ID" in billing.describe()
    retired = classify(404, "not_found_error", "model: claude-opus-4-1", model="claude-opus-4-1")
    assert "move to claude-opus-5-5" in retired.describe()
    assert (
        "move to claude-sonnet-5-5"
        in classify(404, "not_found_error", "x", model="claude-sonnet-4-5").describe()
    )
    assert (
        "move to claude-haiku-5-5"
        in classify(404, "not_found_error", "x", model="claude-nope").describe()
    )
    for error in (cap, billing, retired, classify(401, "authentication_error", "bad")):
        assert fatal_code_of(error.describe("creating a message batch")) == error.code
    assert fatal_code_of("cancel requested") is None and fatal_code_of(None) is None


def test_only_a_plain_429_cuts_the_fleets_rate() -> None:
    assert classify(429, "rate_limit_error", "slow").cuts_rate
    assert not classify(429, "rate_limit_error", "x", error_code="ramp_limit_exceeded").cuts_rate
    assert not classify(
        429, "rate_limit_error", "x", error_code="enforced_spend_limit_reached"
    ).cuts_rate
    assert not classify(529, "overloaded_error", "x").cuts_rate


def test_a_ramp_limit_keeps_its_retry_after() -> None:
    ramp = classify(429, "rate_limit_error", "x", error_code="ramp_limit_exceeded", retry_after="7")
    assert retry_delay_s(ramp, 0.0) == 7.0
    spend = classify(429, "rate_limit_error", "x", error_code="enforced_spend_limit_reached")
    assert spend.retry_after_s is None


def test_retry_after_is_honoured_bounded_and_jittered() -> None:
    error = classify(429, "rate_limit_error", "slow down", retry_after="10")
    assert retry_delay_s(error, 0.0) == 10.0
    assert retry_delay_s(error, 0.999) == pytest.approx(10.0 * (1 + RETRY_AFTER_JITTER * 0.999))
    assert retry_delay_s(classify(429, "x", retry_after="0"), 0.0) == 0.5
    assert retry_delay_s(classify(429, "x", retry_after="9999"), 0.0) == 300.0
    assert retry_delay_s(classify(429, "x", retry_after="Wed, 21 Oct 2026"), 0.0) is None
    assert retry_delay_s(classify(529, "x"), 0.5) is None


def test_a_rejected_key_message_says_what_to_do() -> None:
    text = classify(401, "authentication_error", "invalid x-api-key").describe()
    assert "the API key was rejected" in text and "ANTHROPIC_API_KEY" in text
    assert "while creating a message batch" in classify(401, "e").describe(
        "creating a message batch"
    )


def test_answer_with_remaining_blocks_splits_a_pack_and_retries_a_single_block() -> None:
    assert decide("answered", blocks=8, remaining=0).step == "done"
    split = decide("answered", blocks=8, remaining=3, reason="max_tokens")
    assert (split.step, split.reason, split.code) == ("split", "max_tokens", None)
    assert decide("answered", blocks=1, remaining=1).step == "retry"
    keep = decide("answered", blocks=8, remaining=3, stopping=True)
    assert (keep.step, keep.code) == ("keep", "cancelled")


@pytest.mark.parametrize(
    ("outcome", "blocks", "message", "step", "code"),
    [
        ("empty", 3, None, "done", None),
        ("cancelled", 3, None, "keep", "cancelled"),
        ("oversized", 1, "block is too large for m", "fail", "oversized"),
        ("over_budget", 4, None, "fail", "budget_exhausted"),
        # The whole pack does not fit what the budget leaves, one block would: halve it.
        ("over_budget_split", 4, "budget", "split", None),
        ("over_budget_split", 1, "budget", "fail", "budget_exhausted"),
        ("overflow", 4, "prompt is too long", "split", None),
        ("overflow", 1, "prompt is too long", "fail", "prompt_too_long"),
        ("request_error", 4, "bad request", "split", None),
        ("request_error", 1, "bad request", "fail", "request_rejected"),
    ],
)
def test_a_call_that_did_not_answer_is_decided_by_the_table(
    outcome: str, blocks: int, message: str | None, step: str, code: str | None
) -> None:
    decision = decide_call(outcome, blocks=blocks, message=message)
    assert (decision.step, decision.code) == (step, code)
    if message is not None:
        assert message in decision.reason


def test_every_call_outcome_but_an_answer_has_a_row() -> None:
    assert set(CALL_RESULTS) == set(get_args(CallOutcome)) - {"answered"}


def test_a_turned_down_call_keeps_claudes_classified_error() -> None:
    fatal = ClaudeError(kind="fatal", status=403, error_type="x", message="no", code="billing")
    assert decide_call("request_error", blocks=4, message="no", error=fatal) == Decision(
        "fatal", "no", "billing"
    )


def test_nothing_left_oversized_and_stopped_attempts() -> None:
    assert decide("nothing_left", blocks=0).step == "done"
    too_big = decide("oversized", blocks=1, reason="block is too large for m")
    assert (too_big.step, too_big.reason) == ("fail", "block is too large for m")
    assert too_big.code == "oversized"
    stopped = decide("stopped", blocks=4)
    assert (stopped.step, stopped.code) == ("keep", "cancelled")


def test_prompt_too_long_splits_until_a_single_block_fails() -> None:
    error = classify(400, "invalid_request_error", TOO_LONG)
    assert decide("errored", blocks=4, error=error).step == "split"
    assert decide("errored", blocks=4, error=error).code is None
    assert decide("errored", blocks=4, error=error, stopping=True).code == "cancelled"
    single = decide("errored", blocks=1, error=error)
    assert single.step == "fail" and "too long" in single.reason
    assert single.code == "prompt_too_long"
    too_large = decide("errored", blocks=1, error=classify(413, "request_too_large", "big"))
    assert (too_large.step, too_large.code) == ("fail", "prompt_too_long")


def test_rejected_request_is_halved_until_a_single_block_fails_with_claudes_message() -> None:
    error = classify(400, "invalid_request_error", "tools.0: bad schema")
    assert decide("errored", blocks=4, error=error).step == "split"
    keep = decide("errored", blocks=4, error=error, stopping=True)
    assert (keep.step, keep.code) == ("keep", "cancelled")
    single = decide("errored", blocks=1, error=error)
    assert single.step == "fail" and "tools.0: bad schema" in single.reason
    assert single.code == "request_rejected"


def test_rejected_key_stops_the_run() -> None:
    d = decide("errored", blocks=2, error=classify(401, "authentication_error", "bad key"))
    assert d.step == "fatal" and "ANTHROPIC_API_KEY" in d.reason
    assert d.code == "key_rejected"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (
            classify(429, "rate_limit_error", "cap", error_code="enforced_spend_limit_reached"),
            "spend_limit",
        ),
        (
            classify(429, "rate_limit_error", "cap", error_code="contract_spend_limit_reached"),
            "spend_limit",
        ),
        (
            classify(
                402, "billing_error", "x", error_code="linked_organization_spend_limit_reached"
            ),
            "spend_limit",
        ),
        (classify(400, "invalid_request_error", SELF_SET_LIMIT), "spend_limit"),
        (classify(402, "billing_error", "no credit"), "billing"),
        (classify(404, "not_found_error", "model: x"), "model_unavailable"),
    ],
)
@pytest.mark.parametrize("blocks", [1, 6])
def test_an_account_error_stops_the_run_without_retries_or_halving(
    error: ClaudeError, code: str, blocks: int
) -> None:
    for retries_left in (False, True):
        for can_pause in (False, True):
            d = decide(
                "errored",
                blocks=blocks,
                error=error,
                retries_left=retries_left,
                can_pause=can_pause,
            )
            assert (d.step, d.code) == ("fatal", code)
    assert decide("errored", blocks=blocks, error=error, stopping=True).step == "fatal"


def test_a_timeout_is_retried_and_fails_after_retries_but_never_pauses_the_run() -> None:
    for error in (
        classify(504, "timeout_error", "slow"),
        classify(None, "APITimeoutError", "Request timed out"),
    ):
        assert decide("errored", blocks=2, error=error, retries_left=True).step == "resubmit"
        last = decide("errored", blocks=2, error=error, can_pause=True)
        assert (last.step, last.code) == ("fail", "api_unavailable")
    down = decide(
        "errored", blocks=2, error=classify(None, "APIConnectionError", "x"), can_pause=True
    )
    assert down.step == "wait"


def test_a_refused_lone_block_gets_no_second_attempt_a_refused_pack_is_halved() -> None:
    assert attempt_limit(1, True, 3) == 1
    assert attempt_limit(4, True, 3) == 3
    assert attempt_limit(1, False, 3) == 3
    # A refused pack of several is a mapping failure: every block remains, none charged.
    assert decide("answered", blocks=4, remaining=4, reason="refused").step == "split"
    # A refused lone block failed in apply_results: nothing remains, nothing is asked again.
    assert decide("answered", blocks=1, remaining=0).step == "done"


@pytest.mark.parametrize("result", ["errored", "not_processed"])
def test_transient_failures_are_retried_while_retries_are_left(result: AttemptResult) -> None:
    error = classify(529, "overloaded_error", "busy") if result == "errored" else None
    reason = "" if result == "errored" else "expired"
    kwargs: dict[str, Any] = {"blocks": 3, "error": error, "reason": reason}
    again = decide(result, retries_left=True, **kwargs)
    assert (again.step, again.code) == ("resubmit", None)
    last = decide(result, retries_left=False, **kwargs)
    assert last.step == "fail" and "failed after retries" in last.reason
    assert last.code == "api_unavailable"
    keep = decide(
        result,
        retries_left=True,
        stopping=True,
        **kwargs,
    )
    assert (keep.step, keep.code) == ("keep", "cancelled")


def test_an_unclassified_worker_failure_counts_as_transient() -> None:
    d = decide("errored", blocks=2, error=None, reason="Postgres unavailable")
    assert d.step == "fail" and d.reason == "Claude call failed after retries: Postgres unavailable"
    assert d.code == "api_unavailable"


def test_the_caller_message_wins_over_the_errors_own_description() -> None:
    error = classify(400, "invalid_request_error", TOO_LONG)
    assert (
        decide("errored", blocks=1, error=error, reason="prompt too long: x").reason
        == "prompt too long: x"
    )


def test_every_fail_keep_and_fatal_step_carries_a_documented_code() -> None:
    from blockbatch.core.reasons import REASONS

    cases = [
        decide("answered", blocks=2, remaining=1, stopping=True),
        decide("oversized", blocks=1, reason="x"),
        decide("stopped", blocks=1),
        *(
            decide("errored", blocks=b, error=classify(s, t, m), retries_left=r, stopping=st)
            for b in (1, 3)
            for r in (False, True)
            for st in (False, True)
            for s, t, m in [
                (401, "authentication_error", "k"),
                (529, "overloaded_error", "b"),
                (402, "billing_error", "b"),
                (404, "not_found_error", "m"),
                (400, "invalid_request_error", SELF_SET_LIMIT),
                (400, "invalid_request_error", TOO_LONG),
                (400, "invalid_request_error", "bad"),
            ]
        ),
        *(
            decide("not_processed", blocks=2, reason=k, retries_left=r, stopping=st)
            for k in ("expired", "canceled", "missing")
            for r in (False, True)
            for st in (False, True)
        ),
    ]
    for d in cases:
        if d.step in ("fail", "keep", "fatal"):
            assert d.code in REASONS, d
        else:
            assert d.code is None, d


def test_the_code_of_a_recorded_failure_follows_from_its_text() -> None:
    from blockbatch.core.policy import code_of_failure, oversized_message

    error = classify(400, "invalid_request_error", TOO_LONG)
    for d in [
        decide("oversized", blocks=1, reason=oversized_message("m", 300_000, 8_000, 200_000)),
        decide("errored", blocks=1, error=error),
        decide("errored", blocks=1, error=classify(413, "request_too_large", "big")),
        decide("errored", blocks=1, error=classify(400, "invalid_request_error", "no")),
        decide("errored", blocks=2, error=classify(529, "overloaded_error", "busy")),
        decide("not_processed", blocks=2, reason="expired"),
    ]:
        assert d.step == "fail" and code_of_failure(d.reason) == d.code, d


def test_claude_down_past_retries_waits_when_the_run_can_pause() -> None:
    for status, kind in [
        (500, "api_error"),
        (503, "api_error"),
        (529, "overloaded_error"),
        (None, "APIConnectionError"),
    ]:
        error = classify(status, kind, "down")
        d = decide("errored", blocks=3, error=error, can_pause=True)
        assert d.step == "wait" and d.code is None, (status, kind)
        # Stopping still wins, and runs that cannot pause fail the blocks.
        assert (
            decide("errored", blocks=3, error=error, can_pause=True, stopping=True).step == "keep"
        )
        assert decide("errored", blocks=3, error=error).code == "api_unavailable"


def test_claude_busy_or_refusing_never_waits() -> None:
    for error, step in [
        (classify(429, "rate_limit_error", "slow down"), "fail"),
        (classify(400, "invalid_request_error", "bad"), "split"),
        (classify(401, "authentication_error", "key"), "fatal"),
    ]:
        assert decide("errored", blocks=2, error=error, can_pause=True).step == step
    # A worker-side failure (no classified error) is not evidence that Claude is down.
    assert decide("errored", blocks=2, reason="worker lost", can_pause=True).step == "fail"
    # Neither is a batch request that expired.
    assert decide("not_processed", blocks=2, reason="expired", can_pause=True).step == "fail"


def test_retry_takes_refused_blocks_only_when_named_and_fatal_leftovers_with_cancelled() -> None:
    from blockbatch.core.retry import check_retry
    from blockbatch.core.retry_types import RetryRequest

    counts = {
        ("ai_complete", None): 5,
        ("failed", "refused"): 2,
        ("failed", "invalid_value"): 1,
        ("cancelled", "spend_limit"): 4,
    }
    plain = check_retry("r", "failed", counts, {}, RetryRequest())
    assert (plain.blocks, plain.reasons) == (1, {"invalid_value": 1})
    named = check_retry("r", "failed", counts, {}, RetryRequest(reasons=["refused"]))
    assert (named.blocks, named.reasons) == (2, {"refused": 2})
    cancelled = check_retry("r", "failed", counts, {}, RetryRequest(include_cancelled=True))
    assert cancelled.reasons == {"spend_limit": 4, "invalid_value": 1}
    only_refused = check_retry(
        "r", "completed_with_failures", {("failed", "refused"): 1}, {}, RetryRequest()
    )
    assert only_refused.refusal is not None
    assert "--reason refused" in only_refused.refusal.message
