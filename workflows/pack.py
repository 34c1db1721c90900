"""ProcessPack: one LLM call for a pack of blocks, then halving until every block is done.

The story of one attempt: **call** the model (``call_model`` writes the request and the raw
answer to the ledger), **apply** the answer (``apply_results`` validates it by block_uid and
writes the overlays), **decide** with the pack policy (``blockbatch.core.policy.decide``, the same rules
as batch mode), then **split** what is unfinished into two child ProcessPack workflows
(``.../pack-3.0`` and ``.../pack-3.1``), **retry** a single block in place, **fail** the
blocks, or **finish**. Splits do not consume attempts; per-block failures do. A call the
run's budget cannot hold is not made: the blocks end ``budget_exhausted`` and the outcome
tells the run to start no more packs.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import SearchAttributePair
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from activities.db import DbActivities
    from activities.errors import API_UNAVAILABLE, RUN_STOPPED
    from activities.llm import LlmActivities
    from blockbatch.core.call_types import (
        ApplyResultsInput,
        CallModelInput,
        CallModelOutput,
        FailBlocksInput,
        LimiterNote,
        PackOutcome,
        ProcessPackInput,
        RecordSplitInput,
        Totals,
    )
    from blockbatch.core.claude_errors import ClaudeError
    from blockbatch.core.outage_types import ApiDownReport
    from blockbatch.core.policy import Decision, decide, decide_call, split_pack
    from blockbatch.core.quality_types import QualityProbeInput
    from blockbatch.core.workflow_names import PACK_WORKFLOW
    from workflows import attributes
    from workflows.retries import (
        CALL_MODEL_RETRY,
        CALL_MODEL_TIMEOUT,
        DB_RETRY,
        QUALITY_PROBE_RETRY,
        first_backoff,
    )


@workflow.defn(name=PACK_WORKFLOW)
class ProcessPackWorkflow:
    def __init__(self) -> None:
        self._cancelled = False
        self._resumed = False
        self._call_started: datetime | None = None
        self._children: list[str] = []
        #: The limiter as this pack's latest answered call saw it (the run shows it).
        self._limiter: LimiterNote | None = None

    @workflow.signal
    def resume(self) -> None:
        """Claude answered the run's probe: make the call that failed again."""
        self._resumed = True

    @workflow.signal
    async def cancel(self) -> None:
        """Stop before the next call; forward to running halves."""
        self._cancelled = True
        for child_id in list(self._children):
            try:
                await workflow.get_external_workflow_handle_for(
                    ProcessPackWorkflow.run, child_id
                ).signal(ProcessPackWorkflow.cancel)
            except Exception:  # noqa: BLE001 - a finished child needs no signal
                workflow.logger.debug("cancel not delivered to %s", child_id)

    @workflow.run
    async def run(self, inp: ProcessPackInput) -> PackOutcome:
        # A planned pack always reports its outcome to the run by signal (``pack_done``),
        # even when it fails or is cancelled outright: it may outlive the execution of the
        # run that started it (continue-as-new), and a signal by workflow id reaches
        # whichever execution is current. The run counts each pack path once. Halves
        # (``block_uids`` set) return their outcome to the pack that split.
        planned = inp.block_uids is None
        try:
            outcome = await self._run(inp)
        except (FailureError, asyncio.CancelledError):
            if planned:
                await self._report(PackOutcome(pack_path=inp.pack_path))
            raise
        if planned:
            await self._report(outcome)
        return outcome

    async def _report(self, outcome: PackOutcome) -> None:
        run_id = _run_workflow_id()
        try:
            await workflow.get_external_workflow_handle(run_id).signal("pack_done", outcome)
        except Exception as err:  # noqa: BLE001 - the run ended (terminated): nobody to tell
            workflow.logger.error(
                "cannot report pack %s to run %s: %s", outcome.pack_path, run_id, err
            )

    async def _run(self, inp: ProcessPackInput) -> PackOutcome:
        outcome = PackOutcome(pack_path=inp.pack_path)
        uids, attempt = inp.block_uids, 1
        while not self._cancelled:
            uids, decision = await self._attempt(inp, uids, attempt, outcome.totals)
            if decision.step == "retry":
                attempt += 1  # a single block retries in place; apply_results charged it
                continue
            if decision.step == "wait":
                # Claude is down: the run pauses and probes; the same attempt goes again
                # once it answers (no block is charged for the outage).
                if await self._wait_for_api(inp, decision.reason):
                    continue
                await self._fail(
                    inp,
                    uids,
                    decide("errored", blocks=len(uids or ()), reason=decision.reason),
                    outcome.totals,
                )
                break
            if decision.step == "split":
                assert uids is not None
                await self._split(inp, uids, decision.reason, outcome)
            elif decision.step == "fail":
                await self._fail(inp, uids, decision, outcome.totals)
                # The run's budget cannot hold this pack's next call: the run stops
                # starting packs (and ends budget_exhausted).
                outcome.budget_exhausted = decision.code == "budget_exhausted"
            elif decision.step == "fatal":
                outcome.fatal_error = decision.reason
            elif decision.step == "keep":
                outcome.cancelled = True
            break
        else:
            outcome.cancelled = True
        # A planned pack (its halves included) is done: probe its sampled blocks. Not after
        # a cancel, a fatal error or a budget refusal.
        if (
            inp.quality_probe
            and inp.block_uids is None
            and not self._cancelled
            and not (outcome.cancelled or outcome.fatal_error or outcome.budget_exhausted)
        ):
            await self._probe_quality(inp, outcome)
        outcome.limiter = latest(outcome.limiter, self._limiter)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return outcome

    async def _attempt(
        self, inp: ProcessPackInput, uids: list[str] | None, attempt: int, totals: Totals
    ) -> tuple[list[str] | None, Decision]:
        """Call, apply, decide: the blocks the next step is about, and what it is."""
        can_pause = inp.failures_to_pause is not None
        self._call_started = workflow.now()
        try:
            call = await workflow.execute_activity_method(
                LlmActivities.call_model,
                CallModelInput(
                    run_id=inp.run_id,
                    pack_path=inp.pack_path,
                    pack_index=inp.pack_index,
                    pack_attempt=attempt,
                    block_uids=uids,
                    outage_attempts=inp.failures_to_pause if can_pause else None,
                ),
                start_to_close_timeout=CALL_MODEL_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=inp.call_heartbeat_s),
                retry_policy=first_backoff(CALL_MODEL_RETRY, inp.call_retry_s),
                summary=f"call_model pack {inp.pack_path} attempt {attempt}"
                + (f", {len(uids)} blocks" if uids else ""),
            )
        except ActivityError as err:
            # Temporal's retries are spent (or the key was rejected): the policy decides.
            error, message = _claude_error(err)
            return uids, decide(
                "errored",
                blocks=len(uids or ()),
                error=error,
                reason=message,
                retries_left=False,
                can_pause=can_pause and _gave_up(err),
            )
        totals.add(call.totals())
        if call.limiter is not None:
            self._limiter = call.limiter
        uids = call.block_uids
        if call.outcome == "answered":
            return await self._apply(inp, call, attempt, totals)
        return uids, decide_call(
            call.outcome, blocks=len(uids), message=call.message, error=call.error
        )

    async def _apply(
        self, inp: ProcessPackInput, call: CallModelOutput, attempt: int, totals: Totals
    ) -> tuple[list[str], Decision]:
        """Apply an answer; the blocks it left unfinished, and what next."""
        assert call.call_id is not None
        uids = call.block_uids
        applied = await workflow.execute_activity_method(
            DbActivities.apply_results,
            ApplyResultsInput(
                run_id=inp.run_id,
                call_id=call.call_id,
                pack_path=inp.pack_path,
                max_block_attempts=inp.max_block_attempts,
            ),
            start_to_close_timeout=timedelta(seconds=inp.db_step_s),
            retry_policy=DB_RETRY,
            summary=f"apply_results {len(uids)} blocks, {_tokens(call)} ({call.stop_reason})",
        )
        totals.blocks_done += applied.completed
        totals.blocks_failed += len(applied.failed)
        left = applied.remaining
        workflow.set_current_details(
            f"attempt {attempt}: {applied.completed}/{len(uids)} blocks ok, "
            f"{len(applied.failed)} failed, {len(left)} left"
            + (f" ({applied.reason})" if left else "")
            + f" · {_tokens(call)} · "
            f"${totals.cost_usd:.4f}"
        )
        # Not ``stopping`` even after a cancel: halves see the cancel before their first call.
        return left, decide(
            "answered", blocks=len(uids), remaining=len(left), reason=applied.reason
        )

    async def _probe_quality(self, inp: ProcessPackInput, outcome: PackOutcome) -> None:
        """Ask the pack's sampled blocks alone and compare (blockbatch/core/quality.py); the packed
        answers stay the overlays. A probe that fails never fails the pack."""
        try:
            probe = await workflow.execute_activity_method(
                LlmActivities.probe_quality,
                QualityProbeInput(
                    run_id=inp.run_id, pack_index=inp.pack_index, at_least=inp.probe_at_least
                ),
                start_to_close_timeout=CALL_MODEL_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=inp.call_heartbeat_s),
                retry_policy=QUALITY_PROBE_RETRY,
                summary=f"probe_quality pack {inp.pack_path}: its sampled blocks asked alone",
            )
        except ActivityError as err:
            workflow.logger.warning(
                "quality probe of pack %s failed: %s", inp.pack_path, err.cause or err
            )
            return
        outcome.totals.add(probe.totals)
        if probe.sampled or probe.failed:
            workflow.set_current_details(
                f"quality probe: {probe.agreeing}/{probe.sampled} sampled blocks agree with "
                f"their single answers"
                + (f", {probe.failed} probe(s) failed" if probe.failed else "")
                + f" · ${probe.totals.quality_cost_usd:.4f}"
            )

    async def _wait_for_api(self, inp: ProcessPackInput, reason: str) -> bool:
        """Tell the run Claude is down and wait for its ``resume`` (False: could not tell)."""
        assert inp.failures_to_pause is not None
        run_workflow_id = _run_workflow_id()
        assert self._call_started is not None
        report = ApiDownReport(
            pack_workflow_id=workflow.info().workflow_id,
            pack_path=inp.pack_path,
            failures=inp.failures_to_pause,
            since=self._call_started,
            error=reason,
        )
        self._resumed = False
        try:
            await workflow.get_external_workflow_handle(run_workflow_id).signal("api_down", report)
        except Exception as err:  # noqa: BLE001 - no run to wait for: fail as before
            workflow.logger.error(
                "cannot tell run %s that Claude is down: %s", run_workflow_id, err
            )
            return False
        workflow.set_current_details(f"waiting for the API (the run probes it): {reason}")
        await workflow.wait_condition(lambda: self._resumed or self._cancelled)
        return True

    async def _split(
        self, inp: ProcessPackInput, remaining: list[str], reason: str, outcome: PackOutcome
    ) -> None:
        halves = split_pack(inp.pack_path, remaining)
        paths = [path for path, _ in halves]
        await workflow.execute_activity_method(
            DbActivities.record_split,
            RecordSplitInput(
                run_id=inp.run_id,
                pack_path=inp.pack_path,
                reason=reason,
                block_count=len(remaining),
                child_paths=paths,
            ),
            start_to_close_timeout=timedelta(seconds=inp.db_step_s),
            retry_policy=DB_RETRY,
        )
        outcome.totals.splits += 1
        base = _run_workflow_id()
        handles = []
        for path, part in halves:
            child_id = f"{base}/pack-{path}"
            handle = await workflow.start_child_workflow(
                ProcessPackWorkflow.run,
                ProcessPackInput(
                    run_id=inp.run_id,
                    pack_path=path,
                    pack_index=inp.pack_index,
                    block_uids=part,
                    max_block_attempts=inp.max_block_attempts,
                    failures_to_pause=inp.failures_to_pause,
                    call_heartbeat_s=inp.call_heartbeat_s,
                    call_retry_s=inp.call_retry_s,
                    db_step_s=inp.db_step_s,
                ),
                id=child_id,
                task_timeout=workflow.info().task_timeout,  # the run's (workflows/window.py)
                static_summary=f"pack {path}: {len(part)} blocks (half of {inp.pack_path})",
                static_details=f"split because: {reason}",
                search_attributes=workflow.info().typed_search_attributes.updated(
                    SearchAttributePair(attributes.RUN_ID, inp.run_id),
                    SearchAttributePair(attributes.PACK, path),
                ),
            )
            self._children.append(child_id)
            handles.append(handle)
            if self._cancelled:
                await handle.signal(ProcessPackWorkflow.cancel)
        for child in await asyncio.gather(*handles):
            outcome.totals.add(child.totals)
            outcome.cancelled = outcome.cancelled or child.cancelled
            outcome.fatal_error = outcome.fatal_error or child.fatal_error
            outcome.budget_exhausted = outcome.budget_exhausted or child.budget_exhausted
            outcome.limiter = latest(outcome.limiter, child.limiter)

    async def _fail(
        self,
        inp: ProcessPackInput,
        uids: list[str] | None,
        decision: Decision,
        totals: Totals,
    ) -> None:
        failed = await workflow.execute_activity_method(
            DbActivities.fail_blocks,
            FailBlocksInput(
                run_id=inp.run_id,
                block_uids=uids,
                pack_index=inp.pack_index,
                reason=decision.reason,
                pack_path=inp.pack_path,
                reason_code=decision.code,
            ),
            start_to_close_timeout=timedelta(seconds=inp.db_step_s),
            retry_policy=DB_RETRY,
        )
        totals.blocks_failed += failed.failed


def latest(a: LimiterNote | None, b: LimiterNote | None) -> LimiterNote | None:
    """The later of two views of the limiter."""
    if a is None or (b is not None and b.at > a.at):
        return b
    return a


def _run_workflow_id() -> str:
    """The id of the run this pack belongs to (``run-<id>``, from ``run-<id>/pack-3.0``)."""
    return workflow.info().workflow_id.rsplit("/pack-", 1)[0]


def _gave_up(err: ActivityError) -> bool:
    """Whether ``call_model`` stopped retrying because Claude is down (``ClaudeDown``)."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type == API_UNAVAILABLE


def _claude_error(err: ActivityError) -> tuple[ClaudeError | None, str]:
    """The classified error an activity reported (its first detail), and its message."""
    cause = err.cause
    if not isinstance(cause, ApplicationError):
        return None, str(err)
    if cause.details:
        try:
            return ClaudeError.model_validate(cause.details[0]), cause.message
        except ValidationError:
            pass
    if cause.type == RUN_STOPPED:
        return ClaudeError(
            kind="fatal",
            code="key_rejected",
            status=None,
            error_type=cause.type,
            message=cause.message,
        ), cause.message
    return None, cause.message


def _tokens(call: CallModelOutput) -> str:
    """A call's tokens as ``3,412 in / 1,890 out tokens`` (in: all prompt tokens)."""
    prompt = call.input_tokens + call.cache_creation_input_tokens + call.cache_read_input_tokens
    return f"{prompt:,} in / {call.output_tokens:,} out tokens"
