"""bench/suite_stress.py: runs a selection N times, the hog on the chosen runs and stopped
after each, and reports every test that failed in any run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench import suite_stress
from tests.waiting import until


def test_the_hog_goes_to_half_the_runs_spread_out_unless_told() -> None:
    assert suite_stress.hog_runs(10, None) == {0, 2, 4, 6, 8}
    assert suite_stress.hog_runs(10, 3) == {0, 3, 7}
    assert suite_stress.hog_runs(1, None) == set()
    assert suite_stress.hog_runs(2, 5) == {0, 1}


def test_a_failing_test_is_reported_with_the_runs_it_failed_in(tmp_path: Path) -> None:
    # One test always fails, one fails only while this script's hog runs (it sees the hog's
    # process by its own deadline, so a hog of a stress run around this suite is not it),
    # one passes: the report counts each failure by the runs it happened in.
    (tmp_path / "test_sample.py").write_text(
        "import subprocess\n"
        "def test_passes():\n    assert True\n"
        "def test_always_fails():\n    assert False\n"
        "def test_fails_beside_the_hog():\n"
        "    ps = subprocess.run(['ps', '-eww', '-o', 'args'], capture_output=True, text=True).stdout\n"
        "    assert not any(a.rstrip().endswith(' 117.25') for a in ps.splitlines())\n"
    )
    out, text = tmp_path / "stress.json", tmp_path / "stress.txt"
    args = suite_stress.parse_args(
        [
            "--runs",
            "2",
            "--hog-runs",
            "1",
            "--hog-max-s",
            "117.25",
            "--out",
            str(out),
            "--text",
            str(text),
            "--logs",
            str(tmp_path / "logs"),
            "--select",
            "-p",
            "no:xdist",
            "-q",
            str(tmp_path / "test_sample.py"),
        ]
    )
    assert suite_stress.main(args) == 1
    data = json.loads(out.read_text())
    assert [r["hog"] for r in data["runs"]] == [True, False]
    # The runs' logs went where they were told, not to a temp dir left behind.
    assert data["logs"] == str(tmp_path / "logs") and (tmp_path / "logs" / "run-1.log").exists()
    assert all(r["tests"] == 3 for r in data["runs"])
    flakes = {test.rsplit("::", 1)[1]: n for test, n in data["flakes"].items()}
    assert flakes == {"test_always_fails": 2, "test_fails_beside_the_hog": 1}
    assert "2 of 2" in text.read_text() and "test_fails_beside_the_hog" in text.read_text()


def test_a_clean_selection_reports_nothing_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    args = suite_stress.parse_args(
        [
            *("--runs", "1", "--out", str(tmp_path / "s.json"), "--text", str(tmp_path / "s.txt")),
            *("--logs", str(tmp_path / "logs")),
            *("--select", "-p", "no:xdist", "-q", str(tmp_path / "test_ok.py")),
        ]
    )
    assert suite_stress.main(args) == 0
    assert json.loads((tmp_path / "s.json").read_text())["flakes"] == {}
    assert "no test failed in any run" in (tmp_path / "s.txt").read_text()


def test_zero_runs_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        suite_stress.parse_args(["--runs", "0"])


async def test_an_interrupted_run_is_stopped_with_every_process_it_started(
    tmp_path: Path,
) -> None:
    # The run is in a session of its own (the terminal's Ctrl-C does not reach it): the
    # script's interrupt (a KeyboardInterrupt, from Ctrl-C or SIGTERM) must stop it, and the
    # processes it started, before going on. The run interrupts this process itself once
    # it has started a process of its own, so the interrupt lands in the wait for it.
    grandchild = tmp_path / "grandchild.pid"
    command = [
        sys.executable,
        "-c",
        "import os, pathlib, signal, subprocess\n"
        "p = subprocess.Popen(['sleep', '600'])\n"
        f"pathlib.Path({str(grandchild)!r}).write_text(str(p.pid))\n"
        f"os.kill({os.getpid()}, signal.SIGUSR1)\n"
        "p.wait()\n",
    ]

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            suite_stress.Child().run(command, tmp_path / "run.log", timeout=600)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    stat = Path(f"/proc/{int(grandchild.read_text())}/stat")

    def stopped() -> bool:  # gone, or a zombie until init reaps it: not sleeping on
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except OSError:
            return True

    await until(stopped, "the run's own process stopped")


def test_the_hog_lasts_as_long_as_a_run_may_unless_told() -> None:
    assert suite_stress.parse_args(["--run-timeout-s", "3000"]).hog_max_s == 3000
    assert suite_stress.parse_args(["--hog-max-s", "60"]).hog_max_s == 60


def test_the_report_names_the_commit_it_tested_and_whether_files_differed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # git looks no higher than tmp_path, wherever --basetemp put it (inside a checkout too).
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert suite_stress.checkout(tmp_path) is None  # not a git checkout
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    (tmp_path / "a.txt").write_text("a\n")
    for argv in (["init", "-q"], ["add", "a.txt"], ["commit", "-qm", "a"]):
        subprocess.run([*git, *argv], cwd=tmp_path, check=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.strip()
    (tmp_path / "untracked.txt").write_text("not the suite's\n")
    assert suite_stress.checkout(tmp_path) == {"commit": head, "changed": False}
    (tmp_path / "a.txt").write_text("b\n")
    at = suite_stress.checkout(tmp_path)
    assert at == {"commit": head, "changed": True}
    run = {"index": 0, "hog": True, "seconds": 1.0, "exit_code": 0, "tests": 1}
    data = {
        "date": "d",
        "command": "make test",
        "checkout": at,
        "machine": {"nproc": 2},
        "runs": [{**run, "failed": [], "note": ""}],
        "flakes": {},
    }
    assert f"at {head[:12]} (changed)" in suite_stress.report_text(data)


def test_the_report_says_how_many_workers_make_test_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Makefile whose `test` runs pytest the way ours does, its worker count from the
    # environment as ours takes TEST_WORKERS.
    (tmp_path / "Makefile").write_text(
        "TEST_WORKERS ?= 4\ntest:\n\t@python -m pytest -n $(TEST_WORKERS) --dist loadgroup\n"
    )
    monkeypatch.delenv("TEST_WORKERS", raising=False)
    assert suite_stress.make_test_workers(tmp_path) == 4
    monkeypatch.setenv("TEST_WORKERS", "7")
    assert suite_stress.make_test_workers(tmp_path) == 7
    (tmp_path / "Makefile").write_text("test:\n\t@echo no pytest here\n")
    assert suite_stress.make_test_workers(tmp_path) is None
    assert suite_stress.make_test_workers(tmp_path / "missing") is None
    run = {"index": 0, "hog": False, "seconds": 1.0, "exit_code": 0, "tests": 1}
    data = {
        "date": "d",
        "command": "make test",
        "checkout": None,
        "xdist_workers": 3,
        "machine": {"nproc": 2},
        "runs": [{**run, "failed": [], "note": ""}],
        "flakes": {},
    }
    assert "2 cores, 3 test workers" in suite_stress.report_text(data)
    assert "test workers" not in suite_stress.report_text({**data, "xdist_workers": None})
