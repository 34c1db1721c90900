"""The live view of a running run or escalation: a rich progress bar on a terminal, plain
lines otherwise. rich's progress bar loads when a bar is first drawn: ``status`` only
describes a run's progress in words."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from blockbatch.cli.console import Console, human_seconds
from blockbatch.core.escalation_types import EscalationProgress
from blockbatch.core.outage import waiting_text
from blockbatch.core.run_types import RunProgress

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

#: Piped, a waiting state that has not changed is said again after this long (seconds).
WAITING_REPEAT_S = 30.0
#: Piped, counters that changed are said at most this often (seconds).
PIPED_EVERY_S = 2.0
#: The parts of a line that only count time down: a changed countdown is no news.
_COUNTDOWN = re.compile(r"(; next probe in \d+ s|, next look in \w+)")


def steady(text: str) -> str:
    """``text`` without what merely counts time (the ETA, a countdown to the next probe or
    look): piped output says a line again only when this changes."""
    text = " · ".join(x for x in text.split(" · ") if not x.startswith("ETA"))
    return _COUNTDOWN.sub("", text)


class Eta:
    """Remaining time from the block rate seen since following began."""

    def __init__(self) -> None:
        self._first: tuple[float, int] | None = None

    def estimate(self, p: RunProgress, now: float) -> float | None:
        # Reused blocks are done at planning, all at once: they say nothing of the rate.
        done = p.blocks_done + p.blocks_failed - p.blocks_reused
        if self._first is None:
            self._first = (now, done)
            return None
        t0, d0 = self._first
        if done <= d0 or now <= t0 or p.blocks_pending == 0:
            return None
        return p.blocks_pending / ((done - d0) / (now - t0))


def describe(p: RunProgress, eta: float | None) -> str:
    """One short line, most useful first (a narrow terminal cuts the end).

    Zero counts a person need not read (no failures, no splits) are left out, and so are
    tokens and packs (``status`` has them); the fleet's rate limiter is one word when it
    held the run back, its figures are in :func:`limiter_detail` (``watch --verbose``,
    ``status``). The ETA is only shown while
    the run runs: a cancelling or finished run has none.
    """
    if p.status == "planning" or not (p.packs_total or p.blocks_reused):
        return f"{p.status}: sizing packs…"
    if p.outage is not None:  # paused: Claude is down, the run probes it
        return (
            f"{waiting_text(p.outage, datetime.now(UTC))} · "
            f"{p.blocks_done + p.blocks_failed}/{p.blocks_total} blocks · "
            f"{p.blocks_failed} failed"
        )
    parts = [f"{p.blocks_done + p.blocks_failed}/{p.blocks_total} blocks"]
    if p.blocks_failed:
        parts.append(f"{p.blocks_failed} failed")
    if p.blocks_reused:
        parts.append(f"{p.blocks_reused} reused")
    if eta is not None and p.status == "running":
        parts.append(f"ETA {human_seconds(eta)}")
    if (batch := getattr(p, "batch", None)) is not None:  # --mode batch: Message Batches
        c = batch.counts
        ended = c.succeeded + c.errored + c.canceled + c.expired
        text = f"batch round {batch.round} {batch.phase}"
        if batch.requests:
            text += f" ({ended}/{batch.requests} requests back)"
        if batch.next_poll_s:
            text += f", next look in {human_seconds(batch.next_poll_s)}"
        parts.append(text)
    parts += [
        f"${p.cost_usd:.4f}",
        f"{p.calls} call{'s' if p.calls != 1 else ''}"
        + (f", {p.packs_running} in flight" if p.packs_running else ""),
    ]
    if p.splits:
        parts.append(f"{p.splits} split{'s' if p.splits != 1 else ''}")
    if limiter_detail(p) is not None:
        parts.append("rate-limited")
    text = " · ".join(parts)
    return text if p.status == "running" else f"{p.status}: {text}"


def limiter_detail(p: RunProgress) -> str | None:
    """The fleet's rate limiter as this run's calls saw it, when it did something to the
    run (held a call back, answered 429, shared the fleet with other runs); else None."""
    note = getattr(p, "limiter", None)
    if note is None or not (
        note.binding or note.run_throttled or note.runs > 1 or p.limiter_wait_s >= 1
    ):
        return None
    return note.text(p.limiter_wait_s)


def describe_escalation(p: EscalationProgress) -> str:
    """One short line for an escalation, its phase and the count that moves in it first:
    second packs done while it compares, answers back while it escalates; then blocks
    compared, kept and sent up, and the cost so far (the summary's figures as they grow).
    """
    e = p.escalation
    if e is None:
        return "escalation planning: packing a second order…"
    if p.phase == "second pass":
        head = f"escalation second pass: {p.second_packs_done}/{p.second_packs} packs"
    elif p.phase == "escalating":
        head = f"escalating to {e.model}: {e.escalated}/{e.sent_up} answered"
    else:
        head = f"escalation {p.phase}"
    parts = [
        head,
        f"{e.compared}/{p.second_blocks} compared",
        f"{e.kept} kept",
        f"{e.sent_up} sent up",
    ]
    if p.phase != "escalating" and (e.escalated or e.escalation_failed):
        parts.append(f"{e.escalated}/{e.sent_up} answered")
    if e.escalation_failed:
        parts.append(f"{e.escalation_failed} failed")
    if e.skipped:
        parts.append(f"{e.skipped} reviewed meanwhile")
    parts.append(f"${p.cost_usd:.4f}")
    return " · ".join(parts)


def escalation_bar(p: EscalationProgress) -> tuple[int, int | None]:
    """The bar of an escalation's phase, ``(done, total)``: blocks compared of those in a
    second pack, then blocks asked of those sent up (``None``: no total, a pulsing bar)."""
    e = p.escalation
    if e is None:
        return 0, None
    if p.phase in ("escalating", "finishing", "done"):
        return e.escalated + e.escalation_failed + e.skipped, e.sent_up or None
    return e.compared, p.second_blocks or None


class ProgressView:
    """Shows :class:`RunProgress` (or :class:`EscalationProgress`) updates; silent in JSON
    mode.

    On a terminal: a rich progress bar redrawn in place with :func:`describe` beside it.
    Piped: a plain :func:`describe` line, flushed as it is written, when the counters
    change (at most every :data:`PIPED_EVERY_S`); a waiting state (paused for the API) once
    per change of its words without the countdown (:func:`steady`), or again after
    :data:`WAITING_REPEAT_S` when nothing changed.
    ``verbose``: the rate limiter's figures (:func:`limiter_detail`) on a line of their own
    when they change, at most every 10 s.
    """

    def __init__(
        self,
        console: Console,
        *,
        verbose: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.con = console
        self._clock = clock
        self.verbose = verbose
        self._last_detail = ""
        self._last_detail_at = float("-inf")
        self.enabled = not console.json
        self.tty = console.tty
        self.interval = 0.5 if self.tty else 1.0
        self._eta = Eta()
        self._live: Progress | None = None
        self._task: TaskID | None = None
        self._last_text = ""
        self._last_print = float("-inf")
        self._last_phase = ""

    def update(self, p: RunProgress) -> None:
        """Show the latest counters (the ETA needs every update, shown or not)."""
        now = self._clock()
        text = describe(p, self._eta.estimate(p, now))
        if not self.enabled:
            return
        detail = limiter_detail(p) if self.verbose else None
        if detail and detail != self._last_detail and now - self._last_detail_at >= 10.0:
            self.message(detail)
            self._last_detail, self._last_detail_at = detail, now
        if self.tty:
            self._draw(text, p.blocks_done + p.blocks_failed, p.blocks_total or None)
            return
        waiting = p.outage is not None
        self._print(
            text,
            steady(text),
            now,
            now_too=p.status != "running",
            again_after=WAITING_REPEAT_S if waiting else None,
        )

    def update_escalation(self, p: EscalationProgress) -> None:
        """Show an escalation's latest counts (:func:`describe_escalation`); piped, a line
        when they change, at once when its phase does."""
        if not self.enabled:
            return
        text = describe_escalation(p)
        if self.tty:
            self._draw(text, *escalation_bar(p))
            return
        phase_changed = p.phase != self._last_phase
        self._last_phase = p.phase
        self._print(text, text, self._clock(), now_too=phase_changed)

    def _print(
        self,
        text: str,
        core: str,
        now: float,
        *,
        now_too: bool,
        again_after: float | None = None,
    ) -> None:
        """Piped: ``text`` when its ``core`` changed, at most every :data:`PIPED_EVERY_S`
        unless ``now_too``; unchanged, again after ``again_after`` seconds (if given)."""
        since = now - self._last_print
        changed = core != self._last_text and (since >= PIPED_EVERY_S or now_too)
        if changed or (again_after is not None and since >= again_after):
            self.con.line(text)
            self._last_text, self._last_print = core, now

    def message(self, text: str) -> None:
        """A line of its own, above the bar."""
        if not self.enabled:
            return
        self.con.line(text)  # rich prints it above a live bar and redraws the bar below

    def clear(self) -> None:
        """Take the bar off the screen (the next update draws it again)."""
        if self._live is not None:
            self._live.stop()
            self._live, self._task = None, None

    def close(self) -> None:
        """Done following: leave the screen as it was before the bar."""
        self.clear()

    def _draw(self, text: str, completed: int, total: int | None) -> None:
        if self._live is None:
            from rich.progress import BarColumn, Progress, TextColumn
            from rich.table import Column

            self._live = Progress(
                BarColumn(
                    bar_width=min(20, self.con.rich.width // 8),
                    complete_style="green",
                    finished_style="green",
                ),
                TextColumn(
                    "{task.description}",
                    markup=False,
                    table_column=Column(no_wrap=True, overflow="crop"),
                ),
                console=self.con.rich,
                auto_refresh=False,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._live.add_task(text, total=None)
            self._live.start()
        assert self._task is not None
        # No total while planning: rich shows an indeterminate (pulsing) bar.
        self._live.update(self._task, description=text, total=total, completed=completed)
        self._live.refresh()
