"""`review`, `edit`, `confirm`, `reject` and `export`: look at results, correct them, accept
or refuse them, take them away."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import textwrap
from typing import Any

from blockbatch.api import GridPage, GridRow
from blockbatch.api.review import resolve_block_refs
from blockbatch.cli.console import Console
from blockbatch.cli.inspect import page_footer
from blockbatch.cli.parser import (
    REVIEWER_HELP,
    Subparsers,
    add_run_id_command,
    not_negative,
    positive,
)
from blockbatch.cli.session import Session
from blockbatch.core.commands import PROG
from blockbatch.core.evidence import ungrounded
from blockbatch.core.reasons import REASONS
from blockbatch.core.review import OVERLAY_STATUSES, row_identity
from blockbatch.core.views import Disagreement


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def show_item(
    con: Console,
    item: GridRow,
    fields: list[str],
    *,
    full: bool,
    id_columns: list[str] | None = None,
) -> None:
    width = max(shutil.get_terminal_size((100, 20)).columns - 6, 40)
    where = f"pack {item.pack_path}, " if item.pack_path else ""
    attempts = f"{item.attempt_count} attempt{'s' if item.attempt_count != 1 else ''}"
    if item.reused_from_run_id:
        attempts = f"answer reused from run {item.reused_from_run_id}"
    identity = row_identity(item.metadata, id_columns or [])
    con.line(
        con.style(f"#{item.block_index}", "bold"),
        con.style(f"  {identity}", "bold") if identity else "",
        f"  {item.block_uid}  {item.block_type}  ",
        con.status(item.status),
        f"  ({where}{attempts})",
    )
    lines = [
        ln
        for para in item.block_content.splitlines()
        for ln in (textwrap.wrap(para, width) or [""])
    ]
    if not full and len(lines) > 4:
        lines = [*lines[:4], f"… ({len(item.block_content):,} characters; --full shows all)"]
    for ln in lines:
        con.line(con.style("  │ ", "dim"), ln)
    overlay = item.confirmed if item.status == "confirmed" else item.staging
    if overlay:
        key_width = max(len(k) for k in overlay)
        order = [f for f in fields if f in overlay] + [k for k in overlay if k not in fields]
        for key in order:
            value = overlay[key]
            text = _value(value)
            if not full and len(text) > width - key_width:
                text = text[: width - key_width - 1] + "…"
            con.line(f"  → {key:<{key_width}}  {text}")
    missing = ungrounded(item.evidence)
    if missing:
        con.line(
            con.style(
                f"  ? ungrounded: the quote of {', '.join(missing)} is not in the block", "yellow"
            )
        )
    if item.reason_code and item.status in ("failed", "cancelled"):
        why = item.last_error or {str(k): v for k, v in REASONS.items()}.get(item.reason_code)
        con.line(con.style(f"  ✗ {item.status} [{item.reason_code}]: {why}", "red"))
    elif item.last_error and item.status != "ai_complete":
        con.line(con.style(f"  ✗ {item.last_error}", "red"))
    con.line()


def show_disagreement(con: Console, d: Disagreement, *, full: bool) -> None:
    """A disagreeing block: its content, then each field packed vs alone (``✗`` where they
    disagree, with the free-text similarity)."""
    width = max(shutil.get_terminal_size((100, 20)).columns - 6, 40)
    con.line(
        con.style(f"#{d.block_index}", "bold"),
        f"  {d.block_uid}  {d.block_type}  (block {d.position} of {d.pack_size} in its pack)",
    )
    lines = [
        ln for para in d.block_content.splitlines() for ln in (textwrap.wrap(para, width) or [""])
    ]
    if not full and len(lines) > 4:
        lines = [*lines[:4], f"… ({len(d.block_content):,} characters; --full shows all)"]
    for ln in lines:
        con.line(con.style("  │ ", "dim"), ln)
    key_width = max((len(f["field"]) for f in d.fields), default=0)
    half = max((width - key_width - 12) // 2, 20)
    for f in d.fields:
        name = f["field"]
        packed, single = _value(d.packed.get(name)), _value(d.single.get(name))
        if not full:
            packed = packed if len(packed) <= half else packed[: half - 1] + "…"
            single = single if len(single) <= half else single[: half - 1] + "…"
        mark = "  " if f["agree"] else con.style("✗ ", "red")
        similarity = (
            f" (similarity {f['similarity']:.2f})"
            if f.get("similarity") is not None and not f["agree"]
            else ""
        )
        con.line(f"  {mark}{name:<{key_width}}  packed: {packed}")
        if not f["agree"]:
            con.line(f"    {'':<{key_width}}  alone:  {single}{similarity}")
    con.line()


async def cmd_disagreeing(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    total, page = await bb.disagreeing(args.run_id, limit=args.limit, offset=args.offset)
    if s.con.json:
        s.con.data(
            {
                "run_id": args.run_id,
                "total": total,
                "offset": args.offset,
                "items": [dataclasses.asdict(d) for d in page],
            }
        )
        return 0
    for d in page:
        show_disagreement(s.con, d, full=args.full)
    quality = await bb.quality(args.run_id)
    page_footer(
        s.con,
        args.offset,
        len(page),
        total,
        "disagreeing blocks",
        f"review {args.run_id} --disagreeing"
        + (f" --limit {args.limit}" if args.limit != 20 else ""),
    )
    if quality is None:
        s.con.line(
            s.con.style(f"run {args.run_id} probed no block (probe off, or batch mode)", "dim")
        )
    else:
        s.con.line(s.con.style(f"run {args.run_id}: {quality.text}", "dim"))
        if total:
            s.con.line(
                s.con.style(
                    f"the packed answer is the overlay: correct it with `{PROG} edit "
                    f"{args.run_id} BLOCK FIELD VALUE`, or reject it",
                    "dim",
                )
            )
    return 0


async def cmd_review(args: argparse.Namespace, s: Session) -> int:
    if getattr(args, "disagreeing", False):
        return await cmd_disagreeing(args, s)
    bb = await s.bb(temporal=False)
    statuses = list(dict.fromkeys((args.status or []) + (["failed"] if args.failed else [])))
    blocks = None
    if args.block:
        blocks = resolve_block_refs((await bb.run(args.run_id)).document_id, args.block)
    reasons = list(dict.fromkeys(args.reason or [])) or None
    page = await bb.review(
        args.run_id,
        after=args.after,
        limit=args.limit,
        status=statuses or None,
        block_uids=blocks,
        reason=reasons,
        id_columns=args.id_column,
    )
    if s.con.json:
        s.con.data(page.model_dump(mode="json"))
        return 0
    for item in page.rows:
        show_item(s.con, item, page.fields, full=args.full, id_columns=page.id_columns)
    info = page.run
    counts = " · ".join(f"{k} {v}" for k, v in info.blocks.items() if v)
    again = (
        f"review {args.run_id}"
        + "".join(f" --status {st}" for st in statuses)
        + "".join(f" --reason {r}" for r in reasons or ())
        + "".join(f" --id-column {c}" for c in args.id_column or ())
        + (f" --limit {args.limit}" if args.limit != 20 else "")
    )
    keyset_footer(s.con, page, again)
    s.con.line(s.con.style(f"run {info.run_id} is {info.status}: {counts}", "dim"))
    if info.blocks["ai_complete"]:
        s.con.line(s.con.style(f"confirm: {PROG} confirm {info.run_id} [--block UID ...]", "dim"))
    return 0


def keyset_footer(con: Console, page: GridPage, command: str) -> None:
    """ "showing blocks #0-#19 (20 of 200)" and the command for the next page."""
    if not page.total:
        con.line("no blocks to show")
        return
    if not page.rows:
        con.line(con.style(f"no blocks after this one; {page.total} in all", "dim"))
        return
    total = f"{page.total:,}+" if page.capped else f"{page.total:,}"
    first, last = page.rows[0].block_index, page.rows[-1].block_index
    text = f"showing blocks #{first}-#{last} ({len(page.rows)} of {total})"
    if page.next_after is not None:
        text += f"; next page: {PROG} {command} --after {page.next_after}"
    con.line(con.style(text, "dim"))


async def cmd_confirm(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    outcome = await bb.confirm(args.run_id, args.block, reviewer=args.reviewer)
    if s.con.json:
        s.con.data(outcome.model_dump(mode="json"))
        return 0
    n = len(outcome.confirmed)
    s.con.line(
        f"confirmed {n} block{'s' if n != 1 else ''} of run {outcome.run_id} as "
        f"{outcome.reviewer}; {outcome.total_confirmed} confirmed in all"
    )
    if outcome.already_confirmed:
        s.con.line(f"  already confirmed before: {', '.join(outcome.already_confirmed[:10])}")
    if not n and not outcome.already_confirmed:
        s.con.line("  nothing to confirm: no block has an unconfirmed AI result")
    s.con.line(f"  export: {PROG} export {outcome.run_id}")
    return 0


async def cmd_reject(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    outcome = await bb.reject(args.run_id, None if args.all else args.block, reviewer=args.reviewer)
    if s.con.json:
        s.con.data(outcome.model_dump(mode="json"))
        return 0
    n = len(outcome.rejected)
    s.con.line(
        f"rejected {n} block{'s' if n != 1 else ''} of run {outcome.run_id} as {outcome.reviewer}"
    )
    if outcome.already_rejected:
        s.con.line(f"  already rejected before: {', '.join(outcome.already_rejected[:10])}")
    if not n and not outcome.already_rejected:
        s.con.line("  nothing to reject: no block has an unconfirmed AI result")
    return 0


async def cmd_edit(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    outcome = await bb.edit(
        args.run_id, args.block, args.field, args.value, reviewer=args.reviewer, as_text=True
    )
    if s.con.json:
        s.con.data(outcome.model_dump(mode="json"))
        return 0
    if not outcome.changed:
        s.con.line(
            f"{outcome.block_uid} {outcome.field} is already {_value(outcome.after)}; "
            "nothing changed"
        )
        return 0
    s.con.line(
        f"{outcome.block_uid} {outcome.field}: {_value(outcome.before)} → "
        f"{_value(outcome.after)} (staged, by {outcome.reviewer})"
    )
    s.con.line(f"  confirm: {PROG} confirm {outcome.run_id} --block {outcome.block_uid}")
    return 0


async def cmd_export(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    if args.out == "-":
        await bb.export(args.run_id, sys.stdout, staged=args.staged, fmt=args.fmt)
        sys.stdout.flush()  # a closed pipe shows here, inside the command, not at exit
        return 0
    out = args.out or f"{args.run_id}.{args.fmt}"
    summary = await bb.export(args.run_id, out, staged=args.staged, fmt=args.fmt)
    if s.con.json:
        s.con.data({"path": out, "meta_path": f"{out}.meta.json", **summary.meta()})
        return 0
    s.con.line(
        f"wrote {summary.lines} lines to {out} ({summary.with_overlay} with "
        f"{summary.overlays} overlays, {summary.lines - summary.with_overlay} without)"
    )
    s.con.line(f"  run metadata: {out}.meta.json")
    if summary.simulated:
        s.con.line(
            f"  SIMULATED: these answers are the simulator's ({', '.join(summary.endpoints)}),"
            ' not Claude\'s (the metadata says "simulated": true)'
        )
    if not args.staged and summary.with_overlay < summary.lines:
        s.con.line(
            f"  unconfirmed blocks export null; confirm them with `{PROG} confirm "
            f"{args.run_id}`, or export staging with --staged"
        )
    return 0


def add_review_parser(sub: Subparsers) -> None:
    """`review`'s options."""
    review = add_run_id_command(
        sub,
        "review",
        "show blocks next to their staged overlays",
        "Show each block with its staged overlay, failures with reasons.",
    )
    review.add_argument(
        "--limit", type=positive, default=20, help="blocks per page (default %(default)s)"
    )
    review.add_argument(
        "--after",
        type=not_negative,
        metavar="INDEX",
        help="the page after this block index (the footer names the next page's)",
    )
    review.add_argument(
        "--offset",
        type=not_negative,
        default=0,
        help="with --disagreeing: skip this many disagreeing blocks",
    )
    review.add_argument(
        "--status",
        action="append",
        metavar="STATUS",
        choices=list(OVERLAY_STATUSES),
        help="only blocks in this state (repeatable)",
    )
    review.add_argument("--failed", action="store_true", help="only failed blocks")
    review.add_argument(
        "--reason",
        action="append",
        metavar="CODE",
        choices=list(REASONS),
        help="only blocks that failed or were cancelled with this reason "
        "code, or answered blocks flagged ungrounded (repeatable): " + ", ".join(REASONS),
    )
    review.add_argument(
        "--block",
        action="extend",
        nargs="+",
        metavar="UID",
        help="only these blocks (uid, or block index)",
    )
    review.add_argument("--full", action="store_true", help="do not shorten block content")
    review.add_argument(
        "--id-column",
        action="append",
        metavar="COLUMN",
        help="the input's column that says which row a block is, shown with each block "
        "(repeatable; default: the first column of a CSV/JSONL input other than the text)",
    )
    review.add_argument(
        "--disagreeing",
        action="store_true",
        help="only blocks the quality probe found disagreeing: the packed "
        "answer (the overlay) and the answer alone, side by side, per "
        "field",
    )


def add_confirm_parser(sub: Subparsers) -> None:
    """`confirm`'s options."""
    confirm = add_run_id_command(
        sub,
        "confirm",
        "confirm staged overlays",
        "Copy staged overlays to confirmed: the given blocks, or every "
        "ai_complete block. All or nothing: an unknown block, or one "
        "without a staged result, changes nothing. Each block confirmed "
        "is recorded (who, when, the value) and exported with the run.",
    )
    confirm.add_argument(
        "--block",
        action="extend",
        nargs="+",
        metavar="UID",
        help="blocks to confirm (uid, or block index); default: all",
    )
    confirm.add_argument("--reviewer", metavar="NAME", help=REVIEWER_HELP)


def add_reject_parser(sub: Subparsers) -> None:
    """`reject`'s options."""
    reject = add_run_id_command(
        sub,
        "reject",
        "reject staged overlays",
        "Reject the staged results of the given blocks (or of every "
        "ai_complete block with --all): they export as null with status "
        "rejected. All or nothing, like confirm; each act is recorded.",
    )
    which = reject.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--block",
        action="extend",
        nargs="+",
        metavar="UID",
        help="blocks to reject (uid, or block index)",
    )
    which.add_argument("--all", action="store_true", help="every ai_complete block")
    reject.add_argument("--reviewer", metavar="NAME", help=REVIEWER_HELP)


def add_edit_parser(sub: Subparsers) -> None:
    """`edit`'s options."""
    edit = add_run_id_command(
        sub,
        "edit",
        "change one staged value of a block",
        "Set FIELD of BLOCK's staged overlay to VALUE before confirming it. "
        "VALUE is taken as typed for a string field, else as JSON (12, "
        'true, ["a"], null). The overlay must still validate against '
        "the run's schema, else nothing changes (exit 2). Recorded with "
        "who, when, the value before and after.",
    )
    edit.add_argument("block", metavar="BLOCK", help="the block: uid, or block index")
    edit.add_argument("field", metavar="FIELD", help="a field of the run's schema")
    edit.add_argument("value", metavar="VALUE", help="the new value")
    edit.add_argument("--reviewer", metavar="NAME", help=REVIEWER_HELP)


def add_export_parser(sub: Subparsers) -> None:
    """`export`'s options."""
    export = add_run_id_command(
        sub,
        "export",
        "write the run as JSONL, one line per block",
        "Write one JSON line per block in block order: "
        '{"immutable": {...block...}, "user_defined": {...overlay...}}, with '
        '"record": the input\'s row as its file has it, for a CSV, JSONL or XLSX input; '
        "plus run metadata in FILE.meta.json.",
    )
    export.add_argument(
        "--out",
        metavar="FILE",
        help="output file (default RUN_ID.jsonl; '-' for stdout, no sidecar)",
    )
    export.add_argument(
        "--staged", action="store_true", help="export staged overlays instead of confirmed ones"
    )
    export.add_argument(
        "--format",
        dest="fmt",
        choices=["jsonl", "csv", "parquet"],
        default="jsonl",
        help="jsonl (default; review acts in full), csv (the input's own "
        "columns, one column per schema field; the last reviewer and "
        "when) or parquet (csv's columns, typed; needs pyarrow and a file); "
        "with evidence, each field's quote and span",
    )
