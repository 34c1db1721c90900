"""Streams: rows put at a steady rate through ``starter.py stream``, and a trickle.

    flock /tmp/blockbatch-bench.lock .venv/bin/python bench/stream.py [--rows 10000]

1. **Steady**: ``--rows`` rows (handbook blocks, each made unique) are written to the stdin
   of ``starter.py stream --max-rows N --max-wait W`` at ``--rate`` rows/s, with one
   ``worker.py`` and the simulator at realistic latency (``--ttft-ms``, ``--ms-per-token``,
   speed factor 1). For every row: the time it was written and the time its result line
   came back (p50/p95/max put→result). From the ledger: calls, rows per call against the
   triggers (packs that reached ``max_rows`` against those a wait or the close cut), cost.
   Then the same rows run as one JSONL document (``start_run``, same options): its calls
   and cost, the stream's against it.
2. **Trickle**: ``--trickle-rows`` rows, one every ``--trickle-every`` s, ``--max-wait``
   ``--trickle-wait-s`` (2 s): each row's put→result latency against the wait plus the
   latency of the call that answered it (from the ledger), and what is left over
   (blockbatch's own overhead).

Answer reuse is off (every row is called). Writes ``bench/results/stream.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    ROOT,
    BenchStack,
    Recorder,
    common_args,
    handbook_document,
    new_pool,
    run_main,
    sample_schema,
)
from blockbatch.core.ingest import parse_document
from blockbatch.core.run_types import RunOptions
from blockbatch.runtime.process import exit_process


def rows_of(n: int, tag: str) -> list[dict[str, Any]]:
    """``n`` rows: the handbook's blocks in turn, each made unique by its id."""
    blocks = parse_document(handbook_document(144), "markdown")
    return [
        {"id": f"{tag}{i}", "text": f"[{tag}{i}] {blocks[i % len(blocks)].block_content}"}
        for i in range(n)
    ]


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def stream_through_cli(
    bs: BenchStack,
    schema: Path,
    rows: list[dict[str, Any]],
    interval_s: float,
    cli_args: list[str],
    *,
    hold_open: bool = False,
) -> dict[str, Any]:
    """Feed ``rows`` to ``starter.py stream`` one every ``interval_s``; time each result.

    ``hold_open``: end the input only once every row's result is back (closing the stream
    drains it at once, which would speed up the last rows)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        "stream",
        "--schema",
        str(schema),
        "--set",
        "reuse_answers=false",
        *cli_args,
        cwd=ROOT,
        env=bs.worker_env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=2**24,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    sent: dict[str, float] = {}
    got: dict[str, tuple[float, dict[str, Any]]] = {}
    # Rows are fed once the stream is open (the CLI's start-up is not the stream's latency).
    opened = (await proc.stderr.readline()).decode()
    run_id = opened.split("stream ", 1)[1].split(":", 1)[0]
    started = time.monotonic()

    async def feed() -> None:
        assert proc.stdin
        for i, row in enumerate(rows):
            delay = started + i * interval_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            proc.stdin.write((json.dumps(row) + "\n").encode())
            await proc.stdin.drain()
            sent[row["id"]] = time.monotonic()
        while hold_open and len(got) < len(rows):
            await asyncio.sleep(0.05)
        proc.stdin.close()

    async def read() -> None:
        assert proc.stdout
        async for line in proc.stdout:
            obj = json.loads(line)
            got[str(obj["id"])] = (time.monotonic(), obj)

    err_task = asyncio.create_task(proc.stderr.read())
    try:
        await asyncio.gather(feed(), read())
        code = await proc.wait()
    finally:
        if proc.returncode is None:  # interrupted: leave no CLI behind
            proc.kill()
            await proc.wait()
    err = (await err_task).decode()
    return {
        "run_id": run_id,
        "exit_code": code,
        "stderr": err.strip().splitlines()[-1],
        "wall_s": round(time.monotonic() - started, 1),
        "sent": sent,
        "got": got,
    }


async def pack_figures(pool: Any, run_id: str, max_rows: int | None) -> dict[str, Any]:
    calls = await pool.fetchrow(
        """select count(*) filter (where status = 'succeeded') as calls,
                  count(*) filter (where status = 'succeeded' and purpose = 'pack') as pack_calls,
                  coalesce(sum(cost_usd), 0)::float8 as cost_usd,
                  coalesce(sum(input_tokens), 0) as input_tokens,
                  coalesce(sum(output_tokens), 0) as output_tokens,
                  coalesce(sum(cache_read_input_tokens), 0) as cache_read_tokens,
                  coalesce(sum(cache_creation_input_tokens), 0) as cache_write_tokens
           from llm_calls where run_id = $1""",
        run_id,
    )
    sizes = [
        r["n"]
        for r in await pool.fetch(
            """select count(*) as n from overlays where run_id = $1 and pack_index is not null
           group by pack_index""",
            run_id,
        )
    ]
    done = await pool.fetchval(
        "select count(*) from overlays where run_id = $1 and status = 'ai_complete'", run_id
    )
    out = dict(calls)
    out.update(
        packs=len(sizes),
        rows_done=done,
        rows_per_call=round(done / calls["pack_calls"], 2) if calls["pack_calls"] else 0,
        packs_full=sum(1 for n in sizes if max_rows is not None and n >= max_rows),
        packs_cut=sum(1 for n in sizes if max_rows is None or n < max_rows),
        mean_pack=round(statistics.mean(sizes), 1) if sizes else 0,
    )
    return out


async def call_latency_by_row(pool: Any, run_id: str) -> dict[str, float]:
    """Row id -> seconds the answering call took (its ledger latency)."""
    rows = await pool.fetch(
        """select b.stream_key, c.latency_ms from overlays o
           join blocks b on b.block_uid = o.block_uid
           join llm_calls c on c.call_id = o.call_id where o.run_id = $1""",
        run_id,
    )
    return {r["stream_key"]: (r["latency_ms"] or 0) / 1000 for r in rows}


async def steady(
    bs: BenchStack,
    rec: Recorder,
    pool: Any,
    args: argparse.Namespace,
    schema: Path,
    definition: dict[str, Any],
) -> None:
    rows = rows_of(args.rows, "s")
    cli = ["--max-wait", args.max_wait, "--set", f"max_concurrent_packs={args.concurrency}"]
    if args.max_rows:
        cli += ["--max-rows", str(args.max_rows)]
    out = await stream_through_cli(bs, schema, rows, 1 / args.rate, cli)
    latencies = [out["got"][k][0] - t for k, t in out["sent"].items() if k in out["got"]]
    ok = sum(1 for _, obj in out["got"].values() if obj["ok"])
    figures = await pack_figures(pool, out["run_id"], args.max_rows)
    # The same rows as one document, run as a whole.
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    doc = await bs.bb.ingest_bytes(data, name="stream-rows.jsonl", fmt="jsonl")
    schema_id = await bs.bb.add_schema(definition)
    started = time.monotonic()
    run_id = await bs.bb.start_run(
        doc, schema_id, RunOptions(reuse_answers=False, max_concurrent_packs=args.concurrency)
    )
    whole = await bs.bb.wait(run_id)
    whole_wall = time.monotonic() - started
    whole_figures = await pack_figures(pool, run_id, None)
    result: dict[str, Any] = {
        "stream": {
            "run_id": out["run_id"],
            "exit_code": out["exit_code"],
            "summary": out["stderr"],
            "wall_s": out["wall_s"],
            "rows_sent": len(out["sent"]),
            "result_lines": len(out["got"]),
            "ok": ok,
            "latency_s": {
                "p50": round(pct(latencies, 0.5), 2),
                "p95": round(pct(latencies, 0.95), 2),
                "max": round(max(latencies, default=0), 2),
            },
            **figures,
        },
        "document": {
            "run_id": run_id,
            "status": whole.status,
            "wall_s": round(whole_wall, 1),
            **whole_figures,
        },
    }
    result["cost_ratio"] = (
        round(figures["cost_usd"] / whole_figures["cost_usd"], 3)
        if whole_figures["cost_usd"]
        else None
    )
    rec.data["steady"] = result
    s, d = result["stream"], result["document"]
    rec.print_table(
        f"Stream of {args.rows} rows at {args.rate}/s (max_rows {args.max_rows}, max_wait "
        f"{args.max_wait}) against the same rows as one document",
        [
            "",
            "rows ok",
            "calls",
            "rows/call",
            "packs full / cut",
            "p50 s",
            "p95 s",
            "cost $",
            "wall s",
        ],
        [
            [
                "stream",
                s["ok"],
                s["pack_calls"],
                s["rows_per_call"],
                f"{s['packs_full']} / {s['packs_cut']}",
                s["latency_s"]["p50"],
                s["latency_s"]["p95"],
                s["cost_usd"],
                s["wall_s"],
            ],
            [
                "one document",
                d["rows_done"],
                d["pack_calls"],
                d["rows_per_call"],
                "-",
                "-",
                "-",
                d["cost_usd"],
                d["wall_s"],
            ],
        ],
        [f"stream cost / document cost: {result['cost_ratio']}", f"CLI: {s['summary']}"],
    )


async def trickle(
    bs: BenchStack, rec: Recorder, pool: Any, args: argparse.Namespace, schema: Path
) -> None:
    rows = rows_of(args.trickle_rows, "t")
    wait_s = args.trickle_wait_s
    out = await stream_through_cli(
        bs, schema, rows, args.trickle_every, ["--max-wait", f"{wait_s:g}s"], hold_open=True
    )
    calls = await call_latency_by_row(pool, out["run_id"])
    table_rows, within = [], 0
    for key, t in out["sent"].items():
        latency = out["got"][key][0] - t
        call = calls.get(key, 0.0)
        bound = wait_s + call
        within += latency <= bound + args.slack
        table_rows.append([key, round(latency, 2), round(call, 2), round(latency - bound, 2)])
    rec.data["trickle"] = {
        "run_id": out["run_id"],
        "rows": len(rows),
        "every_s": args.trickle_every,
        "max_wait_s": wait_s,
        "slack_s": args.slack,
        "within": within,
        "per_row": [
            dict(zip(("id", "latency_s", "call_s", "over_s"), r, strict=True)) for r in table_rows
        ],
    }
    rec.print_table(
        f"Trickle: one row every {args.trickle_every} s, --max-wait {wait_s:g}s",
        ["row", "put→result s", "its call s", "beyond wait + call s"],
        table_rows,
        [f"{within}/{len(rows)} within {wait_s:g} s + the call's latency + {args.slack} s"],
    )


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("stream", args)
    scenario = {
        "speed_factor": 1.0,
        "latency": {"ttft_ms": args.ttft_ms, "per_output_token_ms": args.ms_per_token},
    }
    definition = sample_schema("extract")
    async with BenchStack(
        "stream",
        fsync=args.fsync,
        temporal_file=args.temporal_file,
        scenario=scenario,
        keep=args.keep,
    ) as bs:
        schema = bs.root / "schema.json"
        schema.write_text(json.dumps(definition))
        await bs.start_workers(1)
        pool = await new_pool(bs)
        try:
            rec.data["stack"] = bs.describe()
            rec.data["scenario"] = scenario
            if args.trickle_rows:
                await trickle(bs, rec, pool, args, schema)
            if args.rows:
                await steady(bs, rec, pool, args, schema, definition)
        finally:
            await pool.close()
    rec.write()
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10_000, help="rows of the steady stream")
    p.add_argument("--rate", type=float, default=25.0, help="rows per second")
    p.add_argument("--max-rows", type=int, default=40, help="the stream's --max-rows")
    p.add_argument("--max-wait", default="2s", help="the stream's --max-wait")
    p.add_argument("--concurrency", type=int, default=32, help="packs in flight at once")
    p.add_argument("--ttft-ms", type=float, default=500, help="simulated time to first token")
    p.add_argument("--ms-per-token", type=float, default=12, help="simulated ms per output token")
    p.add_argument("--trickle-rows", type=int, default=10)
    p.add_argument("--trickle-every", type=float, default=5.0)
    p.add_argument(
        "--trickle-wait-s", type=float, default=2.0, help="the trickle's --max-wait, in seconds"
    )
    p.add_argument(
        "--slack",
        type=float,
        default=1.0,
        help="trickle: seconds allowed beyond the wait plus the call",
    )
    common_args(p, "stream")
    return p.parse_args(argv)


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
