"""Scale: a 100,000-block run completes, and no workflow nears Temporal's limits.

At zero model latency, one run over ``--blocks`` blocks with ``samples/extract.json``:
distinct blocks by default (:func:`distinct_document`: every block is asked), or the sample
handbook repeated (``--document handbook``: a run asks each distinct block once and its
copies take the answer, so few calls are made), on ``worker.py`` subprocesses. Reported: wall time (ingest,
run, history inspection), the largest history of any workflow of the run (events and
bytes; every ProcessPack listed by ``BlockbatchRunId`` and every run of RunWorkflow's
continue-as-new chain, fetched with ``fetch_history``), the most children pending at once,
peak RSS of each worker and of the Temporal server, and the rows written to Postgres.
Temporal warns at 10,240 events or 10 MB of history and at 2,000 pending children.

    .venv/bin/python bench/scale.py                              # 100,000 blocks
    .venv/bin/python bench/scale.py --blocks 2000 --packs-per-history 20 --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import Client

from bench.common import (
    BenchStack,
    Recorder,
    common_args,
    cpu_delta,
    handbook_document,
    ledger_figures,
    new_pool,
    proc_status,
    run_main,
    sample_schema,
)
from blockbatch.cli import amain
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.core.workflow_names import run_workflow_id
from blockbatch.runtime.process import exit_process
from blockbatch.store import reads as reads_module

WARN_EVENTS = 10_240
WARN_BYTES = 10 * 1024 * 1024
WARN_PENDING_CHILDREN = 2_000

_CHILD_OPENED = {EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED}
_CHILD_CLOSED = {
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED,
}


def distinct_document(n_blocks: int) -> bytes:
    """A Markdown document of exactly ``n_blocks`` blocks, no two alike (a heading every
    twelfth block, paragraphs of about 200 bytes between), so a run asks every block.

    Written into one buffer as it is made: the benchmark holds the document's bytes, not a
    list of a million strings besides (that list, not the ingest, set the peak before)."""
    out = io.BytesIO()
    for i in range(n_blocks):
        if i:
            out.write(b"\n\n")
        if i % 12 == 0:
            out.write(f"## Section {i // 12 + 1}: paging and escalation".encode())
        else:
            out.write(
                f"Rule {i}. The on-call engineer acknowledges every severity-{i % 4 + 1} page "
                f"within {i % 13 + 2} minutes, writes what was seen in the incident channel "
                f"and hands the pager to the secondary when unable to respond.".encode()
            )
    out.write(b"\n")
    return out.getvalue()


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux ``clear_refs``
    value 5), so the next peak read is of what follows; ``False`` where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


async def history_of(client: Client, workflow_id: str, run_id: str | None) -> dict[str, Any]:
    """Events, bytes (serialized History proto), most pending children, previous CAN run."""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    pending = peak = 0
    for event in history.events:
        if event.event_type in _CHILD_OPENED:
            pending += 1
            peak = max(peak, pending)
        elif event.event_type in _CHILD_CLOSED:
            pending -= 1
    first = history.events[0].workflow_execution_started_event_attributes
    return {
        "workflow_id": workflow_id,
        "run_id": history.run_id,
        "events": len(history.events),
        "bytes": History(events=history.events).ByteSize(),
        "max_pending_children": peak,
        "continued_from": first.continued_execution_run_id or None,
    }


async def inspect_histories(bs: BenchStack, run_id: str, parallel: int) -> dict[str, Any]:
    client = bs.bb.client
    # RunWorkflow's continue-as-new chain, newest run first, followed back to the first.
    chain: list[dict[str, Any]] = []
    wf_id, wf_run = run_workflow_id(run_id), None
    while True:
        h = await history_of(client, wf_id, wf_run)
        chain.append(h)
        if not h["continued_from"]:
            break
        wf_run = h["continued_from"]
    chain.reverse()
    # Every workflow tagged with the run (packs; the run's own executions are skipped here).
    listed = [
        (w.id, w.run_id) async for w in client.list_workflows(f'BlockbatchRunId = "{run_id}"')
    ]
    packs = [(i, r) for i, r in listed if i != wf_id]
    sem = asyncio.Semaphore(parallel)

    async def one(workflow_id: str, rid: str) -> dict[str, Any]:
        async with sem:
            return await history_of(client, workflow_id, rid)

    pack_histories = await asyncio.gather(*(one(i, r) for i, r in packs))
    every = chain + list(pack_histories)
    largest_events = max(every, key=lambda h: h["events"])
    largest_bytes = max(every, key=lambda h: h["bytes"])
    return {
        "run_workflow_chain": [
            {k: v for k, v in h.items() if k != "continued_from"} for h in chain
        ],
        "workflows_listed": len(listed),
        "pack_workflows_inspected": len(pack_histories),
        "largest_events": {k: largest_events[k] for k in ("workflow_id", "events", "bytes")},
        "largest_bytes": {k: largest_bytes[k] for k in ("workflow_id", "events", "bytes")},
        "largest_pack_events": max((h["events"] for h in pack_histories), default=0),
        "largest_pack_bytes": max((h["bytes"] for h in pack_histories), default=0),
        "max_pending_children": max(h["max_pending_children"] for h in every),
    }


async def postgres_rows(pool: Any) -> dict[str, Any]:
    """Rows now in each table (exact), plus inserts/updates as pg_stat_user_tables saw them."""
    tables = await pool.fetch(
        """select relname, n_tup_ins, n_tup_upd, n_tup_del
           from pg_stat_user_tables order by relname"""
    )
    per_table: dict[str, dict[str, int]] = {}
    for t in tables:
        rows = await pool.fetchval(f'select count(*) from "{t["relname"]}"')
        per_table[t["relname"]] = {
            "rows": rows,
            "inserted": t["n_tup_ins"],
            "updated": t["n_tup_upd"],
            "deleted": t["n_tup_del"],
        }
    size = await pool.fetchval("select pg_database_size(current_database())")
    return {
        "rows": sum(t["rows"] for t in per_table.values()),
        "updated": sum(t["updated"] for t in per_table.values()),
        "database_bytes": size,
        "per_table": per_table,
    }


async def status_command(settings: Any, run_id: str) -> float:
    """Seconds the whole ``blockbatch status RUN`` command takes in this process (its
    output discarded); what a user waits for, less the interpreter's start."""
    t = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        await amain(["status", run_id], settings=settings)
    return time.monotonic() - t


def spread(values: list[float]) -> dict[str, Any]:
    """How many, median and max of timed reads (seconds)."""
    return {
        "reads": len(values),
        "median": round(statistics.median(values), 4) if values else None,
        "max": round(max(values), 4) if values else None,
    }


def spread_text(values: list[float]) -> str:
    if not values:
        return "not read (the run ended first)"
    return (
        f"median {statistics.median(values) * 1000:,.0f} ms, max "
        f"{max(values) * 1000:,.0f} ms over {len(values)} reads"
    )


#: Counting a run's overlays per status, as ``get_run`` did before migration 034.
_COUNTED_SQL = "select status, count(*) from overlays where run_id = $1 group by status"


async def seeded_status_reads(
    pool: asyncpg.Pool, document_id: str, schema_id: str, reads: int = 20
) -> dict[str, Any]:
    """A run over the ingested blocks made in SQL (no model call: half answered, half
    pending), then what ``status`` reads of it (``get_run``), timed, next to counting its
    overlays as before migration 034."""
    run_id = "seeded-run"
    async with pool.acquire() as conn:
        await conn.execute(
            """insert into runs (run_id, document_id, schema_id, model, status)
               values ($1, $2, $3, 'claude-haiku-4-5', 'running')""",
            run_id,
            document_id,
            schema_id,
        )
        t = time.monotonic()
        await conn.execute(
            """insert into overlays (run_id, block_uid, block_index, pack_index, status)
               select $1, block_uid, block_index, block_index / 50,
                      case when block_index % 2 = 0 then 'ai_complete' else 'pending' end
               from blocks where document_id = $2""",
            run_id,
            document_id,
        )
        seeded_s = time.monotonic() - t
        await conn.execute("analyze overlays")
    timed: dict[str, list[float]] = {"get_run": [], "counted": []}
    for _ in range(reads):
        t = time.monotonic()
        await reads_module.get_run(pool, run_id)
        timed["get_run"].append(time.monotonic() - t)
    for _ in range(max(3, reads // 4)):
        t = time.monotonic()
        await pool.fetch(_COUNTED_SQL, run_id)
        timed["counted"].append(time.monotonic() - t)
    out = {
        name: {
            "median_ms": round(statistics.median(v) * 1000, 2),
            "max_ms": round(max(v) * 1000, 2),
        }
        for name, v in timed.items()
    }
    print(
        f"seeded run: overlays inserted in {seeded_s:.1f}s; status (get_run) median "
        f"{out['get_run']['median_ms']} ms, max {out['get_run']['max_ms']} ms; counting the "
        f"overlays (before 034) median {out['counted']['median_ms']} ms",
        flush=True,
    )
    return {"overlays_seeded_s": round(seeded_s, 1), **out}


async def follow_run(
    bs: BenchStack, run_id: str, every: float, t1: float
) -> tuple[RunResult, list[float], list[float], list[float]]:
    """Wait for the run's end, printing its progress every ``every`` seconds; return its
    result, the seconds each status read (``get_run``) took, the seconds each whole
    ``status`` command took and the seconds each answered progress query took.

    The wait is a task of its own (the progress is read beside it). However this ends
    (Ctrl-C cancels it), that task is cancelled and awaited before the stack it waits on
    is stopped: left pending, it failed once Temporal was gone, retrying (warnings) and then
    printing "Task exception was never retrieved" as the benchmark exited.
    """
    waiter = asyncio.ensure_future(bs.bb.wait(run_id))
    status_s: list[float] = []
    command_s: list[float] = []
    query_s: list[float] = []
    try:
        while not waiter.done():
            await asyncio.wait([waiter], timeout=every)
            if not waiter.done():
                # What `blockbatch status` reads first (store/reads.py get_run), timed.
                t_status = time.monotonic()
                await bs.bb.run(run_id)
                status_s.append(time.monotonic() - t_status)
                # The whole `blockbatch status RUN` command, in this process (its own
                # connections, every read it makes, the live progress query).
                command_s.append(await status_command(bs.settings, run_id))
                try:
                    t_query = time.monotonic()
                    p = await bs.bb.progress(run_id)
                    query_s.append(time.monotonic() - t_query)
                    print(
                        f"  {time.monotonic() - t1:6.0f}s  {p.blocks_done:,}/"
                        f"{p.blocks_total:,} blocks, packs {p.packs_done}/{p.packs_total}",
                        flush=True,
                    )
                except Exception as exc:  # noqa: BLE001 - progress is best effort
                    print(f"  progress unavailable: {exc}", flush=True)
        return waiter.result(), status_s, command_s, query_s
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("scale", args)
    async with BenchStack(
        "scale",
        fsync=args.fsync,
        temporal_file=args.temporal_file,
        scenario={"speed_factor": 0.0},
        keep=args.keep,
    ) as bs:
        rec.data["stack"] = bs.describe()
        rec.data["stack"]["workers"] = f"{args.workers} worker.py subprocess(es), defaults"
        pool = await new_pool(bs, 5)
        try:
            if not args.ingest_only:
                await bs.start_workers(args.workers)
            schema_id = await bs.bb.add_schema(sample_schema("extract"))
            doc = (
                distinct_document(args.blocks)
                if args.document == "distinct"
                else handbook_document(args.blocks)
            )
            # The ingest alone: this process's peak RSS from here (the document's bytes
            # count: the ingesting process holds them), its CPU and Postgres'.
            held_rss = proc_status(os.getpid()).get("VmRSS", 0)
            peak_reset = reset_peak_rss()
            cpu0 = bs.cpu_snapshot()
            t0 = time.monotonic()
            document_id = await bs.bb.ingest_bytes(
                doc, name=f"handbook-{args.blocks}.md", fmt="markdown"
            )
            ingest_s = time.monotonic() - t0
            ingest_cpu = cpu_delta(cpu0, bs.cpu_snapshot())
            ingest_rss = (
                proc_status(os.getpid()).get("VmHWM", 0)
                if peak_reset
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            )
            load = os.getloadavg()[0]
            print(
                f"ingested {args.blocks:,} blocks ({len(doc) / 1e6:.1f} MB) in {ingest_s:.1f}s "
                f"(CPU: this process {ingest_cpu['bench_process']:.1f}s, Postgres "
                f"{ingest_cpu.get('postgres', 0):.1f}s; load average {load:.1f}), peak RSS "
                f"{ingest_rss / 2**20:,.0f} MiB ({held_rss / 2**20:,.0f} MiB before, "
                "the document's bytes included)",
                flush=True,
            )
            ingest = {
                "ingest_s": round(ingest_s, 1),
                "ingest_cpu_s": ingest_cpu,
                "ingest_peak_rss_bytes": ingest_rss,
                "rss_before_ingest_bytes": held_rss,
                "peak_rss_reset": peak_reset,
                "document_bytes": len(doc),
                "load_average_after_ingest": round(load, 1),
            }
            del doc
            if args.ingest_only:
                rec.data.update(blocks=args.blocks, **ingest)
                try:
                    rec.data["status_reads"] = await seeded_status_reads(
                        pool, document_id, schema_id
                    )
                except (TimeoutError, asyncpg.PostgresError) as exc:
                    # The ingest's figures stand without it (a million overlays seeded in
                    # one statement outlasted the pool's timeout at load 10-27).
                    rec.data["status_reads"] = {"error": f"{type(exc).__name__}: {exc}"}
                    print(f"seeded status reads not taken: {rec.data['status_reads']}")
                rec.write()
                return 0
            before = bs.cpu_snapshot()
            t1 = time.monotonic()
            run_id = await bs.bb.start_run(
                document_id,
                schema_id,
                RunOptions(max_concurrent_packs=args.concurrency),
                packs_per_history=args.packs_per_history,
            )
            print(f"run {run_id} started", flush=True)
            result, status_s, command_s, query_s = await follow_run(
                bs, run_id, args.progress_every, t1
            )
            run_s = time.monotonic() - t1
            cpu = cpu_delta(before, bs.cpu_snapshot())
            temporal_rss = proc_status(bs.temporal_pid).get("VmHWM", 0)
            await bs.stop_workers()  # their Postgres statistics are flushed on exit
            worker_rss = [w.peak_rss for w in bs.workers]
            figures = await ledger_figures(pool, run_id)
            t2 = time.monotonic()
            histories = await inspect_histories(bs, run_id, args.history_parallelism)
            history_s = time.monotonic() - t2
            rows = await postgres_rows(pool)
        finally:
            await pool.close()

    chain = histories["run_workflow_chain"]
    limits_ok = (
        max(histories["largest_events"]["events"], 0) < WARN_EVENTS
        and histories["largest_bytes"]["bytes"] < WARN_BYTES
        and histories["max_pending_children"] < WARN_PENDING_CHILDREN
    )
    rec.data.update(
        run_id=run_id,
        status=result.status,
        blocks=args.blocks,
        document=args.document,
        blocks_ok=figures["blocks"].get("ai_complete", 0),
        packs=figures["pack_count"],
        calls=figures["calls_ok"],
        split_events=figures["split_events"],
        **ingest,
        status_s=spread(status_s),
        status_command_s=spread(command_s),
        progress_query_s=spread(query_s),
        run_wall_s=round(run_s, 1),
        history_inspection_s=round(history_s, 1),
        blocks_per_s=args.blocks / run_s,
        packs_per_s=figures["pack_count"] / run_s,
        histories=histories,
        worker_peak_rss_bytes=worker_rss,
        temporal_peak_rss_bytes=temporal_rss,
        postgres=rows,
        cpu_s=cpu,
        under_temporal_warning_thresholds=limits_ok,
        thresholds={
            "events": WARN_EVENTS,
            "bytes": WARN_BYTES,
            "pending_children": WARN_PENDING_CHILDREN,
        },
    )
    mib = 1024 * 1024
    rows_out = [
        [
            "run",
            (
                f"{result.status}: {rec.data['blocks_ok']:,}/{args.blocks:,} blocks ok, "
                f"{figures['pack_count']:,} packs, {figures['calls_ok']:,} calls, "
                f"{figures['split_events']} splits"
            ),
        ],
        [
            "wall time",
            (
                f"ingest {ingest_s:.0f} s, run {run_s:.0f} s ({run_s / 60:.1f} min; "
                f"{args.blocks / run_s:.0f} blocks/s, "
                f"{figures['pack_count'] / run_s:.1f} packs/s)"
            ),
        ],
        ["ingest peak RSS (this process)", f"{ingest_rss / mib:,.0f} MiB"],
        ["status read during the run (get_run)", spread_text(status_s)],
        ["`status RUN` during the run (the command)", spread_text(command_s)],
        ["the live progress query (answered ones; 5 s deadline)", spread_text(query_s)],
        [
            "RunWorkflow chain",
            (
                f"{len(chain)} runs (continue-as-new every "
                f"{args.packs_per_history} packs); largest "
                f"{max(h['events'] for h in chain):,} events / "
                f"{max(h['bytes'] for h in chain) / 1024:,.0f} KiB"
            ),
        ],
        [
            "largest history",
            (
                f"{histories['largest_events']['events']:,} events "
                f"({histories['largest_events']['workflow_id']}); "
                f"{histories['largest_bytes']['bytes'] / 1024:,.0f} KiB "
                f"({histories['largest_bytes']['workflow_id']})"
            ),
        ],
        [
            "largest ProcessPack history",
            (
                f"{histories['largest_pack_events']:,} events / "
                f"{histories['largest_pack_bytes'] / 1024:,.1f} KiB "
                f"({histories['pack_workflows_inspected']:,} inspected)"
            ),
        ],
        ["most pending children", f"{histories['max_pending_children']:,}"],
        [
            "under Temporal's warnings",
            (f"{'yes' if limits_ok else 'NO'} (10,240 events, 10 MB, 2,000 pending children)"),
        ],
        ["worker peak RSS", ", ".join(f"{r / mib:,.0f} MiB" for r in worker_rss)],
        ["Temporal server peak RSS", f"{temporal_rss / mib:,.0f} MiB"],
        [
            "Postgres rows written",
            f"{rows['rows']:,} rows ("
            + ", ".join(f"{k} {v['rows']:,}" for k, v in rows["per_table"].items() if v["rows"])
            + f"), {rows['updated']:,} row updates; database {rows['database_bytes'] / mib:,.0f}"
            " MiB",
        ],
        ["CPU s", ", ".join(f"{k} {v:.0f}" for k, v in cpu.items())],
    ]
    rec.print_table(
        f"Scale: {args.blocks:,} blocks, zero model latency, {args.workers} "
        f"worker process(es), concurrency {args.concurrency}",
        ["figure", "value"],
        rows_out,
    )
    rec.write()
    return 0 if result.status == "completed" and limits_ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2, help="worker.py subprocesses")
    parser.add_argument(
        "--document",
        choices=("distinct", "handbook"),
        default="distinct",
        help="distinct blocks (every block asked) or the handbook repeated (copies follow)",
    )
    parser.add_argument(
        "--packs-per-history",
        type=int,
        default=400,
        help="RunWorkflow continues as new every this many packs",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=RunOptions().max_concurrent_packs,
        help="max_concurrent_packs (default: the RunOptions default)",
    )
    parser.add_argument("--progress-every", type=float, default=30.0)
    parser.add_argument(
        "--ingest-only",
        action="store_true",
        help="ingest, then time status on a run seeded in SQL over the blocks; no model run",
    )
    parser.add_argument("--history-parallelism", type=int, default=16)
    common_args(parser, "scale")
    return parser.parse_args(argv)


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
