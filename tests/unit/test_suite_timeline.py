"""bench/suite_timeline.py: the per-test timeline plugin and its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.suite_timeline import busy_by_stretch, per_test

ROOT = Path(__file__).resolve().parents[2]


def _line(ev: str, test: str, t: float, busy: int, total: int, cpu: float = 0.0) -> dict:
    return {"ev": ev, "id": test, "t": t, "busy": busy, "total": total, "cpu": cpu}


def test_each_test_gets_its_wall_its_cpu_and_the_machines_busy_share() -> None:
    lines = [
        _line("start", "a", 0.0, 100, 200, 1.0),
        _line("start", "b", 1.0, 150, 300),  # another worker's test, overlapping
        _line("end", "a", 10.0, 400, 1200, 3.5),
        _line("end", "b", 11.0, 450, 1300),
    ]
    got = {r["test"]: r for r in per_test(lines)}
    assert got["a"] == {"test": "a", "wall_s": 10.0, "own_cpu_s": 2.5, "busy": 0.3}
    assert got["b"]["busy"] == 0.3 and got["b"]["wall_s"] == 10.0


def test_a_test_without_its_end_is_left_out() -> None:
    assert per_test([_line("start", "a", 0.0, 0, 0)]) == []


def test_busy_share_per_stretch() -> None:
    lines = [
        _line("start", "a", 0.0, 0, 100),
        _line("end", "a", 20.0, 50, 200),
        _line("start", "b", 30.0, 60, 300),
        _line("end", "b", 50.0, 260, 500),
    ]
    assert busy_by_stretch(lines, 30.0) == [(0, 0.5), (30, 1.0)]
    assert busy_by_stretch([], 30.0) == []


def test_the_plugin_writes_a_line_at_each_tests_start_and_end(tmp_path: Path) -> None:
    (tmp_path / "test_two.py").write_text(
        "def test_one():\n    pass\n\ndef test_two():\n    pass\n"
    )
    # Not as an xdist worker's child: PYTEST_XDIST_WORKER would name its file after the worker.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(SUITE_TIMELINE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    command += ["-p", "bench.suite_timeline", "--rootdir", str(tmp_path), str(tmp_path)]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(x) for x in (tmp_path / "timeline-main.jsonl").read_text().splitlines()]
    assert [(e["ev"], e["id"].rsplit("::", 1)[1]) for e in lines] == [
        ("start", "test_one"),
        ("end", "test_one"),
        ("start", "test_two"),
        ("end", "test_two"),
    ]
    assert [r["test"].rsplit("::", 1)[1] for r in per_test(lines)] == ["test_one", "test_two"]
