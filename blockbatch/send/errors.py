"""An anthropic SDK failure classified (``blockbatch.core.claude_errors``): by the SDK's
typed fields, never by message text. The senders (:mod:`blockbatch.send.sender`) and the
endpoint question (:mod:`blockbatch.send.endpoint`) raise or report what this returns.
"""

from __future__ import annotations

import json
from typing import Any

from blockbatch.core.claude_errors import ClaudeError, classify
from blockbatch.send.sdk import anthropic


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
