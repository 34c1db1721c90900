"""Following a run (or its escalation) to its end: live progress, Ctrl-C (cancel or detach),
the summary."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, Self

from temporalio.client import WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.service import RPCError, RPCStatusCode

from blockbatch.cli.console import Console
from blockbatch.cli.parser import (
    EXIT_BUDGET_EXHAUSTED,
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_WITH_FAILURES,
)
from blockbatch.cli.progress import ProgressView
from blockbatch.core.commands import PROG
from blockbatch.report import baseline_cost, run_links, summary_dict, summary_lines

if TYPE_CHECKING:
    from blockbatch.api.client import Blockbatch

#: Without an answer to the progress query for this long, say a worker may be missing.
_SILENT_NOTE_S = 10.0
_LOST = (RPCStatusCode.UNAVAILABLE,)


class Interrupts:
    """Turns SIGINT into an event while following (and back to KeyboardInterrupt after)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._installed = False

    def __enter__(self) -> Self:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self.event.set)
            self._installed = True
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (an in-process caller): no Ctrl-C handling
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)


async def _first(*aws: Awaitable[Any] | asyncio.Event, timeout: float | None = None) -> None:
    """Wait until any of futures/events is done (or the timeout passes)."""
    tasks = [asyncio.ensure_future(a.wait() if isinstance(a, asyncio.Event) else a) for a in aws]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t, a in zip(tasks, aws, strict=True):
            if isinstance(a, asyncio.Event):
                t.cancel()


async def ask(con: Console, interrupts: Interrupts) -> Literal["cancel", "detach", "resume"]:
    """After Ctrl-C: cancel the run, detach, or keep watching (a second Ctrl-C detaches)."""
    if not _stdin_is_tty():
        return "detach"
    con.err.write(
        "\nCtrl-C: [c]ancel the run · [d]etach (it keeps running) · [Enter] keep watching: "
    )
    con.err.flush()
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()
    fd = sys.stdin.fileno()

    def on_input() -> None:
        if not answer.done():
            answer.set_result(sys.stdin.readline())

    loop.add_reader(fd, on_input)
    interrupts.event.clear()
    try:
        await _first(answer, interrupts.event)
    finally:
        loop.remove_reader(fd)
    if not answer.done() or answer.result() == "":  # second Ctrl-C, or end of input
        return "detach"
    choice = answer.result().strip().lower()[:1]
    return "cancel" if choice == "c" else "detach" if choice == "d" else "resume"


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


async def follow(
    bb: Blockbatch, run_id: str, con: Console, *, verbose: bool = False
) -> Literal["finished", "detached"]:
    """Show progress until the run's workflow ends, or the user detaches (``verbose``:
    the rate limiter's figures too)."""
    await bb.temporal()
    view = ProgressView(con, verbose=verbose)
    silent_since = time.monotonic()
    noted = False

    async def step() -> None:
        nonlocal silent_since, noted
        try:
            view.update(await bb.progress(run_id, timeout_s=3))
            silent_since = time.monotonic()
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError) as err:
            if isinstance(err, RPCError) and err.status in _LOST:
                raise
            if not noted and time.monotonic() - silent_since > _SILENT_NOTE_S:
                view.message(
                    "no progress from the run yet: is a worker running? "
                    "(`make worker` or `python worker.py`)"
                )
                noted = True

    return await _follow_until(
        bb,
        run_id,
        con,
        view,
        asyncio.ensure_future(bb.wait(run_id)),
        step,
        cancelled=(
            f"cancel requested for run {run_id}: no new Claude call "
            "starts; waiting for running packs to stop…"
        ),
    )


async def follow_escalation(
    bb: Blockbatch, run_id: str, con: Console
) -> Literal["finished", "detached"]:
    """Show an escalation's progress until its workflow ends, or the user detaches; Ctrl-C
    as in :func:`follow` (cancel stops the escalation: ``Blockbatch.cancel`` signals it).

    The figures come from Postgres (``Blockbatch.escalation_progress``: its rows and the
    ledger by purpose), the summary's own source, so they grow into the summary printed
    after; the workflow's end is awaited on Temporal."""
    await bb.temporal()
    view = ProgressView(con)
    since = time.monotonic()
    noted = False

    async def step() -> None:
        nonlocal noted
        p = await bb.escalation_progress(run_id)
        view.update_escalation(p)
        if p.phase == "planning" and not noted and time.monotonic() - since > _SILENT_NOTE_S:
            view.message(
                "the escalation is not planned yet: is a worker running? "
                "(`make worker` or `python worker.py`)"
            )
            noted = True

    return await _follow_until(
        bb,
        run_id,
        con,
        view,
        asyncio.ensure_future(bb.wait_escalation(run_id)),
        step,
        cancelled=(
            f"cancel requested for the escalation of run {run_id}: no new "
            "Claude call starts; blocks not compared or asked keep their "
            "first answer…"
        ),
    )


async def _follow_until(
    bb: Blockbatch,
    run_id: str,
    con: Console,
    view: ProgressView,
    done: asyncio.Future[Any],
    step: Callable[[], Awaitable[None]],
    *,
    cancelled: str,
) -> Literal["finished", "detached"]:
    """``step()`` (a look at the progress) every ``view.interval`` until ``done`` ends or
    the user detaches; Ctrl-C asks whether to cancel (``Blockbatch.cancel``, then
    ``cancelled`` is said) or detach. A workflow lost on Temporal raises."""
    try:
        with Interrupts() as interrupts:
            while not done.done():
                if interrupts.event.is_set():
                    view.clear()
                    choice = await ask(con, interrupts)
                    interrupts.event.clear()
                    if choice == "detach":
                        return "detached"
                    if choice == "cancel":
                        await bb.cancel(run_id)
                        view.message(cancelled)
                await step()
                await _first(done, interrupts.event, timeout=view.interval)
    finally:
        view.close()
        if not done.done():
            done.cancel()
    failure = done.exception()
    if isinstance(failure, RPCError) and failure.status in _LOST:
        raise failure
    return "finished"


def say_detached(con: Console, run_id: str) -> None:
    if con.json:
        con.data({"run_id": run_id, "status": "detached"})
    con.note(
        f"detached: run {run_id} keeps running.\n"
        f"  re-attach: {PROG} watch {run_id}\n"
        f"  cancel:    {PROG} cancel {run_id}"
    )


def exit_code(status: str) -> int:
    """A followed run's exit code: 0 every block done, 5 done with failures, 9 stopped by
    its budget, 1 otherwise."""
    if status == "completed":
        return EXIT_OK
    if status == "budget_exhausted":
        return EXIT_BUDGET_EXHAUSTED
    if status == "completed_with_failures":
        return EXIT_WITH_FAILURES
    return EXIT_RUN_FAILED


async def report(bb: Blockbatch, run_id: str, con: Console) -> int:
    """Print the end-of-run summary; return the run's :func:`exit_code`."""
    # The quote's module (token counts through the Claude client) loads at the end only.
    from blockbatch.api.quote import count_run_prefix

    info = await bb.run(run_id)
    result = await bb.result_of(info)
    # An uncached prefix is counted here, once, not while drawing: the summary only reads.
    await count_run_prefix(bb.pool, bb.settings, run_id)
    baseline = await baseline_cost(bb.pool, run_id)
    links = run_links(bb.settings, run_id)
    retries = await bb.retries(run_id)
    if con.json:
        con.data(
            summary_dict(
                result, baseline=baseline, links=links, duration_s=info.duration_s, retries=retries
            )
        )
    else:
        con.line()
        lines = summary_lines(
            result, baseline=baseline, links=links, duration_s=info.duration_s, retries=retries
        )
        head, _, tail = lines[0].partition(result.status)
        con.line(head, con.status(result.status), tail)
        for line in lines[1:]:
            con.line(line)
    if info.active:
        con.note(
            f"the workflow of run {run_id} ended but the run is still {info.status}: "
            f"see {links['run']}"
        )
    if result.escalation is not None and result.escalation.status == "failed":
        return EXIT_RUN_FAILED  # the run's blocks stand, but what was asked did not end
    return exit_code(info.status)
