"""Under rate limits: wall time against the lower bound the limits allow, and the 429s.

The simulator answers with realistic latency (time to first token plus a time per output
token, ``speed_factor`` 1) and enforces requests-per-minute, input- and output-tokens-per-
minute limits as the API does, with token buckets (full at the start, refilled at
``limit / 60`` per second; output reserved from ``max_tokens`` until the answer ends),
answering 429 with ``retry-after``. One run of ``--blocks`` blocks with
``samples/extract.json`` is made with automatic pack sizing and one with
``batching_enabled=False``.

The lower bound of a run counts what it actually needed (answered calls, their output and
their uncached input). A bucket starts with one minute's worth and refills at one minute's
worth per minute, so the last call needing a bucket cannot start before
``max(0, used / limit - 1)`` minutes, and then takes at least the fastest call's time; and
no run is shorter than its slowest call (a call cannot be split). The bound is the largest
of these terms. It ignores that a call holds its whole ``max_tokens`` of output while it
runs (only what it produced stays taken), which can make the output bucket bind earlier
than the bound says, most of all with one call per block.

The default limits are Anthropic's Tier 2 for Claude Sonnet 4.x with the request rate
halved (1,000 -> 500 rpm) so that the request limit, not only the output limit, binds the
one-call-per-block run within a few minutes.

    .venv/bin/python bench/ratelimits.py
    .venv/bin/python bench/ratelimits.py --blocks 20 --rpm 60 --otpm 20000 --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import sys
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
    run_once,
    sample_schema,
)
from core.models import RunOptions

MODES = {"auto": {}, "baseline": {"batching_enabled": False}}


def lower_bound_min(figures: dict[str, Any], args: argparse.Namespace,
                    slowest_call_s: float, fastest_call_s: float) -> dict[str, float]:
    """The run's lower bound by term, in minutes (see the module docstring)."""

    def bucket(used: int, limit: int) -> float:
        # Full at the start, refilled at ``limit`` per minute: the last call that takes
        # from it starts at ``used / limit - 1`` minutes at the earliest, then runs.
        return max(0.0, used / limit - 1) + fastest_call_s / 60

    terms = {"one_call": slowest_call_s / 60,  # a call cannot be split
             "requests": bucket(figures["calls_ok"], args.rpm),
             "output_tokens": bucket(figures["output_tokens"], args.otpm)}
    if args.itpm:
        # The simulator counts uncached input plus cache writes (cache reads are free).
        terms["input_tokens"] = bucket(figures["input_tokens"]
                                       + figures["cache_write_tokens"], args.itpm)
    return terms


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("ratelimits", args)
    limits = {"rpm": args.rpm, "output_tpm": args.otpm, "input_tpm": args.itpm}
    scenario = {"speed_factor": 1.0,
                "latency": {"ttft_ms": args.ttft_ms, "per_output_token_ms": args.per_token_ms},
                "limits": limits}
    runs: list[dict[str, Any]] = []
    async with BenchStack("ratelimits", fsync=args.fsync, temporal_file=args.temporal_file,
                          scenario=scenario, keep=args.keep) as bs:
        rec.data["stack"] = bs.describe()
        rec.data["stack"]["workers"] = f"{args.workers} worker.py subprocess(es), defaults"
        rec.data["scenario"] = scenario
        pool = await new_pool(bs, 5)
        try:
            await bs.start_workers(args.workers)
            schema_id = await bs.bb.add_schema(sample_schema("extract"))
            document_id = await bs.bb.ingest_bytes(handbook_document(args.blocks),
                                                   name=f"handbook-{args.blocks}.md",
                                                   fmt="markdown")
            for concurrency in args.concurrency:
                for mode in args.modes:
                    bs.sim_reset()  # full rate-limit buckets and a cold cache for every run
                    options = RunOptions(max_concurrent_packs=concurrency, **MODES[mode])
                    timed = await run_once(bs, document_id, schema_id, options,
                                           timeout_s=args.run_timeout)
                    figures = await ledger_figures(pool, timed.run_id)
                    stats = bs.sim_stats()
                    by_status = stats["requests"].get("POST /v1/messages", {})
                    latency = await pool.fetchrow(
                        """select max(latency_ms) as slowest, min(latency_ms) as fastest,
                                  avg(latency_ms)::float8 as mean
                           from llm_calls where run_id = $1 and status = 'succeeded'""",
                        timed.run_id,
                    )
                    bound = lower_bound_min(figures, args, (latency["slowest"] or 0) / 1000,
                                            (latency["fastest"] or 0) / 1000)
                    bound_min = max(bound.values())
                    run = {
                        "mode": mode, "concurrency": concurrency, "run_id": timed.run_id,
                        "status": timed.result.status,
                        "blocks_ok": figures["blocks"].get("ai_complete", 0),
                        "calls": figures["calls_ok"], "packs": figures["pack_count"],
                        "output_tokens": figures["output_tokens"],
                        "uncached_input_tokens": figures["input_tokens"]
                        + figures["cache_write_tokens"],
                        "responses_429": int(by_status.get("429", 0)),
                        "ledger_429": figures["calls_429"],
                        "sim_requests": by_status,
                        "split_events": figures["split_events"],
                        "wall_s": round(timed.wall_s, 1),
                        "lower_bound_terms_min": {k: round(v, 3) for k, v in bound.items()},
                        "lower_bound_min": round(bound_min, 3),
                        "wall_over_bound": timed.wall_s / 60 / bound_min,
                        "slowest_call_s": (latency["slowest"] or 0) / 1000,
                        "fastest_call_s": (latency["fastest"] or 0) / 1000,
                        "mean_call_s": (latency["mean"] or 0) / 1000,
                        "cost_usd": figures["cost_usd"],
                    }
                    runs.append(run)
                    print(f"{mode} c={concurrency}: {timed.result.status} in "
                          f"{timed.wall_s / 60:.2f} min (bound {bound_min:.2f} min), "
                          f"{run['responses_429']} 429s", flush=True)
        finally:
            await pool.close()
    rec.data["runs"] = runs
    rows = [[r["mode"] + (" (1 block per call)" if r["mode"] == "baseline" else ""),
             r["concurrency"], r["calls"], r["output_tokens"],
             f"{r['wall_s'] / 60:.2f}", f"{r['lower_bound_min']:.2f}",
             max(r["lower_bound_terms_min"], key=r["lower_bound_terms_min"].get),
             f"{r['wall_over_bound']:.2f}", r["responses_429"],
             f"{r['mean_call_s']:.1f} / {r['slowest_call_s']:.1f}",
             f"{r['blocks_ok']}/{args.blocks}"] for r in runs]
    rec.print_table(
        f"Under rate limits: {args.blocks:,} blocks, rpm {args.rpm:,}, output {args.otpm:,}/min, "
        f"input {args.itpm or 'unlimited'}/min; latency {args.ttft_ms} ms + "
        f"{args.per_token_ms} ms/token",
        ["mode", "max concurrent packs", "calls", "output tokens", "wall min", "bound min",
         "binding limit", "wall / bound", "429s", "call s mean / max", "blocks ok"],
        rows,
        [("bound = max over calls, output tokens and uncached input of (used / limit - 1 "
          "minutes, at least 0, + the fastest call), and the slowest call, from what the run "
          "used: the API's token buckets start full (a minute's worth) and refill at the "
          "limit per minute. A call also holds its max_tokens of output while it runs, "
          "which the bound does not count.")],
    )
    rec.write()
    return 0 if all(r["status"] == "completed" for r in runs) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=2_000)
    parser.add_argument("--rpm", type=int, default=500)
    parser.add_argument("--otpm", type=int, default=90_000)
    parser.add_argument("--itpm", type=int, default=450_000)
    parser.add_argument("--ttft-ms", type=int, default=500)
    parser.add_argument("--per-token-ms", type=float, default=12.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32],
                        help="max_concurrent_packs values to run (default %(default)s)")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--workers", type=int, default=2, help="worker.py subprocesses")
    parser.add_argument("--run-timeout", type=float, default=1800.0)
    common_args(parser, "ratelimits")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run_main(main, parse_args()))
