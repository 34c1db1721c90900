"""Ingest of a 300-page PDF against the time a run's first pack takes.

Generates a report PDF of ``--pages`` pages with a real text layer
(``blockbatch.devtools.pdfgen.report_pdf``: a heading, three paragraphs and three list items
a page; not timed), then times what ``starter.py run`` does with it before the run starts:

* **parse**: ``parse_document(data, "pdf")``, PDFium's text and boxes grouped into blocks
  (``--repeat`` times; median and max);
* **store**: ``repo.save_document`` into a throw-away Postgres (``fsync`` on, as in
  production), the blocks with their provenance in one transaction; a fresh database each
  time so every repeat inserts.

The first pack's time is read from ``bench/results/startup.json`` (``bench/startup.py``:
the simulator with its latency model of 500 ms + 12 ms per output token, packs of 10
blocks): the first pack sent, from the run's workflow start, plus the mean pack call. That
is what a user waits for the first answers; ingest happens before the run starts, so the
goal is ingest time below it. The markdown of the same text is timed beside it for scale.

    flock /tmp/blockbatch-bench.lock .venv/bin/python bench/ingest.py
    .venv/bin/python bench/ingest.py --pages 30 --repeat 1 --out /tmp/ingest.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS_DIR, Recorder, run_main
from blockbatch.core.ingest import parse_document
from blockbatch.devtools import stack
from blockbatch.devtools.pdfgen import report_pdf
from blockbatch.store import repo
from blockbatch.store.db import create_pool


def first_pack_s(path: Path) -> dict[str, Any]:
    """The first pack's answer time from the startup bench's runs (median over its runs)."""
    data = json.loads(path.read_text())
    runs = [r for r in data["runs"] if "first_pack_sent_s" in r]
    answered = [r["first_pack_sent_s"] + r["pack_call_s_mean"] for r in runs]
    return {
        "source": str(path.relative_to(path.parents[2])),
        "source_date": data["date"],
        "scenario": data["tables_markdown"][0].splitlines()[0].removeprefix("### "),
        "first_pack_sent_s": statistics.median(r["first_pack_sent_s"] for r in runs),
        "pack_call_s": statistics.median(r["pack_call_s_mean"] for r in runs),
        "first_pack_answered_s": round(statistics.median(answered), 3),
    }


def timed(fn: Any, repeat: int) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


async def store_times(blocks: list[Any], data: bytes, repeat: int, root: Path) -> list[float]:
    pg = stack.start_postgres(root / "pg", stack.free_port(), root / "pg.log")
    try:
        times = []
        for i in range(repeat):
            stack.ensure_database(pg, f"ingest{i}")
            pool = await create_pool(pg.url(f"ingest{i}"), max_size=2)
            try:
                async with pool.acquire() as conn:
                    t0 = time.perf_counter()
                    await repo.save_document(conn, "report.pdf", "pdf", data, blocks)
                    times.append(time.perf_counter() - t0)
            finally:
                await pool.close()
        return times
    finally:
        stack.stop_postgres(pg.data_dir)


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("ingest", args)
    t0 = time.perf_counter()
    data = report_pdf(args.pages)
    made_s = time.perf_counter() - t0
    parse, blocks = timed(lambda: parse_document(data, "pdf"), args.repeat)
    pages = max(b.provenance.page for b in blocks)
    markdown = "\n\n".join(
        ("#" * b.metadata.get("level", 1) + " " if b.block_type == "heading" else "")
        + ("- " if b.block_type == "list_item" else "")
        + b.block_content
        for b in blocks
    ).encode()
    md_parse, md_blocks = timed(lambda: parse_document(markdown, "markdown"), args.repeat)
    root = Path(tempfile.mkdtemp(prefix="bb-bench-ingest-"))
    try:
        store = await store_times(blocks, data, args.repeat, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    first = first_pack_s(RESULTS_DIR / "startup.json")
    total = statistics.median(parse) + statistics.median(store)
    rec.data["document"] = {
        "pages": pages,
        "bytes": len(data),
        "blocks": len(blocks),
        "block_types": dict(Counter(b.block_type for b in blocks)),
        "generated_s": round(made_s, 3),
        "markdown_bytes": len(markdown),
        "markdown_blocks": len(md_blocks),
    }
    rec.data["parse_s"] = [round(t, 4) for t in parse]
    rec.data["markdown_parse_s"] = [round(t, 4) for t in md_parse]
    rec.data["store_s"] = [round(t, 4) for t in store]
    rec.data["ingest_s_median"] = round(total, 4)
    rec.data["first_pack"] = first
    rec.data["ingest_share_of_first_pack"] = round(total / first["first_pack_answered_s"], 4)
    rec.print_table(
        f"Ingest of a {pages}-page PDF ({len(data) // 1024} KiB, {len(blocks)} blocks), "
        f"{args.repeat} runs",
        ["step", "median s", "max s", "per page ms"],
        [
            ("parse (PDFium + grouping)", statistics.median(parse), max(parse),
             1000 * statistics.median(parse) / pages),
            ("store (save_document, fsync on)", statistics.median(store), max(store),
             1000 * statistics.median(store) / pages),
            ("ingest (parse + store)", total, max(parse) + max(store), 1000 * total / pages),
            ("same text as markdown: parse", statistics.median(md_parse), max(md_parse),
             1000 * statistics.median(md_parse) / pages),
        ],
        [
            (
                f"first pack answered: {first['first_pack_answered_s']} s after the run starts "
                f"(sent at {first['first_pack_sent_s']} s + a {first['pack_call_s']} s call; "
                f"from {first['source']}, {first['source_date']}, not re-measured here)."
            ),
            f"ingest is {100 * total / first['first_pack_answered_s']:.1f}% of it.",
        ],
    )  # fmt: skip
    rec.write()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each step")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "ingest.json")
    sys.exit(run_main(main, parser.parse_args()))
