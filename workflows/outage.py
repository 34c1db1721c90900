"""RunWorkflow's side of riding out an outage: pause, probe, resume (see ``blockbatch.core.outage``).

A pack whose call kept failing because Claude is down signals its run (``api_down``) and
waits. :class:`OutageWatch` then pauses the run (RunWorkflow starts no pack while
``paused``), holds every pack that reports, and probes with one small call at growing
intervals; the first answered probe resumes every held pack. A report about a call that
began failing before the last answered probe is resumed at once: Claude was back already.
A cancel ends the pause; the held packs then get the run's cancel like any other pack. A
probe the run's budget cannot hold resumes them too: the budget then refuses their calls.
No pause is endless: an endpoint no connection reaches, or a pause past its limit, ends the
run (``blockbatch.core.outage.pause_end``) through ``fail``, as a fatal error does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.llm import LlmActivities
    from blockbatch.core.outage import next_probe_in_s, pause_end
    from blockbatch.core.outage_types import (
        ApiDownReport,
        OutageProgress,
        ProbeApiInput,
        ProbeApiOutput,
    )
    from blockbatch.core.run_types import RunInput
    from workflows.pack import ProcessPackWorkflow

#: A probe is one small call; a Postgres hiccup while recording it is retried a little,
#: anything longer counts as an unanswered probe (the next one comes anyway).
PROBE_TIMEOUT = timedelta(minutes=2)
PROBE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)


class OutageWatch:
    """Pause, probe and resume for one RunWorkflow execution (deterministic workflow code)."""

    def __init__(
        self,
        inp: RunInput,
        stopping: Callable[[], bool],
        show: Callable[[], None],
        fail: Callable[[str], None],
    ) -> None:
        self._inp = inp
        self._stopping = stopping
        self._show = show
        #: Ends the run with this reason (it then stops, as after a fatal error).
        self._fail = fail
        #: The outage being waited out; ``None`` while the run is not paused.
        self.current: OutageProgress | None = None
        self._paused_at: datetime | None = None
        self._held: list[str] = []
        self._last_up_at: datetime | None = None

    @property
    def paused(self) -> bool:
        return self.current is not None

    async def report(self, report: ApiDownReport) -> None:
        """A pack's call kept failing because Claude is down: hold it, pause if not yet."""
        if self._last_up_at is not None and report.since < self._last_up_at:
            await self._resume([report.pack_workflow_id])
            return
        self._held.append(report.pack_workflow_id)
        if self.current is not None:
            self.current.failures += report.failures
            self.current.last_error = report.error
            self._show()
            return
        workflow.logger.warning("Claude is down (%s): pausing the run and probing", report.error)
        self.current = OutageProgress(
            since=report.since, failures=report.failures, probes=0, last_error=report.error
        )
        self._paused_at = workflow.now()
        self._inp.totals.outages += 1
        asyncio.get_running_loop().create_task(self._probe_until_up())

    async def _probe_until_up(self) -> None:
        unreachable = False
        while self.current is not None:
            assert self._paused_at is not None
            delay = next_probe_in_s(
                self.current,
                self._inp.outage,
                paused_at=self._paused_at,
                now=workflow.now(),
                unreachable=unreachable,
            )
            self.current.next_probe_at = workflow.now() + timedelta(seconds=delay)
            self._show()
            try:
                await workflow.wait_condition(self._stopping, timeout=delay)
            except TimeoutError:
                pass
            else:
                # Cancelled (or failing) while paused: the held packs get the run's cancel.
                self._end_pause()
                return
            self.current.next_probe_at = None
            self._show()
            result = await self._probe()
            if result is None:
                held, self._held = self._held, []
                self._last_up_at = workflow.now()
                self._end_pause()
                await self._resume(held)
                continue
            unreachable = result.unreachable is not None
            why = pause_end(
                self.current,
                self._inp.outage,
                result,
                paused_at=self._paused_at,
                now=workflow.now(),
            )
            if why is not None:
                # The held packs get the run's stop like any other pack.
                workflow.logger.warning("ending the run: %s", why)
                self._fail(why)
                self._end_pause()
                return

    async def _probe(self) -> ProbeApiOutput | None:
        """One probe: ``None`` when the packs may resume, else the unanswered probe."""
        assert self.current is not None
        number = self.current.probes + 1
        try:
            result: ProbeApiOutput = await workflow.execute_activity_method(
                LlmActivities.probe_api,
                ProbeApiInput(run_id=self._inp.run_id),
                start_to_close_timeout=PROBE_TIMEOUT,
                retry_policy=PROBE_RETRY,
                summary=f"probe_api #{number}: is Claude back?",
            )
        except ActivityError as err:
            result = ProbeApiOutput(up=False, message=f"probe failed: {err.cause or err}")
        totals = self._inp.totals
        totals.probes += 1
        totals.calls += 1 if result.call_id is not None else 0
        totals.cost_usd += result.cost_usd
        if result.over_budget:
            # The budget cannot hold even a probe: resume the held packs, whose calls the
            # budget then refuses (their blocks end budget_exhausted, the run stops).
            workflow.logger.warning("probe %d not made: %s", number, result.message)
            return None
        workflow.logger.info("probe %d: %s", number, "up" if result.up else result.message)
        if result.up:
            return None
        self.current.probes += 1
        self.current.failures += 1
        self.current.last_error = result.message
        return result

    def _end_pause(self) -> None:
        if self._paused_at is not None:
            self._inp.totals.paused_s += (workflow.now() - self._paused_at).total_seconds()
        self.current, self._paused_at = None, None
        self._show()

    async def _resume(self, pack_workflow_ids: list[str]) -> None:
        for pack_id in pack_workflow_ids:
            try:
                await workflow.get_external_workflow_handle_for(
                    ProcessPackWorkflow.run, pack_id
                ).signal(ProcessPackWorkflow.resume)
            except Exception:  # noqa: BLE001 - a pack that ended (cancelled) needs none
                workflow.logger.debug("resume not delivered to %s", pack_id)
