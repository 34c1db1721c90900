"""Does packing cost quality, and do we measure it right? The simulator wrong like a model.

The simulator's quality model (``blockbatch/simulator/README.md``, "Wrong like a model") is on: a block
in a pack of ``n`` at position ``k`` gets one plausible, valid, wrong field with probability
``wrong_per_extra_block * max(0, n - free_blocks) + wrong_per_position * (k - 1)``, a call
of one block is always right, and ``/_sim/stats`` reports what it injected: the TRUE
disagreement with the single answer, per pack size. At each of ``--seeds`` simulator seeds
(each seed draws other wrong blocks), on a synthetic document of ``--blocks`` distinct
blocks with ``samples/extract.json``, one section per question:

* :func:`calibration_section`: ``calibrate`` with ``--sample`` blocks at ``--sizes`` and
  ``--target``; then the whole document is run at each size (fixed pack size, no reuse)
  and the simulator's true disagreement of that run is read. Per seed and size: the
  agreement calibrate measured with its 95% interval, the true agreement on the whole
  document, and whether the truth is inside the interval; the recommended size and
  whether the whole run at that size really meets the target.

Each section is one function taking the stack, the recorder and the arguments, so a
section (the run's own probe, the quality gate) can be added next to it.

    flock /tmp/blockbatch-bench.lock .venv/bin/python bench/quality.py
    .venv/bin/python bench/quality.py --seeds 1 --blocks 100 --sample 40 --out /tmp/q.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    SAMPLES,
    BenchStack,
    Recorder,
    common_args,
    new_pool,
    pct,
    run_main,
    run_once,
)
from blockbatch.core.agreement import Tally
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from blockbatch.devtools.synthetic import markdown_document
from blockbatch.runtime.process import exit_process

#: The quality model of every section: right alone and in packs of up to 5 blocks, then
#: wrong more often with each block beyond 5 and with each place further down the pack.
FREE_BLOCKS = 5
PER_EXTRA_BLOCK = 0.001
PER_POSITION = 0.0015


def scenario(seed: int) -> dict[str, Any]:
    """The simulator's scenario: the quality model's wrong answers only (no skips, no
    whole-result bleeds, no errors), at zero latency."""
    return {
        "seed": seed,
        "quality": {
            "enabled": True,
            "free_blocks": FREE_BLOCKS,
            "skip_per_extra_block": 0.0,
            "bleed_per_extra_block": 0.0,
            "wrong_per_extra_block": PER_EXTRA_BLOCK,
            "wrong_per_position": PER_POSITION,
        },
    }


def expected_agreement(size: int) -> float:
    """The model's mean agreement over a full pack of ``size`` (what the dice average to)."""
    if size < 2:
        return 1.0
    p = [PER_EXTRA_BLOCK * max(0, size - FREE_BLOCKS) + PER_POSITION * k for k in range(size)]
    return 1 - sum(min(1.0, x) for x in p) / size


def true_agreement(stats: dict[str, Any], size: int) -> Tally:
    """The simulator's truth for calls of ``size`` blocks: agreed = answered - altered."""
    seen = stats["quality"]["by_pack_size"].get(str(size), {"answered": 0, "altered": 0})
    return Tally(agreed=seen["answered"] - seen["altered"], total=seen["answered"])


async def calibration_section(
    bs: BenchStack,
    rec: Recorder,
    args: argparse.Namespace,
    document: Path,
    schema: Path,
    document_id: str,
    schema_id: str,
) -> None:
    """Calibrate, then run the whole document at each size: measured against true."""
    sizes = [int(s) for s in args.sizes.split(",")]
    per_seed: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    for seed in range(1, args.seeds + 1):
        bs.sim_reset(scenario(seed))
        cal = await bs.bb.calibrate(
            document, schema, sample=args.sample, sizes=sizes, target=args.target
        )
        sample_truth = bs.sim_stats()
        runs: dict[int, dict[str, Any]] = {}
        for size in sizes:
            bs.sim_reset()
            options = RunOptions(
                pack_size=size,
                reuse_answers=False,
                quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
            )
            timed = await run_once(bs, document_id, schema_id, options)
            truth = true_agreement(bs.sim_stats(), size)
            runs[size] = {
                "run_id": timed.run_id,
                "calls": timed.result.calls,
                "cost_usd": timed.result.cost_usd,
                "answered": truth.total,
                "agreed": truth.agreed,
                "true_agreement": truth.rate,
            }
        measured = {r.size: r for r in cal.sizes}
        seed_out: dict[str, Any] = {
            "seed": seed,
            "calibration": cal.model_dump(mode="json"),
            "recommended": cal.recommended,
            "sizes": {},
        }
        for size in sizes:
            m, full = measured[size], runs[size]
            sample_true = true_agreement(sample_truth, size)
            inside = (
                m.ci_low is not None
                and m.ci_high is not None
                and full["true_agreement"] is not None
                and m.ci_low <= full["true_agreement"] <= m.ci_high
            )
            mean_inside = (
                m.ci_low is not None
                and m.ci_high is not None
                and m.ci_low <= expected_agreement(size) <= m.ci_high
            )
            seed_out["sizes"][str(size)] = {
                "measured": m.rate,
                "ci": [m.ci_low, m.ci_high],
                "compared": m.compared,
                "sample_true": sample_true.rate,
                "document_true": full["true_agreement"],
                "expected": expected_agreement(size),
                "inside_ci": inside,
                "mean_inside_ci": mean_inside,
                "calibration_calls": m.calls,
                "calibration_cost_usd": m.cost_usd,
                "run": full,
            }
            rows.append(
                [
                    seed,
                    size,
                    f"{pct(m.rate)} of {m.compared}",
                    f"{pct(m.ci_low)}-{pct(m.ci_high)}",
                    pct(sample_true.rate),
                    f"{pct(full['true_agreement'])} of {full['answered']}",
                    "yes" if inside else "NO",
                    pct(expected_agreement(size)),
                    "yes" if mean_inside else "NO",
                    "*" if size == cal.recommended else "",
                ]
            )
        recommended = cal.recommended
        true_at = runs[recommended]["true_agreement"] if recommended else 1.0
        seed_out["recommended_true_agreement"] = true_at
        seed_out["recommended_meets_target"] = (true_at or 0) >= args.target
        seed_out["calibration_cost_usd"] = cal.cost_usd
        per_seed.append(seed_out)
        print(
            f"seed {seed}: recommended {recommended}, true agreement there "
            f"{pct(true_at)} (target {pct(args.target)}), calibration ${cal.cost_usd:.4f}",
            flush=True,
        )
    inside_all = sum(s["sizes"][str(n)]["inside_ci"] for s in per_seed for n in sizes)
    mean_all = sum(s["sizes"][str(n)]["mean_inside_ci"] for s in per_seed for n in sizes)
    met = sum(s["recommended_meets_target"] for s in per_seed)
    rec.data["calibration"] = {
        "sizes": sizes,
        "sample": args.sample,
        "target": args.target,
        "blocks": args.blocks,
        "seeds": per_seed,
        "true_inside_ci": inside_all,
        "mean_inside_ci": mean_all,
        "cases": len(per_seed) * len(sizes),
        "recommended_met_target": met,
    }
    rec.print_table(
        f"Calibration against the simulator's truth ({args.blocks}-block document, sample "
        f"{args.sample}, target {pct(args.target)})",
        [
            "seed",
            "size",
            "calibrate measured",
            "95% CI",
            "true on the sample",
            "true on the document",
            "in CI",
            "model's mean",
            "in CI",
            "recommended",
        ],
        rows,
        [
            (
                f"The document's true agreement is inside calibrate's 95% interval in {inside_all} "
                f"of {len(per_seed) * len(sizes)} cases, the model's mean in {mean_all}; a run at "
                f"the recommended size met the target at {met} of {len(per_seed)} seeds. 'True on "
                "the sample' is exact by construction (every injected wrong value disagrees); "
                "'true on the document' is the simulator's count over a whole run at that size, "
                "the population the sample estimates (itself one draw of the model: its blocks sit "
                "at other places in their packs than in the sample's); 'model's mean' is what the "
                "quality model's formula averages to over a full pack."
            )
        ],
    )


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("quality", args)
    rec.data["quality_model"] = {
        "free_blocks": FREE_BLOCKS,
        "wrong_per_extra_block": PER_EXTRA_BLOCK,
        "wrong_per_position": PER_POSITION,
        "expected_agreement": {s: expected_agreement(int(s)) for s in args.sizes.split(",")},
    }
    async with BenchStack(
        "quality",
        fsync=args.fsync,
        temporal_file=args.temporal_file,
        scenario=scenario(1),
        keep=args.keep,
    ) as bs:
        pool = await new_pool(bs)
        rec.data["stack"] = bs.describe()
        document = bs.root / "quality.md"
        document.write_bytes(markdown_document(args.blocks))
        schema = SAMPLES / "extract.json"
        document_id = await bs.bb.ingest_file(document)
        schema_id = await bs.bb.add_schema(json.loads(schema.read_text()))
        try:
            async with bs.inprocess_worker(pool):
                await calibration_section(bs, rec, args, document, schema, document_id, schema_id)
        finally:
            await pool.close()
    rec.write()
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="simulator seeds (default 3)")
    parser.add_argument(
        "--blocks", type=int, default=400, help="blocks of the synthetic document (default 400)"
    )
    parser.add_argument("--sample", type=int, default=100, help="calibrate's sample (default 100)")
    parser.add_argument("--sizes", default="5,20,50", help="pack sizes (default 5,20,50)")
    parser.add_argument(
        "--target", type=float, default=0.95, help="target agreement (default 0.95)"
    )
    common_args(parser, "quality")
    args = parser.parse_args(argv)
    # The simulator counts its truth per call size: every call of a size's runs must have
    # that size (no shorter last pack), so the truth of a size is one counter.
    for size in (int(s) for s in args.sizes.split(",")):
        if args.sample % size or args.blocks % size:
            parser.error(
                f"--sample {args.sample} and --blocks {args.blocks} must be "
                f"multiples of every size (not of {size})"
            )
    return args


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
