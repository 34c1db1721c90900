"""Where the test suite's CPU goes, by kind of process (docs/testing.md).

Runs a command (``pytest`` on a selection by default, or ``make test``) and samples every
process under it every ``--every`` seconds from ``/proc/PID/stat``, keeping each pid's last
user + system time, then adds them up by kind: the pytest processes (the controller and the
xdist workers), the Temporal dev server, Postgres (the postmaster and its backends), the
simulator, ``worker.py`` and ``starter.py`` subprocesses, chromium, and the rest.

This script makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so the processes
the suite detaches (``pg_ctl`` leaves Postgres to be adopted, the dev server runs in a
session of its own) are adopted by it rather than by init and stay in the tree it samples.
A process that ends between two samples loses the CPU it spent since the last one; the
``unsampled`` line is that loss: every child's CPU as the kernel counted it for this
script (``RUSAGE_CHILDREN``, which includes the adopted ones) less the sum of the samples.

    .venv/bin/python bench/suite_cpu.py -- -p no:xdist -q tests/e2e/test_retry.py
    .venv/bin/python bench/suite_cpu.py --make test

Writes ``bench/results/suite_cpu.json`` (``--out``) and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PR_SET_CHILD_SUBREAPER = 36
TICKS = os.sysconf("SC_CLK_TCK")
#: Seconds the processes the command leaves running are still sampled after it ends.
LEFT_BEHIND_S = 5.0

#: The kinds, in the order the table lists them.
KINDS = (
    "pytest",
    "temporal dev server",
    "temporal test server",
    "postgres",
    "simulator",
    "worker.py",
    "starter.py",
    "chromium",
    "other",
)


@dataclass(frozen=True)
class Sample:
    pid: int
    started: int
    ppid: int
    cpu_s: float
    comm: str
    cmdline: tuple[str, ...]
    state: str = "R"


def kind_of(comm: str, cmdline: Sequence[str]) -> str:
    """The kind of a process, from its name (``/proc/PID/comm``) and command line."""
    line = " ".join(cmdline)
    # The postmaster, and its backends, which rename themselves "postgres: ...".
    if comm == "postgres" or (cmdline and Path(cmdline[0].split(":")[0]).name == "postgres"):
        return "postgres"
    if cmdline and Path(cmdline[0]).name == "temporal" and "start-dev" in cmdline:
        return "temporal dev server"
    # The time-skipping test server of the workflow tests (a downloaded Java-native binary).
    if comm.startswith("temporal-test") or (cmdline and "temporal-test-server" in cmdline[0]):
        return "temporal test server"
    if "chrom" in comm or any("chrom" in Path(part).name for part in cmdline[:1]):
        return "chromium"
    if "blockbatch.simulator" in cmdline:
        return "simulator"
    if any(Path(part).name == "worker.py" for part in cmdline[1:3]):
        return "worker.py"
    if any(Path(part).name == "starter.py" for part in cmdline[1:3]):
        return "starter.py"
    # The controller (`python -m pytest`, `pytest`) and the xdist workers, which execnet
    # starts as `python -c "import sys;exec(eval(sys.stdin.readline()))"`.
    after_m = [cmdline[i + 1] for i, part in enumerate(cmdline[:-1]) if part == "-m"]
    if "pytest" in after_m or (cmdline and Path(cmdline[0]).name in ("pytest", "py.test")):
        return "pytest"
    if "exec(eval(sys.stdin.readline()))" in line:
        return "pytest"
    return "other"


def parse_stat(text: str) -> tuple[int, str, str, int, float, int]:
    """pid, comm, state, ppid, user + system CPU seconds and start time (clock ticks after
    boot) from a ``/proc/PID/stat`` line."""
    pid_part, rest = text.split(" (", 1)
    comm, fields = rest.rsplit(") ", 1)
    parts = fields.split()
    # parts[0] is field 3 (state): ppid is field 4, utime 14, stime 15, starttime 22.
    ppid, utime, stime, start = int(parts[1]), int(parts[11]), int(parts[12]), int(parts[19])
    return int(pid_part), comm, parts[0], ppid, (utime + stime) / TICKS, start


def read_all() -> dict[int, Sample]:
    """Every process on the machine now (those that end while it is read are left out)."""
    out: dict[int, Sample] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        pid, comm, state, ppid, cpu, start = parse_stat(stat)
        cmdline = tuple(p.decode(errors="replace") for p in raw.split(b"\0") if p)
        out[pid] = Sample(pid, start, ppid, cpu, comm, cmdline, state)
    return out


def descendants(root: int, procs: dict[int, Sample]) -> set[int]:
    children: dict[int, list[int]] = {}
    for s in procs.values():
        children.setdefault(s.ppid, []).append(s.pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tally(last: Iterable[Sample]) -> dict[str, dict[str, float]]:
    """CPU seconds and process count per kind, from each process's last sample."""
    table = {k: {"cpu_s": 0.0, "processes": 0} for k in KINDS}
    for s in last:
        row = table[kind_of(s.comm, s.cmdline)]
        row["cpu_s"] += s.cpu_s
        row["processes"] += 1
    return table


def largest(last: Iterable[Sample], n: int = 12) -> list[dict[str, object]]:
    """The ``n`` command lines (first 100 characters) that spent the most, all their
    processes together, with their kind."""
    by_line: dict[str, list[float]] = {}
    kinds: dict[str, str] = {}
    for s in last:
        line = " ".join(s.cmdline)[:100] or s.comm
        by_line.setdefault(line, []).append(s.cpu_s)
        kinds[line] = kind_of(s.comm, s.cmdline)
    top = sorted(by_line.items(), key=lambda item: -sum(item[1]))[:n]
    return [
        {"command": line, "kind": kinds[line], "cpu_s": round(sum(cpus), 1), "processes": len(cpus)}
        for line, cpus in top
    ]


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def reap(adopted: Iterable[int]) -> None:
    """Wait for the adopted children that ended, once sampled (the command itself is
    waited by its ``Popen``)."""
    for pid in adopted:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def left_running() -> list[str]:
    """The command lines of the processes still under this script (what the suite left)."""
    procs = read_all()
    return sorted(" ".join(procs[pid].cmdline)[:160] for pid in descendants(os.getpid(), procs))


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(command: Sequence[str], every: float) -> dict[str, object]:
    become_subreaper()
    before = children_cpu()
    started = time.monotonic()
    load_start = os.getloadavg()
    proc = subprocess.Popen(list(command), cwd=ROOT)
    # Each process's last sample, keyed by pid and start time (a pid can be reused).
    last: dict[tuple[int, int], Sample] = {}
    samples = 0
    ended_at: float | None = None
    while True:
        procs = read_all()
        under = descendants(os.getpid(), procs)
        for pid in under:
            s = procs[pid]
            prev = last.get((s.pid, s.started))
            if prev is not None and not s.cmdline:
                # A zombie has no command line left: keep the one it ran with.
                s = Sample(s.pid, s.started, s.ppid, s.cpu_s, prev.comm, prev.cmdline, s.state)
            last[(s.pid, s.started)] = s
        samples += 1
        # Adopted processes that ended are waited only once sampled ended (a zombie keeps
        # its final CPU), so none of their CPU goes unsampled.
        reap(
            p
            for p in under
            if procs[p].ppid == os.getpid() and procs[p].state == "Z" and p != proc.pid
        )
        if proc.poll() is not None:
            ended_at = ended_at or time.monotonic()
            # What the command left running gets a few seconds to stop, then is reported.
            if not under - {proc.pid} or time.monotonic() - ended_at > LEFT_BEHIND_S:
                break
        time.sleep(every)
    wall = time.monotonic() - started
    counted = children_cpu() - before
    table = tally(last.values())
    sampled = sum(row["cpu_s"] for row in table.values())
    return {
        "command": list(command),
        "exit_code": proc.returncode,
        "wall_s": round(wall, 1),
        "load_start": [round(x, 1) for x in load_start],
        "load_end": [round(x, 1) for x in os.getloadavg()],
        "cores": os.cpu_count(),
        "every_s": every,
        "samples": samples,
        "kinds": {
            k: {"cpu_s": round(v["cpu_s"], 1), "processes": v["processes"]}
            for k, v in table.items()
        },
        "largest": largest(last.values()),
        "sampled_cpu_s": round(sampled, 1),
        "counted_cpu_s": round(counted, 1),
        "unsampled_cpu_s": round(max(0.0, counted - sampled), 1),
        "left_running": left_running(),
        "machine": platform.node(),
    }


def render(result: dict[str, object]) -> str:
    kinds = result["kinds"]
    assert isinstance(kinds, dict)
    total = float(str(result["counted_cpu_s"])) or 1.0
    lines = [
        f"{' '.join(map(str, result['command']))}",  # type: ignore[call-overload]
        f"exit {result['exit_code']}, {result['wall_s']} s wall, load {result['load_start']}"
        f" -> {result['load_end']}, {result['cores']} cores",
        "",
        "| kind | CPU s | share | processes |",
        "|---|---:|---:|---:|",
    ]
    for kind in KINDS:
        row = kinds[kind]
        lines.append(
            f"| {kind} | {row['cpu_s']:.1f} | {100 * row['cpu_s'] / total:.0f} % | {row['processes']} |"
        )
    lines.append(
        f"| (ended between samples) | {result['unsampled_cpu_s']} |"
        f" {100 * float(str(result['unsampled_cpu_s'])) / total:.0f} % | |"
    )
    lines.append(f"| **all** | **{result['counted_cpu_s']}** | 100 % | |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--make", metavar="TARGET", help="run `make TARGET` instead of pytest")
    parser.add_argument("--out", type=Path, default=RESULTS / "suite_cpu.json")
    parser.add_argument("pytest_args", nargs="*", help="pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.make:
        command = ["make", args.make]
    elif args.pytest_args:
        command = [sys.executable, "-m", "pytest", *args.pytest_args]
    else:
        parser.error("give pytest arguments after -- (or --make test)")
    result = measure(command, args.every)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(render(result))
    return int(result["exit_code"] != 0)


if __name__ == "__main__":
    raise SystemExit(main())
