"""`status`, `list` and `calls`: read-only views of runs and the ledger."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from blockbatch.cli.console import Console, human_seconds, human_tokens
from blockbatch.cli.parser import (
    EXIT_USAGE,
    Subparsers,
    add_command,
    add_run_id_command,
    not_negative,
    positive,
)
from blockbatch.cli.progress import describe
from blockbatch.cli.session import Session
from blockbatch.core.budget import left_text
from blockbatch.core.commands import PROG
from blockbatch.core.endpoint import answered_text
from blockbatch.core.ratelimit import rate_class
from blockbatch.report import (
    change_rows,
    model_line,
    next_command,
    not_done_line,
    quality_rows,
    retries_data,
    retries_line,
    reused_line,
    run_links,
    tokens_line,
)

if TYPE_CHECKING:
    from blockbatch.api.client import Blockbatch
    from blockbatch.core.run_types import RunProgress
    from blockbatch.core.views import LimiterView, PromptPart, RunInfo


def _when(t: datetime | None) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _blocks(info: RunInfo) -> str:
    b = info.blocks
    rejected = f", {b['rejected']} rejected" if b["rejected"] else ""
    return (
        f"{b['ai_complete'] + b['confirmed'] + b['rejected']} ok ({b['confirmed']} "
        f"confirmed{rejected}) · "
        f"{b['failed']} failed · {b['cancelled']} cancelled · {b['pending']} pending · "
        f"{info.blocks_total} total"
    )


#: How long, from the command's start, `status` waits for the run's worker to answer the
#: live ``progress`` query. It is asked beside the reads of Postgres, so `status` answers
#: within about this long however busy the worker is (issue 39: a worker of a million-block
#: run, on a loaded machine, took seconds); without its answer, the counts shown are the
#: stored ones.
STATUS_LIVE_WAIT_S = 0.8
#: The least a live query is given when the run's lookup took most of the wait.
STATUS_LIVE_LEAST_S = 0.05


def live_wait_s(started: float, now: float) -> float:
    """What is left of the live wait at ``now`` for a command started at ``started`` (the
    event loop's clock): the lookup before the query comes out of the same second."""
    return max(STATUS_LIVE_LEAST_S, STATUS_LIVE_WAIT_S - (now - started))


async def _live_progress(
    bb: Blockbatch, run_id: str, wait: float
) -> tuple[RunProgress | None, str | None]:
    """The running run's ``progress`` query answer within ``wait`` seconds, or why there is
    none."""
    from temporalio.service import RPCError, RPCStatusCode

    stored = "the blocks above are as stored"
    try:
        return await asyncio.wait_for(bb.progress(run_id, timeout_s=wait), wait + 0.05), None
    except TimeoutError:
        pass  # the worker did not answer in time: said below
    except RPCError as exc:
        if exc.status == RPCStatusCode.FAILED_PRECONDITION:
            # The server knows no worker polls the run's task queue (it says so at once).
            return None, f"no worker is polling the run's task queue; {stored}"
        if exc.status != RPCStatusCode.DEADLINE_EXCEEDED:
            return None, f"no live progress ({exc.status.name}); {stored}"
    except Exception as exc:  # noqa: BLE001 - the stored state is still worth showing
        return None, f"no live progress ({type(exc).__name__}); {stored}"
    return None, (
        f"no live answer within {STATUS_LIVE_WAIT_S:g} s (the run's worker is busy); {stored}"
    )


async def cmd_status(args: argparse.Namespace, s: Session) -> int:
    loop = asyncio.get_running_loop()
    started = loop.time()
    bb = await s.bb(temporal=False)
    info = await bb.run(args.run_id)
    # The live query and the stored reads go together: the slower sets the wait, and the
    # live query's wait counts from the command's start.
    live = (
        asyncio.ensure_future(_live_progress(bb, info.run_id, live_wait_s(started, loop.time())))
        if info.active
        else None
    )
    try:
        result, retries, limiters = await asyncio.gather(
            bb.result_of(info), bb.retries(info.run_id), bb.limits()
        )
    finally:
        progress, live_error = await live if live is not None else (None, None)
    links = run_links(s.settings, info.run_id)
    if s.con.json:
        s.con.data(
            {
                "run": info.model_dump(mode="json"),
                "failure_reasons": result.failure_reasons,
                "budget": (
                    result.budget.model_dump(mode="json") if result.budget is not None else None
                ),
                "retries": retries_data(retries),
                "plan_changes": result.plan_changes,
                "quality": (
                    result.quality.model_dump(mode="json") if result.quality is not None else None
                ),
                "next": None if info.active else next_command(result),
                "progress": progress.model_dump(mode="json") if progress else None,
                "temporal_ui": links,
            }
        )
        return 0
    con = s.con
    con.line(
        f"run {info.run_id}: ",
        con.status(info.status),
        " · SIMULATED answers, not Claude's" if result.simulated else "",
    )
    rows = [
        *([("answered by", answered)] if (answered := answered_text(info.endpoints)) else []),
        ("document", f"{info.document_name} ({info.document_id})"),
        ("schema", f"{info.schema_name} ({info.schema_id})"),
        ("model", f"{model_line(result)} · mode {info.settings.get('mode', 'sync')}"),
        ("blocks", _blocks(info)),
    ]
    not_done = not_done_line(result)
    if not_done:
        rows.append(("not done", not_done))
    if reused := reused_line(result):
        rows.append(("reused", reused))
    if result.budget is not None:
        rows.append(("budget", left_text(result.budget)))
    elif info.max_cost_usd is not None:
        rows.append(("budget", f"${info.max_cost_usd:.4f} (--max-cost)"))
    if retried := retries_line(retries):
        rows.append(("retries", retried))
    rows += change_rows(result.plan_changes)
    rows += quality_rows(result)
    for limiter in limiters:
        if limiter.model == rate_class(info.model) and (
            info.run_id in limiter.shares or info.run_id in limiter.waiting_runs
        ):
            rows.append(("rate limits", limiter_line(info.run_id, limiter)))
    if progress is not None:
        rows.append(("progress", describe(progress, None)))
    elif live_error:
        rows.append(("progress", live_error))
    if not info.active:
        tokens = tokens_line(result)
        rows += [
            (
                "calls",
                (
                    f"{info.calls} calls · {info.pack_count} packs · "
                    f"{info.split_events} split events"
                ),
            ),
            ("tokens", tokens),
            ("cost", f"${info.cost_usd:.4f}"),
        ]
    rows.append(("created", _when(info.created_at)))
    if info.finished_at:
        rows.append(
            (
                "finished",
                (f"{_when(info.finished_at)} (after {human_seconds(info.duration_s or 0)})"),
            )
        )
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


async def cmd_limits(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    views = await bb.limits()
    if s.con.json:
        s.con.data([dataclasses.asdict(v) for v in views])
        return 0
    if not views:
        s.con.line("no rate limiter yet: the first Claude call of a worker creates one")
        return 0
    rows = []
    for v in views:
        lim, now = v.limits, {k: max(n, 0.0) for k, n in v.levels.items()}
        limits = (
            f"{lim['requests']:,} / {human_tokens(lim['input'])} / {human_tokens(lim['output'])}"
        )
        available = (
            f"{now['requests']:,.0f} / {human_tokens(int(now['input']))} / "
            f"{human_tokens(int(now['output']))}"
        )
        rows.append(
            [
                v.key_hash,
                v.model,
                limits,
                "learned" if v.learned else "assumed",
                available,
                f"{v.factor:.0%}",
                f"{v.admitted:,}",
                f"{v.throttled:,}",
                str(v.in_flight),
            ]
        )
    s.con.table(
        [
            "KEY",
            "MODEL",
            "LIMITS/MIN (REQ/IN/OUT)",
            "",
            "AVAILABLE NOW",
            "RATE",
            "ADMITTED",
            "429s",
            "IN FLIGHT",
        ],
        rows,
        right=[5, 6, 7, 8],
    )
    for v in views:
        if v.shares or v.waiting_runs:
            shares = ", ".join(f"{run} {n}" for run, n in v.shares.items()) or "none"
            waiting = ", ".join(v.waiting_runs) or "none"
            s.con.line(
                f"  {v.key_hash} {v.model}: calls in the last minute by run: "
                f"{shares}; waiting now: {waiting}"
            )
    return 0


def limiter_line(run_id: str, v: LimiterView) -> str:
    """The run's share of the fleet's limiter: ``12 of 40 calls in the last minute ...``."""
    mine, total = v.shares.get(run_id, 0), sum(v.shares.values())
    text = f"{mine} of {total} calls in the last minute on key {v.key_hash}"
    if run_id in v.waiting_runs:
        text += " · waiting for its turn"
    return (
        f"{text} · fleet at {v.factor:.0%} of the learned limits · {v.throttled} × 429 "
        f"· {v.in_flight} in flight"
    )


async def cmd_list(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    runs = await bb.runs(limit=args.limit, status=args.status)
    if s.con.json:
        s.con.data([r.model_dump(mode="json") for r in runs])
        return 0
    if not runs:
        s.con.line(
            f"no runs{' with status ' + args.status if args.status else ''} yet: "
            f"start one with `{PROG} run FILE --schema SCHEMA.json`"
        )
        return 0
    rows = []
    for r in runs:
        b = r.blocks
        model = f"{r.model} (simulated)" if r.simulated else r.model
        rows.append(
            [
                r.run_id,
                s.con.status(r.status),
                r.document_name,
                r.schema_name,
                model,
                f"{b['ai_complete'] + b['confirmed'] + b['rejected']}/{b['failed']}/{r.blocks_total}",
                f"${r.cost_usd:.4f}",
                _when(r.created_at),
            ]
        )
    s.con.table(
        ["RUN", "STATUS", "DOCUMENT", "SCHEMA", "MODEL", "OK/FAILED/TOTAL", "COST", "CREATED"],
        rows,
        right=[5, 6],
    )
    return 0


async def cmd_calls(args: argparse.Namespace, s: Session) -> int:
    if args.full and args.show is None:
        s.con.error("--full applies to --show CALL_ID (one call in full)", EXIT_USAGE)
        return EXIT_USAGE
    bb = await s.bb(temporal=False)
    if args.show is not None:
        return await _show_call(args, s, bb)
    total, calls = await bb.calls(args.run_id, offset=args.offset, limit=args.limit, pack=args.pack)
    con: Console = s.con
    if con.json:
        con.data(
            {
                "run_id": args.run_id,
                "total": total,
                "offset": args.offset,
                "calls": [c.model_dump(mode="json") for c in calls],
            }
        )
        return 0
    if any(c.provider == "simulator" for c in calls):
        hosts = sorted({c.endpoint_host or "?" for c in calls if c.provider == "simulator"})
        con.line(
            con.style(
                f"SIMULATED: these calls were answered by the simulator at "
                f"{', '.join(hosts)}, not by Claude",
                "bold",
            )
        )
    rows = []
    for c in calls:
        outcome = c.stop_reason or c.error_type or "-"
        api = c.api or "-"
        if c.provider == "simulator":
            api += " (simulated)"
        rows.append(
            [
                c.call_id,
                c.pack_path,
                c.pack_attempt,
                c.blocks,
                c.purpose,
                api,
                con.status(c.status),
                outcome,
                human_tokens(c.input_tokens),
                human_tokens(c.output_tokens),
                human_tokens(c.cache_creation_input_tokens),
                human_tokens(c.cache_read_input_tokens),
                f"${c.cost_usd:.4f}",
                f"{c.latency_ms}ms" if c.latency_ms is not None else "-",
                f"{c.workflow_id or '-'} {c.activity_id or '-'}#{c.activity_attempt or 0}",
            ]
        )
    con.table(
        [
            "CALL",
            "PACK",
            "TRY",
            "BLOCKS",
            "PURPOSE",
            "API",
            "STATUS",
            "STOP",
            "IN",
            "OUT",
            "C.WRITE",
            "C.READ",
            "COST",
            "LATENCY",
            "WORKFLOW ACTIVITY#ATTEMPT",
        ],
        rows,
        right=[0, 2, 3, 8, 9, 10, 11, 12, 13],
    )
    for c in calls:
        if c.error_message:
            con.line(f"  call {c.call_id}: {c.error_message}")
    again = (
        f"calls {args.run_id}"
        + (f" --pack {args.pack}" if args.pack else "")
        + (f" --limit {args.limit}" if args.limit != 50 else "")
    )
    page_footer(con, args.offset, len(calls), total, "calls", again)
    con.line(con.style(f"one call in full: {PROG} calls {args.run_id} --show CALL_ID", "dim"))
    return 0


def _json_block(con: Console, title: str, value: Any) -> None:
    con.line(con.style(title, "bold"))
    for text in json.dumps(value, indent=2, ensure_ascii=False, default=str).splitlines():
        con.line(f"  {text}")


def _prompt_part(con: Console, title: str, part: PromptPart | None) -> None:
    if part is None:
        con.line(con.style(title, "bold"), " -")
        return
    how = "elided" if part.elided else "whole"
    con.line(
        con.style(title, "bold"),
        f" ({part.length:,} characters, sha256 {part.sha256}, {how}"
        + ("; --full prints it whole)" if part.elided else ")"),
    )
    for text in part.text.splitlines() or [""]:
        con.line(f"  {text}")


async def _show_call(args: argparse.Namespace, s: Session, bb: Any) -> int:
    c = await bb.call(args.run_id, args.show, full=args.full)
    con: Console = s.con
    if con.json:
        con.data(c.model_dump(mode="json"))
        return 0
    con.line(f"call {c.call_id} of run {c.run_id}: ", con.status(c.status))
    duration = f"{_when(c.started_at)} → {_when(c.finished_at)}" + (
        f" ({c.latency_ms}ms)" if c.latency_ms is not None else ""
    )
    rows = [
        ("pack", f"{c.pack_path} · attempt {c.pack_attempt} · {c.blocks} blocks"),
        (
            "purpose",
            f"{c.purpose} · provider {c.provider}"
            + (f" {c.endpoint_host}" if c.endpoint_host else "")
            + (" (SIMULATED, not Claude)" if c.provider == "simulator" else "")
            + f" · api {c.api or '-'}",
        ),
        ("model", c.model),
        ("timing", duration),
        (
            "tokens",
            (
                f"input {c.input_tokens:,} · output {c.output_tokens:,} · cache write "
                f"{c.cache_creation_input_tokens:,} (1h {c.cache_creation_1h_tokens:,}) · "
                f"cache read {c.cache_read_input_tokens:,}"
            ),
        ),
        ("cost", f"${c.cost_usd:.6f}"),
        ("stop", c.stop_reason or "-"),
        (
            "temporal",
            (
                f"workflow {c.workflow_id or '-'} (run {c.workflow_run_id or '-'}) · "
                f"activity {c.activity_id or '-'}#{c.activity_attempt or 0}"
            ),
        ),
        ("request id", c.request_id or "-"),
    ]
    if c.custom_id or c.provider_batch_id:
        rows.append(("batch", f"{c.provider_batch_id or '-'} · custom_id {c.custom_id or '-'}"))
    if c.http_status is not None and (c.error_type or c.error_message):
        rows.append(("error", f"http {c.http_status} · {c.error_type or '-'}"))
    elif c.error_type or c.error_message:
        rows.append(("error", c.error_type or "-"))
    if c.error_message:
        rows.append(("message", c.error_message))
    rows.append(("blocks", ", ".join(c.named_blocks)))
    for key, value in rows:
        con.line(f"  {key:<12} {value}")
    con.line(con.style(f"request as sent (prefix sha256 {c.prefix_sha256 or '-'})", "bold"))
    _prompt_part(con, "system", c.system)
    _prompt_part(con, "tools", c.tools)
    _json_block(con, "request (without system and tools)", c.request)
    if c.response is not None:
        _json_block(con, "response (raw)", c.response)
    elif c.status == "failed":
        con.line(con.style("response", "bold"), " none: the call failed (see error above)")
    else:
        con.line(con.style("response", "bold"), f" none yet ({c.status})")
    return 0


def page_footer(con: Console, offset: int, shown: int, total: int, what: str, command: str) -> None:
    """ "showing 21-40 of 200" and the command for the next page."""
    if not total:
        con.line(f"no {what} to show")
        return
    text = f"showing {what} {offset + 1 if shown else offset}-{offset + shown} of {total}"
    if offset + shown < total:
        text += f"; next page: {PROG} {command} --offset {offset + shown}"
    con.line(con.style(text, "dim"))


def add_status_parser(sub: Subparsers) -> None:
    """`status`'s options."""
    add_run_id_command(
        sub,
        "status",
        "show one run: state, counters, cost, links",
        "Show a run's state and counters (live progress while it runs).",
    )


def add_limits_parser(sub: Subparsers) -> None:
    """`limits`'s options."""
    add_command(
        sub,
        "limits",
        "the fleet's rate limiters",
        "The rate limits every worker shares, per API key (by hash) and model: the limits "
        "learned from Claude's answers, what is available now, the rate the fleet allows "
        "itself after 429s (AIMD), calls in flight and each run's share of the last "
        "minute.",
    )


def add_list_parser(sub: Subparsers) -> None:
    """`list`'s options."""
    lst = add_command(sub, "list", "list recent runs", "List runs, newest first.")
    lst.add_argument("--limit", type=positive, default=20, help="how many (default %(default)s)")
    lst.add_argument(
        "--status",
        help="only runs in this state: created, planning, running, "
        "cancelling, completed, completed_with_failures, failed, cancelled, "
        "budget_exhausted",
    )


def add_calls_parser(sub: Subparsers) -> None:
    """`calls`'s options."""
    calls = add_run_id_command(
        sub,
        "calls",
        "show the run's LLM call ledger",
        "One line per Claude call: pack path, attempt, purpose, API, stop "
        "reason, tokens, cost, latency, status and the Temporal "
        "workflow/activity ids. --show CALL_ID prints one call in full: "
        "the request as sent and the raw response or error.",
    )
    calls.add_argument(
        "--limit", type=positive, default=50, help="calls per page (default %(default)s)"
    )
    calls.add_argument("--offset", type=not_negative, default=0, help="skip this many calls")
    calls.add_argument("--pack", metavar="PATH", help="only this pack and its halves")
    calls.add_argument(
        "--show",
        type=positive,
        metavar="CALL_ID",
        help="print this call in full: request as sent, raw response or error",
    )
    calls.add_argument(
        "--full",
        action="store_true",
        help="with --show: print the system prompt and tool definitions whole "
        "(default: their first 200 characters, length and sha256)",
    )
