"""One classifier for Claude's errors, for synchronous calls, batch result lines and batch
management calls alike.

An error is what the API said (HTTP status, error type, message, ``retry-after``); its
*kind* is what blockbatch does about it:

| kind | when | what follows |
|---|---|---|
| ``key_rejected`` | 401, 403 | the whole run stops: no retry can help |
| ``retryable`` | no answer (connection), 408, 409, 429, 5xx, 529 | retried (Temporal's backoff, or the next batch round), honouring ``retry-after`` |
| ``overflow`` | 413, or 400 that says the prompt is too long | the pack is halved; a single block fails |
| ``rejected`` | any other 4xx | the pack's blocks fail with the message |

No I/O: the activities turn a classified error into an ``ApplicationError`` or a ledger row.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

ErrorKind = Literal["key_rejected", "retryable", "overflow", "rejected"]

#: The HTTP status a synchronous call would have had, by the error type of a batch result line.
HTTP_STATUS = {"invalid_request_error": 400, "authentication_error": 401,
               "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
               "rate_limit_error": 429, "api_error": 500, "overloaded_error": 529}
#: A retry-after shorter than this is raised to it, a longer one capped (seconds).
MIN_RETRY_AFTER_S, MAX_RETRY_AFTER_S = 0.5, 300.0
#: Callers told the same retry-after come back spread over up to this much longer.
RETRY_AFTER_JITTER = 0.5
#: The one sentence that tells a user what to do about a rejected key.
SET_A_VALID_KEY = "set a valid ANTHROPIC_API_KEY for the workers and start a new run"


class ClaudeError(BaseModel):
    """A classified Claude error; ``text`` is ``"<status> <type>: <message>"``.

    Small and typed, so it travels through Temporal (in an activity's output, or as the
    details of the ``ApplicationError`` that reports it).
    """

    model_config = ConfigDict(frozen=True)

    kind: ErrorKind
    status: int | None
    error_type: str
    message: str
    retry_after_s: float | None = None

    @property
    def text(self) -> str:
        status = f"{self.status} " if self.status is not None else ""
        return f"{status}{self.error_type}: {self.message}"

    def describe(self, doing: str = "") -> str:
        """The readable sentence for a user (``doing``: while creating a batch, ...)."""
        while_ = f" while {doing}" if doing else ""
        if self.kind == "key_rejected":
            return f"the API key was rejected by Claude{while_} ({self.text}); {SET_A_VALID_KEY}"
        if self.kind == "overflow":
            what = "request too large" if self.status == 413 else "prompt too long"
            return f"{what}: {self.message}"
        if self.kind == "rejected":
            return f"Claude rejected the request{while_} ({self.text})"
        if self.status is None:
            return f"could not reach Claude{while_} ({self.error_type}); will retry"
        return f"Claude answered {self.text}{while_}"


def classify(
    status: int | None,
    error_type: str | None,
    message: str = "",
    *,
    retry_after: str | None = None,
) -> ClaudeError:
    """Classify one failure.

    Args:
        status: the HTTP status; ``None`` when no answer came (connection error) or for a
            batch result line, whose ``error_type`` then gives the status.
        error_type: the API's ``error.type`` (or the client's exception name).
        message: the API's ``error.message``.
        retry_after: the ``retry-after`` header as sent, if any.
    """
    error_type = error_type or "api_error"
    if status is None and error_type in HTTP_STATUS:
        status = HTTP_STATUS[error_type]
    if status is None:
        return ClaudeError(kind="retryable", status=None, error_type=error_type, message=message)
    if status in (401, 403):
        return ClaudeError(kind="key_rejected", status=status, error_type=error_type,
                           message=message)
    if status in (408, 409, 429) or status >= 500:
        return ClaudeError(kind="retryable", status=status, error_type=error_type,
                           message=message, retry_after_s=_seconds(retry_after))
    if status == 413 or (status == 400 and "too long" in message.lower()):
        return ClaudeError(kind="overflow", status=status, error_type=error_type, message=message)
    return ClaudeError(kind="rejected", status=status, error_type=error_type, message=message)


def is_outage(error: ClaudeError) -> bool:
    """Whether ``error`` says Claude is down (5xx, 529, timeout, no answer), not busy (429).

    A run of these across packs pauses the run instead of failing blocks
    (``core.outage``); a rate limit is Claude answering, and is only waited for.
    """
    if error.kind != "retryable":
        return False
    return error.status is None or error.status >= 500 or error.status == 408


def retry_delay_s(error: ClaudeError, jitter: float) -> float | None:
    """How long to wait before retrying, from ``retry-after``; ``None``: the default backoff.

    Args:
        error: a ``retryable`` error.
        jitter: a number in ``[0, 1)`` (random in production) that spreads the callers
            told the same retry-after over up to ``RETRY_AFTER_JITTER`` longer.
    """
    if error.retry_after_s is None:
        return None
    base = min(max(error.retry_after_s, MIN_RETRY_AFTER_S), MAX_RETRY_AFTER_S)
    return base * (1 + RETRY_AFTER_JITTER * jitter)


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date: rare from this API; the default backoff applies
