"""Throw-away processes that die with the process that started them, however it dies.

A test session, a benchmark or a chaos run starts a stack (Postgres, the Temporal dev
server, the simulator, the S3 and GCS stand-ins, ``worker.py`` processes) and stops it when
it ends. A clean end, an exception and Ctrl-C all pass through that stop; SIGKILL (CI's
timeout, a killed session, the OOM killer) does not, and the stack ran on with its temp dir.

Why a watchdog process, and not the kernel's parent-death signal: ``PR_SET_PDEATHSIG``
fires when the *thread* that forked the child exits (stacks are started from
``asyncio.to_thread`` and executor threads, which come and go), and it cannot reach
Postgres' postmaster, which ``pg_ctl`` daemonises (its parent is init, not us). A pipe
can: the first time this process guards something, it starts ``python -m
blockbatch.devtools.lifeline`` in a session of its own (a Ctrl-C to the terminal does not
reach it) with the read end of a pipe as its stdin, and keeps the only write end. The
kernel closes that end when this process ends, whatever ended it, and the watchdog reads
end-of-file. Each guard is one line on the pipe; at end-of-file the watchdog

1. stops every guarded process still running (SIGTERM, to its process group when it leads
   one; SIGKILL after :data:`GRACE_S`): ``pid PID START`` names one by its pid and start
   time (so a pid the kernel gave to another process since is not touched); ``stack ROOT``
   names every pid file under ``ROOT/run`` (:class:`~blockbatch.devtools.services.Services`
   keeps one per service, rewritten on a restart) and the Postgres under ``ROOT/pg``
   (SIGQUIT to its postmaster: an immediate shutdown, the data is thrown away);
2. then removes each ``stack ROOT`` directory, unless ``keep`` follows it, but only when
   something of the stack was still running: a stack its owner stopped is its owner's to
   keep or remove, as it did before exiting.

``make up``'s stack (``blockbatch.devtools.stack.LocalStack``) guards nothing: it outlives
the command that started it, as it must.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Seconds a guarded process gets to exit after SIGTERM (SIGQUIT for Postgres) before SIGKILL.
GRACE_S = 10.0
#: A pid file names a process that started before the file was written; one that started
#: more than this many seconds after it has the pid by reuse (the clocks compared, the boot
#: time in /proc/stat and a file's mtime, are only good to about a second).
_PID_FILE_SLACK_S = 2.0

_lock = threading.Lock()
_pipe: int | None = None
#: The process that started the watchdog behind :data:`_pipe` (a forked child starts its own).
_pipe_owner = 0
#: The watchdog's Popen, held so that it is never collected (and warned about) while it waits.
_watchdog: subprocess.Popen[bytes] | None = None


def guard_process(pid: int) -> None:
    """Stop process ``pid`` (and the group it leads, if it leads one) when this process ends
    without having stopped it."""
    start = start_ticks(pid)
    if start is not None:
        _send(f"pid {pid} {start}")


def guard_stack(root: Path, *, keep: bool = False) -> None:
    """Stop the services under ``root`` (its ``run/*.pid`` and ``pg``) when this process ends
    without having stopped them, and then remove ``root`` (unless ``keep``)."""
    path = str(Path(root).resolve())
    if "\n" in path:
        raise ValueError(
            f"a stack directory with a newline in its name cannot be guarded: {path!r}"
        )
    _send(f"stack {path}{' keep' if keep else ''}")


def _send(line: str) -> None:
    global _pipe, _pipe_owner, _watchdog
    with _lock:
        if _pipe is None or _pipe_owner != os.getpid():
            read_end, write_end = os.pipe()  # neither end is inherited by other children
            try:
                _watchdog = subprocess.Popen(  # this package's own module, our interpreter
                    [sys.executable, "-m", "blockbatch.devtools.lifeline"],
                    stdin=read_end,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd="/",
                )
            except BaseException:
                os.close(write_end)
                raise
            finally:
                os.close(read_end)
            _pipe, _pipe_owner = write_end, os.getpid()
        # One short line: a single write of at most PIPE_BUF bytes is atomic.
        os.write(_pipe, (line + "\n").encode())


# --------------------------------------------------------------------------- the watchdog


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat``'s fields after the command name (state first); None: gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot; None when there is no such process."""
    stat = _stat(pid)
    return int(stat[19]) if stat is not None else None


def _running(pid: int, start: int) -> bool:
    stat = _stat(pid)
    return stat is not None and int(stat[19]) == start and stat[0] not in ("Z", "X")


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


@dataclass
class Orders:
    """What the watchdog stops and removes, read from its pipe."""

    pids: dict[int, int] = field(default_factory=dict)
    stacks: dict[Path, bool] = field(default_factory=dict)  # root -> keep

    @classmethod
    def parse(cls, text: str) -> Orders:
        orders = cls()
        for line in text.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "pid":
                pid, start = rest.split()
                orders.pids[int(pid)] = int(start)
            elif kind == "stack":
                root, keep = (rest[:-5], True) if rest.endswith(" keep") else (rest, False)
                orders.stacks[Path(root)] = orders.stacks.get(Path(root), False) or keep
        return orders

    def running(self) -> dict[int, int]:
        """Each guarded process still running (pid -> start ticks): the named ones, and
        those of the stacks' pid files that started before their file was written."""
        found = {pid: start for pid, start in self.pids.items() if _running(pid, start)}
        ticks = os.sysconf("SC_CLK_TCK")
        boot = _boot_time()
        for root in self.stacks:
            for pid_file in sorted((root / "run").glob("*.pid")):
                with contextlib.suppress(OSError, ValueError):
                    pid = int(pid_file.read_text().strip())
                    start = start_ticks(pid)
                    written = pid_file.stat().st_mtime
                    if start is not None and boot + start / ticks <= written + _PID_FILE_SLACK_S:
                        found[pid] = start
        return {pid: start for pid, start in found.items() if _running(pid, start)}

    def postmasters(self) -> dict[int, int]:
        """The running postmaster of each stack's Postgres (pid -> start ticks)."""
        found: dict[int, int] = {}
        for root in self.stacks:
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int((root / "pg" / "postmaster.pid").read_text().splitlines()[0])
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                start = start_ticks(pid)
                if start is not None and b"postgres" in cmdline and _running(pid, start):
                    found[pid] = start
        return found


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def stop_all(orders: Orders, grace_s: float = GRACE_S) -> bool:
    """Stop what ``orders`` guards, then remove its stacks' directories when anything of
    theirs ran. Returns True when something was still running."""
    processes, postmasters = orders.running(), orders.postmasters()
    for pid in processes:
        _signal(pid, signal.SIGTERM)
    for pid in postmasters:
        _signal(pid, signal.SIGQUIT)  # immediate shutdown: the postmaster stops its backends
    alive = {**processes, **postmasters}
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = {pid: start for pid, start in alive.items() if _running(pid, start)}
    for pid in alive:
        _signal(pid, signal.SIGKILL)
    ran = bool(processes or postmasters)
    if ran:
        for root, keep in orders.stacks.items():
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
    return ran


def main() -> int:
    # The starter's Ctrl-C or hang-up is not for the watchdog: it acts on end-of-file only.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    text = sys.stdin.buffer.read().decode(errors="replace")  # returns when the starter is gone
    stop_all(Orders.parse(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
