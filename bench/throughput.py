"""Orchestration overhead: blocks and packs per second at zero model latency.

The simulator answers at once (``speed_factor`` 0), so what is measured is blockbatch's
own cost per pack: Temporal (RunWorkflow fan-out, ProcessPack child, two activities),
Postgres (ledger rows, overlay writes) and the HTTP round trip to the simulator. Next to
it, in the same process, on the same Temporal server and at the same concurrency, the
reference: bare child workflows that each run one no-op activity (``bench/reference.py``),
measured before and after the pipeline runs. Our packs/s as a fraction of the reference's
children/s is the figure of merit.

    .venv/bin/python bench/throughput.py                       # 1,000 and 10,000 blocks
    .venv/bin/python bench/throughput.py --blocks 20 --reference-children 20 --out /tmp/t.json
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.worker import Worker

from bench.common import (
    BenchStack,
    Recorder,
    common_args,
    cpu_delta,
    handbook_document,
    ledger_figures,
    new_pool,
    run_main,
    run_once,
    sample_schema,
)
from bench.reference import RefChildWorkflow, RefInput, RefParentWorkflow, noop
from blockbatch.core.run_types import RunOptions
from blockbatch.runtime.process import exit_process
from blockbatch.runtime.temporal import WORKFLOW_RUNNER, build_worker

# The slot counts build_worker gives a blockbatch worker (read, not copied, so the reference
# follows them when they change).
_BUILD_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(build_worker).parameters.items()
    if name in ("max_concurrent_activities", "max_concurrent_workflow_tasks")
}


async def reference(
    bs: BenchStack, children: int, concurrency: int, parallel_starts: bool = True
) -> dict[str, Any]:
    """Children per second of bare child workflows with one no-op activity each."""
    task_queue = f"bench-ref-{uuid.uuid4().hex[:6]}"
    worker = Worker(
        bs.bb.client,
        task_queue=task_queue,
        workflows=[RefParentWorkflow, RefChildWorkflow],
        activities=[noop],
        # The same slot counts and workflow runner (no sandbox) build_worker gives a
        # blockbatch worker.
        workflow_runner=WORKFLOW_RUNNER,
        **_BUILD_DEFAULTS,
    )
    async with worker:
        before = bs.cpu_snapshot()
        started = time.monotonic()
        result = await bs.bb.client.execute_workflow(
            RefParentWorkflow.run,
            RefInput(count=children, concurrency=concurrency, parallel_starts=parallel_starts),
            id=f"bench-ref-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        wall = time.monotonic() - started
        cpu = cpu_delta(before, bs.cpu_snapshot())
    assert result.done == children
    return {
        "children": children,
        "concurrency": concurrency,
        "starts": "parallel" if parallel_starts else "sequential",
        "wall_s": round(wall, 2),
        "children_per_s": children / wall,
        "ms_per_child": 1000 * wall / children,
        "cpu_s": cpu,
    }


async def pipeline(
    bs: BenchStack, pool: Any, blocks: int, schema_id: str, concurrency: int
) -> dict[str, Any]:
    document_id = await bs.bb.ingest_bytes(
        handbook_document(blocks), name=f"handbook-{blocks}.md", fmt="markdown"
    )
    bs.sim_reset()
    before = bs.cpu_snapshot()
    timed = await run_once(
        bs,
        document_id,
        schema_id,
        RunOptions(max_concurrent_packs=concurrency, reuse_answers=False),
    )
    cpu = cpu_delta(before, bs.cpu_snapshot())
    figures = await ledger_figures(pool, timed.run_id)
    packs = figures["pack_count"]
    return {
        "blocks": blocks,
        "run_id": timed.run_id,
        "status": timed.result.status,
        "concurrency": concurrency,
        "packs": packs,
        "calls": figures["calls_ok"],
        "split_events": figures["split_events"],
        "largest_pack": figures["largest_pack"],
        "blocks_ok": figures["blocks"].get("ai_complete", 0),
        "wall_s": round(timed.wall_s, 2),
        "blocks_per_s": blocks / timed.wall_s,
        "packs_per_s": packs / timed.wall_s,
        "ms_per_pack": 1000 * timed.wall_s / packs,
        "cpu_s": cpu,
    }


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("throughput", args)
    async with BenchStack(
        "throughput",
        fsync=args.fsync,
        temporal_file=args.temporal_file,
        scenario={"speed_factor": 0.0},
        keep=args.keep,
    ) as bs:
        rec.data["stack"] = bs.describe()
        rec.data["stack"]["workers"] = (
            "one in-process worker (build_worker defaults: "
            f"{_BUILD_DEFAULTS['max_concurrent_activities']} activity slots, "
            f"{_BUILD_DEFAULTS['max_concurrent_workflow_tasks']} workflow-task slots; the "
            "reference's worker has the same; Postgres pool of "
            f"{bs.settings.worker_db_pool_size}, as worker.py), sharing the process with "
            "the reference's in-process worker"
        )
        pool = await new_pool(bs, bs.settings.worker_db_pool_size)
        try:
            schema_id = await bs.bb.add_schema(sample_schema("extract"))
            refs = [await reference(bs, args.reference_children, args.concurrency)]
            print(f"reference: {refs[-1]['children_per_s']:.1f} children/s", flush=True)
            refs.append(
                await reference(
                    bs, args.reference_children, args.concurrency, parallel_starts=False
                )
            )
            print(
                f"reference, sequential starts: {refs[-1]['children_per_s']:.1f} children/s",
                flush=True,
            )
            runs = []
            async with bs.inprocess_worker(pool):
                for blocks in args.blocks:
                    run = await pipeline(bs, pool, blocks, schema_id, args.concurrency)
                    runs.append(run)
                    print(
                        f"{blocks} blocks: {run['packs_per_s']:.2f} packs/s, "
                        f"{run['blocks_per_s']:.0f} blocks/s",
                        flush=True,
                    )
            refs.append(await reference(bs, args.reference_children, args.concurrency))
            print(f"reference: {refs[-1]['children_per_s']:.1f} children/s", flush=True)
        finally:
            await pool.close()

    ceilings = [r["children_per_s"] for r in refs if r["starts"] == "parallel"]
    ceiling = sum(ceilings) / len(ceilings)
    ref_ms = 1000 / ceiling
    for run in runs:
        run["fraction_of_ceiling"] = run["packs_per_s"] / ceiling
        run["overhead_ms_per_pack_over_reference"] = run["ms_per_pack"] - ref_ms
    rec.data.update(
        reference=refs,
        ceiling_children_per_s=ceiling,
        runs=runs,
        schema="samples/extract.json (as shipped)",
    )
    rows = [
        [
            f"reference, {r['starts']} starts ({r['children']:,} children)",
            "",
            "",
            "",
            f"{r['wall_s']:.1f}",
            "",
            f"{r['children_per_s']:.1f}",
            f"{r['children_per_s'] / ceiling:.0%}",
            f"{r['ms_per_child']:.1f}",
            "",
            _cpu(r["cpu_s"]),
        ]
        for r in refs
    ]
    rows += [
        [
            f"blockbatch {r['blocks']:,} blocks",
            r["packs"],
            r["calls"],
            r["split_events"],
            f"{r['wall_s']:.1f}",
            f"{r['blocks_per_s']:.0f}",
            f"{r['packs_per_s']:.2f}",
            f"{r['fraction_of_ceiling']:.0%}",
            f"{r['ms_per_pack']:.1f}",
            f"{r['overhead_ms_per_pack_over_reference']:.1f}",
            _cpu(r["cpu_s"]),
        ]
        for r in runs
    ]
    rec.print_table(
        f"Orchestration overhead (zero model latency, concurrency {args.concurrency})",
        [
            "what",
            "packs",
            "calls",
            "splits",
            "wall s",
            "blocks/s",
            "packs/s (children/s)",
            "of ceiling",
            "ms per pack",
            "ms over reference",
            ("CPU s (worker+bench / temporal / postgres / simulator)"),
        ],
        rows,
        [
            (
                f"Ceiling: {ceiling:.1f} children/s (mean of the parallel-start reference before "
                "and after the pipeline runs). "
                "'ms per pack' is wall time / packs, with up to "
                f"{args.concurrency} packs in flight."
            )
        ],
    )
    rec.write()
    return 0 if all(r["status"] == "completed" for r in runs) else 1


def _cpu(cpu: dict[str, float]) -> str:
    return " / ".join(
        f"{cpu.get(k, 0):.0f}" for k in ("bench_process", "temporal", "postgres", "simulator")
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument(
        "--reference-children",
        type=int,
        default=1_000,
        help="children of each reference measurement (default %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=RunOptions().max_concurrent_packs,
        help="max_concurrent_packs, and the reference's concurrency "
        "(default: the RunOptions default, %(default)s)",
    )
    common_args(parser, "throughput")
    return parser.parse_args(argv)


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
