"""The test suite under stress: run it N times, some with a CPU hog on one core, and report
every test that failed in any run (a flake report).

Each run is ``make test`` (or, with ``--select``, ``pytest`` on a chosen selection, for
trying the script out), with a JUnit XML report per run, read back for its failures. In
the runs chosen for the hog (every other run by default, ``--hog-runs``), a busy-looping
process occupies one core while the suite runs: it is started just before the run, stopped
as soon as the run ends, ends on its own after ``--hog-max-s`` whatever happens to this
script, and is killed if this script is interrupted (Ctrl-C) or terminated.

    .venv/bin/python bench/suite_stress.py --runs 10            # what docs/testing.md reports
    .venv/bin/python bench/suite_stress.py --runs 2 --select tests/unit -q

The JSON (``--out``) has every run (hog or not, seconds, exit code, counts, the failed test
ids) and ``flakes``: each test that failed in any run, with how many runs it failed in;
the text report (``--text``) says the same in a few lines. The exit status is 0 when no
test failed in any run, else 1.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from blockbatch.devtools.lifeline import guard_process

RESULTS = ROOT / "bench" / "results"

#: The hog: a busy loop that ends by itself after its deadline (seconds, argv[1]).
HOG_CODE = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


@dataclass
class Run:
    index: int
    hog: bool
    command: list[str]
    seconds: float
    exit_code: int
    tests: int = 0
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: int = 0
    note: str = ""

    @property
    def failed(self) -> list[str]:
        return self.failures + self.errors


class Hog:
    """One busy-looping process: started and stopped by the script, bounded in time."""

    def __init__(self, max_s: float) -> None:
        self.max_s = max_s
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(  # our own interpreter, running HOG_CODE
            [sys.executable, "-c", HOG_CODE, str(self.max_s)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        guard_process(self.proc.pid)  # gone with this script, even if it is SIGKILLed

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    @contextlib.contextmanager
    def running(self, on: bool) -> Iterator[None]:
        if on:
            self.start()
        try:
            yield
        finally:
            self.stop()


def parse_junit(path: Path) -> tuple[int, list[str], list[str], int]:
    """(tests, failed ids, errored ids, skipped) of a JUnit XML report."""
    root = ET.parse(path).getroot()
    tests, skipped = 0, 0
    failures: list[str] = []
    errors: list[str] = []
    for case in root.iter("testcase"):
        tests += 1
        classname = case.get("classname", "")
        name = case.get("name", "")
        test_id = f"{classname.replace('.', '/')}.py::{name}" if classname else name
        if case.find("failure") is not None:
            failures.append(test_id)
        elif case.find("error") is not None:
            errors.append(test_id)
        elif case.find("skipped") is not None:
            skipped += 1
    return tests, failures, errors, skipped


def _stdout(path: Path, *argv: str) -> str | None:
    """What ``argv`` prints, run in ``path``; ``None`` if it cannot run or fails."""
    try:
        return subprocess.run(
            list(argv), cwd=path, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def make_test_workers(path: Path) -> int | None:
    """How many pytest-xdist workers ``make test`` starts in ``path`` (its ``-n``, as
    ``make -n`` prints it: ``TEST_WORKERS`` or the Makefile's default); ``None`` if it
    cannot say."""
    plan = _stdout(path, "make", "-n", "test")
    found = re.search(r"-m pytest -n (\d+)\b", plan) if plan is not None else None
    return int(found.group(1)) if found else None


def command_for(select: Sequence[str], junit: Path) -> list[str]:
    report = f"--junitxml={junit}"
    if select:
        python = ROOT / ".venv" / "bin" / "python"
        return [str(python), "-m", "pytest", "-p", "no:cacheprovider", report, *select]
    return ["make", "test", f"PYTEST_ARGS=-q -p no:cacheprovider {report}"]


class Child:
    """The suite's process group, so an interrupt stops every process the run started."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self, command: list[str], log: Path, timeout: float) -> int:
        """Run ``command`` to its end (its exit code), or stop it after ``timeout`` (-1).

        Interrupted (Ctrl-C, SIGTERM: a KeyboardInterrupt here), the run is stopped before
        the interrupt goes on: in a session of its own, the terminal's Ctrl-C does not
        reach it. Killed outright, this script's watchdog stops it.
        """
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(  # make or our venv's pytest, argv built above
                command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        guard_process(self.proc.pid)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return -1
        finally:
            self.stop()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def hog_runs(runs: int, hog: int | None) -> set[int]:
    """Which runs get the hog: ``hog`` of them (default half), spread evenly, from run 1."""
    count = runs // 2 if hog is None else max(0, min(hog, runs))
    return {round(i * runs / count) for i in range(count)} if count else set()


def checkout(path: Path) -> dict[str, Any] | None:
    """The commit the runs test (``git`` in ``path``, where ``make test`` runs) and whether
    tracked files differ from it; ``None`` outside a git checkout."""
    head = _stdout(path, "git", "rev-parse", "HEAD")
    status = _stdout(path, "git", "status", "--porcelain", "--untracked-files=no")
    if head is None or status is None:
        return None
    return {"commit": head.strip(), "changed": bool(status.strip())}


def report_text(data: dict[str, Any]) -> str:
    runs = data["runs"]
    at = data.get("checkout")
    where = f" at {at['commit'][:12]}{' (changed)' if at['changed'] else ''}" if at else ""
    lines = [
        f"suite stress, {data['date']}: {len(runs)} runs of `{data['command']}`{where} "
        f"({sum(r['hog'] for r in runs)} with a CPU hog on one core), "
        f"{data['machine']['nproc']} cores"
        + (f", {data['xdist_workers']} test workers" if data.get("xdist_workers") else ""),
    ]
    lines.extend(
        f"  run {r['index'] + 1}{' (hog)' if r['hog'] else ''}: {r['seconds']:.0f} s, "
        f"exit {r['exit_code']}, {r['tests']} tests, {len(r['failed'])} failed"
        + (f", {r['note']}" if r["note"] else "")
        for r in runs
    )
    flakes = data["flakes"]
    if flakes:
        lines.append(f"tests that failed in any run ({len(flakes)}):")
        lines += [f"  {n} of {len(runs)}  {test}" for test, n in flakes.items()]
    else:
        lines.append("no test failed in any run")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="how many runs (default 10)")
    parser.add_argument(
        "--hog-runs", type=int, default=None, help="how many of them with the hog (default half)"
    )
    parser.add_argument(
        "--hog-max-s",
        type=float,
        default=None,
        help="the hog ends by itself after this many seconds (default: --run-timeout-s, "
        "so it lasts as long as a run may)",
    )
    parser.add_argument(
        "--run-timeout-s", type=float, default=1800, help="a run is stopped after this long"
    )
    parser.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="where each run's log and JUnit report go (default: a new temp dir, kept)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "suite_stress.json")
    parser.add_argument("--text", type=Path, default=RESULTS / "suite_stress.txt")
    parser.add_argument(
        "--select",
        nargs=argparse.REMAINDER,
        default=[],
        help="pytest arguments instead of `make test` (everything after --select)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.hog_max_s is None:
        args.hog_max_s = args.run_timeout_s
    return args


def main(args: argparse.Namespace) -> int:
    hog, child = Hog(args.hog_max_s), Child()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    with_hog = hog_runs(args.runs, args.hog_runs)
    runs: list[Run] = []
    logs = args.logs or Path(tempfile.mkdtemp(prefix="bb-suite-stress-"))
    logs.mkdir(parents=True, exist_ok=True)
    loadavg_start = list(os.getloadavg())
    tested = checkout(Path.cwd())
    workers = None if args.select else make_test_workers(Path.cwd())
    interrupted = False
    try:
        for i in range(args.runs):
            junit = logs / f"run-{i + 1}.xml"
            command = command_for(args.select, junit)
            started = time.monotonic()
            with hog.running(i in with_hog):
                code = child.run(command, logs / f"run-{i + 1}.log", args.run_timeout_s)
            run = Run(i, i in with_hog, command, time.monotonic() - started, code)
            if junit.exists():
                run.tests, run.failures, run.errors, run.skipped = parse_junit(junit)
            else:
                run.note = f"no JUnit report; see {logs / f'run-{i + 1}.log'}"
            if code == -1:
                run.note = f"stopped after {args.run_timeout_s:.0f} s"
            elif code != 0 and not run.failed:
                run.note = run.note or f"exit {code} without a failed test; see the log"
            runs.append(run)
            print(
                f"run {i + 1}/{args.runs}{' (hog)' if run.hog else ''}: {run.seconds:.0f} s, "
                f"exit {code}, {len(run.failed)} failed",
                flush=True,
            )
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: stopping the run and the hog", file=sys.stderr)
    finally:
        child.stop()
        hog.stop()
    counts = Counter(test for run in runs for test in set(run.failed))
    data: dict[str, Any] = {
        "benchmark": "suite_stress",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(command_for(args.select, Path("RUN.xml"))),
        "checkout": tested,
        "xdist_workers": workers,
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "loadavg_start": loadavg_start,
        "loadavg_end": list(os.getloadavg()),
        "hog": {"cores": 1, "max_s": args.hog_max_s},
        "interrupted": interrupted,
        "logs": str(logs),
        "runs": [{**asdict(r), "failed": r.failed} for r in runs],
        # Failed runs that had no failed test (a crash, a timeout) count under their note.
        "flakes": dict(counts.most_common()),
        "runs_without_report": [r.index + 1 for r in runs if r.note],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    text = report_text(data)
    args.text.parent.mkdir(parents=True, exist_ok=True)
    args.text.write_text(text)
    print(text, end="")
    clean = not counts and not data["runs_without_report"] and not interrupted
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main(parse_args()))
