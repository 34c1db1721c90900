"""bench/cost.py's budget table: a run stopped before any block was done has no estimate to
finish, and the table says so instead of crashing the benchmark."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.common import Recorder
from bench.cost import report_budget


def test_the_budget_table_shows_figures_the_run_could_not_give_as_a_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = Recorder("cost", argparse.Namespace(out=tmp_path / "cost.json"))
    budget = {
        "mode": "auto",
        "unbudgeted_cost_usd": 0.0221,
        "unbudgeted_calls": 6,
        "budget_usd": 0.011,
        "calls": 2,
        "cost_usd": 0.0104,
        "status": "budget_exhausted",
        "blocks_done": 0,
        "within_budget": True,
        "left": {"blocks_left": 200, "to_finish_usd": None},
        "retry": {
            "max_cost_usd": 0.03,
            "calls": 6,
            "cost_usd": 0.02,
            "status": "completed",
            "blocks": 200,
            "estimate_was_usd": None,
        },
        "total": {
            "calls": 8,
            "cost_usd": 0.0304,
            "within_budget": False,
            "blocks_ok": 200,
            "blocks_paid_twice": 0,
            "x_unbudgeted_cost": None,
        },
    }
    report_budget(rec, {"schema": "extract", "budget": budget}, 200)
    out = capsys.readouterr().out
    assert "200 left, ~$-" in out
    assert "| 94.5%" in out  # of its budget, before it stopped
    assert "cost -x the unbudgeted run" in out and "The estimate to finish was $-" in out
