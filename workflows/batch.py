"""Batch mode of RunWorkflow: rounds of Anthropic Message Batches, at half the price.

RunWorkflow hands a ``mode="batch"`` run to :class:`BatchRounds`, whose ``run`` says how
the rounds ended (:class:`BatchEnd`); RunWorkflow decides about continue-as-new and
finishing. Round 1 holds one request per planned pack, or one lead request alone that writes
the prompt prefix, its followers being round 2 (``open_batch_run``). Before a round, one sync
``max_tokens: 0`` call may write the prefix with the 1-hour TTL (``prewarm_round``), so the
batch's requests read it (hits in a batch are best effort). Each round is submitted as provider batches, waited for with
durable timers (the interval doubles from ``poll_initial_s`` to ``poll_max_s``; a batch
may take up to 24 h, and an expired request is simply resubmitted), its results are
streamed into the ledger and applied, and whatever is unfinished (halves of truncated
or mis-mapped packs, single-block retries, errored or expired requests) is round n + 1.
A round's membership lives in Postgres; only the round number crosses Temporal, and it
travels in ``RunInput.batch`` across continue-as-new. A cancel signal cancels the
provider batches; results that did arrive are applied, the rest ends ``cancelled``. A run
with a budget submits each round sized to fit it (``submit_round``); once a round had to be
cut, the run stops after it and finishes ``budget_exhausted``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.batches import BatchActivities
    from activities.db import DbActivities
    from activities.errors import BATCH_REJECTED, RUN_STOPPED
    from blockbatch.core.batch_types import (
        ApplyRoundInput,
        BatchProgress,
        BatchRoundInput,
        OpenBatchRunInput,
    )
    from blockbatch.core.run_types import MarkCancellingInput, RunInput
    from workflows.retries import (
        CALL_MODEL_HEARTBEAT,
        CALL_MODEL_TIMEOUT,
        DB_RETRY,
        DB_TIMEOUT,
        WARM_UP_RETRY,
    )

#: Creating a batch uploads up to 256 MB; API errors are retried, a refusal is not.
SUBMIT_TIMEOUT = timedelta(hours=1)
SUBMIT_HEARTBEAT = timedelta(minutes=1)
SUBMIT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=2),
    maximum_attempts=20,
    non_retryable_error_types=[RUN_STOPPED, BATCH_REJECTED],
)
#: Looking at, canceling and reading batches is harmless to repeat: retried until it works.
API_TIMEOUT = timedelta(minutes=2)
API_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
    maximum_attempts=0,
    non_retryable_error_types=[RUN_STOPPED, BATCH_REJECTED],
)
#: Streaming and applying a round of many thousand results; heartbeats show progress.
LONG_TIMEOUT = timedelta(hours=2)
LONG_HEARTBEAT = timedelta(minutes=2)
#: Past this many history events the run continues as new at the next round boundary.
HISTORY_EVENTS_PER_RUN = 5000


@dataclass(frozen=True)
class BatchEnd:
    """How the rounds of one workflow run ended."""

    #: Rounds are left, and this history is long enough: continue as new.
    more: bool = False
    #: The run must stop (the API key was rejected, a batch was refused).
    fatal_error: str | None = None
    #: A round was cut to fit the run's budget: the run finishes ``budget_exhausted``.
    budget_exhausted: bool = False


class BatchRounds:
    """The batch-mode body of one RunWorkflow execution (deterministic workflow code)."""

    def __init__(self, inp: RunInput, cancel_requested: Callable[[], bool]) -> None:
        assert inp.batch is not None
        self._inp = inp
        self._state = inp.batch
        self._cancel_requested = cancel_requested
        self._marked_stopping = False
        self._cancel_sent = False
        self._progress = BatchProgress(round=self._state.round, phase="opening")

    def progress(self) -> BatchProgress:
        return self._progress.model_copy(deep=True)

    async def run(self) -> BatchEnd:
        """Run rounds until nothing is left, the run stops, or the history is long enough."""
        try:
            return await self._rounds()
        except ActivityError as err:
            cause = err.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(err)
            workflow.logger.error("batch mode stops the run: %s", message)
            await self._stop(message)
            return BatchEnd(fatal_error=message)

    async def _rounds(self) -> BatchEnd:
        st, inp = self._state, self._inp
        if not st.opened:
            opened = await workflow.execute_activity_method(
                BatchActivities.open_batch_run,
                OpenBatchRunInput(run_id=inp.run_id),
                start_to_close_timeout=LONG_TIMEOUT,
                retry_policy=DB_RETRY,
                summary="open_batch_run: round 1 is one request per planned pack",
            )
            st.options, st.opened = opened.options, True
            inp.totals.blocks_failed += opened.failed
        while True:
            self._progress = BatchProgress(round=st.round, phase="submitting")
            self._cancel_sent = False
            self._show()
            if self._cancel_requested():
                await self._stop("cancel requested")
                return BatchEnd()
            ref = BatchRoundInput(run_id=inp.run_id, round=st.round)
            await self._prewarm(ref)
            submitted = await workflow.execute_activity_method(
                BatchActivities.submit_round,
                ref,
                start_to_close_timeout=SUBMIT_TIMEOUT,
                heartbeat_timeout=SUBMIT_HEARTBEAT,
                retry_policy=SUBMIT_RETRY,
                summary=f"submit_round {st.round}: Message Batches built from Postgres",
            )
            self._progress.provider_batch_ids = [b.provider_batch_id for b in submitted.batches]
            self._progress.requests = submitted.requests
            if submitted.batches:
                await self._wait(ref)
                fatal = await self._collect_and_apply(ref)
                if fatal:
                    await self._stop(fatal)
                    return BatchEnd(fatal_error=fatal)
            if self._cancel_requested() or submitted.refused:
                await self._stop("cancel requested")
                return BatchEnd()
            if submitted.over_budget:
                # The budget held only part of this round: what is left ends
                # budget_exhausted when the run finishes.
                self._progress.phase = "budget exhausted"
                self._show()
                return BatchEnd(budget_exhausted=True)
            if st.round == ref.round:
                self._progress.phase = "done"
                self._show()
                return BatchEnd()
            info = workflow.info()
            if (
                info.get_current_history_length() > HISTORY_EVENTS_PER_RUN
                or info.is_continue_as_new_suggested()
            ):
                return BatchEnd(more=True)

    async def _prewarm(self, ref: BatchRoundInput) -> None:
        """One sync ``max_tokens: 0`` call writes the prefix with the batch's 1-hour TTL,
        when the round's expected reads repay it (``activities/batches/prewarm.py``).
        A pre-warm that fails after its retries leaves the round to write the prefix
        itself; a refusal of the key or account (``RUN_STOPPED``) stops the run."""
        try:
            out = await workflow.execute_activity_method(
                BatchActivities.prewarm_round,
                ref,
                start_to_close_timeout=CALL_MODEL_TIMEOUT,
                heartbeat_timeout=CALL_MODEL_HEARTBEAT,
                retry_policy=WARM_UP_RETRY,
                summary=f"prewarm_round {ref.round}: write the prompt cache before the batch",
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == RUN_STOPPED:
                raise
            workflow.logger.warning("batch pre-warm failed (%s): the round writes it", cause)
            return
        self._inp.totals.add(out.totals)

    async def _wait(self, ref: BatchRoundInput) -> None:
        """Durable timers between looks at the batches, until every one has ended."""
        options = self._state.options
        interval = options.poll_initial_s
        while True:
            if self._cancel_requested() and not self._cancel_sent:
                await self._stop("cancel requested")
                interval = options.poll_initial_s
            self._progress.phase = "canceling" if self._cancel_sent else "processing"
            self._progress.next_poll_s = interval
            self._show()
            try:
                await workflow.wait_condition(
                    lambda: self._cancel_requested() and not self._cancel_sent,
                    timeout=timedelta(seconds=interval),
                    timeout_summary=f"wait {interval:g} s for batch round {ref.round}",
                )
                continue  # a cancel arrived: cancel the batches before looking again
            except TimeoutError:
                pass
            polled = await workflow.execute_activity_method(
                BatchActivities.poll_round,
                ref,
                start_to_close_timeout=API_TIMEOUT,
                retry_policy=API_RETRY,
                summary=f"poll_round {ref.round}",
            )
            self._progress.counts = polled.counts
            if polled.ended:
                self._progress.next_poll_s = None
                return
            interval = min(interval * 2, options.poll_max_s)

    async def _collect_and_apply(self, ref: BatchRoundInput) -> str | None:
        """Results into the ledger, then applied; returns a fatal error, if any."""
        inp, st = self._inp, self._state
        self._progress.phase = "collecting"
        self._show()
        collected = await workflow.execute_activity_method(
            BatchActivities.collect_round,
            ref,
            start_to_close_timeout=LONG_TIMEOUT,
            heartbeat_timeout=LONG_HEARTBEAT,
            retry_policy=API_RETRY,
            summary=f"collect_round {ref.round}: results into the ledger",
        )
        inp.totals.add(collected.totals)  # calls, tokens and cost of the round
        self._progress.phase = "applying"
        self._show()
        applied = await workflow.execute_activity_method(
            BatchActivities.apply_round,
            ApplyRoundInput(
                run_id=inp.run_id,
                round=ref.round,
                max_block_attempts=inp.max_block_attempts,
                max_resubmits=st.options.max_resubmits,
                schedule_next=not self._cancel_requested(),
            ),
            start_to_close_timeout=LONG_TIMEOUT,
            heartbeat_timeout=LONG_HEARTBEAT,
            retry_policy=DB_RETRY,
            summary=f"apply_round {ref.round}: validate by block_uid, plan round {ref.round + 1}",
        )
        inp.totals.blocks_done += applied.completed
        inp.totals.blocks_failed += applied.failed
        inp.totals.splits += applied.splits
        inp.totals.packs_done = applied.packs_done
        if applied.next_requests and not applied.fatal_error:
            st.round += 1
        return applied.fatal_error

    async def _stop(self, reason: str) -> None:
        """No new batch may start; cancel the current round's batches (once)."""
        if not self._marked_stopping:
            await workflow.execute_activity_method(
                DbActivities.mark_run_cancelling,
                MarkCancellingInput(run_id=self._inp.run_id, reason=reason),
                start_to_close_timeout=DB_TIMEOUT,
                retry_policy=DB_RETRY,
                summary="mark_run_cancelling: no new batch may be created",
            )
            self._marked_stopping = True
        if self._cancel_sent:
            return
        self._cancel_sent = True
        if not self._progress.provider_batch_ids:
            return
        self._progress.phase = "canceling"
        try:
            polled = await workflow.execute_activity_method(
                BatchActivities.cancel_round,
                BatchRoundInput(run_id=self._inp.run_id, round=self._progress.round),
                start_to_close_timeout=API_TIMEOUT,
                retry_policy=API_RETRY,
                summary=f"cancel_round {self._progress.round}: cancel the provider batches",
            )
            self._progress.counts = polled.counts
        except ActivityError as err:
            workflow.logger.error("could not cancel the provider batches: %s", err.cause)
        self._show()

    def _show(self) -> None:
        p, t, inp = self._progress, self._inp.totals, self._inp
        c = p.counts
        ids = ", ".join(p.provider_batch_ids) or "none yet"
        poll = f" · next look in {p.next_poll_s:g} s" if p.next_poll_s else ""
        workflow.set_current_details(
            f"**batch round {p.round}: {p.phase}** · batches {ids} · {p.requests} requests: "
            f"{c.processing} processing, {c.succeeded} succeeded, {c.errored} errored, "
            f"{c.expired} expired, {c.canceled} canceled{poll} · blocks "
            f"{t.blocks_done}/{inp.block_count} done, {t.blocks_failed} failed · "
            f"{t.calls} calls · {t.splits} splits · ${t.cost_usd:.4f} at batch prices"
        )
