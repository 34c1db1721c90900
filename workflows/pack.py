"""ProcessPack: one LLM call for a pack of blocks, then halving until every block is done.

A pack calls the model once (``call_model`` writes the request and the raw answer to the
ledger), applies the answer (``apply_results`` validates it by block_uid and writes the
overlays), and hands whatever is still unfinished to two child ProcessPack workflows
(``.../pack-3.0`` and ``.../pack-3.1``). A single block retries in place until its attempts
run out. Splits do not consume attempts; per-block failures do.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.db import DbActivities
    from activities.llm import API_KEY_REJECTED, LlmActivities
    from core.models import (
        ApplyResultsInput,
        CallModelInput,
        CallModelOutput,
        FailBlocksInput,
        PackOutcome,
        ProcessPackInput,
        RecordSplitInput,
        Totals,
    )
    from workflows import attributes

#: Rate limits, overload and 5xx are retried here, honouring retry-after (next_retry_delay).
CALL_MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=12,
    non_retryable_error_types=[API_KEY_REJECTED],
)
CALL_MODEL_TIMEOUT = timedelta(minutes=10)
#: A killed worker is noticed within this time and the call moves to another worker.
CALL_MODEL_HEARTBEAT = timedelta(seconds=20)
DB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,  # Postgres restarts are waited out, never turned into lost blocks.
)
DB_TIMEOUT = timedelta(seconds=60)


@workflow.defn(name="ProcessPack")
class ProcessPackWorkflow:
    def __init__(self) -> None:
        self._cancelled = False
        self._children: list[str] = []

    @workflow.signal
    async def cancel(self) -> None:
        """Stop before the next call; forward to running halves."""
        self._cancelled = True
        for child_id in list(self._children):
            try:
                await workflow.get_external_workflow_handle(child_id).signal("cancel")
            except Exception:  # noqa: BLE001 - a finished child needs no signal
                workflow.logger.debug("cancel not delivered to %s", child_id)

    @workflow.run
    async def run(self, inp: ProcessPackInput) -> PackOutcome:
        outcome = await self._process(inp)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return outcome

    async def _process(self, inp: ProcessPackInput) -> PackOutcome:
        totals = Totals()
        outcome = PackOutcome(pack_path=inp.pack_path, totals=totals)
        uids = inp.block_uids
        attempt = 1
        while True:
            if self._cancelled:
                outcome.cancelled = True
                return outcome
            try:
                call = await workflow.execute_activity_method(
                    LlmActivities.call_model,
                    CallModelInput(
                        run_id=inp.run_id,
                        pack_path=inp.pack_path,
                        pack_index=inp.pack_index,
                        pack_attempt=attempt,
                        block_uids=uids,
                    ),
                    start_to_close_timeout=CALL_MODEL_TIMEOUT,
                    heartbeat_timeout=CALL_MODEL_HEARTBEAT,
                    retry_policy=CALL_MODEL_RETRY,
                    summary=f"call_model pack {inp.pack_path} attempt {attempt}"
                    + (f", {len(uids)} blocks" if uids else ""),
                )
            except ActivityError as err:
                cause = err.cause
                if isinstance(cause, ApplicationError) and cause.type == API_KEY_REJECTED:
                    outcome.fatal_error = cause.message
                    return outcome
                # Retries exhausted (API down for minutes): fail these blocks, not the run.
                message = cause.message if isinstance(cause, ApplicationError) else str(err)
                await self._fail(inp, uids, f"Claude call failed after retries: {message}",
                                 totals)
                return outcome
            self._count_call(call, totals)
            uids = call.block_uids
            if call.outcome == "empty":
                return outcome
            if call.outcome == "cancelled":
                outcome.cancelled = True
                return outcome
            if call.outcome in ("oversized", "request_error") or (
                call.outcome == "overflow" and len(uids) == 1
            ):
                await self._fail(inp, uids, call.message or call.outcome, totals)
                return outcome
            if call.outcome == "overflow":
                remaining, reason = uids, call.message or "prompt too long"
            else:
                assert call.call_id is not None
                applied = await workflow.execute_activity_method(
                    DbActivities.apply_results,
                    ApplyResultsInput(
                        run_id=inp.run_id,
                        call_id=call.call_id,
                        pack_path=inp.pack_path,
                        max_block_attempts=inp.max_block_attempts,
                    ),
                    start_to_close_timeout=DB_TIMEOUT,
                    retry_policy=DB_RETRY,
                    summary=f"apply_results {len(uids)} blocks, {_tokens(call)} "
                            f"({call.stop_reason})",
                )
                totals.blocks_done += applied.completed
                totals.blocks_failed += len(applied.failed)
                remaining, reason = applied.remaining, applied.reason
                workflow.set_current_details(
                    f"attempt {attempt}: {applied.completed}/{len(uids)} blocks ok, "
                    f"{len(applied.failed)} failed, {len(remaining)} left"
                    + (f" ({reason})" if remaining else "") + f" · {_tokens(call)} · "
                    f"${totals.cost_usd:.4f}"
                )
            if not remaining:
                return outcome
            if len(uids) == 1:
                attempt += 1  # a single block retries in place; apply_results counted it
                continue
            await self._split(inp, remaining, reason, outcome)
            return outcome

    async def _split(
        self, inp: ProcessPackInput, remaining: list[str], reason: str, outcome: PackOutcome
    ) -> None:
        half = (len(remaining) + 1) // 2
        parts = [p for p in (remaining[:half], remaining[half:]) if p]
        paths = [f"{inp.pack_path}.{i}" for i in range(len(parts))]
        await workflow.execute_activity_method(
            DbActivities.record_split,
            RecordSplitInput(
                run_id=inp.run_id,
                pack_path=inp.pack_path,
                reason=reason,
                block_count=len(remaining),
                child_paths=paths,
            ),
            start_to_close_timeout=DB_TIMEOUT,
            retry_policy=DB_RETRY,
        )
        outcome.totals.splits += 1
        parent_id = workflow.info().workflow_id
        base = parent_id.rsplit("/pack-", 1)[0]
        handles = []
        for path, part in zip(paths, parts):
            child_id = f"{base}/pack-{path}"
            handle = await workflow.start_child_workflow(
                ProcessPackWorkflow.run,
                ProcessPackInput(
                    run_id=inp.run_id,
                    pack_path=path,
                    pack_index=inp.pack_index,
                    block_uids=part,
                    max_block_attempts=inp.max_block_attempts,
                ),
                id=child_id,
                static_summary=f"pack {path}: {len(part)} blocks (half of {inp.pack_path})",
                static_details=f"split because: {reason}",
                search_attributes=workflow.info().typed_search_attributes.updated(
                    SearchAttributePair(attributes.RUN_ID, inp.run_id), SearchAttributePair(attributes.PACK, path)
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

    async def _fail(
        self, inp: ProcessPackInput, uids: list[str] | None, reason: str, totals: Totals
    ) -> None:
        failed = await workflow.execute_activity_method(
            DbActivities.fail_blocks,
            FailBlocksInput(run_id=inp.run_id, block_uids=uids, pack_index=inp.pack_index,
                            reason=reason, pack_path=inp.pack_path),
            start_to_close_timeout=DB_TIMEOUT,
            retry_policy=DB_RETRY,
        )
        totals.blocks_failed += failed.failed

    @staticmethod
    def _count_call(call: CallModelOutput, totals: Totals) -> None:
        if call.call_id is None or call.reused:
            return
        totals.calls += 1
        totals.input_tokens += call.input_tokens
        totals.output_tokens += call.output_tokens
        totals.cache_creation_input_tokens += call.cache_creation_input_tokens
        totals.cache_read_input_tokens += call.cache_read_input_tokens
        totals.cost_usd += call.cost_usd


def _tokens(call: CallModelOutput) -> str:
    """A call's tokens as ``3,412 in / 1,890 out tokens`` (in: all prompt tokens)."""
    prompt = (call.input_tokens + call.cache_creation_input_tokens
              + call.cache_read_input_tokens)
    return f"{prompt:,} in / {call.output_tokens:,} out tokens"
