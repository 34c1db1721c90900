"""blockbatch.devtools.lifeline: what a process guards is stopped when it dies, however it
dies, and nothing else is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from blockbatch.devtools.lifeline import Orders, start_ticks
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]

#: A starter: guards a sleeper of its own session, and a stack dir whose pid file names a
#: second sleeper; says their pids and its watchdog's, then waits to be killed (or, given
#: "stop", stops both sleepers itself and exits).
STARTER = """
import json, os, subprocess, sys, threading
from pathlib import Path
from blockbatch.devtools import lifeline
root = Path(sys.argv[1])
(root / "run").mkdir(parents=True)
def start():
    return subprocess.Popen(["sleep", "600"], start_new_session=True)
guarded = start()
# From a thread that ends at once: a parent-death signal would fire here already.
t = threading.Thread(target=lifeline.guard_process, args=(guarded.pid,))
t.start(); t.join()
service = start()
(root / "run" / "service.pid").write_text(str(service.pid))
lifeline.guard_stack(root)
print(json.dumps({"pids": [guarded.pid, service.pid], "watchdog": lifeline._watchdog.pid}))
sys.stdout.flush()
if sys.stdin.readline().strip() == "stop":
    for p in (guarded, service):
        p.kill(); p.wait()
"""


def _alive(pid: int, start: int | None) -> bool:
    now = start_ticks(pid)
    if now is None or now != start:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _start(root: Path) -> tuple[subprocess.Popen[str], dict[str, int | list[int]]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(root)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


async def test_a_sigkilled_starter_leaves_no_guarded_process_and_no_stack_dir(
    tmp_path: Path,
) -> None:
    root = tmp_path / "stack"
    proc, said = _start(root)
    pids = said["pids"]
    assert isinstance(pids, list)
    starts = {pid: start_ticks(pid) for pid in pids}
    assert all(_alive(pid, start) for pid, start in starts.items())
    proc.kill()
    proc.wait()

    def gone() -> bool:
        return not root.exists() and not any(_alive(p, s) for p, s in starts.items())

    await until(gone, "the guarded processes stopped and the stack dir removed")


async def test_a_stack_its_starter_stopped_is_left_for_it_to_keep(tmp_path: Path) -> None:
    root = tmp_path / "stack"
    proc, said = _start(root)
    watchdog = said["watchdog"]
    assert isinstance(watchdog, int)
    watchdog_start = start_ticks(watchdog)
    proc.communicate("stop\n")
    assert proc.returncode == 0
    await until(lambda: not _alive(watchdog, watchdog_start), "the watchdog gone")
    assert (root / "run" / "service.pid").exists()


def test_a_pid_used_again_by_another_process_is_not_stopped(tmp_path: Path) -> None:
    me = os.getpid()
    mine = start_ticks(me)
    assert mine is not None
    # Named with another start time: the pid's process is not the one that was guarded.
    assert Orders.parse(f"pid {me} {mine + 1}\n").running() == {}
    assert Orders.parse(f"pid {me} {mine}\n").running() == {me: mine}
    # A pid file written before its process started names a process that took the pid later.
    pid_file = tmp_path / "run" / "temporal.pid"
    pid_file.parent.mkdir()
    pid_file.write_text(str(me))
    orders = Orders.parse(f"stack {tmp_path}\n")
    assert orders.running() == {me: mine}
    os.utime(pid_file, (0, 0))
    assert orders.running() == {}


def test_orders_read_every_line_and_keep_wins() -> None:
    orders = Orders.parse("pid 12 345\nstack /tmp/a b\nstack /tmp/c keep\nstack /tmp/c\n")
    assert orders.pids == {12: 345}
    assert orders.stacks == {Path("/tmp/a b"): False, Path("/tmp/c"): True}
