"""How a failure of the anthropic client becomes the ApplicationError Temporal sees."""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import anthropic
import httpx2 as httpx

from activities.errors import (
    BATCH_REJECTED,
    RETRYABLE,
    RUN_STOPPED,
    application_error,
)
from blockbatch.core.claude_errors import ClaudeError, is_outage, is_unreachable
from blockbatch.send.errors import from_api_error

REQUEST = httpx.Request(
    "POST", "http://simulator/v1/messages", json={"model": "claude-opus-4-1", "max_tokens": 10}
)
BATCH_REQUEST = httpx.Request("GET", "http://simulator/v1/messages/batches/b1")


def status_error(
    status: int,
    error_type: str,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    error_code: str | None = None,
    request: httpx.Request = REQUEST,
) -> anthropic.APIStatusError:
    """The error the SDK raises for this answer (its own class for the status and code)."""
    error: dict[str, Any] = {"type": error_type, "message": message}
    if error_code is not None:
        error["details"] = {"error_code": error_code}
    body: dict[str, Any] = {"type": "error", "error": error}
    response = httpx.Response(status, request=request, json=body, headers=headers)
    client = anthropic.Anthropic(api_key="k", base_url="http://simulator")
    return client._make_status_error(message, body=body, response=response)


def test_overloaded_is_retried_after_a_jittered_retry_after_with_the_error_attached() -> None:
    err = application_error(
        from_api_error(status_error(529, "overloaded_error", "Overloaded", {"retry-after": "10"}))
    )
    assert err.type == RETRYABLE and not err.non_retryable
    assert err.message == "Claude answered 529 overloaded_error: Overloaded"
    assert err.next_retry_delay is not None
    assert timedelta(seconds=10) <= err.next_retry_delay <= timedelta(seconds=15)
    detail = err.details[0]
    assert isinstance(detail, ClaudeError) and detail.kind == "retryable"


def test_rejected_key_stops_the_run_and_says_what_to_do() -> None:
    err = application_error(
        from_api_error(status_error(401, "authentication_error", "bad")), "creating a message batch"
    )
    assert err.type == RUN_STOPPED and err.non_retryable
    assert "while creating a message batch" in err.message
    assert "ANTHROPIC_API_KEY" in err.message


def test_no_answer_is_retried() -> None:
    err = application_error(
        from_api_error(anthropic.APIConnectionError(request=REQUEST)), "looking at batch b1"
    )
    assert err.type == RETRYABLE
    assert err.message == (
        "could not reach Claude at simulator while looking at batch b1 "
        "(APIConnectionError: Connection error.); will retry"
    )


def _no_connection(cause: BaseException) -> anthropic.APIConnectionError:
    try:
        try:
            raise cause
        except OSError as inner:
            raise httpx.ConnectError(str(inner)) from inner
    except httpx.ConnectError as outer:
        err = anthropic.APIConnectionError(request=REQUEST)
        err.__cause__ = outer
        return err


def test_a_connection_that_never_happened_names_the_host_and_the_cause() -> None:
    refused = from_api_error(_no_connection(ConnectionRefusedError(111, "Connection refused")))
    assert is_unreachable(refused) and is_outage(refused)
    assert refused.host == "simulator"
    assert refused.message == "connection refused ([Errno 111] Connection refused)"
    assert refused.describe() == (
        "could not reach Claude at simulator (APIConnectionError: connection refused "
        "([Errno 111] Connection refused)); will retry"
    )
    dns = from_api_error(_no_connection(socket.gaierror(-2, "Name or service not known")))
    assert dns.message.startswith("the host name does not resolve (DNS)")
    # A read timeout reached the server: slow, not unreachable.
    slow = from_api_error(anthropic.APITimeoutError(request=REQUEST))
    assert not is_unreachable(slow) and slow.message.startswith("Request timed out")


def test_a_refused_batch_call_is_not_retried() -> None:
    error = from_api_error(
        status_error(404, "not_found_error", "no such batch", request=BATCH_REQUEST)
    )
    assert error.kind == "rejected"
    err = application_error(error, "canceling batch b1")
    assert err.type == BATCH_REJECTED and err.non_retryable
    assert "404 not_found_error: no such batch" in err.message


def test_prompt_too_long_is_an_overflow() -> None:
    error = from_api_error(
        status_error(400, "invalid_request_error", "prompt is too long: 210000 tokens")
    )
    assert error.kind == "overflow"
    assert error.describe() == "prompt too long: prompt is too long: 210000 tokens"


def test_the_sdks_spend_cap_is_fatal_by_its_error_code_with_no_retry() -> None:
    raised = status_error(
        429,
        "rate_limit_error",
        "over the monthly threshold",
        error_code="enforced_spend_limit_reached",
    )
    assert type(raised).__name__ == "EnforcedSpendLimitReachedError"
    error = from_api_error(raised)
    assert (error.kind, error.code, error.error_code) == (
        "fatal",
        "spend_limit",
        "enforced_spend_limit_reached",
    )
    err = application_error(error)
    assert err.type == RUN_STOPPED and err.non_retryable
    assert "raise the limit in the Claude Console" in err.message


def test_a_linked_organisation_cap_is_a_402_spend_limit() -> None:
    raised = status_error(
        402, "billing_error", "limit", error_code="linked_organization_spend_limit_reached"
    )
    assert isinstance(raised, anthropic.PaymentRequiredError)
    assert from_api_error(raised).code == "spend_limit"


def test_billing_and_a_retired_model_stop_the_run_and_name_what_to_do() -> None:
    billing = from_api_error(status_error(402, "billing_error", "credit balance too low"))
    assert (billing.kind, billing.code) == ("fatal", "billing")
    gone = from_api_error(status_error(404, "not_found_error", "model: claude-opus-4-1"))
    assert (gone.kind, gone.code, gone.model) == ("fatal", "model_unavailable", "claude-opus-4-1")
    assert "move to claude-opus-5-5" in application_error(gone).message


def test_a_ramp_limit_is_retried_after_its_retry_after_without_cutting_the_rate() -> None:
    error = from_api_error(
        status_error(
            429,
            "rate_limit_error",
            "ramp up gradually",
            {"retry-after": "4"},
            error_code="ramp_limit_exceeded",
        )
    )
    assert error.kind == "retryable" and not error.cuts_rate
    err = application_error(error)
    assert err.type == RETRYABLE
    assert err.next_retry_delay is not None
    assert timedelta(seconds=4) <= err.next_retry_delay <= timedelta(seconds=6)


def test_a_gateway_or_client_timeout_is_retried_but_is_no_outage() -> None:
    gateway = from_api_error(status_error(504, "timeout_error", "use streaming"))
    client = from_api_error(anthropic.APITimeoutError(request=REQUEST))
    for error in (gateway, client):
        assert error.kind == "retryable" and not is_outage(error)
        err = application_error(error, give_up=True)
        assert err.type == RETRYABLE and not err.non_retryable
