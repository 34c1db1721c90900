"""`status`'s live progress (blockbatch/cli/inspect.py ``_live_progress``): asked with a short
deadline beside the stored reads, and when no answer comes, the reason in words."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from blockbatch.cli import inspect
from blockbatch.core.run_types import RunProgress


class _Run:
    """Stands in for Blockbatch: ``progress`` answers, raises or never returns."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.timeouts: list[float] = []

    async def progress(self, run_id: str, *, timeout_s: float) -> RunProgress:
        self.timeouts.append(timeout_s)
        if self.outcome == "never":
            await asyncio.Event().wait()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def _progress() -> RunProgress:
    zero = dict.fromkeys(
        [
            "blocks_total", "blocks_done", "blocks_failed", "blocks_pending", "packs_total",
            "packs_done", "packs_running", "calls", "splits", "input_tokens", "output_tokens",
            "cache_creation_input_tokens", "cache_read_input_tokens",
        ],
        0,
    )  # fmt: skip
    return RunProgress(run_id="r", status="running", cost_usd=0.0, **zero)


async def test_the_answer_is_shown_and_the_query_asked_with_the_short_deadline() -> None:
    run = _Run(_progress())
    progress, why = await inspect._live_progress(run, "r", inspect.STATUS_LIVE_WAIT_S)  # type: ignore[arg-type]
    assert progress == _progress() and why is None
    assert run.timeouts == [inspect.STATUS_LIVE_WAIT_S]


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        (
            RPCError("deadline", RPCStatusCode.DEADLINE_EXCEEDED, b""),
            "no live answer within 0.8 s (the run's worker is busy)",
        ),
        (
            RPCError("no poller seen", RPCStatusCode.FAILED_PRECONDITION, b""),
            "no worker is polling the run's task queue",
        ),
        (RPCError("down", RPCStatusCode.UNAVAILABLE, b""), "no live progress (UNAVAILABLE)"),
        (OSError("refused"), "no live progress (OSError)"),
    ],
)
async def test_no_answer_says_why_and_that_the_counts_are_stored(
    outcome: BaseException, said: str
) -> None:
    progress, why = await inspect._live_progress(_Run(outcome), "r", inspect.STATUS_LIVE_WAIT_S)  # type: ignore[arg-type]
    assert progress is None
    assert why == f"{said}; the blocks above are as stored"


async def test_a_query_that_never_returns_is_given_up_after_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inspect, "STATUS_LIVE_WAIT_S", 0.01)
    progress, why = await inspect._live_progress(_Run("never"), "r", inspect.STATUS_LIVE_WAIT_S)  # type: ignore[arg-type]
    assert progress is None
    assert (
        why
        == "no live answer within 0.01 s (the run's worker is busy); the blocks above are as stored"
    )


async def test_the_query_is_asked_with_what_is_left_of_the_wait() -> None:
    run = _Run(_progress())
    await inspect._live_progress(run, "r", 0.3)  # type: ignore[arg-type]
    assert run.timeouts == [0.3]


def test_the_wait_counts_from_the_commands_start() -> None:
    """The run's lookup before the query comes out of the live wait, so the command answers
    within the wait however long the lookup took; a query is still asked, briefly."""
    wait = inspect.STATUS_LIVE_WAIT_S
    assert inspect.live_wait_s(100.0, 100.0) == wait
    assert inspect.live_wait_s(100.0, 100.3) == pytest.approx(wait - 0.3)
    assert inspect.live_wait_s(100.0, 100.0 + wait) == inspect.STATUS_LIVE_LEAST_S
    assert inspect.live_wait_s(100.0, 105.0) == inspect.STATUS_LIVE_LEAST_S
