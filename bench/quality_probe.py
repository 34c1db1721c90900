"""The quality probe and the quality gate inside runs, on the simulator's quality model.

Three sections, one function each:

* ``estimate``: the probe's estimate of block-level disagreement (its 95% Wilson interval)
  against the simulator's true rate (``/_sim/stats`` quality: blocks its answers altered,
  over every pack call of two or more blocks) at three pack sizes, on a document whose
  answers go wrong more often in larger packs and further down a pack. The probe's rate is
  raised (``--estimate-rate``) so each size has a few dozen samples, and its cost cap is
  lifted (``probe_max_share=1``): the cap would cut that sample back to a share of the
  run's cost, and this section measures the estimate, not the cost (the ``cost`` section
  measures that, at the defaults).
* ``gate``: the same document where large packs degrade more, at a fixed pack size of 40,
  without a gate, with ``min_agreement`` (``--target``) and re-asks (the default), and with
  the gate but ``reask=False``: the true disagreement over every call and of the final
  answers (the calls of the settled size or smaller: with re-asks, every block's answer
  comes from one), the cost, the blocks re-asked and the pack size the run settled on.
* ``cost``: the probe at its defaults (3%, at least 5, capped at 5% of the run's expected
  cost) on the cost suites
  (bench/cost.py's document and schemas, automatic sizing, its ``--system-tokens`` prompt):
  the probe's calls and cost as a share of the run's, and the run's cost against the same run
  without the probe. The simulator's quality model is off here (the parity scenario).

    .venv/bin/python bench/quality_probe.py
    .venv/bin/python bench/quality_probe.py --blocks 200 --sections estimate cost
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
    new_pool,
    run_main,
    run_once,
    sample_schema,
)
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.runtime.process import exit_process

SECTIONS = ("estimate", "gate", "cost")
#: The estimate's document: answers go wrong with pack size beyond 5 and with position.
ESTIMATE_QUALITY = {
    "enabled": True,
    "free_blocks": 5,
    "skip_per_extra_block": 0,
    "bleed_per_extra_block": 0,
    "wrong_base": 0.02,
    "wrong_per_extra_block": 0.003,
    "wrong_per_position": 0.002,
}
#: The gate's document: large packs degrade fast (packs of 40: about 40% wrong).
GATE_QUALITY = {
    "enabled": True,
    "free_blocks": 5,
    "skip_per_extra_block": 0,
    "bleed_per_extra_block": 0,
    "wrong_base": 0.01,
    "wrong_per_extra_block": 0.01,
    "wrong_per_position": 0.002,
}


def true_rate(stats: dict[str, Any]) -> tuple[int, int]:
    """``(answered, altered)`` over the simulator's pack calls of two or more blocks."""
    sizes = stats["quality"]["by_pack_size"]
    answered = sum(v["answered"] for s, v in sizes.items() if int(s) >= 2)
    altered = sum(v["altered"] for s, v in sizes.items() if int(s) >= 2)
    return answered, altered


def final_rate(stats: dict[str, Any], settled: int) -> dict[str, Any]:
    """Answered and altered blocks over the simulator's calls of 2 to ``settled`` blocks."""
    sizes = stats["quality"]["by_pack_size"]
    answered = sum(v["answered"] for s, v in sizes.items() if 2 <= int(s) <= settled)
    altered = sum(v["altered"] for s, v in sizes.items() if 2 <= int(s) <= settled)
    return {
        "answered": answered,
        "altered": altered,
        "disagreement": round(altered / answered, 4) if answered else None,
    }


def probe_figures(result: RunResult) -> dict[str, Any]:
    q = result.quality
    if q is None:  # nothing sampled (the cost cap can leave a small run no probe)
        return {
            "sampled": 0,
            "agreeing": 0,
            "failed": 0,
            "disagreement": None,
            "ci": None,
            "probe_calls": 0,
            "probe_cost_usd": 0.0,
            "pack_size": None,
            "gate": [],
            "text": None,
            "sample_wanted": None,
            "sample_planned": 0,
            "sample_capped": None,
            "probe_rate": None,
            "blocks_reasked": 0,
            "by_pack_size": {},
        }
    a = q.agreement
    return {
        "sampled": q.sampled,
        "agreeing": a.agreeing,
        "failed": q.failed,
        "disagreement": None if a.rate is None else round(1 - a.rate, 4),
        "ci": None
        if a.low is None or a.high is None
        else [round(1 - a.high, 4), round(1 - a.low, 4)],
        "probe_calls": q.probe_calls,
        "probe_cost_usd": q.probe_cost_usd,
        "pack_size": q.pack_size,
        "gate": q.gate,
        "text": q.text,
        "sample_wanted": q.sample_wanted,
        "sample_planned": q.sample_planned,
        "sample_capped": q.sample_capped,
        "probe_rate": q.probe_rate,
        "blocks_reasked": q.blocks_reasked,
        "by_pack_size": {k: v.model_dump() for k, v in q.by_pack_size.items()},
    }


async def _run(
    bs: BenchStack,
    document_id: str,
    schema_id: str,
    options: RunOptions,
    scenario: dict[str, Any],
    timeout_s: float,
) -> dict[str, Any]:
    bs.sim_reset(scenario)
    timed = await run_once(bs, document_id, schema_id, options, timeout_s=timeout_s)
    stats = bs.sim_stats()
    answered, altered = true_rate(stats)
    r = timed.result
    settled = r.quality.pack_size if r.quality is not None else None
    final = final_rate(stats, settled) if settled else None
    return {
        "run_id": r.run_id,
        "status": r.status,
        "blocks": r.blocks_ai_complete,
        "calls": r.calls,
        "cost_usd": round(r.cost_usd, 6),
        "wall_s": round(timed.wall_s, 1),
        "true": {
            "answered": answered,
            "altered": altered,
            "disagreement": round(altered / answered, 4) if answered else None,
        },
        "final": final,
        "probe": probe_figures(r),
    }


async def estimate(
    bs: BenchStack, rec: Recorder, document_id: str, schema_id: str, args: argparse.Namespace
) -> dict[str, Any]:
    """The probe's estimate against the simulator's true disagreement, at three sizes."""
    out: dict[str, Any] = {}
    rows = []
    for seed in args.seeds:
        for size in args.sizes:
            options = RunOptions(
                pack_size=size,
                reuse_answers=False,
                quality=QualityOptions(probe_rate=args.estimate_rate, probe_max_share=1.0),
            )
            got = await _run(
                bs,
                document_id,
                schema_id,
                options,
                {"seed": seed, "quality": ESTIMATE_QUALITY},
                args.run_timeout,
            )
            p, t = got["probe"], got["true"]
            inside = (
                p.get("ci") is not None
                and t["disagreement"] is not None
                and p["ci"][0] <= t["disagreement"] <= p["ci"][1]
            )
            got["truth_inside_ci"] = inside
            out[f"seed{seed}/pack{size}"] = got
            rows.append(
                [
                    seed,
                    size,
                    p["sampled"],
                    p.get("disagreement"),
                    f"{100 * p['ci'][0]:.1f}-{100 * p['ci'][1]:.1f}%" if p.get("ci") else "-",
                    t["disagreement"],
                    "yes" if inside else "NO",
                ]
            )
            print(
                f"  estimate seed {seed} pack {size}: probe {p.get('disagreement')} "
                f"CI {p.get('ci')}, true {t['disagreement']}",
                flush=True,
            )
    rec.print_table(
        f"probe estimate vs true disagreement ({args.blocks} blocks, probe rate "
        f"{args.estimate_rate:.0%})",
        [
            "seed",
            "pack size",
            "sampled",
            "probe: disagreement",
            "95% CI",
            "true rate",
            "truth in CI",
        ],
        rows,
        [
            (
                "True rate: the simulator's altered answers over its pack calls of 2+ blocks "
                "(/_sim/stats quality); the probe compares a sample's packed answers with their "
                "answers alone, field by field (blockbatch/core/agreement.py)."
            )
        ],
    )
    return out


async def gate(
    bs: BenchStack, rec: Recorder, document_id: str, schema_id: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Large packs degrade: the run at 40 without a gate and with ``--target``."""
    scenario = {"seed": args.seeds[0], "quality": GATE_QUALITY}
    out = {
        "no_gate": await _run(
            bs,
            document_id,
            schema_id,
            RunOptions(pack_size=40, reuse_answers=False),
            scenario,
            args.run_timeout,
        ),
        "gate": await _run(
            bs,
            document_id,
            schema_id,
            RunOptions(
                pack_size=40, reuse_answers=False, quality=QualityOptions(min_agreement=args.target)
            ),
            scenario,
            args.run_timeout,
        ),
        "gate_no_reask": await _run(
            bs,
            document_id,
            schema_id,
            RunOptions(
                pack_size=40,
                reuse_answers=False,
                quality=QualityOptions(min_agreement=args.target, reask=False),
            ),
            scenario,
            args.run_timeout,
        ),
    }
    rows = []
    for label, got in out.items():
        p, t = got["probe"], got["true"]
        f = got["final"] or {}
        rows.append(
            [
                label,
                got["status"],
                t["disagreement"],
                f.get("disagreement"),
                f.get("answered"),
                p.get("disagreement"),
                p.get("pack_size"),
                p.get("blocks_reasked", 0),
                got["calls"],
                got["cost_usd"],
                p.get("probe_cost_usd"),
                "; ".join(p.get("gate") or []) or "-",
            ]
        )
        print(
            f"  gate {label}: true {t['disagreement']}, settled {p.get('pack_size')}, "
            f"${got['cost_usd']:.4f}",
            flush=True,
        )
    rec.print_table(
        f"quality gate (quality.min_agreement={args.target}) at pack size 40 ({args.blocks} blocks)",
        [
            "run",
            "status",
            "true disagreement (every call)",
            "true disagreement (final)",
            "final answers counted",
            "probe's",
            "settled pack size",
            "blocks re-asked",
            "calls",
            "cost $",
            "probe $",
            "gate",
        ],
        rows,
        [
            (
                "True disagreement (every call): over every pack call of the run, re-asked "
                "answers included. (final): over the calls of the settled size or smaller, whose "
                "answers are the run's final ones (with re-asks, every block's; without, the "
                "blocks answered before the gate are missing from it and keep their larger "
                "packs' answers)."
            )
        ],
    )
    return out


async def cost(
    bs: BenchStack, rec: Recorder, pool: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """The probe's cost at its default rate on the cost suites (quality model off)."""
    out: dict[str, Any] = {}
    rows = []
    document_id = await bs.bb.ingest_bytes(
        handbook_document(args.cost_blocks), name=f"handbook-{args.cost_blocks}.md", fmt="markdown"
    )
    for name in ("extract", "revise"):
        schema_id = await bs.bb.add_schema(sample_schema(name, args.system_tokens))
        without = await _run(
            bs,
            document_id,
            schema_id,
            RunOptions(reuse_answers=False, quality=QualityOptions(probe_rate=0)),
            {"seed": 0},
            args.run_timeout,
        )
        with_probe = await _run(
            bs,
            document_id,
            schema_id,
            RunOptions(reuse_answers=False),
            {"seed": 0},
            args.run_timeout,
        )
        p = with_probe["probe"]
        share = p["probe_cost_usd"] / with_probe["cost_usd"] if with_probe["cost_usd"] else None
        added = (with_probe["cost_usd"] / without["cost_usd"] - 1) if without["cost_usd"] else None
        out[name] = {
            "without": without,
            "with": with_probe,
            "probe_share": None if share is None else round(share, 4),
            "added_over_without": None if added is None else round(added, 4),
        }
        rows.append(
            [
                name,
                f"{p['sampled']} of {p.get('sample_wanted')}"
                + (" (capped)" if p.get("sample_capped") else ""),
                p["probe_calls"],
                p["probe_cost_usd"],
                with_probe["cost_usd"],
                f"{100 * share:.1f}%" if share is not None else "-",
                without["cost_usd"],
                f"{100 * added:+.1f}%" if added is not None else "-",
            ]
        )
        print(
            f"  cost {name}: probe ${p['probe_cost_usd']:.4f} of ${with_probe['cost_usd']:.4f}"
            f" ({share:.1%})",
            flush=True,
        )
    rec.print_table(
        f"the probe's cost at its defaults (3%, at least 5, capped at 5% of the run's "
        f"expected cost): {args.cost_blocks} blocks, "
        f"{args.system_tokens:,}-token prompts, automatic sizing",
        [
            "schema",
            "sampled",
            "probe calls",
            "probe $",
            "run $",
            "probe's share",
            "run without probe $",
            "with vs without",
        ],
        rows,
    )
    return out


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("quality_probe", args)
    async with BenchStack(
        "quality", fsync=args.fsync, temporal_file=args.temporal_file, keep=args.keep
    ) as bs:
        rec.data["stack"] = bs.describe()
        pool = await new_pool(bs)
        try:
            async with bs.inprocess_worker(pool):
                document_id = await bs.bb.ingest_bytes(
                    handbook_document(args.blocks),
                    name=f"handbook-{args.blocks}.md",
                    fmt="markdown",
                )
                schema_id = await bs.bb.add_schema(sample_schema("extract", 2000))
                if "estimate" in args.sections:
                    rec.data["estimate"] = await estimate(bs, rec, document_id, schema_id, args)
                if "gate" in args.sections:
                    rec.data["gate"] = await gate(bs, rec, document_id, schema_id, args)
                if "cost" in args.sections:
                    rec.data["cost"] = await cost(bs, rec, pool, args)
        finally:
            await pool.close()
    rec.write()
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument(
        "--blocks", type=int, default=600, help="blocks of the estimate's and the gate's document"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 20, 40])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument(
        "--estimate-rate",
        type=float,
        default=0.1,
        help="the probe's rate in the estimate section (default %(default)s)",
    )
    parser.add_argument(
        "--target", type=float, default=0.95, help="the gate's min_agreement (default %(default)s)"
    )
    parser.add_argument("--cost-blocks", type=int, default=200)
    parser.add_argument("--system-tokens", type=int, default=25_000)
    parser.add_argument("--run-timeout", type=float, default=900.0)
    common_args(parser, "quality_probe")
    return parser.parse_args(argv)


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
