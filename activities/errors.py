"""How a classified Claude error (``blockbatch.core.claude_errors``) reaches Temporal.

The ``ApplicationError`` types below are what retry policies name in
``non_retryable_error_types``; the classified error travels as the error's first detail,
so a workflow that sees the failure can hand it to the pack policy unchanged.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ApplicationError

from activities.sdk import anthropic
from blockbatch.core.call_types import CallFacts
from blockbatch.core.claude_errors import ClaudeError, classify, is_outage, retry_delay_s

#: Claude refused the account, not the request (a rejected key, a spend cap, billing, a
#: model it does not serve): the run's calls stop, retrying cannot help. The first detail
#: is the ``ClaudeError``; its ``code`` says which (blockbatch/core/reasons.py).
RUN_STOPPED = "ClaudeStopsRun"
#: Claude is unavailable for now (429, 5xx, 529, no answer): Temporal retries with backoff.
RETRYABLE = "ClaudeUnavailable"
#: Claude is down (5xx, 529, no answer) and this pack call has failed often enough: the
#: activity stops retrying so its run can pause and probe (``blockbatch.core.outage``).
API_UNAVAILABLE = "ClaudeDown"
#: A batch management call was refused for a reason retrying cannot fix (400/404/413).
BATCH_REJECTED = "BatchRejected"


def application_error(
    error: ClaudeError, doing: str = "", *, give_up: bool = False
) -> ApplicationError:
    """The ``ApplicationError`` an activity raises for ``error`` (retry-after jittered).

    ``give_up``: Claude is down and the caller has tried often enough; the error is
    ``API_UNAVAILABLE`` and not retried, so the workflow can pause instead.
    """
    if give_up and is_outage(error):
        return ApplicationError(
            error.describe(doing), error, type=API_UNAVAILABLE, non_retryable=True
        )
    if error.kind == "fatal":
        return ApplicationError(error.describe(doing), error, type=RUN_STOPPED, non_retryable=True)
    if error.kind == "retryable":
        delay = retry_delay_s(error, random.random())
        return ApplicationError(
            error.describe(doing),
            error,
            type=RETRYABLE,
            next_retry_delay=timedelta(seconds=delay) if delay else None,
        )
    return ApplicationError(error.describe(doing), error, type=BATCH_REJECTED, non_retryable=True)


def claude_error_of(err: BaseException) -> ClaudeError | None:
    """The classified Claude error an ``ApplicationError`` carries as its first detail."""
    if (
        isinstance(err, ApplicationError)
        and err.details
        and isinstance(err.details[0], ClaudeError)
    ):
        return err.details[0]
    return None


def call_of_error(err: BaseException) -> CallFacts | None:
    """The call a failed attempt made, from the error it raised (``None``: no call).

    An error carrying a ``ClaudeError`` was raised after the ledger recorded the failed
    call (429, 5xx, 529, no answer, a rejected key). A ``RETRYABLE`` error without one is
    the answer another worker had already recorded for the same attempt: the call is in
    the ledger as ``failed`` (``duplicate_attempt``), not as an API error. Any other error
    (Postgres unreachable before the call) made no call.
    """
    error = claude_error_of(err)
    if error is not None:
        return CallFacts(status="failed", api_error=True, http_status=error.status)
    if isinstance(err, ApplicationError) and err.type == RETRYABLE:
        return CallFacts(status="failed")
    return None


def from_api_error(err: anthropic.APIError) -> ClaudeError:
    """Classify a failure of the anthropic client: an error answer, or no answer at all.

    By the SDK's typed fields (``type``, ``error_code``: SDK 2.14 ``APIStatusError``); a
    body that is not the API's (a proxy's page) falls back to the class name.
    """
    if not isinstance(err, anthropic.APIStatusError):
        # No answer: a connection error, or the client's read timeout (APITimeoutError).
        # A connection error says why in what it wraps (refused, a name that does not
        # resolve, a TLS or proxy failure): that is what a person can act on.
        timeout = isinstance(err, anthropic.APITimeoutError)
        return classify(
            None,
            type(err).__name__,
            str(err) if timeout else _root_cause(err),
            host=_host_of(err),
        )
    # A 404 of a Messages call is a model Claude does not serve: name it (and so its
    # replacement); a 404 of a batch management call is a missing batch.
    model_call = "/batches" not in err.request.url.path
    model = _model_asked(err) if err.status_code == 404 and model_call else None
    return classify(
        err.status_code,
        str(err.type or type(err).__name__),
        str(err.api_message or err.message),
        retry_after=err.response.headers.get("retry-after"),
        error_code=err.error_code,
        model=model,
        model_call=model_call,
    )


#: What a person reads for the exception under a connection error, by its class name.
_CAUSES = {
    "ConnectionRefusedError": "connection refused",
    "gaierror": "the host name does not resolve (DNS)",
    "SSLError": "the TLS handshake failed",
    "SSLCertVerificationError": "the TLS certificate was not accepted",
    "ProxyError": "the proxy refused the connection",
    "ConnectionResetError": "the connection was reset",
    "OSError": "no route to the host",
}


def _root_cause(err: BaseException) -> str:
    """The innermost cause, in words (``connection refused ([Errno 111] ...)``)."""
    found: BaseException | None = None
    seen: set[int] = set()
    cause = err.__cause__ or err.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if str(cause):
            found = cause
        cause = cause.__cause__ or cause.__context__
    if found is None:
        return str(err)
    name = type(found).__name__
    return f"{_CAUSES.get(name, name)} ({found})"


def _host_of(err: anthropic.APIError) -> str | None:
    """``host[:port]`` the failed request went to."""
    try:
        url = err.request.url
    except (AttributeError, RuntimeError):
        return None
    return f"{url.host}:{url.port}" if url.port else str(url.host)


def _model_asked(err: anthropic.APIStatusError) -> str | None:
    """The model the failed request named (from its JSON body), if it can be read."""
    try:
        body: Any = json.loads(err.request.content or b"null")
    except (ValueError, UnicodeDecodeError, RuntimeError):  # RuntimeError: a streamed body
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None
