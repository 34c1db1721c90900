"""The window of a run's packs in flight: start them, count each outcome once, stop them.

Deterministic workflow code shared by RunWorkflow and StreamWorkflow, in the shape of the
``batch_sliding_window`` sample: packs are children that outlive continue-as-new
(``ParentClosePolicy.ABANDON``); every planned pack reports its outcome by the run's
``pack_done`` signal, addressed by workflow id, so whichever execution is current gets it.
The window is ``RunInput.running``, part of the state that crosses continue-as-new: a
report counts only while its pack is in it, so a duplicate (a report and a failed child's
result, or a signal delivered twice) is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.common import SearchAttributePair
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.db import DbActivities
    from blockbatch.core.call_types import PackOutcome, ProcessPackInput
    from blockbatch.core.run_types import MarkCancellingInput, RunInput
    from workflows import attributes
    from workflows.pack import ProcessPackWorkflow
    from workflows.retries import DB_RETRY, DB_TIMEOUT


def pack_workflow_id(run_id: str, index: int) -> str:
    return f"run-{run_id}/pack-{index}"


class PackWindow:
    """One execution's view of the run's packs in flight (``RunInput.running``)."""

    def __init__(self, state: RunInput, report: Callable[[PackOutcome], None]) -> None:
        self._s = state
        #: The run's ``pack_done``: how a pack that closed without reporting is counted.
        self._report = report

    def __len__(self) -> int:
        return len(self._s.running)

    async def start(self, index: int, *, probe_at_least: int = 0) -> None:
        """Start planned pack ``index`` as a child that outlives this execution."""
        s = self._s
        s.running.add(index)
        handle = await workflow.start_child_workflow(
            ProcessPackWorkflow.run,
            ProcessPackInput(
                run_id=s.run_id,
                pack_path=str(index),
                pack_index=index,
                max_block_attempts=s.max_block_attempts,
                failures_to_pause=s.outage.failures_to_pause,
                quality_probe=s.quality is not None and s.quality.probe,
                probe_at_least=probe_at_least,
                call_heartbeat_s=s.call_heartbeat_s,
                call_retry_s=s.call_retry_s,
                db_step_s=s.db_step_s,
            ),
            id=pack_workflow_id(s.run_id, index),
            # A child's own default would be the namespace's (10 s), not its run's.
            task_timeout=workflow.info().task_timeout,
            # Cancelled by the run's cancel (``stop``), never by the parent closing.
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            # No total: a re-plan (from the answers, or the quality gate) changes it.
            static_summary=f"pack {index} of run {s.run_id}",
            static_details=f"planned as pack {index} of {s.pack_count}; a re-plan from "
            "the answers or the quality gate may change the packs after it",
            # The run's own attributes (document, schema, model) plus run id and pack.
            search_attributes=workflow.info().typed_search_attributes.updated(
                SearchAttributePair(attributes.RUN_ID, s.run_id),
                SearchAttributePair(attributes.PACK, str(index)),
            ),
        )
        asyncio.get_running_loop().create_task(self._watch(index, handle))

    def count(self, outcome: PackOutcome) -> bool:
        """Add a reported outcome to the run's totals once; False: not in the window."""
        s, index = self._s, int(outcome.pack_path)
        if index not in s.running:
            return False
        s.running.discard(index)
        s.totals.add(outcome.totals)
        s.totals.packs_done += 1
        q = s.quality
        if q is not None and index >= q.since_pack:
            # The gate counts the samples of packs at the current size.
            q.sampled += outcome.totals.quality_sampled
            q.agreeing += outcome.totals.quality_agreeing
        return True

    async def stop(self, reason: str) -> None:
        """Mark the run cancelling (no Claude call starts) and cancel every pack in flight."""
        s = self._s
        await workflow.execute_activity_method(
            DbActivities.mark_run_cancelling,
            MarkCancellingInput(run_id=s.run_id, reason=reason),
            start_to_close_timeout=DB_TIMEOUT,
            retry_policy=DB_RETRY,
            summary="mark_run_cancelling: no new Claude call may start",
        )
        for index in sorted(s.running):
            try:
                await workflow.get_external_workflow_handle_for(
                    ProcessPackWorkflow.run, pack_workflow_id(s.run_id, index)
                ).signal(ProcessPackWorkflow.cancel)
            except Exception:  # noqa: BLE001 - the pack may have just finished
                workflow.logger.debug("cancel not delivered to pack %s", index)

    async def _watch(self, index: int, handle: workflow.ChildWorkflowHandle) -> None:
        """A pack that closed without reporting (terminated, timed out) ends its slot; its
        blocks stay pending and ``finish_run`` reports them."""
        try:
            await handle
        except ChildWorkflowError as err:
            workflow.logger.error("pack %s failed: %s", index, err)
            self._report(PackOutcome(pack_path=str(index)))
