"""Ctrl-C on a benchmark stops the stack it started (issue 39).

``bench/scale.py`` is run as a user runs it, its stack's temp dir under this test's own
``TMPDIR`` so every process of that stack names it on its command line (Postgres' data
dir, Temporal's database, the simulator's scenario). Once its run is under way it gets a
real SIGINT (twice, as an impatient user presses Ctrl-C): it must exit saying the stack
was stopped, and none of those processes, nor its workers, may be left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def _stack_of(bench: psutil.Process, tmp: Path) -> list[psutil.Process]:
    """The bench's children and every process whose command line names ``tmp``."""
    found = {p.pid: p for p in bench.children(recursive=True)}
    for p in psutil.process_iter(["cmdline"]):
        if any(str(tmp) in arg for arg in p.info["cmdline"] or ()):
            found[p.pid] = p
    found.pop(bench.pid, None)
    return list(found.values())


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_ctrl_c_on_the_scale_benchmark_leaves_no_process(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("BENCH_SHARED_STACK", None)
    out = tmp_path / "out.txt"
    with open(out, "w") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "bench/scale.py",
                "--blocks",
                "3000",
                "--workers",
                "1",
                "--out",
                str(tmp_path / "scale.json"),
            ],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        bench = psutil.Process(proc.pid)
        deadline = time.monotonic() + 150
        while "ingested" not in out.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, out.read_text()
            time.sleep(0.5)
        assert "ingested" in out.read_text(), out.read_text()
        stack = _stack_of(bench, tmp_path)
        names = " ".join(" ".join(p.cmdline()) for p in stack)
        for part in ("postgres", "temporal", "blockbatch.simulator", "worker.py"):
            assert part in names, (part, names)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)  # pressed again while the stack stops
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    said = out.read_text()
    left = [" ".join(p.cmdline())[:100] for p in stack if _alive(p)]
    assert not left, f"left running: {left}\n{said}"
    assert code == 130, said
    told = next(line for line in said.splitlines() if line.startswith("interrupted:"))
    for part in ("the simulator", "Temporal", "Postgres", "1 worker"):
        assert part in told, said
