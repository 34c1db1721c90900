"""A deliberately non-deterministic ProcessPack: a new activity call before ``call_model``.

Registered under the real name ``ProcessPack``, it is what an unguarded edit to
workflows/pack.py would deploy; test_replay.py shows the recorded histories reject it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from blockbatch.core.call_types import PackOutcome, ProcessPackInput
    from blockbatch.core.run_types import MarkCancellingInput
    from workflows.pack import ProcessPackWorkflow


@workflow.defn(name="ProcessPack")
class DriftedProcessPack(ProcessPackWorkflow):
    @workflow.run
    async def run(self, inp: ProcessPackInput) -> PackOutcome:
        await workflow.execute_activity(
            "mark_run_cancelling",
            MarkCancellingInput(run_id=inp.run_id, reason="new step"),
            start_to_close_timeout=timedelta(seconds=10),
        )
        return await super().run(inp)
