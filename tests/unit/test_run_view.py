"""What a run shows in the Temporal UI and answers to ``progress``: pure, from its state."""

from __future__ import annotations

from datetime import UTC, datetime

from blockbatch.core.call_types import Totals
from blockbatch.core.quality_types import QualityRunState
from blockbatch.core.run_types import BudgetLeft, RunInput, RunResult
from blockbatch.core.run_view import progress_details, result_details, run_progress

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _state() -> RunInput:
    return RunInput(
        run_id="r1",
        pack_count=5,
        block_count=10,
        running={3, 4},
        totals=Totals(blocks_done=6, blocks_failed=1, packs_done=3, calls=4, cost_usd=0.0123456789),
        quality=QualityRunState(text="gate: packs 5- re-planned at 2 blocks"),
    )


def test_progress_counts_the_window_and_what_is_pending() -> None:
    p = run_progress(_state(), status="running")
    assert (p.packs_running, p.packs_done, p.packs_total) == (2, 3, 5)
    assert (p.blocks_done, p.blocks_failed, p.blocks_pending) == (6, 1, 3)
    assert p.cost_usd == 0.012346 and p.quality_gate == "gate: packs 5- re-planned at 2 blocks"


def test_running_details_say_when_the_budget_stops_new_packs() -> None:
    p = run_progress(_state(), status="running")
    text = progress_details(p, now=NOW, budget_exhausted=True, replanned="packs 1-5 re-planned")
    assert text.startswith("**running: budget exhausted, no more packs start** · 6/10 blocks")
    assert "packs 3/5 (2 running)" in text
    assert "\n\npacks 1-5 re-planned" in text and "\n\ngate: packs 5-" in text


def test_result_details_name_reasons_and_the_command_that_finishes_the_run() -> None:
    result = RunResult(
        run_id="r1",
        status="budget_exhausted",
        blocks_total=10,
        blocks_ai_complete=6,
        blocks_failed=4,
        failure_reasons={"budget_exhausted": 3, "refused": 1},
        budget=BudgetLeft(
            max_cost_usd=0.02, spent_usd=0.019, blocks_done=6, blocks_left=4, to_finish_usd=0.01
        ),
    )
    text = result_details(result, run_progress(_state(), status="budget_exhausted"), 0)
    assert text.startswith("**budget_exhausted** · 6/10 blocks ok · 4 failed")
    assert "not done: 3 budget_exhausted, 1 refused" in text
    assert "about $0.0100 to finish; continue with `blockbatch retry r1 --max-cost" in text
