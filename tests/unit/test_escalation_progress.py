"""An escalation's live line (``watch``, ``escalate``, ``run --escalate-to``): its phase,
the count that moves in it, and the summary's figures as they grow."""

from __future__ import annotations

import io

import pytest

from blockbatch.cli.console import Console
from blockbatch.cli.progress import ProgressView, describe_escalation, escalation_bar
from blockbatch.core.escalation_types import EscalationPhase, EscalationProgress, EscalationResult
from blockbatch.store.escalations import phase_of

SONNET = "claude-sonnet-5-5"


def _progress(phase: EscalationPhase, **counts: object) -> EscalationProgress:
    return EscalationProgress(
        run_id="r1",
        phase=phase,
        second_packs=6,
        second_packs_done=int(str(counts.pop("packs_done", 6))),
        second_blocks=48,
        escalation=EscalationResult.model_validate({"model": SONNET, "blocks": 50, **counts}),
    )


def test_planning_says_so_with_a_pulsing_bar() -> None:
    p = EscalationProgress(run_id="r1", phase="planning")
    assert describe_escalation(p) == "escalation planning: packing a second order…"
    assert escalation_bar(p) == (0, None)


def test_second_pass_shows_packs_then_blocks_compared_kept_sent_up_and_cost() -> None:
    p = _progress(
        "second pass",
        packs_done=3,
        left=26,
        compared=24,
        kept=20,
        escalated_by_reason={"disagrees": 4, "failed": 2},
        second_pass_cost_usd=0.0123,
    )
    assert describe_escalation(p) == (
        "escalation second pass: 3/6 packs · 24/48 compared · 20 kept · 6 sent up · $0.0123"
    )
    assert escalation_bar(p) == (24, 48)


def test_escalating_leads_with_answers_back_of_those_sent_up() -> None:
    p = _progress(
        "escalating",
        left=3,
        compared=48,
        kept=43,
        escalated_by_reason={"disagrees": 5, "failed": 2},
        escalated=3,
        escalation_failed=1,
        second_pass_cost_usd=0.05,
        escalation_cost_usd=0.0134,
    )
    assert describe_escalation(p) == (
        f"escalating to {SONNET}: 3/7 answered · 48/48 compared · 43 kept · 7 sent up · "
        "1 failed · $0.0634"
    )
    assert escalation_bar(p) == (4, 7)


@pytest.mark.parametrize("phase", ["finishing", "cancelling", "done", "cancelled"])
def test_other_phases_keep_the_answered_count_after_the_phase(phase: EscalationPhase) -> None:
    p = _progress(
        phase, compared=48, kept=43, escalated_by_reason={"disagrees": 5}, escalated=5, skipped=0
    )
    assert describe_escalation(p).startswith(f"escalation {phase} · 48/48 compared · ")
    assert "5/5 answered" in describe_escalation(p)


def test_nothing_sent_up_shows_no_answered_count() -> None:
    p = _progress("finishing", compared=48, kept=48)
    assert "answered" not in describe_escalation(p)
    assert escalation_bar(p) == (0, None)


@pytest.mark.parametrize(
    ("counts", "run_status", "waiting", "phase"),
    [
        (None, "completed", 0, "planning"),
        ({"left": 30}, "running", 2, "second pass"),
        ({"left": 30}, "cancelling", 2, "cancelling"),
        ({"left": 4}, "running", 0, "escalating"),
        ({}, "running", 0, "finishing"),
        ({}, "completed", 0, "done"),
        ({"left": 30}, "completed", 2, "cancelled"),
    ],
)
def test_phase_of_rows_and_run_status(
    counts: dict[str, int] | None, run_status: str, waiting: int, phase: str
) -> None:
    result = None if counts is None else EscalationResult(model=SONNET, blocks=50, **counts)
    assert phase_of(result, run_status, waiting) == phase


def test_piped_view_prints_a_line_when_the_phase_changes_and_none_in_json() -> None:
    out = io.StringIO()
    view = ProgressView(Console(out=out))
    second = _progress("second pass", packs_done=1, compared=8, kept=8, left=40)
    view.update_escalation(second)
    view.update_escalation(second)  # unchanged: not printed twice
    view.update_escalation(_progress("escalating", compared=48, kept=45, left=3))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("escalation second pass: 1/6 packs")
    assert lines[1].startswith(f"escalating to {SONNET}: 0/0 answered")
    quiet = io.StringIO()
    ProgressView(Console(json_mode=True, out=quiet)).update_escalation(second)
    assert quiet.getvalue() == ""
