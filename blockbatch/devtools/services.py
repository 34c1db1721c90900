"""Throw-away stacks: Postgres, the Temporal dev server and the simulator under one directory,
on free ports, for the tests, the benchmarks and the chaos runs (the one launcher).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from blockbatch.devtools.lifeline import guard_stack
from blockbatch.devtools.stack import (
    PostgresInstance,
    StackError,
    ensure_database,
    free_port,
    pg_run,
    postgres_bin_dir,
    spawn,
    start_postgres,
    start_simulator,
    start_temporal,
    stop_pid,
    stop_postgres,
)


@dataclass
class Services:
    """Postgres, the Temporal dev server and the simulator under one directory, on free ports.

    The one launcher of throw-away stacks: the test suite's session services
    (tests/conftest.py), the benchmark scripts' stacks and the stack they share in the smoke
    tests (bench/common.py), and the chaos stack whose services are stopped and started again
    (bench/chaos_stack.py). Each service is started on its own (a test needing only Postgres
    starts only Postgres), keeps its port across a restart, writes its log to
    ``root/logs/<name>.log`` and its pid to ``root/run/<name>.pid``; :meth:`stop` stops
    whatever was started and :meth:`save`/:meth:`load` hand a running stack to another process.

    A stack dies with the process that started it, however that process ends (SIGKILL
    included): its first service started, the stack is guarded by a watchdog
    (``blockbatch.devtools.lifeline``) that stops whatever of it still runs when this
    process is gone, and then removes ``root`` (unless :attr:`keep`). A stack handed to
    another process (:meth:`load`) is not that process's to stop.
    """

    root: Path
    #: Postgres durability: off (``fsync``, ``synchronous_commit``, ``full_page_writes``)
    #: for tests, on for benchmarks that measure it.
    fsync: bool = False
    #: Temporal's history in a SQLite file (WAL) that survives a restart; else in memory.
    temporal_file: bool = False
    #: More dev server options (the test session's one task-queue partition, tests/conftest.py).
    temporal_options: tuple[str, ...] = ()
    pg_port: int = 0
    temporal_port: int = 0
    sim_port: int = 0
    temporal_pid: int = 0
    sim_pid: int = 0
    s3_port: int = 0
    gcs_port: int = 0
    #: Stopped (and its directory removed) when the process that started it ends.
    lifeline: bool = True
    #: Its directory is kept when the watchdog stops it (a benchmark's ``--keep``).
    keep: bool = False
    _guarded: bool = field(default=False, init=False, repr=False)

    def _guard(self) -> None:
        """Put the stack under the watchdog (once), before its first service starts."""
        if self.lifeline and not self._guarded:
            guard_stack(self.root, keep=self.keep)
            self._guarded = True

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    @property
    def pg_dir(self) -> Path:
        return (self.root / "pg").resolve()

    @property
    def pg(self) -> PostgresInstance:
        return PostgresInstance(self.pg_dir, self.pg_port, self.log("postgres"))

    def database_url(self, database: str) -> str:
        return self.pg.url(database)

    @property
    def temporal_address(self) -> str:
        return f"127.0.0.1:{self.temporal_port}"

    @property
    def sim_url(self) -> str:
        return f"http://127.0.0.1:{self.sim_port}"

    def start_postgres(self, *databases: str) -> PostgresInstance:
        """Start Postgres (initialised on first start) and create ``databases``."""
        self._guard()
        self.pg_port = self.pg_port or free_port()
        instance = start_postgres(self.pg_dir, self.pg_port, self.log("postgres"), fsync=self.fsync)
        for database in databases:
            ensure_database(instance, database)
        return instance

    def stop_postgres(self, mode: str = "fast") -> None:
        """Stop Postgres: ``fast`` is a clean shutdown, ``immediate`` a crash (WAL recovery)."""
        pg_run(
            [str(postgres_bin_dir() / "pg_ctl"), "-D", str(self.pg_dir), "-m", mode, "-w", "stop"]
        )

    def start_temporal(self) -> str:
        """Start the headless dev server (or wait for it, when it runs); return its address."""
        self._guard()
        self.temporal_port = self.temporal_port or free_port()
        db_file = self.root / "temporal" / "temporal.db" if self.temporal_file else None
        self.temporal_pid = start_temporal(
            self.temporal_port,
            None,
            db_file,
            self.log("temporal"),
            self.pid_file("temporal"),
            self.temporal_options,
        )
        return self.temporal_address

    def stop_temporal(self) -> None:
        """SIGTERM the dev server and wait for it to exit (a file-backed history stays)."""
        stop_pid(self.pid_file("temporal"))

    def start_simulator(self, scenario: Path | None = None) -> str:
        """Start ``python -m blockbatch.simulator`` (with a scenario file); return its URL."""
        self._guard()
        self.sim_port = self.sim_port or free_port()
        self.sim_pid = start_simulator(
            self.sim_port, self.log("simulator"), self.pid_file("simulator"), scenario
        )
        return self.sim_url

    @property
    def s3_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def start_s3(self) -> str:
        """Start a local S3-compatible server (moto's server mode) and return its URL.

        Only Bedrock batch jobs need it (their JSONL lives in S3), so nothing starts it but
        a caller that runs one; :meth:`stop` stops it with the rest.
        """
        self._guard()
        self.s3_port = self.s3_port or free_port()
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.s3_port)]
        spawn(cmd, self.log("s3"), self.pid_file("s3"))
        deadline = time.monotonic() + 30
        while not _answers(f"{self.s3_url}/moto-api/"):
            if time.monotonic() > deadline:
                self.stop_s3()
                raise StackError(
                    f"the local S3 server did not answer on port {self.s3_port} within 30 s: "
                    f"see {self.log('s3')}"
                )
            time.sleep(0.2)
        return self.s3_url

    def stop_s3(self) -> None:
        """Stop the local S3 server (its buckets live in memory and go with it)."""
        with contextlib.suppress(OSError):
            stop_pid(self.pid_file("s3"))

    @property
    def gcs_url(self) -> str:
        return f"http://127.0.0.1:{self.gcs_port}"

    def start_gcs(self) -> str:
        """Start a local Cloud Storage stand-in (gcp-storage-emulator, in memory) and return
        its URL (what ``STORAGE_EMULATOR_HOST`` names). Only Vertex batch prediction jobs
        need it; :meth:`stop` stops it with the rest."""
        self._guard()
        self.gcs_port = self.gcs_port or free_port()
        cmd = [
            sys.executable,
            "-m",
            "gcp_storage_emulator",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.gcs_port),
            "--in-memory",
        ]
        spawn(cmd, self.log("gcs"), self.pid_file("gcs"))
        deadline = time.monotonic() + 30
        while not _answers(f"{self.gcs_url}/"):
            if time.monotonic() > deadline:
                self.stop_gcs()
                raise StackError(
                    f"the local Cloud Storage server did not answer on port {self.gcs_port} "
                    f"within 30 s: see {self.log('gcs')}"
                )
            time.sleep(0.2)
        return self.gcs_url

    def stop_gcs(self) -> None:
        """Stop the local Cloud Storage server (its buckets live in memory and go with it)."""
        with contextlib.suppress(OSError):
            stop_pid(self.pid_file("gcs"))

    def start(self, *databases: str, scenario: Path | None = None) -> Services:
        """Start all three (stopping what started when one fails)."""
        try:
            self.start_postgres(*databases)
            self.start_temporal()
            self.start_simulator(scenario)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop whatever of the three (and the local S3 server) runs (best effort: teardown must not hide a failure)."""
        for name in ("gcs", "s3", "simulator", "temporal"):
            with contextlib.suppress(OSError):
                stop_pid(self.pid_file(name))
        if (self.pg_dir / "PG_VERSION").exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError, StackError):
                stop_postgres(self.pg_dir)

    def save(self, path: Path) -> None:
        """Describe the running stack in ``path`` for :meth:`load` in another process."""
        fields = {k: v for k, v in vars(self).items() if k not in ("root", "lifeline", "_guarded")}
        path.write_text(json.dumps({"root": str(self.root), **fields}))

    @classmethod
    def load(cls, path: Path) -> Services:
        data = json.loads(path.read_text())
        options = tuple(data.get("temporal_options", ()))
        # Its owner's watchdog guards it: this process does not stop it by ending.
        return cls(
            **{
                **data,
                "root": Path(data["root"]),
                "temporal_options": options,
                "lifeline": False,
            }
        )


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return 200 <= resp.status < 300
    except OSError:
        return False
