"""The review app's run grid at 100,000 blocks: how long one page takes to serve over HTTP.

Starts a throw-away Postgres (no Temporal, no simulator: nothing here calls a model; with
``BENCH_SHARED_STACK`` set, a database of its own on that running stack's Postgres, as the
test of this script does) and loads one finished run of ``--blocks`` blocks straight through the store's own writes:
the document (``repo.save_document``), the plan (``overlays.insert_plan``), staged results
for 97% of the blocks (``overlays.stage_valid``, apply_answer's write), 3% failed with
``invalid_value`` (``overlays.fail_pending``), 10% confirmed by a reviewer
(``overlays.decide``, one ``review_actions`` row each) and the run closed
(``runs.close_run``); then ``VACUUM ANALYZE`` (what autovacuum does soon after a bulk load).

It serves the app as a user would (``python starter.py serve`` in its own process) and
times GETs of grid pages over HTTP from this process: the first page, a deep page by
keyset (``after=``), the last page (``before=``) and filtered pages (status, reason code,
block type; first and deep). Each case: ``--warmup`` requests, then ``--repeat`` timed
ones; median, p95 and max in milliseconds, and the rows the page showed. Goal: < 300 ms a
page. The plan Postgres uses for each case (``EXPLAIN ANALYZE`` of the page query) goes
to the JSON, with the index each one scans.

    flock /tmp/blockbatch-bench.lock .venv/bin/python bench/review_page.py
    .venv/bin/python bench/review_page.py --blocks 2000 --repeat 3 --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench.common import RESULTS_DIR, ROOT, SHARED_STACK_ENV, Recorder, SharedStack, run_main
from blockbatch.core.ingest import parse_document
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from blockbatch.core.views import GridFilter
from blockbatch.devtools import stack
from blockbatch.devtools.services import Services
from blockbatch.devtools.synthetic import checkable_properties, markdown_document
from blockbatch.store import overlays, repo, runs
from blockbatch.store.db import create_pool
from blockbatch.store.review import explain_grid, refresh_statistics

PAGE = 50
GOAL_MS = 300.0
BATCH = 10_000


def _overlay(block_type: str, content: str) -> dict[str, Any]:
    return {
        "word_count": len(content.split()),
        "char_count": len(content),
        "first_40_chars": content[:40],
        "block_type": block_type,
        "summary": f"About: {content[:60]}",
    }


async def load_run(url: str, n_blocks: int) -> tuple[str, dict[str, Any]]:
    """One finished run of ``n_blocks`` blocks, loaded through the store; (run_id, figures)."""
    pool = await create_pool(url, max_size=4)
    t0 = time.monotonic()
    try:
        raw = markdown_document(n_blocks)
        blocks = parse_document(raw, "markdown")
        async with pool.acquire() as conn:
            doc = await repo.save_document(conn, "big.md", "markdown", raw, blocks)
            schema = await repo.save_schema(
                conn,
                load_schema(
                    {
                        "name": "bench-review",
                        "properties": checkable_properties(),
                        "prompt_config": {"system_instructions": "Annotate each block."},
                    }
                ),
            )
            run_id = await repo.create_run(conn, doc, schema, RunOptions())
            sizes = await runs.document_blocks(conn, doc)
            await overlays.insert_plan(conn, run_id, sizes, [i // 20 for i in range(len(sizes))])
            failed = [b.block_uid for b in sizes if b.block_index % 33 == 7]
            failed_set = set(failed)
            for start in range(0, len(blocks), BATCH):
                chunk = blocks[start : start + BATCH]
                valid = {
                    f"{doc}:{b.block_index}": _overlay(b.block_type, b.block_content)
                    for b in chunk
                    if f"{doc}:{b.block_index}" not in failed_set
                }
                await overlays.stage_valid(conn, run_id, valid, "bench", 0)
            await overlays.fail_pending(
                conn,
                run_id,
                "word_count: -1 is less than the minimum of 0",
                "bench",
                reason_code="invalid_value",
                block_uids=failed,
            )
            confirm = [
                b.block_uid
                for b in sizes
                if b.block_index % 10 == 3 and b.block_uid not in failed_set
            ]
            for start in range(0, len(confirm), BATCH):
                await overlays.decide(
                    conn, run_id, confirm[start : start + BATCH], "confirm", "bench"
                )
            result = await runs.close_run(conn, run_id, "completed", None)
        loaded_s = time.monotonic() - t0
        await refresh_statistics(pool)
        return run_id, {
            "document_id": doc,
            "blocks": result.blocks_total,
            "failed": result.blocks_failed,
            "confirmed": len(confirm),
            "status": result.status,
            "load_s": round(loaded_s, 1),
            "analyze_s": round(time.monotonic() - t0 - loaded_s, 1),
        }
    finally:
        await pool.close()


def cases(n: int) -> list[tuple[str, dict[str, str], GridFilter, int | None]]:
    """(name, query, filter, keyset after) of each page timed."""
    deep = str(int(n * 0.9))
    return [
        ("first page", {}, GridFilter(), None),
        (f"deep page (after={deep})", {"after": deep}, GridFilter(), int(deep)),
        ("last page (before=end)", {"before": str(n)}, GridFilter(), None),
        ("status=failed, first", {"status": "failed"}, GridFilter(statuses=["failed"]), None),
        (
            f"status=failed, after={deep}",
            {"status": "failed", "after": deep},
            GridFilter(statuses=["failed"]),
            int(deep),
        ),
        (
            f"status=ai_complete, after={deep}",
            {"status": "ai_complete", "after": deep},
            GridFilter(statuses=["ai_complete"]),
            int(deep),
        ),
        (
            "reason=invalid_value, first",
            {"reason": "invalid_value"},
            GridFilter(reasons=["invalid_value"]),
            None,
        ),
        (
            f"type=heading, after={deep}",
            {"type": "heading", "after": deep},
            GridFilter(block_type="heading"),
            int(deep),
        ),
        (
            "status=confirmed + type=paragraph",
            {"status": "confirmed", "type": "paragraph"},
            GridFilter(statuses=["confirmed"], block_type="paragraph"),
            None,
        ),
    ]


async def wait_http(url: str, proc: asyncio.subprocess.Process, log: Path) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(300):
            if proc.returncode is not None:
                raise RuntimeError(f"starter.py serve exited: {log.read_text()[-2000:]}")
            try:
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"starter.py serve did not answer: {log.read_text()[-2000:]}")


async def time_pages(base: str, run_id: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    async with aiohttp.ClientSession() as http:
        for name, query, _, _ in cases(args.blocks):
            url = f"{base}/runs/{run_id}"
            times, rows, size = [], 0, 0
            for i in range(args.warmup + args.repeat):
                t0 = time.perf_counter()
                async with http.get(url, params=query) as resp:
                    body = await resp.text()
                    assert resp.status == 200, (name, resp.status, body[:500])
                elapsed = (time.perf_counter() - t0) * 1000
                if i >= args.warmup:
                    times.append(elapsed)
                rows, size = len(re.findall(r"<tr id=\"row-", body)), len(body)
            times.sort()
            out.append(
                {
                    "case": name,
                    "query": query,
                    "rows": rows,
                    "bytes": size,
                    "median_ms": round(statistics.median(times), 1),
                    "p95_ms": round(times[min(len(times) - 1, int(len(times) * 0.95))], 1),
                    "max_ms": round(times[-1], 1),
                }
            )
    return out


async def plans(url: str, run_id: str, n: int) -> dict[str, list[str]]:
    pool = await create_pool(url, max_size=2)
    try:
        return {
            name: await explain_grid(pool, run_id, flt, limit=PAGE, after=after)
            for name, _, flt, after in cases(n)
        }
    finally:
        await pool.close()


def scans(plan: list[str]) -> str:
    """The scans of a plan, shortened: ``Index Scan using overlays_run_index on o``."""
    found = [
        m.group(0)
        for line in plan
        for m in [
            re.search(
                r"(Index Only Scan|Index Scan|Bitmap Heap Scan|Seq Scan)"
                r"( Backward)?( using \w+)? on \w+",
                line,
            )
        ]
        if m
    ]
    return "; ".join(dict.fromkeys(found))


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("review_page", args)
    root = Path(tempfile.mkdtemp(prefix="bb-bench-review-"))
    shared_file = os.environ.get(SHARED_STACK_ENV)
    if shared_file:  # a running stack's Postgres (the tests'), a database of its own
        services = SharedStack.load(Path(shared_file))
        database = f"bench_{uuid.uuid4().hex[:8]}"
        pg = services.pg
        stack.ensure_database(pg, database)
    else:
        services = Services(root)  # Postgres alone (fsync off): no worker, no Claude
        database = "bench"
        pg = services.start_postgres(database)
    server: asyncio.subprocess.Process | None = None
    try:
        url = pg.url(database)
        run_id, loaded = await load_run(url, args.blocks)
        rec.data["loaded"] = loaded
        print(f"loaded run {run_id}: {loaded}", flush=True)
        port = stack.free_port()
        log = root / "serve.log"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DATABASE_", "BLOCKBATCH_", "ANTHROPIC_"))
        }
        with log.open("wb") as out:
            server = await asyncio.create_subprocess_exec(
                sys.executable,
                "starter.py",
                "serve",
                "--port",
                str(port),
                cwd=ROOT,
                env={**env, "DATABASE_URL": url, "BLOCKBATCH_REVIEWER": "bench"},
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        base = f"http://127.0.0.1:{port}"
        await wait_http(base + "/", server, log)
        figures = await time_pages(base, run_id, args)
        plan = await plans(url, run_id, args.blocks)
        for f in figures:
            f["plan"] = plan[f["case"]]
            f["scans"] = scans(plan[f["case"]])
        rec.data["pages"] = figures
        worst = max(f["p95_ms"] for f in figures)
        rec.data["goal_ms"] = GOAL_MS
        rec.data["goal_met"] = worst < GOAL_MS
        rec.print_table(
            f"Review grid, {loaded['blocks']:,} blocks, {PAGE} a page, over HTTP "
            f"({args.repeat} requests a case after {args.warmup} warm-up)",
            ["page", "rows", "median ms", "p95 ms", "max ms", "KiB", "index scans"],
            [
                [
                    f["case"],
                    f["rows"],
                    f["median_ms"],
                    f["p95_ms"],
                    f["max_ms"],
                    round(f["bytes"] / 1024),
                    f["scans"],
                ]
                for f in figures
            ],
            notes=[
                (
                    f"goal < {GOAL_MS:.0f} ms a page: "
                    f"{'met' if worst < GOAL_MS else 'missed'} (worst p95 {worst} ms); "
                    f"loading the run took {loaded['load_s']} s, VACUUM ANALYZE "
                    f"{loaded['analyze_s']} s"
                )
            ],
        )
        rec.write()
        return 0
    finally:
        if server is not None:
            server.terminate()
            await server.wait()
        if not shared_file:  # else its owner stops it
            services.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30, help="timed requests a case")
    parser.add_argument("--warmup", type=int, default=3, help="untimed requests first")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "review_page.json")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run_main(main, parse_args()))
