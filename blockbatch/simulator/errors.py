"""API errors with the real API's types, statuses and JSON shape (contract §6).

The body is ``{"type": "error", "error": {"type", "message", "details"?}, "request_id"}``;
``details.error_code`` names the cause where the API gives one (the SDK's
``APIStatusError.error_code`` and its ``(status, error_code)`` exception classes).
"""

from __future__ import annotations

import secrets
from typing import Any

STATUS_BY_TYPE: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class ApiError(Exception):
    """An error answer, raised anywhere while handling a request.

    Attributes:
        error_type: the API's error type, e.g. ``"rate_limit_error"``.
        message: the human-readable message (never contains an API key).
        status: the HTTP status that goes with ``error_type``.
        headers: extra response headers (``retry-after``, rate-limit headers).
        fault: the injected fault that caused it, if any (for stats and the request log).
        status: the HTTP status when not the one of ``error_type`` (a 503 is an
            ``api_error`` too).
        error_code: ``error.details.error_code``, if the API names the cause.
    """

    def __init__(
        self,
        error_type: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        fault: str | None = None,
        status: int | None = None,
        error_code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.status = status if status is not None else STATUS_BY_TYPE[error_type]
        self.headers = headers or {}
        self.fault = fault
        self.error_code = error_code

    def body(self, request_id: str | None) -> dict[str, Any]:
        """The error JSON, exactly as the API shapes it."""
        return error_body(self.error_type, self.message, request_id, self.error_code)


def error_body(
    error_type: str, message: str, request_id: str | None, error_code: str | None = None
) -> dict[str, Any]:
    """``{"type": "error", "error": {...}, "request_id": ...}``; ``error.details`` only
    when there is an ``error_code``."""
    error: dict[str, Any] = {"type": error_type, "message": message}
    if error_code is not None:
        error["details"] = {"error_code": error_code}
    return {"type": "error", "error": error, "request_id": request_id}


def account_error(kind: str) -> ApiError:
    """The refusal of an account that may not spend (contract §6, "Spend limits";
    api_findings.md §3 for the statuses the SDK 2.14 maps): ``kind`` is a scenario
    ``errors.account_error``. None of them carries ``retry-after``: waiting does not help.
    """
    fault = f"account:{kind}"
    if kind == "billing_error":
        return ApiError(
            "billing_error",
            "Your credit balance is too low to access the "
            "Anthropic API. Please go to Plans & Billing to upgrade or purchase "
            "credits.",
            fault=fault,
        )
    if kind == "enforced_spend_limit_reached":
        return ApiError(
            "rate_limit_error",
            "Your organization has reached the monthly API "
            "usage limit of its tier. Access resumes at 00:00 UTC on the 1st of "
            "next month.",
            fault=fault,
            error_code=kind,
        )
    if kind == "contract_spend_limit_reached":
        return ApiError(
            "rate_limit_error",
            "Your organization has reached the spend limit of its contract.",
            fault=fault,
            error_code=kind,
        )
    if kind == "linked_organization_spend_limit_reached":
        return ApiError(
            "billing_error",
            "The linked organization has reached a spend limit that it set, or lacks credit.",
            status=402,
            fault=fault,
            error_code=kind,
        )
    if kind == "self_spend_limit":
        # The one spend refusal without an error_code (api_findings.md §3).
        return ApiError(
            "invalid_request_error",
            "You have reached your specified API usage limits.",
            fault=fault,
        )
    raise ValueError(f"unknown account error {kind!r}")


def invalid(message: str) -> ApiError:
    """A 400 ``invalid_request_error``."""
    return ApiError("invalid_request_error", message)


def new_id(prefix: str) -> str:
    """A fresh id in the API's style, e.g. ``msg_01AbC...``."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "01" + "".join(secrets.choice(alphabet) for _ in range(22))
