"""Which tests keep the machine's cores busy and which wait (docs/testing.md).

A pytest plugin and its report. Loaded with ``-p bench.suite_timeline`` and
``SUITE_TIMELINE_DIR`` set, each pytest process (the xdist controller and every worker)
appends one line per test start and end to ``<dir>/timeline-<worker>.jsonl``: the time, the
machine's busy and total CPU ticks (``/proc/stat``, every core), the process's own CPU
time, that of the subprocesses it has waited for, and that of its session's services (the
Temporal dev server, Postgres with its ended backends, the simulator: the ``services``
fixture's pid files) once a test has used them. Run as a script on that directory, it
prints how busy the machine was in each ``--bucket-s`` stretch of the run, the longest
tests with the share of the machine that was busy while each ran (a long test at a low
share waits, on a timeout, a backoff or a service, rather than works), and the tests that
cost the most CPU, their services' included.

    SUITE_TIMELINE_DIR=/tmp/tl make test PYTEST_ARGS="-p bench.suite_timeline"
    .venv/bin/python bench/suite_timeline.py /tmp/tl --out bench/results/suite_timeline.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import pytest

DIR_ENV = "SUITE_TIMELINE_DIR"
_out: TextIO | None = None
#: The session's services (blockbatch.devtools.Services), from the first test that used them.
_services: Any = None
_HZ = os.sysconf("SC_CLK_TCK")
#: The CPU kinds a test's total adds up (each a difference of two lines).
KINDS = ("cpu", "children", "temporal", "postgres", "simulator")


def process_cpu(pid: int) -> float | None:
    """A process's CPU seconds (user + system), with its children's that it has waited for
    (a postmaster's ended backends); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(v) for v in fields[11:15]) / _HZ  # utime, stime, cutime, cstime


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _services_cpu() -> dict[str, float]:
    if _services is None:
        return {}
    pid_files = {
        "temporal": _services.pid_file("temporal"),
        "postgres": _services.pg_dir / "postmaster.pid",
        "simulator": _services.pid_file("simulator"),
    }
    out = {}
    for name, path in pid_files.items():
        pid = _pid(path)
        cpu = process_cpu(pid) if pid else None
        if cpu is not None:
            out[name] = cpu
    return out


def _ticks() -> tuple[int, int]:
    """The machine's busy and total CPU ticks since boot, over every core."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


def _write(event: str, nodeid: str) -> None:
    global _out
    where = os.environ.get(DIR_ENV)
    if not where:
        return
    if _out is None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _out = open(Path(where) / f"timeline-{worker}.jsonl", "a", buffering=1)  # noqa: SIM115
    busy, total = _ticks()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = {"ev": event, "id": nodeid, "t": time.time(), "busy": busy, "total": total}
    line["cpu"] = usage.ru_utime + usage.ru_stime
    line["children"] = children.ru_utime + children.ru_stime
    line.update(_services_cpu())
    _out.write(json.dumps(line) + "\n")


@pytest.hookimpl(trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """After the test's fixtures are set up: the session's services, once a test used them."""
    global _services
    if _services is None:
        _services = getattr(item, "funcargs", {}).get("services")


# The xdist controller sees each test's start and end too, as its workers report them:
# its file (``timeline-main``) is left out of the report when workers' files are there.
def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _write("start", nodeid)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    _write("end", nodeid)


def per_test(lines: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each test's wall, own CPU, the machine's busy share while it ran and ``cpu_s``: its
    own CPU, its waited-for subprocesses' and its session's services' while it ran.

    A service that stopped during the test (the session's teardown in its last test) is
    waited for by the test process: its CPU up to the test's start is taken off the
    subprocesses' share, which would otherwise count it a second time.
    """
    started: dict[str, dict[str, Any]] = {}
    out = []
    for e in lines:
        if e["ev"] == "start":
            started[e["id"]] = e
        elif e["ev"] == "end" and e["id"] in started:
            s = started.pop(e["id"])
            ticks = e["total"] - s["total"]
            cpu = {k: e[k] - s[k] for k in KINDS if k in e and k in s}
            if "children" in cpu:
                stopped = [k for k in ("temporal", "simulator") if k in s and k not in e]
                cpu["children"] = max(0.0, cpu["children"] - sum(s[k] for k in stopped))
            out.append(
                {
                    "test": e["id"],
                    "wall_s": round(e["t"] - s["t"], 3),
                    "own_cpu_s": round(e["cpu"] - s["cpu"], 3),
                    "cpu_s": round(sum(cpu.values()), 3),
                    "busy": round((e["busy"] - s["busy"]) / ticks, 3) if ticks else None,
                }
            )
    return out


def busy_by_stretch(lines: Sequence[dict[str, Any]], bucket_s: float) -> list[tuple[int, float]]:
    """The machine's busy share in each ``bucket_s`` stretch, from every process's lines."""
    ordered = sorted(lines, key=lambda e: e["t"])
    if not ordered:
        return []
    t0 = ordered[0]["t"]
    first: dict[int, dict[str, Any]] = {}
    last: dict[int, dict[str, Any]] = {}
    for e in ordered:
        k = int((e["t"] - t0) // bucket_s)
        first.setdefault(k, e)
        last[k] = e
    out = []
    for k in sorted(first):
        ticks = last[k]["total"] - first[k]["total"]
        if ticks > 0:
            out.append((int(k * bucket_s), round((last[k]["busy"] - first[k]["busy"]) / ticks, 2)))
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help=f"the {DIR_ENV} of the run")
    parser.add_argument("--bucket-s", type=float, default=30.0)
    parser.add_argument("--top", type=int, default=30, help="longest tests listed")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "suite_timeline.json"
    )
    return parser.parse_args(argv)


def main(args: argparse.Namespace) -> int:
    from bench.common import Recorder  # not at import: the plugin loads in every test process

    rec = Recorder("suite_timeline", args)
    per_worker = {
        f.stem.removeprefix("timeline-"): [json.loads(x) for x in f.read_text().splitlines()]
        for f in sorted(args.dir.glob("timeline-*.jsonl"))
    }
    lines = [e for name, ws in per_worker.items() if name != "main" for e in ws] or [
        e for ws in per_worker.values() for e in ws
    ]
    tests = sorted(per_test(lines), key=lambda r: -r["wall_s"])
    stretches = busy_by_stretch(lines, args.bucket_s)
    wall = sum(r["wall_s"] for r in tests)
    weighted = sum(r["wall_s"] * (r["busy"] or 0) for r in tests)
    listed = [r for r in tests if r["wall_s"] >= 1.0 or r["cpu_s"] >= 1.0]
    rest = [r for r in tests if r["wall_s"] < 1.0 and r["cpu_s"] < 1.0]
    rec.data.update(
        tests_count=len(tests),
        # The tests of a second or more, of wall or CPU (the rest are summed): a small file.
        tests=listed,
        shorter_tests_wall_s=round(sum(r["wall_s"] for r in rest), 1),
        shorter_tests_cpu_s=round(sum(r["cpu_s"] for r in rest), 1),
        stretches=stretches,
        sum_wall_s=round(wall, 1),
        sum_cpu_s=round(sum(r["cpu_s"] for r in tests), 1),
        busy_weighted=round(weighted / wall, 3) if wall else None,
    )
    rec.print_table(
        f"The machine's busy share, {args.bucket_s:.0f} s stretches",
        ["from s", "busy"],
        stretches,
    )
    rec.print_table(
        f"The {args.top} longest tests (busy: the machine's share while the test ran)",
        ["test", "wall s", "own CPU s", "busy"],
        [(r["test"], r["wall_s"], r["own_cpu_s"], r["busy"]) for r in tests[: args.top]],
    )
    costly = sorted(tests, key=lambda r: -r["cpu_s"])[: args.top]
    rec.print_table(
        f"The {args.top} tests that cost the most CPU (with their subprocesses and services)",
        ["test", "CPU s", "own CPU s", "wall s"],
        [(r["test"], r["cpu_s"], r["own_cpu_s"], r["wall_s"]) for r in costly],
    )
    rec.write()
    return 0


if __name__ == "__main__":
    # As a script, `bench.common` is found from the checkout (as a plugin, pytest's path has it).
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main(parse_args()))
