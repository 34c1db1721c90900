"""One classifier for Claude's errors, for synchronous calls, batch result lines and batch
management calls alike.

An error is what the API said (HTTP status, ``error.type``, ``error.details.error_code``,
message, ``retry-after``); its *kind* is what blockbatch does about it. Classification goes
by status, type and error code, never by the message (contract §0 rule 10, §6), with the
two exceptions named below:

| status / type / error_code | kind | code | what follows |
|---|---|---|---|
| 401 ``authentication_error``, 403 ``permission_error`` | ``fatal`` | ``key_rejected`` | the run's calls stop: no retry can help |
| 429 ``enforced_spend_limit_reached``, ``contract_spend_limit_reached`` | ``fatal`` | ``spend_limit`` | the run's calls stop; no retry, no rate cut |
| 402 ``linked_organization_spend_limit_reached`` | ``fatal`` | ``spend_limit`` | as above |
| 400 ``invalid_request_error`` "reached your specified ... API usage limits" (no error_code) | ``fatal`` | ``spend_limit`` | as above |
| 402 ``billing_error`` (any other code) | ``fatal`` | ``billing`` | the run's calls stop |
| 404 ``not_found_error`` of a Messages call, no error_code | ``fatal`` | ``model_unavailable`` | the run's calls stop; move to the replacement |
| 429 ``ramp_limit_exceeded`` | ``retryable`` | | retried after ``retry-after``; the limiter ramps, it does not halve |
| no answer (connection, client read-timeout), 408, 409, 429, 5xx, 504, 529 | ``retryable`` | | retried (Temporal's backoff, or the next batch round), honouring ``retry-after`` |
| no connection at all (``APIConnectionError``: DNS, refused, TLS, proxy) | ``retryable`` | | as above; :func:`is_unreachable`: the run ends ``unreachable`` (blockbatch/core/outage.py) when the endpoint never answered it |
| 413, or 400 that says the prompt is too long | ``overflow`` | | the pack is halved; a single block fails |
| any other 4xx | ``rejected`` | | halved; a single block fails with the message |

A ``fatal`` error ends the run's calls at once: no retry, no halving, every block left
ends with the error's reason code (blockbatch/core/reasons.py), and the message says what to do.

No I/O: the activities turn a classified error into an ``ApplicationError`` or a ledger row.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from blockbatch.core.commands import PROG, for_any_reader
from blockbatch.core.registry import DEFAULT_MODEL, UnknownModelError, get_model, retired_model

ErrorKind = Literal["fatal", "retryable", "overflow", "rejected"]
#: Why a ``fatal`` error stops the run: the reason code its blocks end with.
FatalCode = Literal[
    "key_rejected", "spend_limit", "billing", "model_unavailable", "unreachable", "api_unavailable"
]

#: The HTTP status a synchronous call would have had, by the error type of a batch result
#: line (a line carries only ``error.type`` and ``details``, contract §6).
HTTP_STATUS = {
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
#: ``error.details.error_code`` values of a spend cap (SDK 2.14 ``_error_classes.py``: the
#: first two are ``RateLimitError`` subclasses, 429; the third a ``PaymentRequiredError``, 402).
SPEND_LIMIT_CODES = frozenset(
    {
        "enforced_spend_limit_reached",
        "contract_spend_limit_reached",
        "linked_organization_spend_limit_reached",
    }
)
#: A 429 of a sharp rise in usage (``RampLimitExceededError``): retry after ``retry-after``.
RAMP_LIMIT = "ramp_limit_exceeded"
#: A retry-after shorter than this is raised to it, a longer one capped (seconds).
MIN_RETRY_AFTER_S, MAX_RETRY_AFTER_S = 0.5, 300.0
#: Callers told the same retry-after come back spread over up to this much longer.
RETRY_AFTER_JITTER = 0.5
#: The one sentence that tells a user what to do about a rejected key.
SET_A_VALID_KEY = "set a valid ANTHROPIC_API_KEY for the workers and start a new run"
#: How each fatal error's sentence begins; ``fatal_code_of`` reads the code back from a
#: run's error (the run passes only its text to ``finish_run``).
FATAL_OPENING: dict[FatalCode, str] = {
    "key_rejected": "the API key was rejected by Claude",
    "spend_limit": "Claude's spend limit for this account is reached",
    "billing": "Claude refused the call for a billing problem",
    "model_unavailable": "Claude does not serve the model",
    # Said by the run itself (blockbatch/core/outage.py), never by one call's error.
    "unreachable": "could not connect to Claude's endpoint",
    "api_unavailable": "Claude did not answer for",
}
#: The SDK's exception for a request that got no connection at all (its subclass
#: ``APITimeoutError`` is a connection that answered too slowly: not this).
CONNECTION_ERROR = "APIConnectionError"


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
    #: ``error.details.error_code``, when the API sent one.
    error_code: str | None = None
    #: For ``fatal``: the reason code the run's blocks end with.
    code: FatalCode | None = None
    #: The model the call asked for (names the replacement of a retired one).
    model: str | None = None
    #: The host a call without an answer tried to reach (``api.anthropic.com``).
    host: str | None = None

    @property
    def text(self) -> str:
        status = f"{self.status} " if self.status is not None else ""
        code = f" ({self.error_code})" if self.error_code else ""
        return f"{status}{self.error_type}{code}: {self.message}"

    @property
    def cuts_rate(self) -> bool:
        """Whether the fleet's limiter halves its rate for this error (AIMD).

        Only a plain 429 says the fleet sends too fast. A spend cap says nothing about the
        rate; a ramp limit says the rise was too sharp, which the limiter's ramp answers.
        """
        return self.kind == "retryable" and self.status == 429 and self.error_code != RAMP_LIMIT

    def describe(self, doing: str = "") -> str:
        """The readable sentence for a user (``doing``: while creating a batch, ...); stored
        with the run and its blocks and read later, so a command in it is the console
        script's (``blockbatch.core.commands.for_any_reader``)."""
        return for_any_reader(self._describe(doing))

    def _describe(self, doing: str) -> str:
        while_ = f" while {doing}" if doing else ""
        if self.kind == "fatal":
            opening = FATAL_OPENING[self.code or "key_rejected"]
            return f"{opening}{while_} ({self.text}); {self._what_to_do()}"
        if self.kind == "overflow":
            what = "request too large" if self.status == 413 else "prompt too long"
            return f"{what}: {self.message}"
        if self.kind == "rejected":
            return f"Claude rejected the request{while_} ({self.text})"
        if self.status is None:
            at = f" at {self.host}" if self.host else ""
            cause = f": {self.message}" if is_unreachable(self) and self.message else ""
            return f"could not reach Claude{at}{while_} ({self.error_type}{cause}); will retry"
        return f"Claude answered {self.text}{while_}"

    def _what_to_do(self) -> str:
        if self.code == "spend_limit":
            return (
                "raise the limit in the Claude Console (Settings > Limits; a tier's "
                "monthly cap lifts at 00:00 UTC on the 1st), then "
                f"`{PROG} retry RUN_ID --cancelled`"
            )
        if self.code == "billing":
            return (
                "add credit or fix the payment method in the Claude Console (Settings > "
                f"Billing), then `{PROG} retry RUN_ID --cancelled`"
            )
        if self.code == "model_unavailable":
            return (
                f"move to {replacement_for(self.model)} (prompt_config.model in the "
                "schema, or --model) and start a new run"
            )
        return SET_A_VALID_KEY


def classify(
    status: int | None,
    error_type: str | None,
    message: str = "",
    *,
    retry_after: str | None = None,
    error_code: str | None = None,
    model: str | None = None,
    model_call: bool = True,
    host: str | None = None,
) -> ClaudeError:
    """Classify one failure (see the table in the module docstring).

    Args:
        status: the HTTP status; ``None`` when no answer came (connection error) or for a
            batch result line, whose ``error_type`` then gives the status.
        error_type: the API's ``error.type`` (or the client's exception name).
        message: the API's ``error.message``.
        retry_after: the ``retry-after`` header as sent, if any.
        error_code: the API's ``error.details.error_code``, if any.
        model: the model the call asked for.
        model_call: the call asked a model (Messages, count_tokens, a batch line); a 404 of
            a batch management call is a missing batch, not a missing model.
        host: the host a call without an answer tried to reach.
    """
    error_type = error_type or "api_error"
    if status is None and error_type in HTTP_STATUS:
        status = HTTP_STATUS[error_type]

    def error(kind: ErrorKind, code: FatalCode | None = None) -> ClaudeError:
        return ClaudeError(
            kind=kind,
            status=status,
            error_type=error_type,
            message=message,
            error_code=error_code,
            code=code,
            model=model,
            host=host if status is None else None,
            retry_after_s=_seconds(retry_after) if kind == "retryable" else None,
        )

    if status is None:
        # No answer: a connection error or the client's read timeout (``APITimeoutError``).
        return error("retryable")
    if status in (401, 403):
        return error("fatal", "key_rejected")
    if error_code in SPEND_LIMIT_CODES:
        return error("fatal", "spend_limit")
    if status == 402:
        return error("fatal", "billing")
    if status == 400 and _self_set_spend_limit(message):
        return error("fatal", "spend_limit")
    if status == 404 and model_call and error_code is None:
        return error("fatal", "model_unavailable")
    if status in (408, 409, 429) or status >= 500:
        return error("retryable")
    if status == 413 or (status == 400 and "too long" in message.lower()):
        # The SDK defines no error_code for a prompt over the context window (its 400
        # codes are all account and tooling causes), so the wording is what tells it.
        return error("overflow")
    return error("rejected")


def _self_set_spend_limit(message: str) -> bool:
    """A spend limit the organisation or workspace set itself: a 400 with no error_code.

    The one place we read the message: the SDK defines no code for it (api_findings §3),
    and only the wording tells it from any other rejected request ("You have reached your
    specified API usage limits", or "...specified workspace API usage limits").
    """
    text = message.lower()
    return "reached your specified" in text and "usage limit" in text


def fatal_code_of(text: str | None) -> FatalCode | None:
    """The fatal code a run's error text was written with (``describe``), if any."""
    for code, opening in FATAL_OPENING.items():
        if text and text.startswith(opening):
            return code
    return None


def replacement_for(model: str | None) -> str:
    """The model to move to from ``model`` (retired, deprecated or unknown)."""
    gone = retired_model(model) if model else None
    if gone is not None:
        return gone[1]
    try:
        known = get_model(model) if model else None
    except UnknownModelError:
        known = None
    return known.replacement if known is not None and known.replacement else DEFAULT_MODEL


def is_outage(error: ClaudeError) -> bool:
    """Whether ``error`` says Claude is down (408, 5xx, 529, no connection), not busy (429).

    A run of these across packs pauses the run instead of failing blocks
    (``blockbatch.core.outage``); a rate limit is Claude answering, and is only waited for. A 504
    ``timeout_error`` and a client read-timeout (``APITimeoutError``) are retried but are
    no outage: a long call took too long, which says nothing of Claude being down
    (contract §6, §8 "Long calls").
    """
    if error.kind != "retryable":
        return False
    if error.status is None:
        return error.error_type != "APITimeoutError"
    return error.status == 408 or (error.status >= 500 and error.status != 504)


def is_unreachable(error: ClaudeError) -> bool:
    """Whether ``error`` is a call that reached no server at all (DNS, refused, TLS, proxy).

    Claude being down answers 5xx or 529, or accepts the connection and never answers (a
    read timeout): this is the worker's network or settings. It is retried and paused for
    like an outage, but a run whose endpoint never answered it ends ``unreachable`` after
    ``OutageOptions.unreachable_after_s`` (blockbatch/core/outage.py).
    """
    return (
        error.kind == "retryable" and error.status is None and error.error_type == CONNECTION_ERROR
    )


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
