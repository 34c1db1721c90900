"""API errors with the real API's types, statuses and JSON shape."""

from __future__ import annotations

import secrets
from typing import Any

STATUS_BY_TYPE: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
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
    """

    def __init__(
        self,
        error_type: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        fault: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.status = status if status is not None else STATUS_BY_TYPE[error_type]
        self.headers = headers or {}
        self.fault = fault

    def body(self, request_id: str | None) -> dict[str, Any]:
        """The error JSON, exactly as the API shapes it."""
        return error_body(self.error_type, self.message, request_id)


def error_body(error_type: str, message: str, request_id: str | None) -> dict[str, Any]:
    """``{"type": "error", "error": {...}, "request_id": ...}``."""
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


def invalid(message: str) -> ApiError:
    """A 400 ``invalid_request_error``."""
    return ApiError("invalid_request_error", message)


def new_id(prefix: str) -> str:
    """A fresh id in the API's style, e.g. ``msg_01AbC...``."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "01" + "".join(secrets.choice(alphabet) for _ in range(22))
