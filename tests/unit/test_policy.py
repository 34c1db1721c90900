"""The pack policy and the Claude error classifier: one set of rules for sync and batch."""

from __future__ import annotations

import pytest

from core.claude_errors import RETRY_AFTER_JITTER, classify, retry_delay_s
from core.policy import decide

TOO_LONG = "prompt is too long: 210000 tokens > 200000 maximum"


@pytest.mark.parametrize(
    ("status", "error_type", "message", "kind"),
    [
        (401, "authentication_error", "invalid x-api-key", "key_rejected"),
        (403, "permission_error", "no access", "key_rejected"),
        (429, "rate_limit_error", "slow down", "retryable"),
        (529, "overloaded_error", "overloaded", "retryable"),
        (500, "api_error", "oops", "retryable"),
        (408, "timeout", "", "retryable"),
        (None, "APIConnectionError", "connection refused", "retryable"),
        (400, "invalid_request_error", TOO_LONG, "overflow"),
        (413, "request_too_large", "too big", "overflow"),
        (400, "invalid_request_error", "tools.0: bad schema", "rejected"),
        (404, "not_found_error", "no such model", "rejected"),
        # Batch result lines carry only the error type: the status follows from it.
        (None, "invalid_request_error", TOO_LONG, "overflow"),
        (None, "authentication_error", "bad key", "key_rejected"),
        (None, "overloaded_error", "busy", "retryable"),
    ],
)
def test_every_claude_error_gets_one_kind(
    status: int | None, error_type: str, message: str, kind: str
) -> None:
    assert classify(status, error_type, message).kind == kind


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
        "creating a message batch")


def test_answer_with_remaining_blocks_splits_a_pack_and_retries_a_single_block() -> None:
    assert decide("answered", blocks=8, remaining=0).step == "done"
    split = decide("answered", blocks=8, remaining=3, reason="max_tokens")
    assert (split.step, split.reason, split.code) == ("split", "max_tokens", None)
    assert decide("answered", blocks=1, remaining=1).step == "retry"
    keep = decide("answered", blocks=8, remaining=3, stopping=True)
    assert (keep.step, keep.code) == ("keep", "cancelled")


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
    # Runs started before halving rejected requests existed replay without it.
    whole = decide("errored", blocks=4, error=error, isolate_rejected=False)
    assert (whole.step, whole.code) == ("fail", "request_rejected")


def test_rejected_key_stops_the_run() -> None:
    d = decide("errored", blocks=2, error=classify(401, "authentication_error", "bad key"))
    assert d.step == "fatal" and "ANTHROPIC_API_KEY" in d.reason
    assert d.code == "key_rejected"


@pytest.mark.parametrize("result", ["errored", "not_processed"])
def test_transient_failures_are_retried_while_retries_are_left(result: str) -> None:
    error = classify(529, "overloaded_error", "busy") if result == "errored" else None
    reason = "" if result == "errored" else "expired"
    kwargs = {"blocks": 3, "error": error, "reason": reason}
    again = decide(result, retries_left=True, **kwargs)  # type: ignore[arg-type]
    assert (again.step, again.code) == ("resubmit", None)
    last = decide(result, retries_left=False, **kwargs)  # type: ignore[arg-type]
    assert last.step == "fail" and "failed after retries" in last.reason
    assert last.code == "api_unavailable"
    keep = decide(result, retries_left=True, stopping=True,  # type: ignore[arg-type]
                  **kwargs)
    assert (keep.step, keep.code) == ("keep", "cancelled")


def test_an_unclassified_worker_failure_counts_as_transient() -> None:
    d = decide("errored", blocks=2, error=None, reason="Postgres unavailable")
    assert d.step == "fail" and d.reason == "Claude call failed after retries: " \
                                            "Postgres unavailable"
    assert d.code == "api_unavailable"


def test_the_caller_message_wins_over_the_errors_own_description() -> None:
    error = classify(400, "invalid_request_error", TOO_LONG)
    assert decide("errored", blocks=1, error=error, reason="prompt too long: x").reason == \
        "prompt too long: x"


def test_every_fail_keep_and_fatal_step_carries_a_documented_code() -> None:
    from core.reasons import REASONS
    cases = [
        decide("answered", blocks=2, remaining=1, stopping=True),
        decide("oversized", blocks=1, reason="x"),
        decide("stopped", blocks=1),
        *(decide("errored", blocks=b, error=classify(s, t, m), retries_left=r, stopping=st)
          for b in (1, 3) for r in (False, True) for st in (False, True)
          for s, t, m in [(401, "authentication_error", "k"), (529, "overloaded_error", "b"),
                          (400, "invalid_request_error", TOO_LONG),
                          (400, "invalid_request_error", "bad")]),
        *(decide("not_processed", blocks=2, reason=k, retries_left=r, stopping=st)
          for k in ("expired", "canceled", "missing") for r in (False, True)
          for st in (False, True)),
    ]
    for d in cases:
        if d.step in ("fail", "keep", "fatal"):
            assert d.code in REASONS, d
        else:
            assert d.code is None, d


def test_the_code_of_a_recorded_failure_follows_from_its_text() -> None:
    from core.policy import code_of_failure, oversized_message
    error = classify(400, "invalid_request_error", TOO_LONG)
    for d in [decide("oversized", blocks=1, reason=oversized_message("m", 300_000, 8_000,
                                                                        200_000)),
              decide("errored", blocks=1, error=error),
              decide("errored", blocks=1, error=classify(413, "request_too_large", "big")),
              decide("errored", blocks=1, error=classify(400, "invalid_request_error", "no")),
              decide("errored", blocks=2, error=classify(529, "overloaded_error", "busy")),
              decide("not_processed", blocks=2, reason="expired")]:
        assert d.step == "fail" and code_of_failure(d.reason) == d.code, d


def test_claude_down_past_retries_waits_when_the_run_can_pause() -> None:
    for status, kind in [(500, "api_error"), (503, "api_error"), (529, "overloaded_error"),
                         (None, "APITimeoutError"), (None, "APIConnectionError")]:
        error = classify(status, kind, "down")
        d = decide("errored", blocks=3, error=error, can_pause=True)
        assert d.step == "wait" and d.code is None, (status, kind)
        # Stopping still wins, and runs that cannot pause fail the blocks as before.
        assert decide("errored", blocks=3, error=error, can_pause=True,
                      stopping=True).step == "keep"
        assert decide("errored", blocks=3, error=error).code == "api_unavailable"


def test_claude_busy_or_refusing_never_waits() -> None:
    for error, step in [(classify(429, "rate_limit_error", "slow down"), "fail"),
                        (classify(400, "invalid_request_error", "bad"), "split"),
                        (classify(401, "authentication_error", "key"), "fatal")]:
        assert decide("errored", blocks=2, error=error, can_pause=True).step == step
    # A worker-side failure (no classified error) is not evidence that Claude is down.
    assert decide("errored", blocks=2, reason="worker lost", can_pause=True).step == "fail"
    # Neither is a batch request that expired.
    assert decide("not_processed", blocks=2, reason="expired", can_pause=True).step == "fail"
