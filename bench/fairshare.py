"""Fair shares: runs of different sizes started together, each against its fair-share bound.

Three runs (``--sizes``, default 100, 1,000 and 5,000 blocks of the handbook, each its own
document, all with ``samples/extract.json`` and default ``RunOptions``) are started at the
same moment on one stack: two ``worker.py`` subprocesses, the simulator at realistic speed
(500 ms to the first token plus 12 ms per output token) with the limits of
``bench/ratelimits.py`` (500 requests, 450,000 input and 90,000 output tokens per minute,
token buckets full at the start). The runs share one API key, so one fleet limiter, whose
fair turn lets the run served least in the last minute (per its weight) go first while
several wait.

**The fair-share bound.** Each limit (requests, uncached input tokens, output tokens per
minute) is a token bucket of size ``L`` that starts full and refills at ``L`` per minute:
by minute ``t`` it has supplied ``S(t) = L * (1 + t)``. Shared fairly, whatever has been
supplied is split equally among the runs that still need some of it, and a run that has
what it needs leaves its share to the others (water-filling, processor sharing). With the
runs' actual needs ``d_1 <= d_2 <= ... <= d_n`` (from the ledger: answered calls, output
tokens, uncached input = input + cache writes), run ``j`` has all it needs once
``sum_m min(d_m, d_j)`` has been supplied, at minute ``max(0, sum_m min(d_m, d_j) / L - 1)``.
Its last call starts then at the earliest and takes at least the run's fastest pack call.
A run also cannot be shorter than its warm-up call followed by its slowest pack call (every
pack waits for the warm-up, and a call cannot be split). The bound of a run is the largest of
these terms (three limits and the critical path), all runs counted from the same start.
Like ``bench/ratelimits.py``'s bound it ignores that a call holds its whole ``max_tokens``
of output while it runs; the simulator (like the API) does hold it.

Reported per run: wall time (``start_run`` to its result), bound, ratio, 429s (ledger),
calls, and the runs' shares of the calls the fleet admitted per 10 s window
(``rate_reservations.created_at``), which shows whether any run starves. The limiter's view
(waiting runs, shares, levels) is sampled every 2 s into the JSON.

    flock /tmp/blockbatch-bench.lock .venv/bin/python bench/fairshare.py
    .venv/bin/python bench/fairshare.py --sizes 20 60 --out /tmp/fairshare.json   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BenchStack,
    Recorder,
    common_args,
    handbook_document,
    ledger_figures,
    new_pool,
    run_main,
    sample_schema,
)
from blockbatch.core.run_types import RunOptions
from blockbatch.runtime.process import exit_process
from blockbatch.store import ratelimits

WINDOW_S = 10.0
KIND_LIMIT = {"requests": "rpm", "input": "itpm", "output": "otpm"}


def water_fill_min(needs: dict[str, int], limit: int) -> dict[str, float]:
    """Minutes until each run has its ``needs`` from a full bucket shared equally."""
    out = {}
    for run, need in needs.items():
        supplied = sum(min(other, need) for other in needs.values())
        out[run] = max(0.0, supplied / limit - 1) if limit else 0.0
    return out


def fair_bounds(runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, dict]:
    """Each run's bound terms in seconds (see the module docstring)."""
    needs = {
        "requests": {r["run_id"]: r["calls"] for r in runs},
        "output": {r["run_id"]: r["output_tokens"] for r in runs},
        "input": {r["run_id"]: r["uncached_input_tokens"] for r in runs},
    }
    terms: dict[str, dict[str, float]] = {r["run_id"]: {} for r in runs}
    for kind, by_run in needs.items():
        limit = getattr(args, KIND_LIMIT[kind])
        if not limit:
            continue
        for run_id, minutes in water_fill_min(by_run, limit).items():
            fastest = next(r["fastest_pack_s"] for r in runs if r["run_id"] == run_id)
            terms[run_id][kind] = minutes * 60 + fastest
    for r in runs:
        terms[r["run_id"]]["critical_path"] = r["warm_up_s"] + r["slowest_pack_s"]
    return terms


async def sample_limiter(pool: Any, samples: list[dict[str, Any]], t0: float) -> None:
    """The limiter's view every 2 s: who waits, shares in the last minute, levels."""
    while True:
        try:
            samples.extend(
                {
                    "t_s": round(time.monotonic() - t0, 1),
                    "waiting": view.waiting_runs,
                    "shares_last_min": view.shares,
                    "in_flight": view.in_flight,
                    "levels": view.levels,
                    "factor": view.factor,
                    "throttled": view.throttled,
                }
                for view in await ratelimits.views(pool)
            )
        except Exception as exc:  # noqa: BLE001 - a sample is best effort
            samples.append({"t_s": round(time.monotonic() - t0, 1), "error": repr(exc)})
        await asyncio.sleep(2.0)


async def timed_run(
    bs: BenchStack, run_id: str, started: float, timeout_s: float
) -> dict[str, Any]:
    result = await asyncio.wait_for(bs.bb.wait(run_id), timeout_s)
    return {"run_id": run_id, "status": result.status, "wall_s": time.monotonic() - started}


async def run_figures(pool: Any, run_id: str) -> dict[str, Any]:
    """Latencies and times of a run from the ledger and the runs row (database clock)."""
    return dict(
        await pool.fetchrow(
            """select
             max(latency_ms) filter (where purpose = 'pack' and status = 'succeeded')
                 / 1000.0 as slowest_pack_s,
             min(latency_ms) filter (where purpose = 'pack' and status = 'succeeded')
                 / 1000.0 as fastest_pack_s,
             avg(latency_ms) filter (where purpose = 'pack' and status = 'succeeded')
                 / 1000.0 as mean_pack_s,
             coalesce(max(latency_ms) filter (where purpose = 'warm_up'), 0) / 1000.0
                 as warm_up_s,
             extract(epoch from (select created_at from runs where run_id = $1))
                 as created_at,
             extract(epoch from (select finished_at from runs where run_id = $1))
                 as finished_at,
             extract(epoch from max(finished_at)) as last_answer_at,
             extract(epoch from max(applied_at)) as last_applied_at,
             avg(extract(epoch from applied_at - finished_at))
                 filter (where purpose = 'pack') as apply_lag_mean_s,
             max(extract(epoch from applied_at - finished_at))
                 filter (where purpose = 'pack') as apply_lag_max_s,
             (select extract(epoch from max(created_at)) from rate_reservations
               where run_id = $1) as last_admitted_at,
             (select extract(epoch from min(started_at)) from llm_calls
               where run_id = $1 and http_status = 429) as first_429_at
           from llm_calls where run_id = $1""",
            run_id,
        )
    )


async def share_windows(pool: Any, run_ids: list[str], t0: float) -> list[dict[str, Any]]:
    """Calls the fleet limiter admitted per run and per ``WINDOW_S`` (reservations)."""
    rows = await pool.fetch(
        """select floor((extract(epoch from created_at) - $2) / $3)::int as w, run_id,
                  count(*) as n, sum(output_tokens) as out_reserved
           from rate_reservations where run_id = any($1::text[])
           group by 1, 2 order by 1""",
        run_ids,
        t0,
        WINDOW_S,
    )
    windows: dict[int, dict[str, int]] = {}
    for r in rows:
        windows.setdefault(r["w"], {})[r["run_id"]] = int(r["n"])
    return [
        {"from_s": w * WINDOW_S, "admitted": {rid: by.get(rid, 0) for rid in run_ids}}
        for w, by in sorted(windows.items())
    ]


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("fairshare", args)
    limits = {"rpm": args.rpm, "output_tpm": args.otpm, "input_tpm": args.itpm}
    scenario = {
        "speed_factor": 1.0,
        "latency": {"ttft_ms": args.ttft_ms, "per_output_token_ms": args.per_token_ms},
        "limits": limits,
    }
    async with BenchStack(
        "fairshare",
        fsync=args.fsync,
        temporal_file=args.temporal_file,
        scenario=scenario,
        keep=args.keep,
    ) as bs:
        rec.data["stack"] = bs.describe()
        rec.data["stack"]["workers"] = f"{args.workers} worker.py subprocess(es), defaults"
        rec.data["scenario"] = scenario
        pool = await new_pool(bs, 5)
        samples: list[dict[str, Any]] = []
        try:
            await bs.start_workers(args.workers)
            schema_id = await bs.bb.add_schema(sample_schema("extract"))
            documents = {}
            for size in args.sizes:
                documents[size] = await bs.bb.ingest_bytes(
                    handbook_document(size), name=f"handbook-{size}.md", fmt="markdown"
                )
            bs.sim_reset()  # full buckets, cold cache
            t0 = time.monotonic()
            t0_db = float(await pool.fetchval("select extract(epoch from clock_timestamp())"))
            sampler = asyncio.create_task(sample_limiter(pool, samples, t0))
            # Started together: every start_run at once, each timed from its own call.
            starts = {size: time.monotonic() for size in args.sizes}
            run_ids = await asyncio.gather(
                *(
                    # Reuse off: the documents repeat the same handbook blocks.
                    bs.bb.start_run(documents[size], schema_id, RunOptions(reuse_answers=False))
                    for size in args.sizes
                )
            )
            by_size = dict(zip(args.sizes, run_ids, strict=True))
            print(
                "started " + ", ".join(f"{s} blocks: {r}" for s, r in by_size.items()), flush=True
            )
            done = await asyncio.gather(
                *(
                    timed_run(bs, by_size[size], starts[size], args.run_timeout)
                    for size in args.sizes
                )
            )
            sampler.cancel()
            stats = bs.sim_stats()
            runs = []
            for size, d in zip(args.sizes, done, strict=True):
                figures = await ledger_figures(pool, d["run_id"])
                times = await run_figures(pool, d["run_id"])
                runs.append(
                    {
                        "blocks": size,
                        **d,
                        "start_offset_s": round(float(times["created_at"]) - t0_db, 3),
                        "db_wall_s": round(
                            float(times["finished_at"]) - float(times["created_at"]), 3
                        ),
                        "blocks_ok": figures["blocks"].get("ai_complete", 0),
                        "calls": figures["calls_ok"],
                        "packs": figures["pack_count"],
                        "output_tokens": figures["output_tokens"],
                        "uncached_input_tokens": figures["input_tokens"]
                        + figures["cache_write_tokens"],
                        "ledger_429": figures["calls_429"],
                        "split_events": figures["split_events"],
                        "slowest_pack_s": float(times["slowest_pack_s"] or 0),
                        "fastest_pack_s": float(times["fastest_pack_s"] or 0),
                        "mean_pack_s": float(times["mean_pack_s"] or 0),
                        "warm_up_s": float(times["warm_up_s"] or 0),
                        "cost_usd": figures["cost_usd"],
                        # Where the time went, in seconds from the common start (database clock).
                        **{
                            f"{k}_s": (
                                round(float(times[f"{k}_at"]) - t0_db, 1)
                                if times[f"{k}_at"] is not None
                                else None
                            )
                            for k in (
                                "last_admitted",
                                "last_answer",
                                "last_applied",
                                "finished",
                                "first_429",
                            )
                        },
                        "apply_lag_mean_s": round(float(times["apply_lag_mean_s"] or 0), 2),
                        "apply_lag_max_s": round(float(times["apply_lag_max_s"] or 0), 2),
                    }
                )
            windows = await share_windows(pool, run_ids, t0_db)
            throttled = [
                {
                    "run_id": r["run_id"],
                    "at_s": round(float(r["at"]) - t0_db, 1),
                    "pack_path": r["pack_path"],
                    "message": r["error_message"],
                }
                for r in await pool.fetch(
                    """select run_id, pack_path, error_message,
                              extract(epoch from started_at) as at
                       from llm_calls where run_id = any($1::text[]) and http_status = 429
                       order by started_at""",
                    run_ids,
                )
            ]
        finally:
            await pool.close()
    terms = fair_bounds(runs, args)
    for r in runs:
        t = terms[r["run_id"]]
        r["bound_terms_s"] = {k: round(v, 2) for k, v in t.items()}
        r["bound_s"] = round(max(t.values()), 2)
        r["binding"] = max(t, key=lambda term: t[term])
        r["wall_over_bound"] = round(r["wall_s"] / r["bound_s"], 3)
        r["wall_s"] = round(r["wall_s"], 2)
    by_status = stats["requests"].get("POST /v1/messages", {})
    rec.data.update(
        {
            "runs": runs,
            "sim_requests": by_status,
            "responses_429_total": int(by_status.get("429", 0)),
            "share_windows": windows,
            "limiter_samples": samples,
            "ledger_429s": throttled,
        }
    )
    rows = [
        [
            f"{r['blocks']:,}",
            r["calls"],
            r["output_tokens"],
            f"{r['wall_s']:.1f}",
            f"{r['bound_s']:.1f}",
            r["binding"],
            f"{r['wall_over_bound']:.2f}",
            r["ledger_429"],
            f"{r['mean_pack_s']:.1f} / {r['slowest_pack_s']:.1f}",
            f"{r['blocks_ok']}/{r['blocks']}",
        ]
        for r in runs
    ]
    rec.print_table(
        f"Fair shares: runs of {', '.join(f'{s:,}' for s in args.sizes)} blocks started "
        f"together; rpm {args.rpm:,}, output {args.otpm:,}/min, input {args.itpm:,}/min; "
        f"latency {args.ttft_ms} ms + {args.per_token_ms} ms/token; {args.workers} workers",
        [
            "blocks",
            "calls",
            "output tokens",
            "wall s",
            "fair bound s",
            "binding",
            "wall / bound",
            "429s",
            "pack call s mean / max",
            "blocks ok",
        ],
        rows,
        [
            (
                f"429s in all (simulator): {rec.data['responses_429_total']}. fair bound = the "
                "largest of: per limit, the minute at which water-filling (the bucket, full at "
                "the start, refilled at the limit per minute, split equally among the runs still "
                "needing it) has supplied what the run used, plus its fastest pack call; and its "
                "warm-up plus its slowest pack call."
            )
        ],
    )
    rec.print_table(
        "Where each run's time went (seconds from the common start)",
        [
            "blocks",
            "last call admitted",
            "last answer",
            "last answer applied",
            "run finished",
            "answer -> applied mean / max",
            "first 429",
        ],
        [
            [
                f"{r['blocks']:,}",
                r["last_admitted_s"],
                r["last_answer_s"],
                r["last_applied_s"],
                r["finished_s"],
                f"{r['apply_lag_mean_s']:.1f} / {r['apply_lag_max_s']:.1f}",
                r["first_429_s"] if r["first_429_s"] is not None else "-",
            ]
            for r in runs
        ],
        [
            (
                "answer -> applied: from a pack's answer in the ledger (finished_at) to its "
                "apply_results activity writing it (applied_at)."
            )
        ],
    )
    ids = [r["run_id"] for r in runs]
    share_rows = []
    for w in windows:
        total = sum(w["admitted"].values())
        share_rows.append(
            [
                f"{w['from_s']:.0f}-{w['from_s'] + WINDOW_S:.0f}",
                total,
                *(
                    f"{w['admitted'][i]} ({w['admitted'][i] / total:.0%})" if total else "0"
                    for i in ids
                ),
            ]
        )
    rec.print_table(
        f"Calls admitted by the fleet limiter per {WINDOW_S:.0f} s window, by run",
        ["window s", "all", *(f"{r['blocks']:,} blocks" for r in runs)],
        share_rows,
    )
    rec.write()
    return 0 if all(r["status"] == "completed" for r in runs) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[100, 1_000, 5_000],
        help="blocks of each run, started together (default %(default)s)",
    )
    parser.add_argument("--rpm", type=int, default=500)
    parser.add_argument("--otpm", type=int, default=90_000)
    parser.add_argument("--itpm", type=int, default=450_000)
    parser.add_argument("--ttft-ms", type=int, default=500)
    parser.add_argument("--per-token-ms", type=float, default=12.0)
    parser.add_argument("--workers", type=int, default=2, help="worker.py subprocesses")
    parser.add_argument("--run-timeout", type=float, default=3600.0)
    common_args(parser, "fairshare")
    args = parser.parse_args(argv)
    if len(set(args.sizes)) != len(args.sizes):
        parser.error("--sizes must differ (each size is one run)")
    return args


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
