"""RunWorkflow's planning steps: plan a run or claim a retry, warm the prompt cache, and
re-plan the packs not started yet.

Deterministic workflow code. Each step runs one activity and writes what it learned into
the run's state (``RunInput``, which crosses continue-as-new); RunWorkflow decides when.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.db import DbActivities
    from activities.errors import RUN_STOPPED
    from activities.llm import LlmActivities
    from blockbatch.core.batch_types import BatchRunState
    from blockbatch.core.call_types import Totals, WarmCacheInput, WarmCacheOutput
    from blockbatch.core.quality import reading_text
    from blockbatch.core.retry_types import PlanRetryInput, PlanRetryOutput
    from blockbatch.core.run_types import (
        GateReading,
        PlanRunInput,
        PlanRunOutput,
        ReplanInput,
        ReplanOutput,
        RunInput,
    )
    from workflows.retries import (
        CALL_MODEL_HEARTBEAT,
        CALL_MODEL_TIMEOUT,
        DB_RETRY,
        PLAN_HEARTBEAT,
        PLAN_TIMEOUT,
        WARM_UP_RETRY,
        first_backoff,
    )


async def plan_run(s: RunInput) -> PlanRunOutput:
    """Size the run's packs (``plan_run``); blocks an earlier run answered are done."""
    plan = await workflow.execute_activity_method(
        DbActivities.plan_run,
        PlanRunInput(run_id=s.run_id),
        start_to_close_timeout=PLAN_TIMEOUT,
        heartbeat_timeout=PLAN_HEARTBEAT,
        retry_policy=DB_RETRY,
        summary="plan_run: size packs from block and output estimates",
    )
    s.pack_count, s.block_count, s.replans = plan.pack_count, plan.block_count, plan.replans
    s.totals.add(
        Totals(
            blocks_done=plan.reused,
            blocks_reused=plan.reused,
            reuse_saved_usd=plan.reuse_saved_usd,
        )
    )
    if plan.mode == "batch":
        s.batch = BatchRunState()
    return plan


async def claim_retry(s: RunInput) -> PlanRetryOutput:
    """Claim the retry ``s.retry`` of a finished run (``plan_retry``): its blocks in new
    packs after the run's packs; in batch mode, a new round after the last one.

    Raises:
        ApplicationError: the claim was refused (its type says why: ``RunNotFinished``,
            ``NothingToRetry``, ``RetryRefused``); nothing was changed.
    """
    assert s.retry is not None
    try:
        claim = await workflow.execute_activity_method(
            DbActivities.plan_retry,
            PlanRetryInput(run_id=s.run_id, retry=s.retry),
            start_to_close_timeout=PLAN_TIMEOUT,
            retry_policy=DB_RETRY,
            summary="plan_retry: claim the run, reset the blocks to retry, pack them "
            "after its packs",
        )
    except ActivityError as err:
        cause = err.cause
        if isinstance(cause, ApplicationError):
            raise ApplicationError(cause.message, type=cause.type, non_retryable=True) from None
        raise ApplicationError(str(err), non_retryable=True) from None
    s.pack_count, s.block_count = claim.pack_count, claim.block_count
    s.next_pack, s.totals = claim.first_pack, claim.totals
    if claim.mode == "batch":
        assert claim.first_round is not None and claim.batch_options is not None
        s.batch = BatchRunState(round=claim.first_round, opened=True, options=claim.batch_options)
    return claim


async def warm_cache(s: RunInput) -> WarmCacheOutput | None:
    """One small call writes the prompt cache before every pack starts at once (``None``:
    it failed after its retries; pack 0 then goes first alone instead).

    Raises:
        ApplicationError: the key, the account or the model refuses every call
            (``ClaudeStopsRun``): the run stops, no pack starts.
    """
    try:
        out = await workflow.execute_activity_method(
            LlmActivities.warm_cache,
            WarmCacheInput(run_id=s.run_id, first_pack=s.next_pack),
            start_to_close_timeout=CALL_MODEL_TIMEOUT,
            heartbeat_timeout=CALL_MODEL_HEARTBEAT,
            retry_policy=first_backoff(WARM_UP_RETRY, s.call_retry_s),
            summary="warm_cache: write the prompt cache once, then start every pack",
        )
    except ActivityError as err:
        cause = err.cause
        if isinstance(cause, ApplicationError) and cause.type == RUN_STOPPED:
            raise ApplicationError(cause.message, type=RUN_STOPPED, non_retryable=True) from None
        workflow.logger.warning("warm-up call failed (%s): pack 0 goes first", cause or err)
        return None
    s.totals.add(out.totals)
    return out


async def replan(s: RunInput, gate: GateReading | None = None) -> ReplanOutput:
    """Plan the packs not started yet again: from what the run's answers wrote, or, for
    the quality gate (``gate``), at half the size; then the gate counts again from them.

    With the gate's re-asks (``QualityRunState.reask``) the blocks answered in larger
    packs are re-planned at the new size too (new packs after ``next_pack``).
    """
    q = s.quality if gate is not None else None
    out = await workflow.execute_activity_method(
        DbActivities.replan_run,
        ReplanInput(
            run_id=s.run_id, first_pack=s.next_pack, gate=gate, reask=q is not None and q.reask
        ),
        start_to_close_timeout=PLAN_TIMEOUT,
        heartbeat_timeout=PLAN_HEARTBEAT,
        retry_policy=DB_RETRY,
        summary=f"replan_run: quality gate, {reading_text(gate)}"
        if gate is not None
        else f"replan_run: packs {s.next_pack} on, from what the answers wrote",
    )
    s.pack_count = out.pack_count
    if q is not None:
        q.since_pack, q.sampled, q.agreeing = s.next_pack, 0, 0
        # No smaller size to go to (packs of one block): the gate has done what it can.
        q.pack_size = out.pack_size or 1
        if out.text is not None:
            q.text = out.text
            workflow.logger.warning("run %s: %s", s.run_id, out.text)
    return out
