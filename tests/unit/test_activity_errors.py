"""How a failure of the anthropic client becomes the ApplicationError Temporal sees."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anthropic
import httpx2 as httpx

from activities.errors import (
    API_KEY_REJECTED,
    BATCH_REJECTED,
    RETRYABLE,
    application_error,
    from_api_error,
)
from core.claude_errors import ClaudeError

REQUEST = httpx.Request("POST", "http://simulator/v1/messages")


def status_error(status: int, error_type: str, message: str,
                 headers: dict[str, str] | None = None) -> anthropic.APIStatusError:
    body: dict[str, Any] = {"type": "error", "error": {"type": error_type, "message": message}}
    response = httpx.Response(status, request=REQUEST, json=body, headers=headers)
    return anthropic.APIStatusError(message, response=response, body=body)


def test_overloaded_is_retried_after_a_jittered_retry_after_with_the_error_attached() -> None:
    err = application_error(from_api_error(
        status_error(529, "overloaded_error", "Overloaded", {"retry-after": "10"})))
    assert err.type == RETRYABLE and not err.non_retryable
    assert err.message == "Claude answered 529 overloaded_error: Overloaded"
    assert err.next_retry_delay is not None
    assert timedelta(seconds=10) <= err.next_retry_delay <= timedelta(seconds=15)
    detail = err.details[0]
    assert isinstance(detail, ClaudeError) and detail.kind == "retryable"


def test_rejected_key_stops_the_run_and_says_what_to_do() -> None:
    err = application_error(from_api_error(status_error(401, "authentication_error", "bad")),
                            "creating a message batch")
    assert err.type == API_KEY_REJECTED and err.non_retryable
    assert "while creating a message batch" in err.message
    assert "ANTHROPIC_API_KEY" in err.message


def test_no_answer_is_retried() -> None:
    err = application_error(from_api_error(anthropic.APIConnectionError(request=REQUEST)),
                            "looking at batch b1")
    assert err.type == RETRYABLE
    assert err.message == ("could not reach Claude while looking at batch b1 "
                           "(APIConnectionError); will retry")


def test_a_refused_batch_call_is_not_retried() -> None:
    error = from_api_error(status_error(404, "not_found_error", "no such batch"))
    assert error.kind == "rejected"
    err = application_error(error, "canceling batch b1")
    assert err.type == BATCH_REJECTED and err.non_retryable
    assert "404 not_found_error: no such batch" in err.message


def test_prompt_too_long_is_an_overflow() -> None:
    error = from_api_error(status_error(400, "invalid_request_error",
                                        "prompt is too long: 210000 tokens"))
    assert error.kind == "overflow"
    assert error.describe() == "prompt too long: prompt is too long: 210000 tokens"
