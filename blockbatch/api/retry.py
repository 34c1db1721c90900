"""Retry only what failed (part of :class:`~blockbatch.api.client.Blockbatch`).

:meth:`Retries.retry` checks the request against the run first, read-only, then starts the
run's workflow again by its registered name (blockbatch/core/workflow_names.py) with
update-with-start; nothing is written until the new execution claims the retry
(``plan_retry``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
from pydantic import BaseModel

from blockbatch.api.connection import Connection
from blockbatch.api.errors import (
    BlockNotRetryable,
    NothingToRetry,
    RetryRefused,
    RetryUnderWay,
    RunStillActive,
    UnknownBlock,
    UnknownReason,
    speaks_python,
)
from blockbatch.api.review import resolve_block_refs
from blockbatch.api.runs import run_attributes, run_details
from blockbatch.core.budget import parse_budget
from blockbatch.core.commands import PROG
from blockbatch.core.reasons import counts_text
from blockbatch.core.retry import RefusalKind, check_retry, unknown_reasons
from blockbatch.core.retry_types import PlanRetryOutput, RetryRequest
from blockbatch.core.run_types import RunOptions, RunResult, run_input
from blockbatch.core.views import RetryRecord
from blockbatch.core.workflow_names import (
    NOTHING_TO_RETRY,
    RETRY,
    RETRY_UNDER_WAY,
    RUN_NOT_FINISHED,
    RUN_WORKFLOW,
    run_workflow_id,
)
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
    from blockbatch.api.budget import check_retry_budget

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


@speaks_python
class Retries(Connection):
    """Retry a finished run's failed blocks in the same run; what its retries took."""

    async def retry(
        self,
        run_id: str,
        *,
        reasons: list[str] | None = None,
        blocks: list[str] | None = None,
        include_cancelled: bool = False,
        max_cost_usd: float | None = None,
        packs_per_history: int = 400,
        task_queue: str | None = None,
    ) -> RetryStarted:
        """Run a finished run's failed blocks again, in the same run; return once claimed.

        Only blocks that ended ``failed`` are taken (and ``cancelled`` ones with
        ``include_cancelled``), narrowed to those with one of ``reasons`` and to ``blocks``
        (uids or block indexes) when given. Blocks that succeeded are never sent again.
        The request is checked first, read-only; then a new execution of the run's
        workflow (same id, ``run-<run_id>``) claims the retry, resets those blocks and
        runs them in new packs. It answers the ``retry`` Update with its claim, or with
        why it refused (so this waits for a worker). Its counters, ledger and cost add to
        the run's. Follow it with :meth:`wait` and :meth:`progress` like any run. ``max_cost_usd`` sets a new
        budget for the whole run (what it spent already included): a run that ended
        ``budget_exhausted`` finishes its blocks within it.

        Raises:
            UnknownReason: a reason code that is not in blockbatch/core/reasons.py.
            NotFound: no such run (``UnknownBlock``: no such block in it).
            RunStillActive: the run has not finished; ``RetryUnderWay``: a retry of it is
                already running (two retries at once: one starts, the other gets this).
            NothingToRetry: nothing in the run matches the request (also when another
                retry took the blocks between the check and the claim).
            BlockNotRetryable: a named block did not fail (or is not in the selection).
            BudgetError: the budget cannot pay for the retry's first call.
        """
        from temporalio.client import WithStartWorkflowOperation, WorkflowUpdateFailedError
        from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

        from blockbatch.runtime.connect import ensure_search_attributes

        checked = await self.check_retry(
            run_id,
            reasons=reasons,
            blocks=blocks,
            include_cancelled=include_cancelled,
            max_cost_usd=max_cost_usd,
        )
        client = await self.temporal()
        run = checked.run
        options = RunOptions.model_validate(run.settings)
        reasons_text = counts_text(checked.reasons)
        await ensure_search_attributes(client, self.settings.temporal_namespace)
        # Update-with-start: a new execution of the run's workflow (a closed id is reused)
        # claims the retry and answers the ``retry`` Update with its claim or its refusal.
        # A running execution of the id gets the Update instead, and refuses it.
        start: WithStartWorkflowOperation[Any, RunResult] = WithStartWorkflowOperation(
            RUN_WORKFLOW,
            run_input(run_id, options, packs_per_history=packs_per_history, retry=checked.request),
            id=run_workflow_id(run_id),
            result_type=RunResult,
            task_queue=task_queue or self.settings.temporal_task_queue,
            task_timeout=self.settings.workflow_task_timeout,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            static_summary=f"run {run_id}: retry {checked.number} of {checked.blocks} "
            f"block{'s' if checked.blocks != 1 else ''} ({reasons_text}) · "
            f"{run.document_name} × {run.schema_name} ({options.model})",
            static_details=(
                f"retry {checked.number} of run {run_id}, which was {run.status}: "
                f"{checked.blocks} blocks ({reasons_text}); asked for "
                f"`{checked.request.model_dump_json(exclude_defaults=True)}`\n\n"
                + run_details(run_id, run.document_id, run.schema_id, options)
            ),
            search_attributes=run_attributes(run_id, run.document_id, run.schema_id, options.model),
        )
        try:
            claim: PlanRetryOutput = await client.execute_update_with_start_workflow(
                RETRY, start_workflow_operation=start, result_type=PlanRetryOutput
            )
        except WorkflowUpdateFailedError as err:
            raise _retry_refused(run_id, checked.number, err.cause) from None
        handle = await start.workflow_handle()
        assert handle.result_run_id is not None
        return RetryStarted(
            run_id=run_id,
            retry=claim.retry,
            blocks=claim.blocks,
            reasons=checked.reasons,
            request=checked.request,
            workflow_id=handle.id,
            workflow_run_id=handle.result_run_id,
        )

    async def check_retry(
        self,
        run_id: str,
        *,
        reasons: list[str] | None = None,
        blocks: list[str] | None = None,
        include_cancelled: bool = False,
        max_cost_usd: float | None = None,
    ) -> CheckedRetry:
        """What :meth:`retry` would take (blocks, by reason), read-only; raises as it would."""
        async with self.pool.acquire() as conn:
            return await check_retry_request(
                conn,
                run_id,
                reasons=reasons,
                blocks=blocks,
                include_cancelled=include_cancelled,
                max_cost_usd=max_cost_usd,
            )

    async def retries(self, run_id: str) -> list[RetryRecord]:
        """Every retry of the run, first first (what it took, when, how it ended)."""
        return await retries.history(self.pool, run_id)

    async def retry_claimed(self, started: RetryStarted) -> RetryRecord | None:
        """The retry as claimed by its workflow; ``None`` while (or if never) claimed."""
        return await retries.claimed_by(self.pool, started.run_id, started.workflow_run_id)


def _retry_refused(run_id: str, number: int, cause: BaseException) -> RetryRefused:
    """The error for a retry the run's workflow refused (the ``retry`` Update's failure)."""
    from temporalio.exceptions import ApplicationError

    kind = cause.type if isinstance(cause, ApplicationError) else None
    message = cause.message if isinstance(cause, ApplicationError) else str(cause)
    if kind == RETRY_UNDER_WAY:
        return RetryUnderWay(
            f"a retry of run {run_id} is already under way (its workflow "
            f"{run_workflow_id(run_id)} is running): follow it with "
            f"`{PROG} watch {run_id}`"
        )
    error = {RUN_NOT_FINISHED: RunStillActive, NOTHING_TO_RETRY: NothingToRetry}.get(
        kind or "", RetryRefused
    )
    return error(f"retry {number} of run {run_id} was refused: {message}")
