"""How a classified Claude error (``blockbatch.core.claude_errors``) reaches Temporal.

The ``ApplicationError`` types below are what retry policies name in
``non_retryable_error_types``; the classified error travels as the error's first detail,
so a workflow that sees the failure can hand it to the pack policy unchanged.
"""

from __future__ import annotations

import random
from datetime import timedelta

from temporalio.exceptions import ApplicationError

from blockbatch.core.call_types import CallFacts
from blockbatch.core.claude_errors import ClaudeError, is_outage, retry_delay_s

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
