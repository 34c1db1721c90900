"""How a classified Claude error (``core.claude_errors``) reaches Temporal.

The ``ApplicationError`` types below are what retry policies name in
``non_retryable_error_types``; the classified error travels as the error's first detail,
so a workflow that sees the failure can hand it to the pack policy unchanged.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ApplicationError

from activities.sdk import anthropic
from core.claude_errors import ClaudeError, classify, is_outage, retry_delay_s

#: The API key was rejected (401/403): the run stops, retrying cannot help.
API_KEY_REJECTED = "ApiKeyRejected"
#: Claude is unavailable for now (429, 5xx, 529, no answer): Temporal retries with backoff.
RETRYABLE = "ClaudeUnavailable"
#: Claude is down (5xx, 529, no answer) and this pack call has failed often enough: the
#: activity stops retrying so its run can pause and probe (``core.outage``).
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
        return ApplicationError(error.describe(doing), error, type=API_UNAVAILABLE,
                                non_retryable=True)
    if error.kind == "key_rejected":
        return ApplicationError(error.describe(doing), error, type=API_KEY_REJECTED,
                                non_retryable=True)
    if error.kind == "retryable":
        delay = retry_delay_s(error, random.random())
        return ApplicationError(error.describe(doing), error, type=RETRYABLE,
                                next_retry_delay=timedelta(seconds=delay) if delay else None)
    return ApplicationError(error.describe(doing), error, type=BATCH_REJECTED,
                            non_retryable=True)


def from_api_error(err: anthropic.APIError) -> ClaudeError:
    """Classify a failure of the anthropic client: an error answer, or no answer at all."""
    if not isinstance(err, anthropic.APIStatusError):
        return classify(None, type(err).__name__, str(err))
    body: dict[str, Any] = err.body if isinstance(err.body, dict) else {}
    raw = body.get("error")
    detail: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return classify(err.status_code, str(detail.get("type") or type(err).__name__),
                    str(detail.get("message") or err.message),
                    retry_after=err.response.headers.get("retry-after"))
