"""Which model, at which pack size? The simulator with per-model quality.

The simulator's quality model runs with the per-model rates of
``blockbatch.simulator.scenario.ASSUMED_MODEL_QUALITY`` (``blockbatch/simulator/README.md``,
"More than one model"): Haiku 5.5 wrong about 1% of blocks alone and far more in big packs,
Sonnet 5.5 rarely. **The rates are assumptions, not measurements of the real models**; what
this measures is whether blockbatch's machinery (calibrate across models, the probe on
another model) finds the truth the simulator hides, and what each choice costs. The truth
of a block is its computed answer (``blockbatch.simulator.content.block_result``); a run's
true disagreement is the share of its answered blocks whose answer differs from the truth
on any field (``blockbatch/core/agreement.py``'s rules), read from the run's overlays.

On a synthetic document of ``--blocks`` distinct blocks with ``samples/extract.json``:

* :func:`models_section` (seed 1): Sonnet 5.5 and Haiku 5.5 in packs of ``--pack-size``,
  and Sonnet 5.5 alone per block as the reference: true disagreement, cost, calls; then
  Haiku 5.5 packed with its quality probe alone on Haiku 5.5 and alone on Sonnet 5.5
  (``--probe-model``): the agreement each probe reports against the truth.
* :func:`escalation_section` (``--seeds`` seeds): Sonnet 5.5 packed, Haiku 5.5 packed and
  Haiku 5.5 packed with escalation to Sonnet 5.5 (``Blockbatch.escalate``,
  docs/ESCALATION.md), and Sonnet 5.5 alone: true disagreement, cost (the second pass and
  the escalation calls apart), calls, and the share of blocks escalated, by reason; the
  issue's bar is true error at or below Sonnet 5.5 packed's at 25% of its cost or less.
* :func:`calibrate_section` (``--seeds`` seeds): ``calibrate --models
  claude-haiku-5-5,claude-sonnet-5-5 --reference claude-sonnet-5-5``, then a whole-document
  run at the recommended (model, size): does it meet the target against the truth?

    flock /tmp/blockbatch-bench.lock .venv/bin/python bench/models.py
    .venv/bin/python bench/models.py --seeds 1 --blocks 120 --out /tmp/m.json
    .venv/bin/python bench/models.py --only escalation --out bench/results/models-escalation.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

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
from blockbatch.core.agreement import Tally, compare_properties
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from blockbatch.devtools.synthetic import markdown_document
from blockbatch.runtime.process import exit_process
from blockbatch.simulator.content import block_result
from blockbatch.simulator.prompt import Block
from blockbatch.simulator.scenario import ASSUMED_MODEL_QUALITY

HAIKU, SONNET = "claude-haiku-5-5", "claude-sonnet-5-5"
NO_PROBE = QualityOptions(probe_rate=0.0, probe_minimum=0)


def scenario(seed: int, repeat: float | None = None) -> dict[str, Any]:
    """The per-model quality model only (no skips, no whole-result bleeds, no errors);
    ``repeat``: every model's ``wrong_repeat`` (the share of its mistakes that repeat in
    every call) instead of the assumed rates' own."""
    models = {m: q.model_dump() for m, q in ASSUMED_MODEL_QUALITY.items()}
    if repeat is not None:
        models = {m: {**q, "wrong_repeat": repeat} for m, q in models.items()}
    return {
        "seed": seed,
        "quality": {
            "enabled": True,
            "skip_per_extra_block": 0.0,
            "bleed_per_extra_block": 0.0,
            "models": models,
        },
    }


async def true_agreement(pool: asyncpg.Pool, run_id: str, properties: dict[str, Any]) -> Tally:
    """The run's answers against the simulator's truth: blocks answered, and those whose
    every field agrees with the block's computed answer."""
    rows = await pool.fetch(
        """select coalesce(o.model_answer, o.staging) as answer, b.block_type, b.block_content
           from overlays o join blocks b using (block_uid)
           where o.run_id = $1 and o.status = 'ai_complete'""",
        run_id,
    )
    agreed = 0
    for r in rows:
        answer = r["answer"] if isinstance(r["answer"], dict) else json.loads(r["answer"])
        truth = block_result(Block("truth", r["block_type"], r["block_content"]), properties)
        agreed += all(v.agree for v in compare_properties(properties, answer, truth))
    return Tally(agreed=agreed, total=len(rows))


async def run_and_measure(
    bs: BenchStack,
    pool: asyncpg.Pool,
    document_id: str,
    schema_id: str,
    properties: dict[str, Any],
    options: RunOptions,
) -> dict[str, Any]:
    """One whole-document run: its cost, calls, true agreement and what its probe said."""
    timed = await run_once(bs, document_id, schema_id, options)
    truth = await true_agreement(pool, timed.run_id, properties)
    result = timed.result
    q = result.quality
    return {
        "run_id": timed.run_id,
        "status": result.status,
        "model": options.model,
        "pack_size": options.pack_size,
        "calls": result.calls,
        "cost_usd": result.cost_usd,
        "answered": truth.total,
        "true_agreement": truth.rate,
        "true_disagreement": None if truth.rate is None else 1 - truth.rate,
        "probe_model": q.probe_model if q else None,
        "probe_sampled": q.sampled if q else 0,
        "probe_agreement": q.agreement.rate if q else None,
        "probe_calls": q.probe_calls if q else 0,
        "probe_cost_usd": q.probe_cost_usd if q else 0.0,
    }


async def models_section(
    bs: BenchStack,
    pool: asyncpg.Pool,
    rec: Recorder,
    args: argparse.Namespace,
    document_id: str,
    schema_id: str,
    properties: dict[str, Any],
) -> None:
    """Each model packed, Sonnet alone, and the probe on either model: against the truth."""
    bs.sim_reset(scenario(1))
    size = args.pack_size
    probe = QualityOptions(probe_rate=args.probe_rate, probe_max_share=1.0)
    cases = [
        (f"Sonnet 5.5, packs of {size}", RunOptions(model=SONNET, pack_size=size)),
        (f"Haiku 5.5, packs of {size}", RunOptions(model=HAIKU, pack_size=size)),
        ("Sonnet 5.5 alone (reference)", RunOptions(model=SONNET, pack_size=1)),
        (
            f"Haiku 5.5, packs of {size}, probe alone on Haiku 5.5",
            RunOptions(model=HAIKU, pack_size=size, quality=probe),
        ),
        (
            f"Haiku 5.5, packs of {size}, probe alone on Sonnet 5.5",
            RunOptions(
                model=HAIKU,
                pack_size=size,
                quality=probe.model_copy(update={"probe_model": SONNET}),
            ),
        ),
    ]
    out: dict[str, Any] = {}
    rows: list[list[Any]] = []
    for label, options in cases:
        if options.quality is None:
            options = options.model_copy(update={"quality": NO_PROBE, "reuse_answers": False})
        else:
            options = options.model_copy(update={"reuse_answers": False})
        m = await run_and_measure(bs, pool, document_id, schema_id, properties, options)
        out[label] = m
        rows.append(
            [
                label,
                m["calls"],
                m["cost_usd"],
                f"{pct(m['true_disagreement'])} of {m['answered']}",
                (
                    f"{pct(m['probe_agreement'])} of {m['probe_sampled']} "
                    f"({m['probe_calls']} calls, ${m['probe_cost_usd']:.4f})"
                    if m["probe_sampled"]
                    else "-"
                ),
                pct(m["true_agreement"]),
            ]
        )
        print(f"{label}: {m['status']}, true disagreement {pct(m['true_disagreement'])}")
    rec.data["models"] = {"blocks": args.blocks, "pack_size": size, "runs": out}
    sonnet_packed = out[f"Sonnet 5.5, packs of {size}"]
    haiku_packed = out[f"Haiku 5.5, packs of {size}"]
    share = haiku_packed["cost_usd"] / sonnet_packed["cost_usd"]
    rec.print_table(
        f"Models against the simulator's truth ({args.blocks}-block document, assumed rates)",
        ["run", "calls", "cost $", "true disagreement", "probe reports", "true agreement"],
        rows,
        [
            (
                f"Haiku 5.5 packed costs {share:.1%} of Sonnet 5.5 packed. 'True' is each run's "
                "answers against the block's computed answer; the probe's agreement is against "
                "its own model's alone answers, so a probe on the run's model cannot see the "
                "mistakes the model makes alone too. The rates are assumptions (see the "
                "simulator's README), not measurements of the real models."
            )
        ],
    )


async def escalate_and_measure(
    bs: BenchStack,
    pool: asyncpg.Pool,
    document_id: str,
    schema_id: str,
    properties: dict[str, Any],
    size: int,
    second_pack_size: int | None,
    model: str = HAIKU,
) -> dict[str, Any]:
    """A run on ``model`` (Haiku 5.5) in packs of ``size``, escalated to Sonnet 5.5: cost
    split, calls, share escalated, true disagreement after, and blocks paid twice on one
    model."""
    options = RunOptions(model=model, pack_size=size, quality=NO_PROBE, reuse_answers=False)
    first = await run_and_measure(bs, pool, document_id, schema_id, properties, options)
    await bs.bb.escalate(first["run_id"], SONNET, second_pack_size=second_pack_size)
    result = await bs.bb.wait_escalation(first["run_id"])
    esc = result.escalation
    assert esc is not None
    truth = await true_agreement(pool, first["run_id"], properties)
    paid_twice = await pool.fetchval(
        """select count(*) from (
               select uid, model from llm_calls c, unnest(c.block_uids) as uid
               where c.run_id = $1 and c.status = 'succeeded'
               group by 1, 2
               having count(*) > case when model = $2 then 2 else 1 end) t""",
        first["run_id"],
        model,
    )
    return {
        **first,
        "status": result.status,
        "second_pack_size": second_pack_size,
        "calls": result.calls,
        "cost_usd": result.cost_usd,
        "first_pass_cost_usd": first["cost_usd"],
        "first_pass_calls": first["calls"],
        "second_pass_cost_usd": esc.second_pass_cost_usd,
        "second_pass_calls": esc.second_pass_calls,
        "escalation_cost_usd": esc.escalation_cost_usd,
        "escalation_calls": esc.escalation_calls,
        "escalated": esc.sent_up,
        "escalated_share": esc.sent_up / esc.blocks if esc.blocks else 0.0,
        "escalated_by_reason": esc.escalated_by_reason,
        "kept": esc.kept,
        "answered": truth.total,
        "true_agreement": truth.rate,
        "true_disagreement": None if truth.rate is None else 1 - truth.rate,
        "blocks_paid_twice_on_one_model": paid_twice,
    }


async def escalation_section(
    bs: BenchStack,
    pool: asyncpg.Pool,
    rec: Recorder,
    args: argparse.Namespace,
    document_id: str,
    schema_id: str,
    properties: dict[str, Any],
) -> None:
    """Haiku 5.5 packed with escalation to Sonnet 5.5 against both models packed and Sonnet
    alone, at each ``--repeat`` share and seed: true disagreement, cost split, calls, share
    escalated."""
    size = args.pack_size
    per_seed: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    repeats = [float(r) for r in str(args.repeat).split(",")]
    for repeat, seed in ((r, s) for r in repeats for s in range(1, args.seeds + 1)):
        bs.sim_reset(scenario(seed, repeat))
        runs: dict[str, dict[str, Any]] = {}
        for label, options in (
            ("Sonnet 5.5 packed", RunOptions(model=SONNET, pack_size=size)),
            ("Haiku 5.5 packed", RunOptions(model=HAIKU, pack_size=size)),
            ("Sonnet 5.5 alone", RunOptions(model=SONNET, pack_size=1)),
        ):
            options = options.model_copy(update={"quality": NO_PROBE, "reuse_answers": False})
            runs[label] = await run_and_measure(
                bs, pool, document_id, schema_id, properties, options
            )
        # The escalated runs: Haiku packed (a run of their own), then escalated to Sonnet,
        # the second pass in the run's packing and each block alone.
        for label, second in (
            ("Haiku 5.5 packed, escalated to Sonnet 5.5", None),
            ("Haiku 5.5 packed, escalated to Sonnet 5.5, second pass alone", 1),
        ):
            runs[label] = await escalate_and_measure(
                bs, pool, document_id, schema_id, properties, size, second
            )
        escalated = runs["Haiku 5.5 packed, escalated to Sonnet 5.5"]
        sonnet = runs["Sonnet 5.5 packed"]
        meets_error = (escalated["true_disagreement"] or 0) <= (sonnet["true_disagreement"] or 0)
        cost_share = escalated["cost_usd"] / sonnet["cost_usd"]
        alone = runs["Haiku 5.5 packed, escalated to Sonnet 5.5, second pass alone"]
        alone_share = alone["cost_usd"] / sonnet["cost_usd"]
        per_seed.append(
            {
                "seed": seed,
                "wrong_repeat": repeat,
                "runs": runs,
                "cost_share_of_sonnet_packed": cost_share,
                "meets_error_bar": meets_error,
                "meets_cost_bar": cost_share <= 0.25,
                "second_pass_alone": {
                    "cost_share_of_sonnet_packed": alone_share,
                    "meets_error_bar": (alone["true_disagreement"] or 0)
                    <= (sonnet["true_disagreement"] or 0),
                    "meets_cost_bar": alone_share <= 0.25,
                },
            }
        )
        for label, m in runs.items():
            is_esc = "escalated" in label
            rows.append(
                [
                    repeat,
                    seed,
                    label,
                    m["calls"],
                    m["cost_usd"],
                    (
                        f"{m['first_pass_cost_usd']:.4f} + {m['second_pass_cost_usd']:.4f} + "
                        f"{m['escalation_cost_usd']:.4f}"
                        if is_esc
                        else "-"
                    ),
                    f"{pct(m['true_disagreement'])} of {m['answered']}",
                    (
                        f"{pct(m['escalated_share'])} ({m['escalated']}: "
                        + ", ".join(f"{n} {r}" for r, n in m["escalated_by_reason"].items())
                        + ")"
                        if is_esc
                        else "-"
                    ),
                    f"{m['cost_usd'] / sonnet['cost_usd']:.1%}",
                ]
            )
        print(
            f"repeat {repeat}, seed {seed}: escalated {pct(escalated['escalated_share'])}, true disagreement "
            f"{pct(escalated['true_disagreement'])} (Sonnet packed "
            f"{pct(sonnet['true_disagreement'])}), cost {cost_share:.1%} of Sonnet packed",
            flush=True,
        )
    rec.data["escalation"] = {
        "blocks": args.blocks,
        "pack_size": size,
        "seeds": per_seed,
        "by_repeat": {
            str(r): {
                key: {
                    "met_error_bar": sum(
                        (s if key == "packed" else s["second_pass_alone"])["meets_error_bar"]
                        for s in per_seed
                        if s["wrong_repeat"] == r
                    ),
                    "met_cost_bar": sum(
                        (s if key == "packed" else s["second_pass_alone"])["meets_cost_bar"]
                        for s in per_seed
                        if s["wrong_repeat"] == r
                    ),
                    "of": sum(s["wrong_repeat"] == r for s in per_seed),
                }
                for key in ("packed", "second_pass_alone")
            }
            for r in repeats
        },
        "met_error_bar": sum(s["meets_error_bar"] for s in per_seed),
        "met_cost_bar": sum(s["meets_cost_bar"] for s in per_seed),
    }
    rec.print_table(
        f"Escalation from Haiku 5.5 to Sonnet 5.5 against the simulator's truth "
        f"({args.blocks}-block document, packs of {size}, assumed rates)",
        [
            "repeat",
            "seed",
            "run",
            "calls",
            "cost $",
            "first + second pass + escalation $",
            "true disagreement",
            "escalated",
            "of Sonnet packed $",
        ],
        rows,
        [
            (
                "The issue's bar: true disagreement at or below Sonnet 5.5 packed's, at 25% of "
                "its cost or less. The second pass is Haiku 5.5 again in a second packing "
                "(reading the first pass's cached prefix); the escalation asks each escalated "
                "block alone on Sonnet 5.5 ('second pass alone': the second pass asks each "
                "block alone on Haiku 5.5, `second_pack_size=1`). A block Haiku gets wrong "
                "the same way in both "
                "packings is kept (wrong): the floor of what escalation can catch. 'repeat' is "
                "every model's `wrong_repeat`, the share of its mistakes that repeat in every "
                "call (1: all of them, the assumed rates; the rest are drawn per call). The "
                "rates and the share are assumptions (see the simulator's README), not "
                "measurements of the real models."
            )
        ],
    )


async def calibrate_section(
    bs: BenchStack,
    pool: asyncpg.Pool,
    rec: Recorder,
    args: argparse.Namespace,
    document: Path,
    schema: Path,
    document_id: str,
    schema_id: str,
    properties: dict[str, Any],
) -> None:
    """Calibrate across models at each seed; run the recommended pair on the whole document."""
    sizes = [int(s) for s in args.sizes.split(",")]
    samples = [int(s) for s in str(args.sample).split(",")]
    per_seed: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    repeats = [float(r) for r in str(args.calibrate_repeat).split(",")]
    cases = [(r, n, s) for r in repeats for n in samples for s in range(1, args.seeds + 1)]
    for repeat, sample, seed in cases:
        bs.sim_reset(scenario(seed, repeat))
        cal = await bs.bb.calibrate_models(
            document,
            schema,
            [HAIKU, SONNET],
            reference=SONNET,
            sample=sample,
            sizes=sizes,
            target=args.target,
            escalation=args.escalation,
        )
        choice = cal.choice
        model, size = (choice.model, choice.size) if choice else (SONNET, 1)
        escalate_to = choice.escalate_to if choice else None
        if escalate_to is not None:
            run = await escalate_and_measure(
                bs, pool, document_id, schema_id, properties, size, None, model
            )
        else:
            options = RunOptions(model=model, pack_size=size, reuse_answers=False, quality=NO_PROBE)
            run = await run_and_measure(bs, pool, document_id, schema_id, properties, options)
        meets = (run["true_agreement"] or 0) >= args.target
        measured: dict[str, Any] = {
            c.model: {r.size: r.model_dump(mode="json") for r in c.sizes} for c in cal.calibrations
        }
        if args.escalation:
            measured["escalated"] = {
                c.model: {r.size: r.model_dump(mode="json") for r in c.escalation}
                for c in cal.calibrations
                if c.escalation
            }
        per_seed.append(
            {
                "seed": seed,
                "sample": sample,
                "wrong_repeat": repeat,
                "calibration": cal.model_dump(mode="json"),
                "choice": [model, size, escalate_to],
                "measured": measured,
                "run": run,
                "meets_target": meets,
            }
        )
        chosen = next(c for c in cal.calibrations if c.model == model) if choice else None
        at = (
            next(
                (r for r in (chosen.escalation if escalate_to else chosen.sizes) if r.size == size),
                None,
            )
            if chosen
            else None
        )
        rows.append(
            [
                repeat,
                sample,
                seed,
                f"{model} x {size}"
                + (f" -> {escalate_to.removeprefix('claude-')}" if escalate_to else ""),
                ", ".join(
                    f"{c.model.removeprefix('claude-')}: {c.recommended or '-'}"
                    + (f" (escalated: {c.escalation_recommended or '-'})" if c.escalation else "")
                    for c in cal.calibrations
                ),
                f"{pct(at.rate)} ({pct(at.ci_low)}-{pct(at.ci_high)})" if at else "reference",
                pct(run["true_agreement"]),
                "yes" if meets else "NO",
                run["cost_usd"],
                choice.whole_cost_usd if choice else cal.reference_alone_usd,
                cal.cost_usd,
            ]
        )
        print(
            f"repeat {repeat}, sample {sample}, seed {seed}: {model} x {size}"
            f"{' escalated' if escalate_to else ''}, true agreement {pct(run['true_agreement'])} "
            f"(target {pct(args.target)}), calibration ${cal.cost_usd:.4f}",
            flush=True,
        )
    met = sum(s["meets_target"] for s in per_seed)
    rec.data["calibrate"] = {
        "models": [HAIKU, SONNET],
        "reference": SONNET,
        "sizes": sizes,
        "samples": samples,
        "target": args.target,
        "blocks": args.blocks,
        "escalation": args.escalation,
        "wrong_repeat": repeats,
        "seeds": per_seed,
        "met_target": met,
        "met_target_by_sample": {
            str(n): sum(s["meets_target"] for s in per_seed if s["sample"] == n) for n in samples
        },
    }
    rec.print_table(
        f"calibrate --models against the simulator's truth ({args.blocks}-block document, "
        f"samples {args.sample}, sizes {args.sizes}, target {pct(args.target)})",
        [
            "repeat",
            "sample",
            "seed",
            "recommended",
            "each model's size",
            "measured (95% CI)",
            "true on the document",
            "meets",
            "run $",
            "quoted $",
            "calibration $",
        ],
        rows,
        [
            (
                f"The whole-document run at the recommended pair met the target against the truth "
                f"in {met} of {len(per_seed)} cases (samples x seeds). 'Measured' is agreement with Sonnet 5.5's alone "
                "answers on the sample (Sonnet's own rare mistakes count against the candidate)"
                + (
                    "; with --escalation, a pair '-> sonnet-5-5' is the candidate escalated to "
                    "Sonnet 5.5 (the sample asked again in a second packing), and its whole-"
                    "document run is escalated too"
                    if args.escalation
                    else ""
                )
                + ". 'repeat': every model's `wrong_repeat` (the simulator's README)."
            )
        ],
    )


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("models", args)
    rec.data["quality_model"] = {m: q.model_dump() for m, q in ASSUMED_MODEL_QUALITY.items()}
    async with BenchStack(
        "models",
        fsync=args.fsync,
        temporal_file=args.temporal_file,
        scenario=scenario(1),
        keep=args.keep,
    ) as bs:
        pool = await new_pool(bs)
        rec.data["stack"] = bs.describe()
        document = bs.root / "models.md"
        document.write_bytes(markdown_document(args.blocks))
        schema = SAMPLES / "extract.json"
        definition = json.loads(schema.read_text())
        document_id = await bs.bb.ingest_file(document)
        schema_id = await bs.bb.add_schema(definition)
        properties = definition["properties"]
        try:
            async with bs.inprocess_worker(pool):
                only = args.only
                if only in (None, "models") and not args.skip_models:
                    await models_section(bs, pool, rec, args, document_id, schema_id, properties)
                if only in (None, "escalation"):
                    await escalation_section(
                        bs, pool, rec, args, document_id, schema_id, properties
                    )
                if only in (None, "calibrate"):
                    await calibrate_section(
                        bs, pool, rec, args, document, schema, document_id, schema_id, properties
                    )
        finally:
            await pool.close()
    rec.write()
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="simulator seeds (default 3)")
    parser.add_argument(
        "--blocks", type=int, default=600, help="blocks of the synthetic document (default 600)"
    )
    parser.add_argument(
        "--pack-size", type=int, default=20, help="the packed runs' size (default 20)"
    )
    parser.add_argument(
        "--probe-rate", type=float, default=0.1, help="the probed runs' rate (default 0.1)"
    )
    parser.add_argument(
        "--sample",
        default="40,100",
        help="calibrate's samples, each at every seed (default 40,100)",
    )
    parser.add_argument("--sizes", default="5,10,20,40", help="pack sizes (default 5,10,20,40)")
    parser.add_argument(
        "--target", type=float, default=0.95, help="target agreement (default 0.95)"
    )
    parser.add_argument(
        "--repeat",
        default="1,0.5,0",
        help="escalation: every model's wrong_repeat, each at every seed (default 1,0.5,0)",
    )
    parser.add_argument(
        "--calibrate-repeat",
        default="1",
        help="calibrate: every model's wrong_repeat, each at every seed (default 1)",
    )
    parser.add_argument(
        "--escalation",
        action="store_true",
        help="calibrate: measure Haiku escalated to Sonnet too (calibrate --escalation)",
    )
    parser.add_argument("--skip-models", action="store_true", help="no models section")
    parser.add_argument(
        "--only",
        choices=["models", "escalation", "calibrate"],
        help="only this section (default: all three)",
    )
    common_args(parser, "models-calibrate")
    return parser.parse_args(argv)


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
