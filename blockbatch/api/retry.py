"""Retry only what failed: checking a retry request against the run, read-only.

:meth:`Blockbatch.retry` checks here first, then starts the run's workflow again; nothing
is written until the new execution claims the retry (``plan_retry``).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from pydantic import BaseModel

from blockbatch.api.budget import check_retry_budget
from blockbatch.api.errors import (
    BlockNotRetryable,
    NothingToRetry,
    RetryRefused,
    RunStillActive,
    UnknownBlock,
    UnknownReason,
)
from blockbatch.api.review import resolve_block_refs
from blockbatch.core.budget import parse_budget
from blockbatch.core.models import RetryRequest
from blockbatch.core.retry import RefusalKind, check_retry, unknown_reasons
from blockbatch.store import reads, retries

#: Each refusal of blockbatch/core/retry.py and the error it raises.
_ERRORS: dict[RefusalKind, type[Exception]] = {
    "unknown_reason": UnknownReason,
    "active": RunStillActive,
    "unknown_block": UnknownBlock,
    "not_retryable": BlockNotRetryable,
    "nothing": NothingToRetry,
}


class RetryStarted(BaseModel):
    """A retry whose workflow has started; follow it like a run (``wait``, ``progress``)."""

    run_id: str
    #: The retry's number in the run (1 for the first).
    retry: int
    #: How many blocks it takes, and how many of them by reason code.
    blocks: int
    reasons: dict[str, int]
    request: RetryRequest
    workflow_id: str
    #: The Temporal run id of the new RunWorkflow execution (the one that claims it).
    workflow_run_id: str


@dataclass(frozen=True)
class CheckedRetry:
    """A retry request that may start: the run, the request, and what it would take."""

    run: reads.RunInfo
    request: RetryRequest
    number: int
    blocks: int
    reasons: dict[str, int]


async def check_retry_request(
    conn: asyncpg.Connection,
    run_id: str,
    *,
    reasons: list[str] | None,
    blocks: list[str] | None,
    include_cancelled: bool,
    max_cost_usd: float | None = None,
) -> CheckedRetry:
    """Check a retry request against the run as it is now; change nothing.

    ``blocks`` are uids or block indexes, as in ``review`` and ``confirm``.

    Raises:
        UnknownReason: a reason code that is not in blockbatch/core/reasons.py.
        NotFound: no such run.
        RunStillActive: the run has not finished.
        UnknownBlock: a block the run does not have.
        BlockNotRetryable: a block that did not fail (or is not in the selection).
        NothingToRetry: the selection takes no block.
        BudgetError: the budget (``max_cost_usd``, else the run's) is not a positive
            number or cannot pay for the retry's first call on top of what was spent.
    """
    request = RetryRequest(
        reasons=list(dict.fromkeys(reasons)) if reasons else None,
        include_cancelled=include_cancelled,
        max_cost_usd=(parse_budget(max_cost_usd) if max_cost_usd is not None else None),
    )
    refusal = unknown_reasons(request)
    if refusal is not None:
        raise UnknownReason(refusal.message)
    run = await reads.get_run(conn, run_id)
    if blocks:
        request.blocks = resolve_block_refs(run.document_id, blocks)
    counts = await retries.block_counts(conn, run_id)
    named = (
        await retries.block_states(conn, run_id, request.blocks)
        if request.blocks is not None
        else {}
    )
    checked = check_retry(run_id, run.status, counts, named, request)
    if checked.refusal is not None:
        raise _ERRORS.get(checked.refusal.kind, RetryRefused)(checked.refusal.message)
    await check_retry_budget(conn, run, request)
    number = await retries.retries_so_far(conn, run_id) + 1
    return CheckedRetry(
        run=run, request=request, number=number, blocks=checked.blocks, reasons=checked.reasons
    )
