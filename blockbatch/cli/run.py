"""`run`, `estimate`, `watch`, `retry` and `cancel`: quote a run, start it, follow it, retry what
failed, stop it."""

from __future__ import annotations

import argparse
import asyncio
import urllib.request
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from temporalio.service import RPCError

from blockbatch.api.errors import BadRequest, ModelRetiring, StackUnavailable, TemporalUnavailable
from blockbatch.api.inputs import as_schema, with_schema_model
from blockbatch.cli.follow import follow, follow_escalation, report, say_detached
from blockbatch.cli.options import add_field_option, apply_settings
from blockbatch.cli.parser import (
    EFFORT,
    ESCALATE_TO,
    MAX_COST,
    MAX_PAUSE,
    MODE,
    PACK_SIZE,
    PROVIDER,
    SECOND_PACK_SIZE,
    SEE_TOP,
    SETTABLE,
    TO,
    VERBOSE_HELP,
    Subparsers,
    add_command,
    add_run_id_command,
    add_run_inputs,
    budget_usd,
    examples,
)
from blockbatch.cli.session import Session
from blockbatch.core.commands import PROG
from blockbatch.core.ingest import parse_records
from blockbatch.core.providers import (
    DEFAULT_PROVIDER,
    ProviderModelError,
    provider_info,
    resolve_model,
    wire_model,
)
from blockbatch.core.reasons import REASONS, counts_text
from blockbatch.core.registry import RetiredModelError, UnknownModelError
from blockbatch.core.run_types import RunOptions
from blockbatch.report import run_links
from blockbatch.runtime.settings import Settings

if TYPE_CHECKING:
    from blockbatch.api.client import Blockbatch
    from blockbatch.core.blocks import ParsedBlock
    from blockbatch.core.views import RunInfo


def _options(args: argparse.Namespace, settings: Settings | None = None) -> RunOptions:
    """The run's options: its own options' values, then each ``--set KEY=VALUE``.

    On another provider (``--provider``), ``--model`` may be the provider's own id (a
    Bedrock id or inference profile, a Vertex id, a Foundry deployment named in
    ``BLOCKBATCH_FOUNDRY_DEPLOYMENTS``): the run keeps the registry's model and that id.
    """
    fields: dict[str, object] = {
        option.field: getattr(args, option.dest)
        for option in (EFFORT, PACK_SIZE, MODE, PROVIDER, MAX_COST)
        if hasattr(args, option.dest)  # `estimate` has no budget
    }
    if fields.get(MODE.field) == "cheapest":  # chosen from the quote (choose_mode)
        fields[MODE.field] = "sync"
    provider = str(fields.get("provider") or DEFAULT_PROVIDER)
    if args.model and provider != DEFAULT_PROVIDER:
        deployments = settings.blockbatch_foundry_deployments if settings else {}
        model, wire = resolve_model(provider, args.model, deployments)
        fields["model"] = model.id
        if wire != wire_model(provider, model.id, None):
            fields["provider_model"] = wire
    elif args.model:
        try:
            fields["model"] = resolve_model(provider, args.model)[0].id
        except (RetiredModelError, ProviderModelError):
            raise
        except UnknownModelError:
            # Not in the registry: it may be a model the Models API describes and
            # BLOCKBATCH_MODEL_PRICES prices; the start (or the quote) decides, before
            # anything is created.
            fields["model"] = args.model
    if getattr(args, "probe_model", None):
        fields["quality"] = {"probe_model": args.probe_model}
    if getattr(args, "include_boilerplate", False):
        fields["include_boilerplate"] = True
    max_pause = getattr(args, MAX_PAUSE.dest, MAX_PAUSE.cli_default)
    if max_pause != MAX_PAUSE.cli_default:  # `estimate` has none
        fields["outage"] = {MAX_PAUSE.field: max_pause}
    apply_settings(fields, args.settings)
    try:
        return RunOptions.model_validate(fields)
    except ValidationError as err:  # the options together (batch mode on a provider)
        raise BadRequest(
            "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
        ) from None


async def check_claude(settings: Settings) -> None:
    """Fail early when no worker could call Claude: no key and no simulator answering."""
    try:
        settings.resolved_api_key()
    except RuntimeError as exc:
        raise StackUnavailable(str(exc)) from None
    if not settings.uses_simulator:
        return
    url = f"{settings.resolved_anthropic_base_url}/health"

    def ok() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=3):
                return True
        except OSError:
            return False

    if not await asyncio.to_thread(ok):
        raise StackUnavailable(
            f"no ANTHROPIC_API_KEY is set and the local Claude simulator is not answering at "
            f"{settings.resolved_anthropic_base_url}: start it with `make up`, or set "
            "ANTHROPIC_API_KEY to use Claude"
        )


def _cheapest(args: argparse.Namespace) -> bool:
    return getattr(args, MODE.dest, None) == "cheapest"


async def cmd_estimate(args: argparse.Namespace, s: Session) -> int:
    # The quote (blockbatch/cli/quote.py) loads for the commands that quote: not for watch,
    # retry or cancel, which share this module.
    from blockbatch.cli.quote import show_quote

    return await show_quote(
        args,
        s,
        _options(args, s.settings),
        count=not args.no_count,
        history=not args.no_history,
        cheapest=_cheapest(args),
    )


async def choose_mode(
    args: argparse.Namespace, s: Session, options: RunOptions, blocks: list[ParsedBlock]
) -> RunOptions:
    """``--mode cheapest``: the mode the quote expects to cost less; ``--mode batch``: a
    warning, with the figures, when the quote expects batch to cost more than sync (its
    cache hits are best effort, while sync reads the cache every call)."""
    from blockbatch.cli.quote import cheaper_mode, quote_of, usd

    wanted = getattr(args, MODE.dest, None)
    if wanted not in ("batch", "cheapest"):
        return options
    provider = provider_info(options.provider)
    if wanted == "cheapest" and not provider.batches:
        s.con.note(f"note: --mode cheapest runs sync: {provider.batch_refusal}")
        return options.model_copy(update={"mode": "sync"})
    q = await quote_of(args, s, options, blocks=blocks)
    figures = (
        f"batch {usd(q.batch.cost_usd)} expected ({usd(q.batch.min_cost_usd)} if every "
        f"request reads the cache, {usd(q.batch.max_cost_usd)} at most), sync "
        f"{usd(q.sync.cost_usd)}"
    )
    if wanted == "cheapest":
        mode = cheaper_mode(q)
        s.con.note(f"note: --mode cheapest runs {mode}: {figures}")
        return options.model_copy(update={"mode": mode})
    if q.batch.cost_usd > q.sync.cost_usd:
        s.con.note(
            f"warning: batch is expected to cost MORE than sync: {figures}. Half price "
            "covers input, output and cache tokens, but a batch reads the cache best "
            "effort; --mode sync (or cheapest) would cost less"
        )
    return options


async def cmd_run(args: argparse.Namespace, s: Session) -> int:
    from blockbatch.api.quote import read_document
    from blockbatch.cli.quote import read_as, show_quote

    if args.dry_run:
        return await show_quote(args, s, _options(args, s.settings), cheapest=_cheapest(args))
    # Everything a user can get wrong is checked before anything is written.
    path = Path(args.file)
    data, _, fmt = read_document(path, fmt=args.format)
    notices: list[str] = []
    parsed = parse_records(
        data,
        fmt,
        text_field=args.text_field,
        skip_empty=args.skip_empty,
        options=read_as(args),
        notices=notices,
    )
    blocks = parsed.blocks
    if (skipped := parsed.skipped_text()) is not None:
        s.con.note(f"note: {skipped} (--skip-empty)")
    for notice in notices:
        s.con.note(f"note: {notice}")
    spec = as_schema(Path(args.schema))
    for notice in spec.notices:
        s.con.note(f"note: {notice}")
    options = _options(args, s.settings)
    bb = await s.bb()
    provider = provider_info(options.provider)
    if provider.name == DEFAULT_PROVIDER:
        await check_claude(s.settings)
    elif (fallbacks := provider.fallbacks_text()) is not None:
        s.con.note(f"note: {fallbacks}")
    options = await choose_mode(args, s, options, blocks)
    # A retired model is refused before the document or the schema is stored; the start
    # takes the model resolved here.
    model = await bb.run_model(with_schema_model(options, spec.prompt_config.model).model)
    escalate_to = getattr(args, "escalate_to", None)
    if escalate_to is not None:
        escalate_to = (await bb.run_model(escalate_to)).id
    if not await bb.workers_polling():
        s.con.note(
            f"note: no worker is polling task queue {s.settings.temporal_task_queue!r}; "
            "the run waits until one does (`make worker` or `python worker.py`)"
        )
    if (differ := await bb.endpoint_warning()) is not None:
        s.con.note(f"warning: {differ}")
    doc = await bb.ingest_blocks(
        data, blocks, name=path.name, fmt=fmt, read_as=read_as(args), text_field=args.text_field
    )
    schema_id = await bb.add_schema(spec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ModelRetiring)
        run_id = await bb.start_run(doc, schema_id, options, model=model)
    for w in caught:
        if issubclass(w.category, ModelRetiring):
            s.con.note(f"warning: {w.message}")
    _say_started(
        s,
        run_id,
        f"run {run_id}: {len(blocks)} blocks of {path.name} x {spec.name}",
        {"run_id": run_id, "document_id": doc, "schema_id": schema_id, "blocks": len(blocks)},
        no_wait=args.no_wait,
    )
    if args.no_wait:
        if escalate_to is not None:
            s.con.note(
                f"note: --no-wait: escalate once the run has ended with "
                f"`{PROG} escalate {run_id} --to {escalate_to}`"
            )
        return 0
    if escalate_to is None:
        return await _follow_to_end(s, run_id, verbose=args.verbose)
    if await follow(bb, run_id, s.con, verbose=args.verbose) == "detached":
        say_detached(s.con, run_id)
        return 0
    info = await bb.run(run_id)
    if info.status not in ("completed", "completed_with_failures"):
        s.con.note(f"note: run {run_id} ended {info.status}: not escalated")
        return await report(bb, run_id, s.con)
    return await _escalate(s, bb, run_id, escalate_to, args.second_pack_size)


async def cmd_escalate(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb()
    await check_claude(s.settings)
    return await _escalate(s, bb, args.run_id, args.to, args.second_pack_size)


async def _escalate(
    s: Session, bb: Blockbatch, run_id: str, model: str, second_pack_size: int | None
) -> int:
    """Start the run's escalation to ``model``, follow it, print the run's summary."""
    await bb.escalate(run_id, model, second_pack_size=second_pack_size)
    if not s.con.json:
        s.con.line(
            f"escalating run {run_id} to {model}: a second packing on the run's model, "
            "then the doubtful blocks alone on the stronger one"
        )
    return await _follow_to_end(s, run_id, escalation=True)


def _say_started(
    s: Session, run_id: str, what: str, data: dict[str, Any], *, no_wait: bool
) -> None:
    """Announce a started run (or retry); when not followed here, how to follow or cancel it.

    ``--json``: only with ``--no-wait``, as ``data`` with its status and Temporal UI links
    (a followed run prints its summary instead).
    """
    links = run_links(s.settings, run_id)
    if s.con.json:
        if no_wait:
            s.con.data({**data, "status": "started", "temporal_ui": links})
        return
    s.con.line(f"started {what}")
    if no_wait:
        s.con.line(f"  follow it:   {PROG} watch {run_id}")
        s.con.line(f"  cancel it:   {PROG} cancel {run_id}")
    s.con.line(f"  Temporal UI: {links['run']}")


async def _follow_to_end(
    s: Session, run_id: str, *, verbose: bool = False, escalation: bool = False
) -> int:
    """Follow the run's workflow (``escalation``: its escalation's) to its end, then print
    the run's summary."""
    bb = await s.bb()
    followed = (
        follow_escalation(bb, run_id, s.con)
        if escalation
        else follow(bb, run_id, s.con, verbose=verbose)
    )
    if await followed == "detached":
        say_detached(s.con, run_id)
        return 0
    if not escalation and (await bb.run(run_id)).active and await _escalating(bb, run_id):
        # The run's workflow had ended and an escalation of it had begun (it reopens the
        # run): follow that, as `watch` would have. A run that ended as usual is not
        # active: no Temporal call is added to the end of every followed run.
        return await _follow_to_end(s, run_id, escalation=True)
    return await report(bb, run_id, s.con)


async def cmd_watch(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    run_id = (await bb.run(args.run_id)).run_id  # NotFound first
    if await _escalating(bb, run_id):
        return await _follow_to_end(s, run_id, escalation=True)
    info = await bb.run(run_id)  # read after: an escalation may have begun, and ended
    if info.active or await _retry_starting(bb, info):
        return await _follow_to_end(s, info.run_id, verbose=args.verbose)
    return await report(bb, info.run_id, s.con)


async def _escalating(bb: Blockbatch, run_id: str) -> bool:
    """The run's escalation runs: it is what `watch` and `cancel --wait` follow."""
    try:
        return await bb.escalation_running(run_id)
    except (TemporalUnavailable, RPCError):
        return False  # the run's own state is still worth showing


async def _retry_starting(bb: Blockbatch, info: RunInfo) -> bool:
    """A finished run whose workflow runs again: a retry no worker has claimed yet."""
    if info.status == "completed":
        return False  # every block done: nothing a retry could take, no need to ask
    try:
        return await bb.workflow_running(info.run_id)
    except (TemporalUnavailable, RPCError):
        return False  # the stored state is still worth showing


async def cmd_retry(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    # Everything a user can get wrong is checked before anything starts.
    checked = await bb.check_retry(
        args.run_id,
        reasons=args.reason,
        blocks=args.block,
        include_cancelled=args.cancelled,
        max_cost_usd=args.max_cost,
    )
    await check_claude(s.settings)
    await bb.temporal()
    if not await bb.workers_polling():
        s.con.note(
            f"note: no worker is polling task queue {s.settings.temporal_task_queue!r}; "
            "the retry waits until one does (`make worker` or `python worker.py`)"
        )
    if (differ := await bb.endpoint_warning()) is not None:
        s.con.note(f"warning: {differ}")
    started = await bb.retry(
        args.run_id,
        reasons=args.reason,
        blocks=args.block,
        include_cancelled=args.cancelled,
        max_cost_usd=args.max_cost,
    )
    run_id = started.run_id
    what = (
        f"retry {started.retry} of run {run_id}: {started.blocks} "
        f"{'failed or cancelled' if args.cancelled else 'failed'} "
        f"block{'s' if started.blocks != 1 else ''} ({counts_text(started.reasons)}) "
        f"of {checked.run.blocks_total}"
    )
    _say_started(s, run_id, what, started.model_dump(mode="json"), no_wait=args.no_wait)
    if args.no_wait:
        return 0
    if await follow(bb, run_id, s.con) == "detached":
        say_detached(s.con, run_id)
        return 0
    return await report(bb, run_id, s.con)


async def cmd_cancel(args: argparse.Namespace, s: Session) -> int:
    bb = await s.bb(temporal=False)
    request = await bb.request_cancel(args.run_id)
    info = request.info
    # An escalation queued or planning leaves the run as it ended: it was signalled too.
    escalating = await _escalating(bb, info.run_id)
    if not info.active and not escalating:
        if s.con.json:
            s.con.data({"run_id": info.run_id, "status": info.status, "cancel_sent": False})
        else:
            s.con.line(f"run {info.run_id} already {info.status}: nothing to cancel")
        return 0
    if request.waits_for_worker:
        # Nothing carries the cancel out until a worker runs: say so and return.
        if s.con.json:
            s.con.data(
                {
                    "run_id": info.run_id,
                    "status": info.status,
                    "cancel_sent": True,
                    "waits_for_worker": True,
                    "worker_polling": request.worker_polling,
                    "task_queue": request.task_queue,
                }
            )
        elif request.worker_polling:
            from blockbatch.api.runs import CANCEL_UPDATE_WAIT_S

            s.con.line(
                f"cancel recorded for run {info.run_id}; the worker on task queue "
                f"{request.task_queue!r} did not take it within {CANCEL_UPDATE_WAIT_S:g} s "
                "(busy, or stopping): it stops the run's packs when it next works on the run, "
                f"and pending blocks end cancelled (follow it: {PROG} watch {info.run_id})"
            )
        else:
            s.con.line(
                f"cancel recorded for run {info.run_id}, but no worker is running on task "
                f"queue {request.task_queue!r} to carry it out: start one (`make worker` or "
                "`python worker.py`); it then stops the run's packs and pending blocks end "
                "cancelled"
            )
        return 0  # recorded: a worker carries it out when one runs
    if s.con.json and not args.wait:
        s.con.data({"run_id": info.run_id, "status": "cancelling", "cancel_sent": True})
    if not s.con.json:
        s.con.line(
            f"cancel requested for the escalation of run {info.run_id}: no new Claude call "
            "starts; blocks not compared or asked keep their first answer"
            if escalating
            else f"cancel requested for run {info.run_id}: no new Claude call starts; "
            "running packs finish or stop and pending blocks end cancelled"
        )
        if not args.wait:
            s.con.line(f"  follow it: {PROG} watch {info.run_id}")
    if not args.wait:
        return 0
    return await _follow_to_end(s, info.run_id, escalation=escalating)


def add_run_parser(sub: Subparsers) -> None:
    """`run`'s options."""
    run = add_command(
        sub,
        "run",
        "ingest a document, start a run and follow it",
        "Ingest FILE, start a run of SCHEMA over every block and follow it with a "
        "live progress bar. Ctrl-C asks whether to cancel the run or detach from it.",
        epilog=examples(
            "samples/handbook.md --schema samples/extract.json",
            "rows.jsonl --schema s.json --model claude-sonnet-4-6 --max-cost 5",
            "doc.md --schema s.json --mode batch --no-wait",
            "doc.md --schema s.json --set quality.min_agreement=0.95 --set max_concurrent_packs=4",
            command="run",
        )
        + f"\n\n{SETTABLE.listing()}\n\n{SEE_TOP}",
    )
    add_run_inputs(run, "the end of this help")
    add_field_option(run, MAX_COST)
    add_field_option(run, MAX_PAUSE)
    add_field_option(run, ESCALATE_TO)
    add_field_option(run, SECOND_PACK_SIZE)
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the quote (as `estimate` does) and stop: nothing is stored, nothing is started",
    )
    run.add_argument(
        "--no-wait",
        action="store_true",
        help="start the run and return; follow it later with `watch`",
    )
    run.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)


def add_estimate_parser(sub: Subparsers) -> None:
    """`estimate`'s options."""
    estimate = add_command(
        sub,
        "estimate",
        "quote a run before running it: calls, tokens, cost",
        "Plan the packs exactly as a run would and quote its calls, input / output / cache "
        "tokens and cost, sync and batch side by side. Input is counted with the API's "
        "token-counting endpoint (a few requests; the only Claude calls it makes), output "
        "is the planner's estimate, or what earlier runs of the same schema and model wrote "
        "when Postgres has any. Stores nothing, starts nothing.",
        epilog=examples(
            "samples/handbook.md --schema samples/extract.json",
            "doc.md --schema s.json --model claude-sonnet-4-6 --pack-size 20 --json",
            command="estimate",
        )
        + f"\n\n{SEE_TOP}",
    )
    add_run_inputs(estimate, "`run --help`")
    add_field_option(estimate, ESCALATE_TO)
    estimate.add_argument(
        "--no-count",
        action="store_true",
        help="do not call the token-counting endpoint: planner estimates",
    )
    estimate.add_argument(
        "--no-history",
        action="store_true",
        help="do not learn the expected output from earlier runs",
    )


def add_cancel_parser(sub: Subparsers) -> None:
    """`cancel`'s options."""
    cancel = add_run_id_command(
        sub,
        "cancel",
        "ask a run to stop",
        "Signal the run to stop: no new Claude call starts, running packs "
        "finish or stop, pending blocks end cancelled. A run being escalated: its "
        "escalation stops, and the blocks it has not compared or asked keep their first "
        "answer.",
    )
    cancel.add_argument(
        "--wait", action="store_true", help="follow the run (or its escalation) until it stops"
    )


def add_watch_parser(sub: Subparsers) -> None:
    """`watch`'s options."""
    watch = add_run_id_command(
        sub,
        "watch",
        "re-attach to a run and follow it to the end",
        "Follow a run with the live progress bar, then print its summary. A run being "
        "escalated: the escalation's progress (phase, second packs, blocks compared, kept "
        "and sent up, answered, cost so far) until it ends.",
    )
    watch.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)


def add_retry_parser(sub: Subparsers) -> None:
    """`retry`'s options."""
    retry = add_run_id_command(
        sub,
        "retry",
        "run a finished run's failed blocks again, in the same run",
        "Run the failed blocks of a finished run again (and its cancelled ones with "
        "--cancelled), in the same run: its history, counters, ledger and cost include the "
        "retry. Blocks that succeeded are never sent or paid for again. Follows the retry "
        "like `run`. A run still active, or with nothing to retry, is refused and nothing "
        "changes.",
    )
    retry.add_argument(
        "--reason",
        action="append",
        metavar="CODE",
        help="only blocks that failed with this reason code (repeatable): " + ", ".join(REASONS),
    )
    retry.add_argument(
        "--block",
        action="extend",
        nargs="+",
        metavar="UID",
        help="only these blocks (uid, or block index); each must have failed",
    )
    retry.add_argument(
        "--cancelled",
        action="store_true",
        help="cancelled blocks too (by default only failed ones)",
    )
    retry.add_argument(
        "--max-cost",
        type=budget_usd,
        metavar="USD",
        help="a new budget for the whole run, what it spent included (a run "
        "that ended budget_exhausted: raise it to finish the run); "
        "default: the run's own",
    )
    retry.add_argument(
        "--no-wait",
        action="store_true",
        help="start the retry and return; follow it later with `watch`",
    )


def add_escalate_parser(sub: Subparsers) -> None:
    """`escalate`'s options."""
    escalate = add_run_id_command(
        sub,
        "escalate",
        "ask a finished run's doubtful blocks again on a stronger model",
        "Escalate a finished run: every block its model answered is asked a second time on "
        "the same model in a second packing (other neighbours, other places; it reads the "
        "prompt cache the run wrote); blocks whose two answers disagree, that failed or "
        "were refused are asked alone on the --to model, whose answer becomes their "
        "overlay. Reviewed blocks are left as they are. A run is escalated once. Follows "
        "the escalation with its live progress (Ctrl-C: cancel or detach, as `run`) and "
        "prints the run's summary with what it escalated and cost.",
    )
    add_field_option(escalate, TO).required = True
    add_field_option(escalate, SECOND_PACK_SIZE)
