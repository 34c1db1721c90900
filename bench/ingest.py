"""Ingest of a 300-page PDF against the time a run's first pack takes.

Generates a report PDF of ``--pages`` pages with a real text layer
(``blockbatch.devtools.pdfgen.report_pdf``: a heading, three paragraphs and three list items
a page; not timed), then times what ``starter.py run`` does with it before the run starts:

* **parse**: ``parse_document(data, "pdf")``, PDFium's text and boxes grouped into blocks
  (``--repeat`` times; median and max);
* **store**: ``repo.save_document`` into the stack's Postgres (``fsync`` on, as in
  production), the blocks with their provenance in one transaction (once: the same bytes
  are the same document).

Then it runs the document (samples/extract.json, one ``worker.py``) on a throw-away stack
(``bench.common.BenchStack``: embedded Postgres, Temporal dev server, the simulator with its
default scenario, as `make demo` has it) and reads from the ledger when the first pack was
answered and applied, counted from the run row's creation. For scale, the first pack of
``bench/results/startup.json`` is shown too: the simulator with a latency model of 500 ms +
12 ms per output token, read from that file, not re-measured. Ingest happens before the run
starts; the goal is ingest time below the first pack's.

    flock /tmp/blockbatch-bench.lock .venv/bin/python bench/ingest.py
    .venv/bin/python bench/ingest.py --pages 30 --repeat 1 --out /tmp/ingest.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS_DIR, ROOT, BenchStack, Recorder, new_pool, run_main
from blockbatch.core.ingest import parse_document
from blockbatch.core.run_types import RunOptions
from blockbatch.devtools.pdfgen import report_pdf

FIRST_PACK_SQL = """
select extract(epoch from min(c.finished_at) - r.created_at) as answered_s,
       extract(epoch from min(c.applied_at) - r.created_at) as applied_s
from runs r join llm_calls c using (run_id)
where r.run_id = $1 and c.purpose = 'pack'
group by r.created_at
"""


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


def timed(fn: Any, repeat: int, cpu: list[float] | None = None) -> tuple[list[float], Any]:
    """Wall times of ``repeat`` calls (and this process's CPU times into ``cpu``: on a
    machine shared with other work the wall time also counts waiting for a core)."""
    times, result = [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    return times, result


async def run_it(bs: BenchStack, data: bytes, blocks: list[Any]) -> dict[str, Any]:
    """Store the document (timed), run it to the end, read the first pack from the ledger."""
    t0 = time.perf_counter()
    document_id = await bs.bb.ingest_blocks(data, blocks, name="report.pdf", fmt="pdf")
    store_s = time.perf_counter() - t0
    schema_id = await bs.bb.add_schema(ROOT / "samples" / "extract.json")
    await bs.start_workers(1)
    run_id = await bs.bb.start_run(document_id, schema_id, RunOptions())
    result = await asyncio.wait_for(bs.bb.wait(run_id), 600)
    pool = await new_pool(bs, 2)
    try:
        row = await pool.fetchrow(FIRST_PACK_SQL, run_id)
    finally:
        await pool.close()
    return {
        "store_s": round(store_s, 4),
        "run_id": run_id,
        "status": result.status,
        "first_pack_answered_s": round(float(row["answered_s"]), 3),
        "first_pack_applied_s": round(float(row["applied_s"]), 3),
    }


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("ingest", args)
    t0 = time.perf_counter()
    data = report_pdf(args.pages)
    made_s = time.perf_counter() - t0
    parse_cpu: list[float] = []
    parse, blocks = timed(lambda: parse_document(data, "pdf"), args.repeat, parse_cpu)
    pages = max(b.provenance.page for b in blocks)
    markdown = "\n\n".join(
        ("#" * b.metadata.get("level", 1) + " " if b.block_type == "heading" else "")
        + ("- " if b.block_type == "list_item" else "")
        + b.block_content
        for b in blocks
    ).encode()
    md_parse, md_blocks = timed(lambda: parse_document(markdown, "markdown"), args.repeat)
    async with BenchStack("ingest") as bs:
        rec.data["stack"] = bs.describe()
        measured = await run_it(bs, data, blocks)
    first = first_pack_s(RESULTS_DIR / "startup.json")
    store = measured["store_s"]
    total = statistics.median(parse) + store
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
    rec.data["parse_cpu_s"] = [round(t, 4) for t in parse_cpu]
    rec.data["parse_pages_per_s"] = round(pages / statistics.median(parse), 1)
    rec.data["parse_pages_per_cpu_s"] = round(pages / statistics.median(parse_cpu), 1)
    rec.data["markdown_parse_s"] = [round(t, 4) for t in md_parse]
    rec.data["store_s"] = store
    rec.data["ingest_s"] = round(total, 4)
    rec.data["run"] = measured
    rec.data["first_pack_with_latency_model"] = first
    rec.data["ingest_share_of_first_pack"] = round(total / measured["first_pack_answered_s"], 4)
    rec.print_table(
        f"Ingest of a {pages}-page PDF ({len(data) // 1024} KiB, {len(blocks)} blocks)",
        ["step", "s", "per page ms"],
        [
            (f"parse (PDFium + layout), median of {args.repeat}", statistics.median(parse),
             1000 * statistics.median(parse) / pages),
            ("parse, this process's CPU time, median", statistics.median(parse_cpu),
             1000 * statistics.median(parse_cpu) / pages),
            ("store (save_document, fsync on), once", store, 1000 * store / pages),
            ("ingest (parse + store)", total, 1000 * total / pages),
            (f"same text as markdown: parse, median of {args.repeat}",
             statistics.median(md_parse), 1000 * statistics.median(md_parse) / pages),
            ("run's first pack answered (this run, default simulator)",
             measured["first_pack_answered_s"], ""),
            ("run's first pack applied (this run, default simulator)",
             measured["first_pack_applied_s"], ""),
            ("first pack answered, simulator with a latency model (startup.json)",
             first["first_pack_answered_s"], ""),
        ],
        [
            ("First pack: from the run row's creation to the first pack call's answer (ledger "
            f"finished_at) and its overlays written (applied_at); run {measured['run_id']} "
            f"{measured['status']}."),
            (f"Latency model: {first['source']} ({first['source_date']}): sent at "
            f"{first['first_pack_sent_s']} s + a {first['pack_call_s']} s call, not re-measured."),
            (f"Parse: {pages / statistics.median(parse):.0f} pages/s "
            f"({pages / statistics.median(parse_cpu):.0f} per CPU second)."),
            (f"Ingest is {100 * total / measured['first_pack_answered_s']:.0f}% of this run's "
            f"first pack and {100 * total / first['first_pack_answered_s']:.1f}% of the "
            "latency-modelled one."),
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
