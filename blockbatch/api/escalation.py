"""Escalating a finished run to a stronger model, following and stopping it (part of
:class:`~blockbatch.api.client.Blockbatch`; docs/ESCALATION.md).

The escalation's workflow is started and signalled by its registered name
(blockbatch/core/workflow_names.py); the work is the worker's (activities/escalation.py).
"""

from __future__ import annotations

from blockbatch.api.connection import Connection
from blockbatch.api.errors import BadRequest, RunStillActive, speaks_python
from blockbatch.core.commands import PROG
from blockbatch.core.escalation import ESCALATED_STATUSES
from blockbatch.core.escalation_types import (
    EscalateInput,
    EscalationOptions,
    EscalationProgress,
    EscalationResult,
)
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.core.views import UNFINISHED
from blockbatch.core.workflow_names import (
    CANCEL_ESCALATION,
    ESCALATE_WORKFLOW,
    escalate_workflow_id,
)
from blockbatch.store import escalations, runs


@speaks_python
class Escalations(Connection):
    """Escalate a run, follow its escalation, stop it."""

    async def escalate(
        self,
        run_id: str,
        model: str,
        *,
        second_pack_size: int | None = None,
        task_queue: str | None = None,
    ) -> str:
        """Escalate a finished run to ``model``; return the escalation's workflow id at once.

        Every block the run's model answered is asked again in a second packing; blocks
        whose two answers disagree, that failed or were refused are asked alone on
        ``model``, whose answer becomes their overlay (docs/ESCALATION.md);
        ``second_pack_size``: blocks per second-pass call (``EscalationOptions``). Follow it
        with :meth:`wait_escalation`; its summary is ``RunResult.escalation``.

        Raises:
            NotFound: no such run (``UnknownModelError``: no such model).
            RunStillActive: the run has not finished, or an escalation of it runs.
            BadRequest: the run was escalated already, did not run to its end
                (cancelled, failed, budget_exhausted), or ``model`` is the run's own.

        An escalation that stopped (cancelled, or an activity failed for good) goes on
        where it stopped when asked again with the same model: answers it recorded are
        not asked again, and no block is paid twice on a model.
        """
        from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
        from temporalio.exceptions import WorkflowAlreadyStartedError

        info = await self.run(run_id)
        up_model = await self.run_model(model)
        up = up_model.id
        options = RunOptions.model_validate(info.settings)
        if info.active:
            raise RunStillActive(
                f"run {run_id} is {info.status}: escalate it once it has finished "
                f"(`{PROG} watch {run_id}`)"
            )
        if info.status not in ESCALATED_STATUSES:
            raise BadRequest(
                f"run {run_id} ended {info.status}: only a run that ran to its end is "
                f"escalated; retry it first (`{PROG} retry {run_id} --cancelled`)"
            )
        if up == options.model:
            raise BadRequest(f"run {run_id} ran on {up} already: escalate to a stronger model")
        before = await escalations.result(self.pool, run_id)
        if before is not None:
            # A run is escalated once; one that stopped (cancelled, or failed for good) goes
            # on where it stopped, to the same model: what it recorded is not asked again.
            if before.status not in ("cancelled", "failed"):
                raise BadRequest(f"run {run_id} was escalated already: a run is escalated once")
            if before.model != up:
                raise BadRequest(
                    f"run {run_id}'s escalation to {before.model} stopped with "
                    f"{before.left} blocks left: go on with `--to {before.model}`"
                )
        client = await self.temporal()
        # Resolved here, once, and kept with the run: its workers read it from there.
        await runs.save_models(self.pool, run_id, [up_model])
        try:
            handle = await client.start_workflow(
                ESCALATE_WORKFLOW,
                EscalateInput(
                    run_id=run_id,
                    model=up,
                    second_pack_size=EscalationOptions(
                        second_pack_size=second_pack_size
                    ).second_pack_size,
                    max_concurrent_packs=options.max_concurrent_packs,
                ),
                id=escalate_workflow_id(run_id),
                result_type=RunResult,
                task_queue=task_queue or self.settings.temporal_task_queue,
                task_timeout=self.settings.workflow_task_timeout,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                static_summary=f"run {run_id}: escalation from {options.model} to {up} · "
                f"{info.document_name} × {info.schema_name}",
            )
        except WorkflowAlreadyStartedError:
            raise RunStillActive(f"an escalation of run {run_id} is already under way") from None
        return handle.id

    async def _cancel_escalation(self, run_id: str) -> bool:
        """Signal the run's escalation to stop, if one runs (queued, planning or under
        way); whether one did."""
        from temporalio.service import RPCError, RPCStatusCode

        if not await self.escalation_running(run_id):
            return False
        handle = self.client.get_workflow_handle(escalate_workflow_id(run_id))
        try:
            await handle.signal(CANCEL_ESCALATION)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return False
        return True

    async def wait_escalation(self, run_id: str) -> RunResult:
        """Wait for a run's escalation to end; the run's result, with ``escalation`` set."""
        client = await self.temporal()
        handle = client.get_workflow_handle(escalate_workflow_id(run_id), result_type=RunResult)
        result: RunResult = await handle.result()
        return result

    async def escalation(self, run_id: str) -> EscalationResult | None:
        """What the run's escalation did (``None``: never escalated)."""
        return await escalations.result(self.pool, run_id)

    async def escalation_progress(self, run_id: str) -> EscalationProgress:
        """The run's escalation as it goes, from Postgres (no worker needed): its phase,
        second packs done, blocks compared, kept and sent up, answered, cost so far.
        ``phase`` is ``planning`` while it has no row, also for a run never escalated:
        :meth:`escalation_running` says whether one runs."""
        return await escalations.progress(self.pool, run_id)

    async def escalation_running(self, run_id: str) -> bool:
        """Whether the run's escalation workflow (``run-<run_id>/escalate``) is running.

        Temporal is asked only when one may run: the run is active (an escalation reopens
        it), or it ended as an escalated run ends and has no escalation row yet (queued, or
        planning)."""
        from temporalio.client import WorkflowExecutionStatus
        from temporalio.service import RPCError, RPCStatusCode

        read = await escalations.run_status_and_model(self.pool, run_id)
        if read is None:
            await self.run(run_id)  # raises NotFound
            return False
        status, model = read
        if status not in UNFINISHED and (status not in ESCALATED_STATUSES or model is not None):
            return False
        client = await self.temporal()
        try:
            described = await client.get_workflow_handle(escalate_workflow_id(run_id)).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status == WorkflowExecutionStatus.RUNNING
