"""StreamWorkflow: a run whose document grows; packs form as triggers fire.

A stream is a run (same run row, same workflow id ``run-<run_id>``, so progress, watch,
cancel, retry, export and the packs' ``pack_done`` / ``api_down`` signals all address it
as they address any run). Rows are accepted straight into Postgres by the API
(``blockbatch.store.streams.append_rows``), never through Temporal: rows are data and stay out of
the history, and a put is accepted even while this workflow is busy or continuing as new.
``rows_added`` only nudges it; it also looks again when the oldest row's wait runs out
(``blockbatch.core.streams.next_check``), so a lost signal delays a pack, never loses a row.

``run`` reads as the story: look at the buffer (``poll_stream``), and when a trigger fires
(``blockbatch.core.streams.due``: rows, tokens, a full pack, the oldest row's wait, or closed) give the
oldest rows the next pack number (``form_pack``) and start a ProcessPack child for it
exactly as RunWorkflow does (its window, workflows/window.py: the same ids, halving,
ledger, limits, outage pause, cancel). Continue as new every ``packs_per_history`` packs or
``polls_per_history`` looks, or when Temporal suggests it; the packs in flight report to
the next execution as they do in any run. Once closed and drained, wait for the packs and
``finish_run`` as any run.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.streams import StreamActivities
    from blockbatch.core.run_types import RunResult
    from blockbatch.core.stream_types import FormPackInput, PollStreamInput, StreamInput
    from blockbatch.core.streams import Buffered, TriggerReason, due, next_check
    from blockbatch.core.workflow_names import CLOSE_STREAM, ROWS_ADDED, STREAM_WORKFLOW
    from workflows.retries import DB_RETRY
    from workflows.run import RunWorkflow

#: A look at the buffer and the forming of a pack are small writes and reads (tens of
#: milliseconds); one a lost worker held (killed, cut off) is tried again after this, not
#: after a minute (``DB_TIMEOUT``) with the stream's packs waiting. A Postgres restart is
#: waited out by ``DB_RETRY``'s retries either way (``form_pack`` is idempotent).
STREAM_STEP_TIMEOUT = timedelta(seconds=10)


@workflow.defn(name=STREAM_WORKFLOW)
class StreamWorkflow(RunWorkflow):
    @workflow.init
    def __init__(self, inp: StreamInput) -> None:
        super().__init__(inp)
        self._nudged = False
        self._buffered = Buffered()

    @workflow.signal(name=ROWS_ADDED)
    def rows_added(self, count: int) -> None:
        """Rows were accepted (in Postgres already): look at the buffer now."""
        self._nudged = True

    @workflow.signal(name=CLOSE_STREAM)
    def close_stream(self) -> None:
        """The stream was closed (in Postgres already): drain what is buffered, then end."""
        self._nudged = True

    @workflow.run
    async def run(self, inp: StreamInput) -> RunResult:  # type: ignore[override]  # its own input type; it shares RunWorkflow's handlers
        self._status = "running"
        self._show()
        if await self._run_stream(inp):
            await self._continue_as_new()
        await self._drain()
        return await self._finish(inp)

    async def _run_stream(self, inp: StreamInput) -> bool:
        """Form and start packs until closed and drained or the run stops (False), or
        until this history is long enough (True: the caller continues as new)."""
        formed_here = polls_here = 0
        while not self._halted():
            self._nudged = False  # before the look: a put after it nudges again
            buffered = await self._poll(inp)
            polls_here += 1
            reason = due(buffered, inp.triggers)
            if reason is None and buffered.closed:
                break  # closed, nothing buffered: drained
            if (
                formed_here >= inp.packs_per_history
                or polls_here >= inp.polls_per_history
                or workflow.info().is_continue_as_new_suggested()
            ):
                return True
            if reason is None:
                # Until a put nudges, or the oldest row's wait runs out (then look anyway).
                with contextlib.suppress(asyncio.TimeoutError):
                    await workflow.wait_condition(
                        lambda: self._nudged or self._halted(),
                        timeout=timedelta(seconds=next_check(buffered, inp.triggers)),
                    )
                continue
            # While Claude is down (the run paused, probing) no pack starts.
            await workflow.wait_condition(lambda: self._room(inp) > 0 or self._halted())
            if self._halted():
                break
            if await self._form_pack(inp, reason):
                formed_here += 1
        return False

    async def _poll(self, inp: StreamInput) -> Buffered:
        out = await workflow.execute_activity_method(
            StreamActivities.poll_stream,
            PollStreamInput(run_id=inp.run_id),
            start_to_close_timeout=STREAM_STEP_TIMEOUT,
            retry_policy=DB_RETRY,
            summary="poll_stream: rows buffered, their tokens, the oldest's wait",
        )
        self._buffered = out.buffered
        inp.block_count = max(inp.block_count, out.buffered.accepted)
        if out.buffered.closed and self._status == "running":
            self._status = "draining"
        return out.buffered

    async def _form_pack(self, inp: StreamInput, reason: TriggerReason) -> bool:
        """Give the oldest buffered rows the next pack and start it (False: none buffered)."""
        index = inp.next_pack
        out = await workflow.execute_activity_method(
            StreamActivities.form_pack,
            FormPackInput(
                run_id=inp.run_id,
                pack_index=index,
                reason=reason,
                max_rows=inp.triggers.max_rows,
                max_tokens=inp.triggers.max_tokens,
            ),
            start_to_close_timeout=STREAM_STEP_TIMEOUT,
            retry_policy=DB_RETRY,
            summary=f"form_pack {index}: the oldest buffered rows ({reason})",
        )
        inp.block_count = max(inp.block_count, out.accepted)
        if not out.blocks:
            return False
        inp.next_pack = inp.pack_count = index + 1
        await self._packs.start(index)
        self._show()
        return True
