"""The live view of a running run: a redrawn bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import shutil
import time

from blockbatch.cli.console import Console, human_seconds, human_tokens
from core.models import RunProgress


class Eta:
    """Remaining time from the block rate seen since following began."""

    def __init__(self) -> None:
        self._first: tuple[float, int] | None = None

    def estimate(self, p: RunProgress, now: float) -> float | None:
        done = p.blocks_done + p.blocks_failed
        if self._first is None:
            self._first = (now, done)
            return None
        t0, d0 = self._first
        if done <= d0 or now <= t0 or p.blocks_pending == 0:
            return None
        return p.blocks_pending / ((done - d0) / (now - t0))


def describe(p: RunProgress, eta: float | None) -> str:
    """One line, most useful first (a narrow terminal cuts the end)."""
    if p.status == "planning" or not p.packs_total:
        return f"{p.status}: sizing packs…"
    tokens = (p.input_tokens + p.output_tokens + p.cache_creation_input_tokens
              + p.cache_read_input_tokens)
    parts = [f"{p.blocks_done + p.blocks_failed}/{p.blocks_total} blocks",
             f"{p.blocks_failed} failed"]
    if eta is not None:
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
    parts += [f"${p.cost_usd:.4f}", (f"packs {p.packs_done}/{p.packs_total} "
              f"({p.packs_running} running)"), f"{p.calls} calls", f"{p.splits} splits",
              f"{human_tokens(tokens)} tokens"]
    text = " · ".join(parts)
    return text if p.status == "running" else f"{p.status}: {text}"


class ProgressView:
    """Shows :class:`RunProgress` updates; silent in JSON mode."""

    def __init__(self, console: Console) -> None:
        self.con = console
        self.enabled = not console.json
        self.tty = console.tty
        self.interval = 0.5 if self.tty else 1.0
        self._eta = Eta()
        self._drawn = False
        self._last_text = ""
        self._last_print = 0.0

    def update(self, p: RunProgress) -> None:
        now = time.monotonic()
        text = describe(p, self._eta.estimate(p, now))
        if not self.enabled:
            return
        if self.tty:
            self._draw(self._bar(p) + " " + text)
            return
        core = " · ".join(x for x in text.split(" · ") if not x.startswith("ETA"))
        changed = core != self._last_text
        if changed and (now - self._last_print >= 2.0 or p.status != "running"):
            self.con.line(text)
            self._last_text, self._last_print = core, now

    def message(self, text: str) -> None:
        """A line of its own, above the bar."""
        if not self.enabled:
            return
        self.clear()
        self.con.line(text)

    def clear(self) -> None:
        if self._drawn:
            self.con.out.write("\r\x1b[2K")
            self.con.out.flush()
            self._drawn = False

    def close(self) -> None:
        self.clear()

    def _bar(self, p: RunProgress) -> str:
        width = min(20, shutil.get_terminal_size((100, 20)).columns // 8)
        done = p.blocks_done + p.blocks_failed
        frac = done / p.blocks_total if p.blocks_total else 0.0
        filled = int(frac * width)
        return self.con.style("█" * filled, "green") + self.con.style("░" * (width - filled),
                                                                        "dim")

    def _draw(self, text: str) -> None:
        columns = shutil.get_terminal_size((100, 20)).columns
        self.con.out.write("\r\x1b[2K" + _fit(text, columns - 1))
        self.con.out.flush()
        self._drawn = True


def _fit(text: str, columns: int) -> str:
    """Cut ``text`` to ``columns`` visible characters, keeping ANSI codes intact."""
    out, visible, i = [], 0, 0
    while i < len(text) and visible < columns:
        if text.startswith("\x1b[", i):
            end = text.index("m", i) + 1
            out.append(text[i:end])
            i = end
            continue
        out.append(text[i])
        visible += 1
        i += 1
    return "".join(out) + "\x1b[0m"
