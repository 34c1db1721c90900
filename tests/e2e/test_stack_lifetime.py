"""A throw-away stack dies with the process that started it, even when that process is
SIGKILLed (issue 39: CI's timeout, a killed session, the OOM killer).

A child process starts a whole ``Services`` stack (Postgres, the Temporal dev server, the
simulator, the S3 and GCS stand-ins) from a thread that then ends, and a ``worker.py`` on it,
as the test session and the benchmarks do; then it is SIGKILLed, so none of its own
teardown runs. Every process of that stack, and the worker, must go, and its dir with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

from tests.procs import cmdline, descendants
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]

STARTER = """
import json, os, subprocess, sys, tempfile, threading
from pathlib import Path
from blockbatch.devtools.lifeline import guard_process
from blockbatch.devtools.services import Services

services = Services(Path(tempfile.mkdtemp(prefix="bb-lifetime-")))
def start():
    services.start("bb")
    services.start_s3()
    services.start_gcs()
# Started from a thread that ends before the kill, as asyncio.to_thread starts stacks.
starting = threading.Thread(target=start)
starting.start()
starting.join()
log = open(services.root / "logs" / "worker.log", "wb")
worker = subprocess.Popen(
    [sys.executable, "worker.py"],
    env={
        **os.environ,
        "DATABASE_URL": services.database_url("bb"),
        "TEMPORAL_ADDRESS": services.temporal_address,
        "TEMPORAL_TASK_QUEUE": "lifetime",
        "ANTHROPIC_BASE_URL": services.sim_url,
        "ANTHROPIC_API_KEY": "sim-test-key",
        "BLOCKBATCH_DATA_DIR": str(services.root / "data"),
    },
    stdout=log,
    stderr=subprocess.STDOUT,
    stdin=subprocess.DEVNULL,
)
guard_process(worker.pid)
print(json.dumps({"root": str(services.root), "worker": worker.pid}), flush=True)
sys.stdin.read()  # until killed
"""


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _processes_of(root: Path, worker: int) -> dict[tuple[int, str], str]:
    """Each process of the stack under ``root`` (its services' pid files, the postmaster
    and its backends) and the worker, as (pid, start time) -> command line."""
    pids = {worker} | {int(p.read_text()) for p in (root / "run").glob("*.pid")}
    postmaster = int((root / "pg" / "postmaster.pid").read_text().splitlines()[0])
    pids |= {postmaster} | descendants(postmaster)
    pids |= {d for p in list(pids) for d in descendants(p)}
    return {(pid, stat[19]): cmdline(pid) for pid in pids if (stat := _stat(pid)) is not None}


def _running(pid: int, started: str) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[19] == started and stat[0] not in ("Z", "X")


async def test_a_sigkilled_starter_leaves_no_process_of_its_stack_and_no_dir(
    tmp_path: Path,
) -> None:
    starter = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        STARTER,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert starter.stdout is not None
        line = await starter.stdout.readline()  # once its stack is up (EOF if it failed)
        assert line, (await starter.communicate())[1].decode()
        said = json.loads(line)
        root = Path(said["root"])
        processes = _processes_of(root, said["worker"])
        names = " ".join(processes.values())
        for part in ("postgres", "temporal", "blockbatch.simulator", "moto.server"):
            assert part in names, (part, names)
        assert "gcp_storage_emulator" in names and "worker.py" in names, names
    finally:
        with contextlib.suppress(ProcessLookupError):
            starter.kill()  # SIGKILL: none of its teardown runs
        await starter.communicate()

    def left() -> list[str]:
        return [cmd[:120] for (pid, started), cmd in processes.items() if _running(pid, started)]

    await until(lambda: not left(), "every process of the stack stopped")
    await until(lambda: not root.exists(), f"{root} removed")
