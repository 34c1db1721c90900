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
``max(0, used / limit - 1)`` minutes, and then takes at least the fastest pack call's time
(the last call is a pack, not the 1-token warm-up; until 2026-11-23 the bound added the
fastest call of any kind, which ``lower_bound_min_any_call`` still records); and
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
    run_once,
    sample_schema,
)
from blockbatch.core.run_types import RunOptions
from blockbatch.runtime.process import exit_process

#: Reuse off: every run sends the same blocks, and is measured doing so.
MODES = {
    "auto": {"reuse_answers": False},
    "baseline": {"batching_enabled": False, "reuse_answers": False},
}
#: Mid-run limit changes (``--change``): the limits before and after, as factors of
#: ``--rpm``/``--otpm``/``--itpm``, and the share another client of the account takes. The
#: factors are below 1 so that the limits bind soon after the start: one call per block
#: sends ~6-11 calls a second here at 32 concurrent packs, and at 500 rpm (8.3/s) the first
#: minute's 500 would last minutes. At 150 rpm the bucket is spent before a change at 75 s;
#: at 300 rpm it may not be (the API's leftover is then spent after the change).
CHANGES: dict[str, dict[str, Any]] = {
    # The account is upgraded: every limit doubles (150 -> 300 rpm at the defaults).
    "upgrade": {
        "before": {"scale": 0.3, "others_share": 0.0},
        "after": {"scale": 0.6, "others_share": 0.0},
    },
    # Another client of the account starts using half of every limit (300 rpm -> 150 left).
    "others": {
        "before": {"scale": 0.6, "others_share": 0.0},
        "after": {"scale": 0.6, "others_share": 0.5},
    },
}
#: Convergence: the admitted rate over every window of these lengths (s) from then on is
#: within TOLERANCE of the rate the new limits allow. 10 s windows also show the noise of
#: the admitted rate in steady state (see ``windows_before_change``).
WINDOWS_S = (10.0, 30.0)
TOLERANCE = 0.10


def lower_bound_min(
    figures: dict[str, Any], args: argparse.Namespace, slowest_call_s: float, fastest_call_s: float
) -> dict[str, float]:
    """The run's lower bound by term, in minutes (see the module docstring)."""

    def bucket(used: int, limit: int) -> float:
        # Full at the start, refilled at ``limit`` per minute: the last call that takes
        # from it starts at ``used / limit - 1`` minutes at the earliest, then runs.
        return max(0.0, used / limit - 1) + fastest_call_s / 60

    terms = {
        "one_call": slowest_call_s / 60,  # a call cannot be split
        "requests": bucket(figures["calls_ok"], args.rpm),
        "output_tokens": bucket(figures["output_tokens"], args.otpm),
    }
    if args.itpm:
        # The simulator counts uncached input plus cache writes (cache reads are free).
        terms["input_tokens"] = bucket(
            figures["input_tokens"] + figures["cache_write_tokens"], args.itpm
        )
    return terms


async def call_timeline(pool: Any, run_id: str) -> list[dict[str, Any]]:
    """Every call of the run: when it was opened, sent (after the limiter's wait), ended.

    Epoch seconds of the database clock. ``sent`` is the end less the call's latency (the
    ledger times a call from the moment the limiter let it go).
    """
    rows = await pool.fetch(
        """select extract(epoch from started_at)::float8 as opened,
                  extract(epoch from finished_at)::float8 as finished,
                  coalesce(latency_ms, 0) as latency_ms, status, http_status, purpose,
                  output_tokens, (request->>'max_tokens')::int as max_tokens
           from llm_calls where run_id = $1 and finished_at is not null
           order by finished_at""",
        run_id,
    )
    return [dict(r, sent=r["finished"] - r["latency_ms"] / 1000) for r in rows]


def limiter_figures(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Concurrency the limiter allowed and how long calls waited for it (from the ledger)."""
    answered = [c for c in calls if c["status"] == "succeeded"]
    if not answered:
        return {}
    start = min(c["sent"] for c in answered)
    end = max(c["finished"] for c in answered)
    events = sorted([(c["sent"], 1) for c in answered] + [(c["finished"], -1) for c in answered])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    waits = sorted(max(0.0, c["sent"] - c["opened"]) for c in answered)
    held = [
        c["max_tokens"] / max(c["output_tokens"], 1) for c in answered if c["purpose"] == "pack"
    ]
    return {
        "mean_in_flight": round(
            sum(c["finished"] - c["sent"] for c in answered) / max(end - start, 1e-9), 2
        ),
        "peak_in_flight": peak,
        "limiter_wait_s_mean": round(sum(waits) / len(waits), 2),
        "limiter_wait_s_p50": round(waits[len(waits) // 2], 2),
        "limiter_wait_s_max": round(waits[-1], 2),
        "max_tokens_mean": round(
            sum(c["max_tokens"] for c in answered if c["purpose"] == "pack")
            / max(1, sum(c["purpose"] == "pack" for c in answered)),
            1,
        ),
        "max_tokens_over_output_mean": round(sum(held) / max(len(held), 1), 2),
    }


async def limiter_state(pool: Any) -> list[dict[str, Any]]:
    """The fleet limiter's rows as the run left them (learned limits, AIMD factor, 429s)."""
    rows = await pool.fetch(
        """select model, requests_limit, input_limit, output_limit, factor, admitted,
                  throttled from rate_limiters order by model"""
    )
    return [dict(r) for r in rows]


async def forget_limiter(pool: Any) -> None:
    """A fresh account for the next run: the fleet's limiter forgets what it learned."""
    await pool.execute("delete from rate_limiters")


def change_limits(args: argparse.Namespace, phase: dict[str, Any]) -> dict[str, Any]:
    """The simulator's ``limits`` for one phase of a change scenario."""
    scale = phase["scale"]
    return {
        "rpm": max(1, round(args.rpm * scale)),
        "output_tpm": max(1, round(args.otpm * scale)),
        "input_tpm": max(1, round(args.itpm * scale)) if args.itpm else None,
        "others_share": phase["others_share"],
    }


def allowed_rate(limits: dict[str, Any], per_call: dict[str, float]) -> dict[str, float]:
    """Calls per second each limit allows (what the other client leaves), given what one
    call counts: 1 request, its output tokens and its uncached input."""
    free = 1 - limits["others_share"]
    rates = {
        "requests": limits["rpm"] * free / 60,
        "output_tokens": limits["output_tpm"] * free / 60 / max(per_call["output"], 1),
    }
    if limits.get("input_tpm"):
        rates["input_tokens"] = limits["input_tpm"] * free / 60 / max(per_call["input"], 1)
    return rates


def window_rates(
    times: list[float], start: float, end: float, window: float, step: float = 1.0
) -> list[tuple[float, float]]:
    """(window start, calls per second) of every ``window``-long window in [start, end]."""
    out = []
    t = start
    times = sorted(times)
    while t + window <= end + 1e-9:
        n = sum(1 for x in times if t <= x < t + window)
        out.append((t, n / window))
        t += step
    return out


def convergence(
    sent: list[float], changed_at: float, end: float, target: float, window: float
) -> dict[str, Any]:
    """How long after ``changed_at`` the admitted rate stays within TOLERANCE of ``target``.

    ``end``: the last call sent (until then the run had calls waiting for the limiter, so
    the rate is the limits', not the run's). Converged at the earliest window start from
    which every later ``window``-long window (1 s apart) is within the tolerance.
    """
    windows = window_rates(sent, changed_at, end, window)
    within = [abs(rate - target) <= TOLERANCE * target for _, rate in windows]
    converged_s = None
    for i in range(len(windows)):
        if all(within[i:]):
            converged_s = round(windows[i][0] - changed_at, 1)
            break
    return {
        "converged_after_s": converged_s,
        "windows_after_change": len(windows),
        "windows_within_tolerance": sum(within),
        "rates_per_window": [round(rate, 2) for _, rate in windows[:: int(window)]],
    }


async def change_run(
    bs: BenchStack,
    pool: Any,
    args: argparse.Namespace,
    change: str,
    document_id: str,
    schema_id: str,
) -> dict[str, Any]:
    """One run whose limits change ``--change-at-s`` seconds after it starts."""
    spec = CHANGES[change]
    before, after = change_limits(args, spec["before"]), change_limits(args, spec["after"])
    base = {
        "speed_factor": 1.0,
        "latency": {"ttft_ms": args.ttft_ms, "per_output_token_ms": args.per_token_ms},
    }
    await asyncio.to_thread(bs.sim_reset, {**base, "limits": before})
    await forget_limiter(pool)
    options = RunOptions(max_concurrent_packs=args.change_concurrency, **MODES[args.change_mode])
    started = time.monotonic()
    run_id = await bs.bb.start_run(document_id, schema_id, options)
    waiter = asyncio.create_task(bs.bb.wait(run_id))
    done, _ = await asyncio.wait({waiter}, timeout=args.change_at_s)
    if done:
        raise RuntimeError(f"{change}: the run ended before the change; use more blocks")
    await asyncio.to_thread(bs.sim, "PUT", "/_sim/scenario", {**base, "limits": after})
    changed_at = float(await pool.fetchval("select extract(epoch from clock_timestamp())"))
    result = await asyncio.wait_for(waiter, args.run_timeout)
    wall_s = time.monotonic() - started
    calls = await call_timeline(pool, run_id)
    figures = await ledger_figures(pool, run_id)
    answered = [c for c in calls if c["status"] == "succeeded" and c["purpose"] == "pack"]
    sent = [c["sent"] for c in answered]
    per_call = {
        "output": figures["output_tokens"] / max(len(calls), 1),
        "input": (figures["input_tokens"] + figures["cache_write_tokens"]) / max(len(calls), 1),
    }
    rates_after = allowed_rate(after, per_call)
    rates_before = allowed_rate(before, per_call)
    binding = min(rates_after, key=lambda kind: rates_after[kind])
    target = rates_after[binding]
    mean_latency = sum(c["finished"] - c["sent"] for c in answered) / max(len(answered), 1)
    ceiling = args.change_concurrency / max(mean_latency, 1e-9)
    end = max(sent)
    conv = {f"{w:.0f}s": convergence(sent, changed_at, end, target, w) for w in WINDOWS_S}
    before_window = [x for x in sent if changed_at - 30 <= x < changed_at]
    steady_before = [
        rate for _, rate in window_rates(sent, changed_at - 30, changed_at, WINDOWS_S[0])
    ]
    after_429 = [c for c in calls if c["http_status"] == 429 and c["sent"] >= changed_at]
    before_429 = [c for c in calls if c["http_status"] == 429 and c["sent"] < changed_at]
    run = {
        "change": change,
        "mode": args.change_mode,
        "run_id": run_id,
        "status": result.status,
        "blocks_ok": figures["blocks"].get("ai_complete", 0),
        "limits_before": before,
        "limits_after": after,
        "change_at_s": round(changed_at - min(c["opened"] for c in calls), 1),
        "wall_s": round(wall_s, 1),
        "calls": figures["calls_ok"],
        "per_call_output_tokens": round(per_call["output"], 1),
        "allowed_calls_per_s_before": round(min(rates_before.values()), 3),
        "allowed_calls_per_s_after": round(target, 3),
        "binding_after": binding,
        "concurrency_ceiling_calls_per_s": round(ceiling, 2),
        "rate_last_30s_before_change": round(len(before_window) / 30, 3),
        "responses_429_before_change": len(before_429),
        "responses_429_after_change": len(after_429),
        "calls_after_change": sum(1 for x in sent if x >= changed_at),
        "mean_rate_after_change": round(
            sum(1 for x in sent if x >= changed_at) / max(end - changed_at, 1e-9), 3
        ),
        "windows_before_change": {
            "window_s": WINDOWS_S[0],
            "min": min(steady_before, default=None),
            "max": max(steady_before, default=None),
        },
        "convergence": conv,
        "limiter": limiter_figures(calls),
        "limiter_rows": await limiter_state(pool),
    }
    print(
        f"change {change}: {result.status}, converged after "
        f"{[c['converged_after_s'] for c in conv.values()]} s, "
        f"{len(after_429)} 429s after the change",
        flush=True,
    )
    return run


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("ratelimits", args)
    limits = {"rpm": args.rpm, "output_tpm": args.otpm, "input_tpm": args.itpm}
    scenario = {
        "speed_factor": 1.0,
        "latency": {"ttft_ms": args.ttft_ms, "per_output_token_ms": args.per_token_ms},
        "limits": limits,
    }
    runs: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    async with BenchStack(
        "ratelimits",
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
            if args.change and args.change_blocks != args.blocks:
                change_document_id = await bs.bb.ingest_bytes(
                    handbook_document(args.change_blocks),
                    name=f"handbook-{args.change_blocks}.md",
                    fmt="markdown",
                )
            else:
                change_document_id = document_id
            for concurrency in args.concurrency:
                for mode in args.modes:
                    bs.sim_reset()  # full rate-limit buckets and a cold cache for every run
                    await forget_limiter(pool)  # and a limiter that learns them again
                    options = RunOptions(max_concurrent_packs=concurrency, **MODES[mode])
                    timed = await run_once(
                        bs, document_id, schema_id, options, timeout_s=args.run_timeout
                    )
                    figures = await ledger_figures(pool, timed.run_id)
                    calls = await call_timeline(pool, timed.run_id)
                    stats = bs.sim_stats()
                    by_status = stats["requests"].get("POST /v1/messages", {})
                    latency = await pool.fetchrow(
                        """select max(latency_ms) as slowest, min(latency_ms) as fastest,
                                  min(latency_ms) filter (where purpose = 'pack')
                                      as fastest_pack,
                                  avg(latency_ms)::float8 as mean
                           from llm_calls where run_id = $1 and status = 'succeeded'""",
                        timed.run_id,
                    )
                    bound = lower_bound_min(
                        figures,
                        args,
                        (latency["slowest"] or 0) / 1000,
                        (latency["fastest_pack"] or 0) / 1000,
                    )
                    bound_min = max(bound.values())
                    bound_any = max(
                        lower_bound_min(
                            figures,
                            args,
                            (latency["slowest"] or 0) / 1000,
                            (latency["fastest"] or 0) / 1000,
                        ).values()
                    )
                    run = {
                        "mode": mode,
                        "concurrency": concurrency,
                        "run_id": timed.run_id,
                        "status": timed.result.status,
                        "blocks_ok": figures["blocks"].get("ai_complete", 0),
                        "calls": figures["calls_ok"],
                        "packs": figures["pack_count"],
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
                        "lower_bound_min_any_call": round(bound_any, 3),
                        "wall_over_bound_any_call": timed.wall_s / 60 / bound_any,
                        "slowest_call_s": (latency["slowest"] or 0) / 1000,
                        "fastest_call_s": (latency["fastest"] or 0) / 1000,
                        "fastest_pack_call_s": (latency["fastest_pack"] or 0) / 1000,
                        "mean_call_s": (latency["mean"] or 0) / 1000,
                        "cost_usd": figures["cost_usd"],
                        "limiter": limiter_figures(calls),
                        "limiter_rows": await limiter_state(pool),
                    }
                    runs.append(run)
                    print(
                        f"{mode} c={concurrency}: {timed.result.status} in "
                        f"{timed.wall_s / 60:.2f} min (bound {bound_min:.2f} min), "
                        f"{run['responses_429']} 429s",
                        flush=True,
                    )
            changes.extend(
                [
                    await change_run(bs, pool, args, change, change_document_id, schema_id)
                    for change in args.change
                ]
            )
        finally:
            await pool.close()
    rec.data["runs"] = runs
    if changes:
        rec.data["changes"] = changes
    rows = [
        [
            r["mode"] + (" (1 block per call)" if r["mode"] == "baseline" else ""),
            r["concurrency"],
            r["calls"],
            r["output_tokens"],
            f"{r['wall_s'] / 60:.2f}",
            f"{r['lower_bound_min']:.2f}",
            max(r["lower_bound_terms_min"], key=r["lower_bound_terms_min"].get),
            f"{r['wall_over_bound']:.2f}",
            r["responses_429"],
            f"{r['mean_call_s']:.1f} / {r['slowest_call_s']:.1f}",
            (
                f"{r['limiter'].get('mean_in_flight', 0):.1f} / "
                f"{r['limiter'].get('peak_in_flight', 0)}"
            ),
            f"{r['limiter'].get('max_tokens_over_output_mean', 0):.1f}",
            (
                f"{r['limiter'].get('limiter_wait_s_mean', 0):.1f} / "
                f"{r['limiter'].get('limiter_wait_s_max', 0):.1f}"
            ),
            f"{r['wall_over_bound_any_call']:.2f}",
            f"{r['blocks_ok']}/{args.blocks}",
        ]
        for r in runs
    ]
    rec.print_table(
        f"Under rate limits: {args.blocks:,} blocks, rpm {args.rpm:,}, output {args.otpm:,}/min, "
        f"input {args.itpm or 'unlimited'}/min; latency {args.ttft_ms} ms + "
        f"{args.per_token_ms} ms/token",
        [
            "mode",
            "max concurrent packs",
            "calls",
            "output tokens",
            "wall min",
            "bound min",
            "binding limit",
            "wall / bound",
            "429s",
            "call s mean / max",
            "in flight mean / peak",
            "max_tokens / output",
            "limiter wait s mean / max",
            "wall / bound as in 4b",
            "blocks ok",
        ],
        rows,
        [
            (
                "bound = max over calls, output tokens and uncached input of (used / limit - 1 "
                "minutes, at least 0, + the fastest pack call), and the slowest call, from what the run "
                "used: the API's token buckets start full (a minute's worth) and refill at the "
                "limit per minute. A call also holds its max_tokens of output while it runs, "
                "which the bound does not count."
            )
        ],
    )
    if changes:
        print_changes(rec, args, changes)
    rec.write()
    return 0 if all(r["status"] == "completed" for r in runs + changes) else 1


def print_changes(rec: Recorder, args: argparse.Namespace, changes: list[dict[str, Any]]) -> None:
    def limits(lim: dict[str, Any]) -> str:
        text = f"rpm {lim['rpm']:,}, output {lim['output_tpm']:,}/min"
        return text + (f", others use {lim['others_share']:.0%}" if lim["others_share"] else "")

    rows = [
        [
            c["change"],
            limits(c["limits_before"]),
            limits(c["limits_after"]),
            f"{c['change_at_s']:.0f}",
            (
                f"{c['allowed_calls_per_s_before']:.2f} -> {c['allowed_calls_per_s_after']:.2f}"
                f" ({c['binding_after']})"
            ),
            (
                f"{c['rate_last_30s_before_change']:.2f} "
                f"({c['windows_before_change']['min']:.1f}-"
                f"{c['windows_before_change']['max']:.1f})"
            ),
            f"{c['mean_rate_after_change']:.2f}",
            " / ".join(
                "not within" if v["converged_after_s"] is None else f"{v['converged_after_s']:.0f}"
                for v in c["convergence"].values()
            ),
            " / ".join(
                f"{v['windows_within_tolerance']}/{v['windows_after_change']}"
                for v in c["convergence"].values()
            ),
            f"{c['responses_429_before_change']} / {c['responses_429_after_change']}",
            f"{c['responses_429_after_change'] / max(c['calls_after_change'], 1):.1%}",
            f"{c['wall_s'] / 60:.2f}",
            f"{c['blocks_ok']}/{args.change_blocks}",
        ]
        for c in changes
    ]
    rec.print_table(
        f"Limits that change mid-run: {args.change_blocks:,} blocks, "
        f"{'one block per call' if args.change_mode == 'baseline' else 'auto packing'}, "
        f"max_concurrent_packs {args.change_concurrency}; the change "
        f"{args.change_at_s:.0f} s after the start",
        [
            "change",
            "limits before",
            "limits after",
            "changed at s",
            "allowed calls/s before -> after (binding)",
            "calls/s 30 s before (10 s windows min-max)",
            "calls/s after",
            "converged after s (10 s / 30 s windows)",
            "windows within 10% (10 s / 30 s)",
            "429s before / after",
            "429s after / calls after",
            "wall min",
            "blocks ok",
        ],
        rows,
        [
            (
                f"calls/s: pack calls answered, by the moment they were sent (ledger). Converged: "
                f"from then on every 10 s (30 s) window, one a second until the last call "
                f"was sent, admitted within {TOLERANCE:.0%} of the rate the new limits allow "
                "(the binding limit's per-second refill, what the other client leaves, over what "
                "one call counts)."
            )
        ],
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=2_000)
    parser.add_argument("--rpm", type=int, default=500)
    parser.add_argument("--otpm", type=int, default=90_000)
    parser.add_argument("--itpm", type=int, default=450_000)
    parser.add_argument("--ttft-ms", type=int, default=500)
    parser.add_argument("--per-token-ms", type=float, default=12.0)
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[32],
        help="max_concurrent_packs values to run (default %(default)s)",
    )
    parser.add_argument(
        "--modes",
        nargs="*",
        choices=list(MODES),
        default=list(MODES),
        help="modes to measure (none: only --change)",
    )
    parser.add_argument(
        "--change",
        nargs="*",
        choices=list(CHANGES),
        default=[],
        help="also measure runs whose limits change mid-run: 'upgrade' "
        "doubles every limit, 'others' has another client take half",
    )
    parser.add_argument("--change-blocks", type=int, default=1_000)
    parser.add_argument(
        "--change-at-s",
        type=float,
        default=75.0,
        help="seconds after the run's start when the limits change",
    )
    parser.add_argument("--change-mode", choices=list(MODES), default="baseline")
    parser.add_argument(
        "--change-concurrency", type=int, default=32, help="max_concurrent_packs of the change runs"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker.py subprocesses")
    parser.add_argument("--run-timeout", type=float, default=1800.0)
    common_args(parser, "ratelimits")
    return parser.parse_args(argv)


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
