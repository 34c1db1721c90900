"""The start of a run: from the workflow's start to the last pack's call, against one round trip.

Sending pack 0 alone so that its call writes the prompt cache, and only then the others,
would serialise the start by a whole pack call at realistic latency. Instead a warm-up call
(purpose ``warm_up`` in the ledger) writes the cache and every pack starts when it answers. The ideal is therefore: **the last pack call starts when the
warm-up's answer arrives**. This script measures how far from that a run is.

One run of ``--blocks`` blocks (default 200) with ``samples/extract.json``, ``--pack-size``
blocks per pack (default 10: 20 packs) and ``max_concurrent_packs`` at its default (32, at
least the packs), ``--repeat`` times on one stack; the simulator at realistic latency (500
ms to the first token, 12 ms per output token) with limits far above what the run uses (so
the limiter never holds a call back); two ``worker.py`` subprocesses. Each run starts with a
cold prompt cache and full buckets. Times are the database's clock (the Temporal dev server
runs on the same machine, so its workflow start time is on the same clock):

* ``start``: the RunWorkflow's start time (Temporal), and the run row's ``created_at``;
* the warm-up's ledger row opened (``llm_calls.started_at``), its request sent
  (``finished_at - latency_ms``) and its answer recorded (``finished_at``);
* each pack call's ledger row opened and its request sent; the last of these.

One round trip is the warm-up's own duration (``latency_ms``). The excess is the last pack
request's send time minus the warm-up's answer, in seconds and in round trips.

    flock /tmp/blockbatch-bench.lock .venv/bin/python bench/startup.py
    .venv/bin/python bench/startup.py --blocks 40 --pack-size 10 --repeat 1 --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BenchStack,
    Recorder,
    common_args,
    handbook_document,
    new_pool,
    run_main,
    run_once,
    sample_schema,
)
from blockbatch.core.run_types import RunOptions
from blockbatch.runtime.process import exit_process


async def timeline(pool: Any, run_id: str) -> dict[str, Any]:
    """The run's start, its warm-up and its pack calls as epoch seconds (database clock)."""
    run = await pool.fetchrow(
        """select extract(epoch from created_at)::float8 as created_at,
                  extract(epoch from started_at)::float8 as planned_at,
                  extract(epoch from finished_at)::float8 as finished_at, pack_count
           from runs where run_id = $1""",
        run_id,
    )
    calls = await pool.fetch(
        """select purpose, pack_path, pack_attempt, status, latency_ms,
                  extract(epoch from started_at)::float8 as opened_at,
                  extract(epoch from finished_at)::float8 as finished_at,
                  extract(epoch from finished_at)::float8 - latency_ms / 1000.0 as sent_at
           from llm_calls where run_id = $1 order by started_at""",
        run_id,
    )
    warm = [c for c in calls if c["purpose"] == "warm_up"]
    packs = [
        c
        for c in calls
        if c["purpose"] == "pack" and c["pack_attempt"] == 1 and "." not in c["pack_path"]
    ]  # first attempts of the planned packs
    return {
        "run": dict(run),
        "warm_up": [dict(c) for c in warm],
        "packs": [dict(c) for c in packs],
        "calls": len(calls),
    }


async def pack_workflows(bs: BenchStack, run_id: str, packs: int) -> list[dict[str, float | None]]:
    """Each planned pack's workflow start and its first activity's scheduling (Temporal)."""
    from temporalio.api.enums.v1 import EventType

    out = []
    for index in range(packs):
        handle = bs.bb.client.get_workflow_handle(f"run-{run_id}/pack-{index}")
        desc = await handle.describe()
        scheduled = None
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled = event.event_time.ToDatetime().timestamp()
                break
        out.append(
            {
                "index": index,
                "started_at": desc.start_time.timestamp(),
                "activity_scheduled_at": scheduled,
            }
        )
    return out


def measure(t: dict[str, Any], workflow_start: float) -> dict[str, Any]:
    """Offsets from the workflow's start (s), the round trip and the excess."""
    run, warm, packs = t["run"], t["warm_up"], t["packs"]
    out: dict[str, Any] = {
        "packs": len(packs),
        "pack_count": run["pack_count"],
        "calls": t["calls"],
    }

    def rel(x: float | None) -> float | None:
        return None if x is None else round(x - workflow_start, 3)

    out["run_row_created_s"] = rel(run["created_at"])
    out["planned_s"] = rel(run["planned_at"])
    if not warm or not packs:
        out["note"] = "no warm-up call" if not warm else "no pack call"
        return out
    w = warm[0]
    sent = sorted(p["sent_at"] for p in packs if p["sent_at"] is not None)
    opened = sorted(p["opened_at"] for p in packs)
    round_trip = w["latency_ms"] / 1000.0
    out.update(
        {
            "warm_up_opened_s": rel(w["opened_at"]),
            "warm_up_sent_s": rel(w["sent_at"]),
            "warm_up_answered_s": rel(w["finished_at"]),
            "round_trip_s": round_trip,
            "first_pack_opened_s": rel(opened[0]),
            "last_pack_opened_s": rel(opened[-1]),
            "first_pack_sent_s": rel(sent[0]),
            "last_pack_sent_s": rel(sent[-1]),
            "median_pack_sent_s": rel(statistics.median(sent)),
            "pack_call_s_mean": round(statistics.mean(p["latency_ms"] for p in packs) / 1000, 3),
        }
    )
    children = t.get("pack_workflows") or []
    if children:
        starts = sorted(c["started_at"] for c in children)
        scheduled = sorted(
            c["activity_scheduled_at"] for c in children if c["activity_scheduled_at"] is not None
        )
        out.update(
            {
                "first_pack_workflow_s": rel(starts[0]),
                "last_pack_workflow_s": rel(starts[-1]),
                "last_call_scheduled_s": rel(scheduled[-1]) if scheduled else None,
            }
        )
    excess = sent[-1] - w["finished_at"]
    out["excess_s"] = round(excess, 3)
    out["excess_round_trips"] = round(excess / round_trip, 2) if round_trip else None
    out["spread_s"] = round(sent[-1] - sent[0], 3)
    return out


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("startup", args)
    limits = {"rpm": args.rpm, "output_tpm": args.otpm, "input_tpm": args.itpm}
    scenario = {
        "speed_factor": 1.0,
        "latency": {"ttft_ms": args.ttft_ms, "per_output_token_ms": args.per_token_ms},
        "limits": limits,
    }
    results: list[dict[str, Any]] = []
    async with BenchStack(
        "startup",
        fsync=args.fsync,
        temporal_file=args.temporal_file,
        scenario=scenario,
        keep=args.keep,
    ) as bs:
        rec.data["stack"] = bs.describe()
        rec.data["stack"]["workers"] = f"{args.workers} worker.py subprocess(es), defaults"
        rec.data["scenario"] = scenario
        pool = await new_pool(bs, 5)
        try:
            await bs.start_workers(args.workers)
            schema_id = await bs.bb.add_schema(sample_schema("extract"))
            document_id = await bs.bb.ingest_bytes(
                handbook_document(args.blocks), name=f"handbook-{args.blocks}.md", fmt="markdown"
            )
            # Reuse off: every repeat sends every block (the repeats measure the pipeline).
            options = RunOptions(pack_size=args.pack_size, reuse_answers=False)
            if args.max_concurrent_packs:
                options = options.model_copy(
                    update={"max_concurrent_packs": args.max_concurrent_packs}
                )
            for i in range(args.repeat):
                bs.sim_reset()  # a cold prompt cache and full buckets for every run
                timed = await run_once(
                    bs, document_id, schema_id, options, timeout_s=args.run_timeout
                )
                desc = await bs.bb.handle(timed.run_id).describe()
                t = await timeline(pool, timed.run_id)
                t["pack_workflows"] = await pack_workflows(bs, timed.run_id, t["run"]["pack_count"])
                m = measure(t, desc.start_time.timestamp())
                m.update(
                    {
                        "run_id": timed.run_id,
                        "status": timed.result.status,
                        "wall_s": round(timed.wall_s, 2),
                        "max_concurrent_packs": options.max_concurrent_packs,
                        "timeline": t,
                    }
                )
                results.append(m)
                print(
                    f"run {i + 1}: {timed.result.status}, {m.get('packs')} packs; last pack "
                    f"sent {m.get('last_pack_sent_s')} s after the start, warm-up answered "
                    f"at {m.get('warm_up_answered_s')} s; excess {m.get('excess_s')} s = "
                    f"{m.get('excess_round_trips')} round trips",
                    flush=True,
                )
        finally:
            await pool.close()
    rec.data["runs"] = results
    ok = [r for r in results if "excess_s" in r]
    rows = [
        [
            i + 1,
            r["packs"],
            *(
                f"{r[k]:.2f}"
                for k in (
                    "run_row_created_s",
                    "warm_up_sent_s",
                    "round_trip_s",
                    "warm_up_answered_s",
                    "first_pack_sent_s",
                    "last_pack_sent_s",
                    "excess_s",
                    "excess_round_trips",
                )
            ),
            f"{r['pack_call_s_mean']:.1f}",
            f"{r['wall_s']:.1f}",
        ]
        for i, r in enumerate(ok)
    ]
    if ok:
        med = {
            k: statistics.median(r[k] for r in ok)
            for k in ("excess_s", "excess_round_trips", "round_trip_s")
        }
        rec.data["median"] = med
    rec.print_table(
        f"The start of a run: {args.blocks} blocks in packs of {args.pack_size}, "
        f"max_concurrent_packs {options.max_concurrent_packs}; latency {args.ttft_ms} ms + "
        f"{args.per_token_ms} ms/token, limits not binding; seconds from the workflow start",
        [
            "run",
            "packs",
            "run row",
            "warm-up sent",
            "round trip",
            "warm-up answered",
            "first pack sent",
            "last pack sent",
            "excess s",
            "excess / round trip",
            "pack call s",
            "wall s",
        ],
        rows,
        [
            (
                "ideal: last pack sent = warm-up answered (excess 0); goal: excess within one "
                "round trip (the warm-up's own duration). Sent = ledger finished_at - latency_ms."
            )
        ],
    )
    stage_rows = [
        [
            i + 1,
            *(
                f"{r[k]:.2f}" if r.get(k) is not None else "-"
                for k in (
                    "warm_up_answered_s",
                    "first_pack_workflow_s",
                    "last_pack_workflow_s",
                    "last_call_scheduled_s",
                    "last_pack_opened_s",
                    "last_pack_sent_s",
                )
            ),
        ]
        for i, r in enumerate(ok)
    ]
    rec.print_table(
        "Where the start goes: seconds from the workflow start",
        [
            "run",
            "warm-up answered",
            "first pack workflow started",
            "last pack workflow started",
            "last call_model scheduled",
            "last ledger row opened",
            "last pack sent",
        ],
        stage_rows,
        [
            (
                "pack workflow started: Temporal's start time of the child; call_model scheduled: "
                "its history's ActivityTaskScheduled; ledger row opened: the activity has read "
                "the pack and is about to ask the fleet limiter."
            )
        ],
    )
    rec.write()
    return 0 if all(r["status"] == "completed" for r in results) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=200)
    parser.add_argument("--pack-size", type=int, default=10)
    parser.add_argument(
        "--max-concurrent-packs", type=int, default=None, help="default: RunOptions' default"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rpm", type=int, default=1_000_000)
    parser.add_argument("--otpm", type=int, default=100_000_000)
    parser.add_argument("--itpm", type=int, default=400_000_000)
    parser.add_argument("--ttft-ms", type=int, default=500)
    parser.add_argument("--per-token-ms", type=float, default=12.0)
    parser.add_argument("--workers", type=int, default=2, help="worker.py subprocesses")
    parser.add_argument("--run-timeout", type=float, default=600.0)
    common_args(parser, "startup")
    return parser.parse_args(argv)


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
