"""Piped progress (``run ... | tee log``): a line as it happens, flushed; a paused run says its
state once per change or every 30 s, never a countdown line a second (issue 33 point 5)."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from blockbatch.cli.console import Console
from blockbatch.cli.progress import ProgressView, steady
from blockbatch.core.outage_types import OutageProgress
from blockbatch.core.run_types import RunProgress

SINCE = datetime(2026, 11, 28, 3, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Flushes(io.StringIO):
    """A pipe that remembers what had been flushed when."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


def _paused(probes: int, next_probe_in_s: float) -> RunProgress:
    outage = OutageProgress(
        since=SINCE,
        failures=4 + probes,
        probes=probes,
        last_error="could not reach Claude at api.anthropic.com (APIConnectionError); will retry",
        next_probe_at=datetime.now(UTC) + timedelta(seconds=next_probe_in_s),
    )
    return RunProgress(
        run_id="r1",
        status="waiting_for_api",
        blocks_total=300,
        blocks_done=20,
        blocks_failed=0,
        blocks_pending=280,
        packs_total=30,
        packs_done=2,
        packs_running=4,
        calls=12,
        splits=0,
        input_tokens=0,
        output_tokens=0,
        cache_creation_input_tokens=0,
        cache_read_input_tokens=0,
        cost_usd=0.01,
        outage=outage,
    )


def test_a_pause_piped_prints_once_per_change_not_a_countdown_a_second() -> None:
    out, clock = io.StringIO(), Clock()
    view = ProgressView(Console(out=out), clock=clock)
    # 280 s paused, the progress looked at every second, a probe every 30 s.
    for second in range(280):
        clock.now = float(second)
        view.update(_paused(probes=second // 30, next_probe_in_s=30 - second % 30))
    lines = out.getvalue().splitlines()
    assert len(lines) == 10  # one per probe's news (0..9 probes), not 140 or 280
    assert all(line.startswith("waiting for the API: ") for line in lines)
    assert len({steady(line) for line in lines}) == 10


def test_an_unchanged_wait_is_said_again_every_30_seconds() -> None:
    out, clock = io.StringIO(), Clock()
    view = ProgressView(Console(out=out), clock=clock)
    for second in range(91):
        clock.now = float(second)
        view.update(_paused(probes=3, next_probe_in_s=30 - second % 30))
    assert len(out.getvalue().splitlines()) == 4  # at 0, 30, 60 and 90 s


def test_each_piped_line_is_flushed_as_it_is_written() -> None:
    pipe = Flushes()
    view = ProgressView(Console(out=pipe), clock=Clock())
    view.update(_paused(probes=0, next_probe_in_s=5))
    assert pipe.flushed and pipe.flushed[-1] == pipe.getvalue()
    assert pipe.getvalue().count("\n") == 1
