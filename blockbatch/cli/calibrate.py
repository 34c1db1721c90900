"""`calibrate`: which pack size (and, with ``--models``, which model) keeps the answers a
block gets alone, as a table or JSON."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from blockbatch.api.calibrate import prepare, run_calibration, run_model_calibration
from blockbatch.api.errors import EmptyRecordsSkipped
from blockbatch.cli.console import Console
from blockbatch.cli.parser import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    Subparsers,
    add_command,
    add_source_options,
    positive,
    share,
)
from blockbatch.cli.quote import note_skipped, usd
from blockbatch.cli.run import check_claude
from blockbatch.cli.session import Session
from blockbatch.core.agreement import percent
from blockbatch.core.calibration import (
    DEFAULT_MODELS_SAMPLE,
    DEFAULT_SAMPLE,
    DEFAULT_SIZES,
    DEFAULT_TARGET,
    Calibration,
    ModelCalibration,
    SizeResult,
)
from blockbatch.core.commands import PROG


async def cmd_calibrate(args: argparse.Namespace, s: Session) -> int:
    # Everything a user can get wrong is checked before anything is stored or started.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EmptyRecordsSkipped)
        plan = prepare(
            Path(args.file),
            Path(args.schema),
            sample=args.sample,
            sizes=args.sizes,
            target=args.target,
            model=args.model,
            fmt=args.format,
            text_field=args.text_field,
            skip_empty=args.skip_empty,
            models=args.models,
            reference=args.reference,
            escalation=args.escalation,
        )
    note_skipped(s, caught)
    bb = await s.bb()
    await check_claude(s.settings)
    if not await bb.workers_polling():
        s.con.note(
            f"note: no worker is polling task queue {s.settings.temporal_task_queue!r}; "
            "the runs wait until one does (`make worker` or `python worker.py`)"
        )
    sizes = ", ".join(str(n) for n in plan.sizes)
    if plan.models:
        s.con.note(
            f"calibrating {plan.spec.name}: {plan.sample} of {len(plan.blocks):,} blocks of "
            f"{plan.name}, alone on {plan.model} and at pack sizes {sizes} on "
            f"{', '.join(plan.models)} ({plan.blocks_sent} blocks sent)"
        )
        across = await run_model_calibration(bb, plan, say=s.con.note)
        if s.con.json:
            s.con.data(across.model_dump(mode="json"))
        else:
            print_model_calibration(s.con, across)
        return EXIT_OK if across.calibrations[0].sizes[0].answered else EXIT_RUN_FAILED
    s.con.note(
        f"calibrating {plan.spec.name} on {plan.model}: {plan.sample} of "
        f"{len(plan.blocks):,} blocks of {plan.name}, alone and at pack sizes "
        f"{sizes} ({plan.blocks_sent} blocks sent)"
    )
    calibration = await run_calibration(bb, plan, say=s.con.note)
    if s.con.json:
        s.con.data(calibration.model_dump(mode="json"))
    else:
        print_calibration(s.con, calibration)
    # Nothing to compare with when no block got an answer alone (a rejected key, say).
    return EXIT_OK if calibration.sizes[0].answered else EXIT_RUN_FAILED


def print_calibration(con: Console, c: Calibration) -> None:
    """The calibration as a few lines and one row per pack size (the recommended ``*``)."""
    con.line(
        con.style(
            f"calibration {c.calibration_id}: {c.sample} blocks of {c.document} x "
            f"{c.schema_name} on {c.model}",
            "bold",
        ),
        f"  (target {percent(c.target)})",
    )
    con.line()
    con.table(
        ["SIZE", "CALLS", "COST", "AGREEMENT", "95% CI", "LOWEST FIELD", "RUN"],
        [_row(r, recommended=r.size == c.recommended) for r in c.sizes],
        right=range(5),
    )
    con.line()
    con.line(con.style(c.advice(), "bold"))
    if c.cost_at_recommended_usd is not None and c.cost_at_default_usd is not None:
        size = c.recommended or 1
        default = ""
        if c.default_blocks_per_pack is not None:
            low, high = c.default_blocks_per_pack
            default = f" ({low} blocks a call)" if low == high else f" ({low}-{high} blocks a call)"
        con.line(
            f"  whole document (sync): {usd(c.cost_at_recommended_usd)} at size {size} vs "
            f"{usd(c.cost_at_default_usd)} at the default sizing{default}"
        )
    con.line(
        f"  this calibration cost {usd(c.cost_usd)}; `{PROG} estimate` of this schema "
        "and model now mentions it"
    )
    for note in c.notes:
        con.line(con.style(f"  note: {note}", "dim"))


def print_model_calibration(con: Console, m: ModelCalibration) -> None:
    """A calibration across models: one row per (model, size), the choice marked ``*``."""
    con.line(
        con.style(
            f"calibration {m.calibration_id}: {m.sample} blocks of {m.document} x "
            f"{m.schema_name}, against {m.reference_model} alone",
            "bold",
        ),
        f"  (target {percent(m.target)})",
    )
    con.line()
    rows = []
    for c in m.calibrations:
        for r in [*c.sizes, *c.escalation]:
            if r.size == 1 and c is not m.calibrations[0]:
                continue  # the reference's alone run: one row
            chosen = m.choice is not None and (c.model, r.size, r.escalated_to) == (
                m.choice.model,
                m.choice.size,
                m.choice.escalate_to,
            )
            model = m.reference_model if r.size == 1 else c.model
            if r.escalated_to:
                model += f" -> {r.escalated_to} ({r.sent_up} up)"
            row = _row(r, recommended=chosen)
            whole = usd(r.whole_cost_usd) if r.whole_cost_usd is not None else "-"
            rows.append([model, *row[:6], whole, row[6]])
    con.table(
        [
            "MODEL",
            "SIZE",
            "CALLS",
            "COST",
            "AGREEMENT",
            "95% CI",
            "LOWEST FIELD",
            "WHOLE DOC",
            "RUN",
        ],
        rows,
        right=[1, 2, 3, 4, 5, 7],
    )
    con.line()
    con.line(con.style(m.advice(), "bold"))
    if m.choice is not None and m.choice.whole_cost_usd is not None:
        versus = ""
        if m.reference_alone_usd is not None:
            versus = f" vs {usd(m.reference_alone_usd)} on {m.reference_model} alone"
        con.line(f"  whole document (sync): {usd(m.choice.whole_cost_usd)}{versus}")
    for c in m.calibrations:
        size = f"size {c.recommended}" if c.recommended is not None else "no size"
        escalated = ""
        if c.escalation:
            best = c.escalation_recommended
            escalated = f"; escalated to {m.reference_model}, " + (
                f"size {best}" if best is not None else "no size"
            )
        con.line(f"  {c.model}: {size} meets the target{escalated} ({c.calibration_id})")
    if any(c.escalation for c in m.calibrations):
        con.line(
            con.style(
                "  escalated rows: the second packing's run is not shown; COST is both "
                "passes, WHOLE DOC both passes and the share sent up alone on "
                f"{m.reference_model} (the sample's escalated blocks took its alone "
                "answers: no call was made for them)",
                "dim",
            )
        )
    con.line(
        f"  this calibration cost {usd(m.cost_usd)}; `{PROG} estimate` of this schema "
        "on each model now mentions it"
    )
    for note in m.notes:
        con.line(con.style(f"  note: {note}", "dim"))


def _row(r: SizeResult, *, recommended: bool) -> list[str]:
    size = f"{r.size}" + (" *" if recommended else "")
    if r.size == 1:
        agreement, interval, lowest = "alone (baseline)", "", ""
    elif r.rate is None:
        agreement, interval, lowest = "no answers", "", ""
    else:
        agreement = f"{percent(r.rate)} of {r.compared}"
        interval = f"{(r.ci_low or 0) * 100:.1f}-{(r.ci_high or 0) * 100:.1f}%"
        lowest = (
            f"{r.lowest_field} {percent(r.lowest_rate)}"
            if r.lowest_field is not None and r.lowest_rate is not None and r.lowest_rate < 1
            else "-"
        )
    if r.size > 1 and r.largest_call and r.largest_call < r.size:
        size += f" (sent {r.largest_call})"
    if r.unanswered:
        agreement += f" ({r.unanswered} unanswered)"
    return [size, f"{r.calls:,}", usd(r.cost_usd), agreement, interval, lowest, r.run_id]


def add_calibrate_parser(sub: Subparsers) -> None:
    """`calibrate`'s options."""
    calibrate = add_command(
        sub,
        "calibrate",
        "find the largest pack size that keeps the answers blocks get alone",
        "Run a deterministic sample of FILE's blocks alone (one block a call) and at each "
        "pack size of --sizes, through the real pipeline (one run per size, every call "
        "made and in the ledger), compare each size's answers with the alone answers field "
        "by field, and print agreement, calls and cost per size and the largest size that "
        "meets --target. Costs about (1 + number of sizes) x --sample blocks of calls. "
        "Stored: `estimate` of the same schema and model mentions it. With --models: the "
        "sample alone on --reference only, every size on every model of --models, each pair "
        "quoted on the whole document, and the cheapest pair that meets --target.",
    )
    add_source_options(calibrate)
    calibrate.add_argument(
        "--models",
        metavar="M,M,...",
        help="calibrate across models: run the sizes on each of these and recommend the "
        "cheapest (model, size) that meets --target against --reference alone",
    )
    calibrate.add_argument(
        "--reference",
        metavar="MODEL",
        help="with --models: the model whose alone answers are compared with (default: "
        "--model, else the model of --models with the highest output price)",
    )
    calibrate.add_argument(
        "--escalation",
        action="store_true",
        help="with --models: also measure each model but --reference escalated to it "
        "(`run --escalate-to`): the sample asked again in a second packing, blocks whose "
        "answers disagree take the reference's alone answer; costs one more run of the "
        "sample per model and size",
    )
    calibrate.add_argument(
        "--sample",
        type=positive,
        metavar="N",
        help=f"blocks in the sample ({DEFAULT_SAMPLE} unless given; "
        f"{DEFAULT_MODELS_SAMPLE} with --models)",
    )
    calibrate.add_argument(
        "--sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        metavar="N,N,...",
        help="pack sizes to try, each 2 or more (default %(default)s)",
    )
    calibrate.add_argument(
        "--target",
        type=share("--target", zero=False),
        default=DEFAULT_TARGET,
        metavar="SHARE",
        help="the agreement with the alone answers to reach, in (0, 1] (default %(default)s)",
    )
