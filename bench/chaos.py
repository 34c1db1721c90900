"""Chaos run: prove that a crash or a misbehaving model never loses, duplicates or pays twice.

One command::

    .venv/bin/python bench/chaos.py [--blocks 1000] [--seed 1]

It starts its own throw-away stack on free ports (embedded Postgres, a file-backed
Temporal dev server, the simulated Claude, two ``python worker.py`` processes), runs the
document once without faults (the reference), then runs it again while it injects, on a
schedule drawn from the seed:

* workers SIGKILLed and restarted (one of two; both at once), and one stopped with SIGTERM
  as a deploy would (graceful: in-flight calls finish first);
* the Temporal dev server stopped and restarted (its history stays in its SQLite file);
* Postgres stopped (cleanly, and crash-like with ``-m immediate``) and restarted;
* the simulator answering 429 (with retry-after), 529, 500, hanging past the client's
  timeout, truncating output, skipping / duplicating / inventing block_uids and sending
  malformed tool input, at the rates below (``--set faults.truncate=0.1`` to change one);
* an outage of Claude: every call answered 503 for ``--outage-s`` seconds (180; 0: none)
  in the middle of the run. The run must pause, probe, resume by itself, and no block may
  fail or be charged an attempt because of it.

``--stream`` runs the stream scenario instead: the document's blocks are put as rows into a
stream (``Blockbatch.open_stream``) by a producer that is killed half-way and replaced by a
new client re-putting its last rows (keys dedupe them), while the simulator misbehaves as
above (no outage) and each worker is SIGKILLed once; every row must end answered exactly
once (blocks, the iterator's results) and no pack attempt paid twice.

Then it checks the invariants from Postgres, the ledger and the simulator's request log
(see ``bench/chaos_check.py``), prints one table and saves it to
``bench/results/chaos.json``. Exit status 1 when an invariant is broken.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import asyncpg

from bench.chaos_check import (
    check_run,
    fault_free_reference,
    install_audit,
    violations,
)
from bench.chaos_stack import ChaosStack, chaos_document, chaos_schema
from blockbatch.api import Blockbatch
from blockbatch.core.ingest import parse_document
from blockbatch.core.outage import waiting_text
from blockbatch.core.run_types import RunOptions
from blockbatch.runtime.process import exit_process
from blockbatch.store.db import create_pool

RESULTS = ROOT / "bench" / "results" / "chaos.json"

#: The simulator's misbehaviour during the chaos run (per request, or per block for the
#: uid faults). The latency makes the run last long enough to be disturbed.
DEFAULT_SCENARIO: dict[str, Any] = {
    "speed_factor": 0.5,
    "latency": {"ttft_ms": 500, "per_output_token_ms": 12},
    "errors": {
        "rate_429": 0.04,
        "rate_529": 0.04,
        "rate_500": 0.03,
        "retry_after_s": 1,
        "rate_timeout": 0.015,
        "timeout_s": 30,
    },
    "faults": {
        "truncate": 0.05,
        "malformed_tool_input": 0.03,
        "skip_block": 0.004,
        "duplicate_uid": 0.004,
        "unknown_uid": 0.004,
    },
}


# --------------------------------------------------------------------------- the schedule


@dataclass
class Event:
    """One disruption, fired once the run has finished ``at`` of its blocks."""

    kind: str  # kill_worker | kill_all_workers | restart_temporal | restart_postgres | outage
    at: float
    arg: str = ""
    down_s: float = 0.0
    fired_at_s: float | None = None
    progress: float | None = None
    took_s: float | None = None

    def label(self) -> str:
        return {
            "kill_worker": f"SIGKILL worker {self.arg}, restart after {self.down_s:.1f}s",
            "stop_worker": f"SIGTERM worker {self.arg} (graceful, like a deploy), restart "
            f"after {self.down_s:.1f}s",
            "kill_all_workers": f"SIGKILL every worker, restart after {self.down_s:.1f}s",
            "restart_temporal": f"stop Temporal, start again after {self.down_s:.1f}s",
            "restart_postgres": f"stop Postgres ({self.arg}), start again after {self.down_s:.1f}s",
            "outage": f"Claude down: every call answered {self.arg} for {self.down_s:.0f}s",
        }[self.kind]


def schedule(seed: int, workers: list[str], outage_s: float = 0.0) -> list[Event]:
    """The disruptions of one chaos run, in firing order; same seed, same schedule.

    An outage (``outage_s`` > 0) comes on top, at 40% of the blocks: in the middle.
    """
    rng = random.Random(seed)
    kinds: list[tuple[str, str]] = [
        ("kill_worker", rng.choice(workers)),  # the other worker carries on
        ("stop_worker", rng.choice(workers)),  # SIGTERM, as a deploy does
        ("restart_temporal", ""),
        ("restart_postgres", "fast"),
        ("kill_all_workers", ""),
        ("restart_postgres", "immediate"),
        ("kill_worker", rng.choice(workers)),
    ]
    rng.shuffle(kinds)
    marks = sorted(rng.uniform(0.04, 0.8) for _ in kinds)
    events = []
    for (kind, arg), at in zip(kinds, marks, strict=True):
        down = rng.uniform(2.0, 6.0) if kind.startswith("restart") else rng.uniform(0.5, 3.0)
        events.append(Event(kind, round(at, 3), arg, round(down, 1)))
    if outage_s > 0:
        events.append(Event("outage", 0.4, "503", outage_s))
        events.sort(key=lambda e: e.at)
    return events


# --------------------------------------------------------------------------- the driver


@dataclass
class Chaos:
    stack: ChaosStack
    worker_names: list[str]
    t0: float = field(default_factory=time.monotonic)
    worker_exits: int = 0
    #: Workers deliberately down (killed by an event, not yet due for restart).
    held: set[str] = field(default_factory=set)
    #: The simulator's chaos scenario (an outage is set on top of it, then taken off).
    scenario: dict[str, Any] = field(default_factory=dict)
    #: What the run said while Claude was down (``progress`` queries), and when it was.
    outage_seen: list[dict[str, Any]] = field(default_factory=list)
    outage_window: tuple[datetime, datetime] | None = None
    look: Any = None  # async () -> RunProgress | None

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def say(self, text: str) -> None:
        print(f"  [{self.now():6.1f}s] {text}", flush=True)

    async def supervise(self) -> None:
        """Restart workers that exited on their own, like a process supervisor would."""
        for name in self.worker_names:
            if name in self.held or self.stack.worker_alive(name):
                continue
            code = self.stack.workers[name].returncode if name in self.stack.workers else None
            if name in self.stack.workers:
                self.worker_exits += 1
                self.say(f"worker {name} exited on its own (code {code}); restarting it")
                await asyncio.sleep(1.0)
            self.stack.start_worker(name)

    async def fire(self, event: Event) -> None:
        st = self.stack
        if event.kind in ("kill_worker", "kill_all_workers", "stop_worker"):
            names = self.worker_names if event.kind == "kill_all_workers" else [event.arg]
            sig = signal.SIGTERM if event.kind == "stop_worker" else signal.SIGKILL
            self.held.update(names)
            for name in names:
                await asyncio.to_thread(st.kill_worker, name, sig)
            await asyncio.sleep(event.down_s)
            for name in names:
                st.start_worker(name)
                self.held.discard(name)
        elif event.kind == "restart_temporal":
            await asyncio.to_thread(st.stop_temporal)
            await asyncio.sleep(event.down_s)
            await asyncio.to_thread(st.start_temporal)
        elif event.kind == "restart_postgres":
            await asyncio.to_thread(st.stop_postgres, event.arg)
            await asyncio.sleep(event.down_s)
            await asyncio.to_thread(st.start_postgres)
        elif event.kind == "outage":
            await self.outage(int(event.arg), event.down_s)

    async def outage(self, status: int, seconds: float) -> None:
        """Every Claude call answered ``status`` for ``seconds``; watch the run meanwhile."""
        errors = {**self.scenario.get("errors", {}), "outage_status": status}
        start = datetime.now(UTC)
        self.stack.sim("PUT", "/_sim/scenario", {**self.scenario, "errors": errors})
        end_at = time.monotonic() + seconds
        while time.monotonic() < end_at:
            await asyncio.sleep(min(5.0, max(end_at - time.monotonic(), 0)))
            with contextlib.suppress(Exception):  # a query may time out: look again later
                p = await self.look()
                self.outage_seen.append(
                    {
                        "t_s": round((datetime.now(UTC) - start).total_seconds(), 1),
                        "status": p.status,
                        "text": None
                        if p.outage is None
                        else waiting_text(p.outage, datetime.now(UTC)),
                    }
                )
        self.stack.sim("PUT", "/_sim/scenario", self.scenario)
        self.outage_window = (start, datetime.now(UTC))
        paused = [s for s in self.outage_seen if s["status"] == "waiting_for_api"]
        self.say(
            f"Claude is back; the run was seen paused {len(paused)}/"
            f"{len(self.outage_seen)} times" + (f": {paused[-1]['text']}" if paused else "")
        )


async def progress(url: str, run_id: str) -> tuple[str, int, int] | None:
    """(run status, blocks finished, blocks planned), or None while Postgres is away."""
    try:
        conn = await asyncpg.connect(url, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return None
    try:
        status = await conn.fetchval("select status from runs where run_id = $1", run_id)
        row = await conn.fetchrow(
            """select count(*) filter (where status <> 'pending') as done, count(*) as total
               from overlays where run_id = $1""",
            run_id,
        )
        return status, row["done"], row["total"]
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        return None
    finally:
        with contextlib.suppress(Exception):  # the server may be going away
            await conn.close()


async def wait_result(bb: Blockbatch, run_id: str, timeout: float) -> dict[str, Any] | None:
    """The RunWorkflow's own result, retrying while Temporal comes back."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = await asyncio.wait_for(bb.wait(run_id), timeout=30)
            return result.model_dump(mode="json")
        except Exception:  # noqa: BLE001 - reconnecting
            await asyncio.sleep(1)
    return None


async def run_chaos(args: argparse.Namespace) -> dict[str, Any]:
    started_at = datetime.now(UTC)
    wall0 = time.monotonic()
    st = ChaosStack.create(anthropic_timeout_s=args.client_timeout)
    workers = [chr(ord("a") + i) for i in range(args.workers)]
    print(
        f"chaos: {args.blocks} blocks, seed {args.seed}, {len(workers)} workers, "
        f"stack in {st.root}",
        flush=True,
    )
    try:
        st.start()
        for name in workers:
            st.start_worker(name)
        for name in workers:
            st.wait_worker_ready(name)
        bb = await Blockbatch.connect(st.settings())
        await install_audit(bb.pool)
        doc = await bb.ingest_bytes(
            chaos_document(args.blocks, args.seed), name="chaos.md", fmt="markdown"
        )
        schema_id = await bb.add_schema(chaos_schema())
        # Reuse off: the chaos run sends the blocks the reference run answered.
        options = RunOptions(
            pack_size=args.pack_size,
            max_concurrent_packs=args.max_concurrent_packs,
            reuse_answers=False,
        )

        # 1. the reference: the same document, no faults, no latency
        st.sim("PUT", "/_sim/scenario", {"seed": args.seed})
        t = time.monotonic()
        ref_id = await bb.start_run(
            doc, schema_id, options, run_id=f"fault-free-{args.seed}-{int(time.time())}"
        )
        ref_result = await bb.wait(ref_id)
        reference = await fault_free_reference(bb.pool, ref_id)
        print(
            f"fault-free run: {ref_result.status}, {reference['calls']} calls, "
            f"{time.monotonic() - t:.1f}s",
            flush=True,
        )

        # 2. the chaos run
        scenario = {**args.scenario, "seed": args.seed}
        st.sim("POST", "/_sim/reset")
        st.sim("PUT", "/_sim/scenario", scenario)
        events = schedule(args.seed, workers, args.outage_s)
        print("schedule: " + "; ".join(f"{e.at:.0%}: {e.label()}" for e in events), flush=True)
        chaos = Chaos(st, workers, scenario=scenario)
        run_id = await bb.start_run(
            doc, schema_id, options, run_id=f"chaos-{args.seed}-{int(time.time())}"
        )
        chaos.say(f"run {run_id} started")
        chaos.look = lambda: bb.progress(run_id, timeout_s=3)
        pending_events = list(events)
        last_event_end = time.monotonic()
        last_print = 0.0
        finished = False
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            await chaos.supervise()
            p = await progress(st.database_url, run_id)
            if p is not None:
                status, done, total = p
                if status in ("completed", "completed_with_failures", "failed", "cancelled"):
                    finished = True
                    chaos.say(f"run {status}: {done}/{total} blocks")
                    break
                frac = done / total if total else 0.0
                if time.monotonic() - last_print > 10:
                    chaos.say(f"{done}/{total} blocks finished")
                    last_print = time.monotonic()
                if (
                    pending_events
                    and frac >= pending_events[0].at
                    and time.monotonic() - last_event_end >= args.min_gap
                ):
                    event = pending_events.pop(0)
                    event.fired_at_s, event.progress = chaos.now(), round(frac, 3)
                    chaos.say(f"{frac:.0%} done: {event.label()}")
                    t = time.monotonic()
                    await chaos.fire(event)
                    event.took_s = round(time.monotonic() - t, 1)
                    chaos.say(f"  back after {event.took_s}s")
                    last_event_end = time.monotonic()
            await asyncio.sleep(0.5)
        wall = time.monotonic() - chaos.t0
        workflow_result = await wait_result(bb, run_id, 120) if finished else None
        await bb.close()
        sim_log = st.sim("GET", "/_sim/requests")
        sim_stats = st.sim("GET", "/_sim/stats")
        # A fresh pool: the driver's own connections did not survive the Postgres restarts.
        pool = await create_pool(st.database_url, max_size=2)
        try:
            async with pool.acquire() as conn:
                check = await check_run(conn, run_id, sim_log=sim_log, fault_free=reference)
                outage = await outage_figures(conn, run_id, chaos, workflow_result)
        finally:
            await pool.close()
        fired = [e for e in events if e.fired_at_s is not None]
        injected = {
            "worker_sigkill": sum(
                1 if e.kind == "kill_worker" else len(workers)
                for e in fired
                if e.kind.startswith("kill")
            ),
            "worker_sigterm": sum(1 for e in fired if e.kind == "stop_worker"),
            "temporal_restart": sum(1 for e in fired if e.kind == "restart_temporal"),
            "postgres_restart": sum(1 for e in fired if e.kind == "restart_postgres"),
            "worker_exited_on_its_own": chaos.worker_exits,
            **{f"sim_{k}": v for k, v in sorted(sim_stats["faults"].items())},
        }
        return {
            "date": started_at.strftime("%Y-%m-%d %H:%M UTC"),
            "args": {k: v for k, v in vars(args).items() if k != "scenario"},
            "scenario": scenario,
            "finished": finished,
            "run_wall_s": round(wall, 1),
            "total_wall_s": round(time.monotonic() - wall0, 1),
            "schedule": [e.__dict__ | {"label": e.label()} for e in events],
            "injected": injected,
            "workflow_result": workflow_result,
            "outage": outage,
            "simulator": {
                "requests": sim_stats["requests"].get("POST /v1/messages", {}),
                "stop_reasons": sim_stats["stop_reasons"],
            },
            **check,
        }
    finally:
        st.close(keep=args.keep)


async def outage_figures(
    conn: asyncpg.Connection, run_id: str, chaos: Chaos, workflow_result: dict[str, Any] | None
) -> dict[str, Any] | None:
    """What the outage cost: calls during it, probes, pause, time to resume, blocks hurt."""
    if chaos.outage_window is None:
        return None
    start, end = chaos.outage_window
    row = await conn.fetchrow(
        """select count(*) filter (where purpose = 'pack' and http_status = 503)
                      as pack_calls_503,
                  count(*) filter (where purpose = 'probe') as probes,
                  count(*) filter (where purpose = 'probe' and status = 'succeeded')
                      as probes_answered,
                  min(started_at) filter (where purpose = 'pack' and status = 'succeeded'
                                          and started_at > $2) as first_answer_after
           from llm_calls where run_id = $1""",
        run_id,
        end,
    )
    worst = await conn.fetchval(
        """select coalesce(max(n), 0) from (select count(*) as n from llm_calls
           where run_id = $1 and purpose = 'pack' and http_status = 503
           group by pack_path, pack_attempt) as per_attempt""",
        run_id,
    )
    api_unavailable = await conn.fetchval(
        """select count(*) from overlays where run_id = $1 and status = 'failed'
           and reason_code = 'api_unavailable'""",
        run_id,
    )
    first = row["first_answer_after"]
    wr = workflow_result or {}
    return {
        "outage_s": round((end - start).total_seconds(), 1),
        "seen_paused": sum(1 for s in chaos.outage_seen if s["status"] == "waiting_for_api"),
        "looks": len(chaos.outage_seen),
        "looks_detail": chaos.outage_seen,
        "pack_calls_answered_503": row["pack_calls_503"],
        "most_503_for_one_pack_attempt": worst,
        "probes": row["probes"],
        "probes_answered": row["probes_answered"],
        "pauses": wr.get("outages"),
        "paused_s": wr.get("paused_s"),
        "resumed_after_s": (round((first - end).total_seconds(), 1) if first is not None else None),
        "blocks_failed_api_unavailable": api_unavailable,
    }


# --------------------------------------------------------------------------- the table


async def run_stream_chaos(args: argparse.Namespace) -> dict[str, Any]:
    """``--stream``: rows put into a stream while workers are SIGKILLed and the producing
    process dies and restarts; every row must be answered exactly once and paid once."""
    started_at = datetime.now(UTC)
    st = ChaosStack.create(anthropic_timeout_s=args.client_timeout)
    workers = [chr(ord("a") + i) for i in range(args.workers)]
    blocks = parse_document(chaos_document(args.blocks, args.seed), "markdown")
    rows = [{"id": f"r{i}", "text": b.block_content} for i, b in enumerate(blocks)]
    n = len(rows)
    print(
        f"chaos stream: {n} rows, seed {args.seed}, {len(workers)} workers, stack in {st.root}",
        flush=True,
    )
    events: list[dict[str, Any]] = []
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {text}", flush=True)

    try:
        st.start()
        for name in workers:
            st.start_worker(name)
        for name in workers:
            st.wait_worker_ready(name)
        st.sim("PUT", "/_sim/scenario", {**args.scenario, "seed": args.seed})
        bb = await Blockbatch.connect(st.settings())
        await install_audit(bb.pool)
        stream = await bb.open_stream(
            chaos_schema(),
            max_rows=args.pack_size,
            max_wait_s=1.0,
            max_buffered=200,
            options=RunOptions(max_concurrent_packs=args.max_concurrent_packs, reuse_answers=False),
        )
        run_id = stream.run_id
        say(f"stream {run_id} open")
        seen: Counter[str] = Counter()

        async def read() -> None:
            async for row in stream.results():
                seen[row.key or ""] += 1

        async def produce(first: int) -> None:
            async with await Blockbatch.connect(st.settings()) as mine:
                producer = await mine.stream(run_id)
                for i in range(first, n, 10):
                    batch = rows[i : i + 10]
                    await producer.put_many(batch, keys=[r["id"] for r in batch])
                    await asyncio.sleep(0.1)
                await producer.flush()

        reader = asyncio.create_task(read())
        first = asyncio.create_task(produce(0))
        killed_producer = False
        plan = [(0.3, workers[0]), (0.7, workers[-1])]
        while True:
            done, accepted = await _stream_counts(bb.pool, run_id)
            if not killed_producer and accepted >= n // 2:
                first.cancel()  # the producer dies: its client is dropped, nothing flushed
                with contextlib.suppress(asyncio.CancelledError):
                    await first
                restart_at = max(accepted - 25, 0)
                events.append(
                    {
                        "event": "producer killed and restarted",
                        "rows_accepted": accepted,
                        "re_put_from": restart_at,
                        "at_s": round(time.monotonic() - t0, 1),
                    }
                )
                say(
                    f"producer killed at {accepted} rows accepted; a new one re-puts from "
                    f"row {restart_at}"
                )
                second = asyncio.create_task(produce(restart_at))
                killed_producer = True
            if plan and done >= plan[0][0] * n:
                _, name = plan.pop(0)
                say(f"{done}/{n} rows done: SIGKILL worker {name}, restart after 2 s")
                st.kill_worker(name)
                events.append(
                    {
                        "event": f"SIGKILL worker {name}",
                        "rows_done": done,
                        "at_s": round(time.monotonic() - t0, 1),
                    }
                )
                await asyncio.sleep(2)
                st.start_worker(name)
            if killed_producer and second.done():
                second.result()
                break
            await asyncio.sleep(0.5)
        await stream.close()
        say("stream closed; draining")
        result = await asyncio.wait_for(stream.wait(), args.timeout)
        await asyncio.wait_for(reader, 120)
        say(f"stream {result.status}: {result.blocks_ai_complete}/{result.blocks_total} ok")
        await bb.close()
        sim_log = st.sim("GET", "/_sim/requests")
        pool = await create_pool(st.database_url, max_size=2)
        try:
            async with pool.acquire() as conn:
                check = await check_run(conn, run_id, sim_log=sim_log)
        finally:
            await pool.close()
        return {
            "date": started_at.strftime("%Y-%m-%d %H:%M UTC"),
            "mode": "stream",
            "args": {k: v for k, v in vars(args).items() if k != "scenario"},
            "scenario": args.scenario,
            "finished": True,
            "events": events,
            "rows": n,
            "results_yielded": sum(seen.values()),
            "results_missing": sum(1 for r in rows if not seen[r["id"]]),
            "results_twice": sum(1 for v in seen.values() if v > 1),
            "run_wall_s": round(time.monotonic() - t0, 1),
            **check,
        }
    finally:
        st.close(keep=args.keep)


async def _stream_counts(pool: Any, run_id: str) -> tuple[int, int]:
    """(rows done, rows accepted) of a stream, read from Postgres."""
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            """select count(*) filter (where status <> 'pending') as done, count(*) as rows
               from overlays where run_id = $1""",
            run_id,
        )
    return row["done"], row["rows"]


def stream_table(r: dict[str, Any]) -> str:
    b, c = r["blocks"], r["calls"]
    lines = [
        ("rows put (distinct)", r["rows"]),
        ("rows accepted (blocks)", b["total"]),
        ("  ai_complete", b["ai_complete"]),
        ("  failed", b["failed"]),
        ("  lost (must be 0)", b["lost"]),
        ("  written twice (must be 0)", b["written_twice"]),
        ("results yielded by the iterator", r["results_yielded"]),
        ("  rows with no result (must be 0)", r["results_missing"]),
        ("  rows with two results (must be 0)", r["results_twice"]),
        ("calls made (ledger rows)", c["ledger_rows"]),
        ("  answered", c["succeeded"]),
        ("calls paid twice for one pack attempt (must be 0)", c["paid_twice_same_attempt"]),
        ("cost in the ledger", f"${c['cost_usd']:.4f}"),
    ]
    lines += [(f"event: {e['event']}", f"at {e['at_s']} s") for e in r["events"]]
    lines.append(("wall time", f"{r['run_wall_s']} s"))
    width = max(len(k) for k, _ in lines) + 2
    return "\n".join(
        [f"chaos stream {r['run_id']} ({r['date']}): {r['run_status']}"]
        + [f"{k:<{width}}{v}" for k, v in lines]
    )


def table(r: dict[str, Any]) -> str:
    b, c, inj = r["blocks"], r["calls"], r["injected"]
    lines = [
        ("blocks total", b["total"]),
        ("  ai_complete", b["ai_complete"]),
        ("  failed", b["failed"]),
    ]
    lines += [(f"    {reason}", n) for reason, n in b["failed_reasons"].items()]
    lines += [
        ("  cancelled", b["cancelled"]),
        ("  lost (must be 0)", b["lost"]),
        ("  written twice (must be 0)", b["written_twice"]),
        ("  values differing from the fault-free run", r["values"]["differs_from_fault_free"]),
        ("calls made (ledger rows)", c["ledger_rows"]),
        ("  answered", c["succeeded"]),
        ("  errors (retried)", sum(c["errors"].values())),
        ("  abandoned (worker lost mid-call)", c["by_status"].get("abandoned", 0)),
        ("calls a fault-free run needs", c["fault_free"]),
        ("  packs planned / split events", f"{c['packs_planned']} / {c['split_events']}"),
        ("calls paid twice for one pack attempt (must be 0)", c["paid_twice_same_attempt"]),
        ("answers billed but never recorded (SIGKILLed mid-call)", c["answers_never_recorded"]),
        ("cost in the ledger", f"${c['cost_usd']:.4f}"),
        ("  billed by the simulator", f"${c['billed_by_simulator_usd']:.4f}"),
        ("  fault-free run", f"${c['fault_free_cost_usd']:.4f}"),
    ]
    o = r.get("outage")
    if o:
        lines += [
            (f"outage: every call 503 for {o['outage_s']} s", ""),
            ("  run seen paused (waiting_for_api)", f"{o['seen_paused']}/{o['looks']} looks"),
            ("  pauses / seconds paused", f"{o['pauses']} / {o['paused_s']} s"),
            ("  pack calls answered 503", o["pack_calls_answered_503"]),
            ("  most 503s for one pack attempt", o["most_503_for_one_pack_attempt"]),
            ("  probes (answered)", f"{o['probes']} ({o['probes_answered']})"),
            ("  first pack answer after Claude was back", f"{o['resumed_after_s']} s"),
            ("  blocks failed api_unavailable (must be 0)", o["blocks_failed_api_unavailable"]),
        ]
    lines.append(("faults injected", ""))
    lines += [(f"  {k}", v) for k, v in inj.items()]
    lines.append(("wall time of the chaos run", f"{r['run_wall_s']} s"))
    width = max(len(k) for k, _ in lines) + 2
    out = [f"chaos run {r['run_id']} ({r['date']}): {r['run_status']}"]
    out += [f"{k:<{width}}{v}" for k, v in lines]
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/chaos.py", description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pack-size", type=int, default=10)
    parser.add_argument("--max-concurrent-packs", type=int, default=8)
    parser.add_argument(
        "--client-timeout",
        type=float,
        default=15.0,
        help="the workers' anthropic timeout (s); a simulated hang exceeds it",
    )
    parser.add_argument(
        "--min-gap",
        type=float,
        default=4.0,
        help="seconds of undisturbed running between two events",
    )
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument(
        "--outage-s",
        type=float,
        default=180.0,
        help="an outage of this many seconds (every call 503) mid-run; 0: none",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario value, e.g. --set faults.truncate=0.1",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the stack's directory")
    parser.add_argument(
        "--stream",
        action="store_true",
        help="the stream scenario: rows put into a stream while workers are "
        "SIGKILLed and the producer dies and restarts (no outage, no "
        "fault-free reference); saved to bench/results/chaos_stream.json",
    )
    args = parser.parse_args(argv)
    if args.stream and args.out == RESULTS:
        args.out = RESULTS.with_name("chaos_stream.json")
    scenario = json.loads(json.dumps(DEFAULT_SCENARIO))
    for item in args.set:
        key, _, value = item.partition("=")
        node = scenario
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = json.loads(value)
    args.scenario = scenario
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The driver's pool complains while Postgres is down on purpose; the workers' logs
    # (under the stack's logs/ with --keep) are where to look.
    logging.getLogger("asyncpg.pool").setLevel(logging.CRITICAL)
    if args.stream:
        result = asyncio.run(run_stream_chaos(args))
        problems = violations(result)
        problems += [
            f"{result[k]} rows {what}"
            for k, what in (
                ("results_missing", "never yielded a result"),
                ("results_twice", "yielded twice"),
            )
            if result[k]
        ]
        result["violations"] = problems
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print("\n" + stream_table(result) + f"\n\nsaved to {args.out}")
        for problem in problems:
            print(f"VIOLATION: {problem}")
        return 1 if problems else 0
    result = asyncio.run(run_chaos(args))
    problems = violations(result)
    if not result["finished"]:
        problems.insert(0, f"the run did not finish within {args.timeout:.0f}s")
    result["violations"] = problems
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print()
    print(table(result))
    print(f"\nsaved to {args.out}")
    for problem in problems:
        print(f"VIOLATION: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    exit_process(main())
