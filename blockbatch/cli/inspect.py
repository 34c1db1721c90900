"""`status`, `list` and `calls`: read-only views of runs and the ledger."""

from __future__ import annotations

import argparse
from datetime import datetime

from blockbatch.api import RunInfo
from blockbatch.cli.console import Console, human_seconds, human_tokens
from blockbatch.cli.parser import PROG
from blockbatch.cli.progress import describe
from blockbatch.cli.session import Session
from blockbatch.report import next_command, not_done_line, run_links
from core.models import RunProgress


def _when(t: datetime | None) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _blocks(info: RunInfo) -> str:
    b = info.blocks
    return (f"{b['ai_complete'] + b['confirmed']} ok ({b['confirmed']} confirmed) · "
            f"{b['failed']} failed · {b['cancelled']} cancelled · {b['pending']} pending · "
            f"{info.blocks_total} total")


async def cmd_status(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    info = await bb.run(args.run_id)
    progress: RunProgress | None = None
    live_error = None
    if info.active:
        try:
            progress = await bb.progress(info.run_id, timeout_s=3)
        except Exception as exc:  # noqa: BLE001 - the stored state is still worth showing
            live_error = f"no live progress ({type(exc).__name__}); is a worker running?"
    links = run_links(s.settings, info.run_id)
    result = info.result().model_copy(
        update={"failure_reasons": await bb.failure_reasons(info.run_id)})
    if s.con.json:
        s.con.data({"run": info.model_dump(mode="json"),
                    "failure_reasons": result.failure_reasons,
                    "next": None if info.active else next_command(result),
                    "progress": progress.model_dump(mode="json") if progress else None,
                    "temporal_ui": links})
        return 0
    con = s.con
    con.line(f"run {info.run_id}: ", con.status(info.status))
    rows = [
        ("document", f"{info.document_name} ({info.document_id})"),
        ("schema", f"{info.schema_name} ({info.schema_id})"),
        ("model", f"{info.model} · mode {info.settings.get('mode', 'sync')}"),
        ("blocks", _blocks(info)),
    ]
    not_done = not_done_line(result)
    if not_done:
        rows.append(("not done", not_done))
    if progress is not None:
        rows.append(("progress", describe(progress, None)))
    elif live_error:
        rows.append(("progress", live_error))
    if not info.active:
        tokens = (f"input {info.input_tokens:,} · output {info.output_tokens:,} · cache write "
                  f"{info.cache_creation_input_tokens:,} · cache read "
                  f"{info.cache_read_input_tokens:,}")
        rows += [("calls", (f"{info.calls} calls · {info.pack_count} packs · "
                           f"{info.split_events} split events")),
                 ("tokens", tokens), ("cost", f"${info.cost_usd:.4f}")]
    rows.append(("created", _when(info.created_at)))
    if info.finished_at:
        rows.append(("finished", (f"{_when(info.finished_at)} "
                                 f"(after {human_seconds(info.duration_s or 0)})")))
    if info.error:
        rows.append(("error", info.error))
    rows += [("Temporal UI", links["run"]), ("its packs", links["packs"])]
    for key, value in rows:
        con.line(f"  {key:<12} {value}")
    if info.active:
        con.line(f"  follow it with `{PROG} watch {info.run_id}`")
    elif following := next_command(result):
        con.line(f"  {'next':<12} {following}")
    return 0


async def cmd_list(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    runs = await bb.runs(limit=args.limit, status=args.status)
    if s.con.json:
        s.con.data([r.model_dump(mode="json") for r in runs])
        return 0
    if not runs:
        s.con.line(f"no runs{' with status ' + args.status if args.status else ''} yet: "
                   f"start one with `{PROG} run FILE --schema SCHEMA.json`")
        return 0
    rows = []
    for r in runs:
        b = r.blocks
        rows.append([r.run_id, s.con.status(r.status), r.document_name, r.schema_name, r.model,
                     f"{b['ai_complete'] + b['confirmed']}/{b['failed']}/{r.blocks_total}",
                     f"${r.cost_usd:.4f}", _when(r.created_at)])
    s.con.table(["RUN", "STATUS", "DOCUMENT", "SCHEMA", "MODEL", "OK/FAILED/TOTAL", "COST",
                 "CREATED"], rows, right=[5, 6])
    return 0


async def cmd_calls(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    total, calls = await bb.calls(args.run_id, offset=args.offset, limit=args.limit,
                                  pack=args.pack)
    con: Console = s.con
    if con.json:
        con.data({"run_id": args.run_id, "total": total, "offset": args.offset,
                  "calls": [c.model_dump(mode="json") for c in calls]})
        return 0
    rows = []
    for c in calls:
        outcome = c.stop_reason or c.error_type or "-"
        rows.append([c.call_id, c.pack_path, c.pack_attempt, c.blocks, con.status(c.status),
                     outcome, human_tokens(c.input_tokens), human_tokens(c.output_tokens),
                     human_tokens(c.cache_creation_input_tokens),
                     human_tokens(c.cache_read_input_tokens), f"${c.cost_usd:.4f}",
                     f"{c.latency_ms}ms" if c.latency_ms is not None else "-",
                     f"{c.workflow_id or '-'} {c.activity_id or '-'}#{c.activity_attempt or 0}"])
    con.table(["CALL", "PACK", "TRY", "BLOCKS", "STATUS", "STOP", "IN", "OUT", "C.WRITE",
               "C.READ", "COST", "LATENCY", "WORKFLOW ACTIVITY#ATTEMPT"], rows,
              right=[0, 2, 3, 6, 7, 8, 9, 10, 11])
    for c in calls:
        if c.error_message:
            con.line(f"  call {c.call_id}: {c.error_message}")
    again = f"calls {args.run_id}" + (f" --pack {args.pack}" if args.pack else "") + (
        f" --limit {args.limit}" if args.limit != 50 else "")
    page_footer(con, args.offset, len(calls), total, "calls", again)
    return 0


def page_footer(con: Console, offset: int, shown: int, total: int, what: str,
                command: str) -> None:
    """"showing 21-40 of 200" and the command for the next page."""
    if not total:
        con.line(f"no {what} to show")
        return
    text = f"showing {what} {offset + 1 if shown else offset}-{offset + shown} of {total}"
    if offset + shown < total:
        text += f"; next page: {PROG} {command} --offset {offset + shown}"
    con.line(con.style(text, "dim"))
