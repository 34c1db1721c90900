"""The command line: every command, option and help text of ``starter.py``."""

from __future__ import annotations

import argparse
import shlex
import textwrap
from collections.abc import Callable
from pathlib import Path

from blockbatch.cli.options import FieldOption, Settable, add_field_option
from blockbatch.core.budget import BudgetError, parse_budget
from blockbatch.core.calibration import (
    DEFAULT_MODELS_SAMPLE,
    DEFAULT_SAMPLE,
    DEFAULT_SIZES,
    DEFAULT_TARGET,
)
from blockbatch.core.ingest import EXTENSIONS, FORMATS
from blockbatch.core.models import EscalationOptions, OutageOptions, QualityOptions, RunOptions
from blockbatch.core.reasons import REASONS
from blockbatch.core.registry import DEFAULT_MODEL
from blockbatch.core.review import OVERLAY_STATUSES
from blockbatch.core.streams import StreamTriggers

#: The program the help and the generated reference are written for.
PROG = "python starter.py"


def invoked_prog(argv0: str) -> str:
    """The program as the user typed it, to write the next command in: ``blockbatch`` for
    the console script, ``python <path as typed>/starter.py`` for starter.py."""
    name = Path(argv0).name
    if name == "starter.py":
        return f"python {shlex.quote(argv0)}"
    if name == "blockbatch":
        return "blockbatch"
    return PROG


#: What a document may be, for the help: the extensions ingest reads.
DOCUMENT_TYPES = ", ".join(EXTENSIONS)

#: Exit codes. For a command that follows a run to its end (run, watch, cancel --wait):
#: 0 every block done, 5 done with some blocks failed, 1 nothing done, failed or cancelled.
EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4
EXIT_WITH_FAILURES = 5
#: A refused retry (nothing changed): the run has not finished (or a retry of it is under
#: way), it has nothing to retry, or a block asked for did not fail.
EXIT_RUN_ACTIVE, EXIT_NOTHING_TO_RETRY, EXIT_NOT_RETRYABLE = 6, 7, 8
#: A followed run stopped by its budget (``budget_exhausted``): some blocks are left.
EXIT_BUDGET_EXHAUSTED = 9
EXIT_INTERRUPTED = 130
#: Stdout closed by the reader (``| head``): 128 + SIGPIPE, as a shell reports it.
EXIT_PIPE_CLOSED = 141

EPILOG = """\
exit codes (retry, once it has run, exits as run and watch do):
  0  done (run/watch/cancel --wait: every block done, the run is `completed`)
  5  run/watch/cancel --wait: done with failures (`completed_with_failures`): some blocks
     failed; see `review RUN_ID --failed`, then `retry RUN_ID`
  1  run/watch/cancel --wait: nothing done (`failed`: every block failed, or a fatal error
     such as a rejected API key) or the run was `cancelled`
  2  usage error or bad input (file, schema, reason code)   3  unknown run id or block uid
  4  the stack is unavailable (Postgres, Temporal, Claude/simulator): try `make up`
  6  retry: the run has not finished, or a retry of it is already under way
  7  retry: nothing to retry (no failed block, or none with the given reasons)
  8  retry: a block given with --block did not fail (or is not in the selection)
  9  run/watch/retry: the budget (--max-cost) ran out (`budget_exhausted`): blocks are
     left; `retry RUN_ID --max-cost USD` with a higher budget finishes them
  130 interrupted (Ctrl-C)                      141 stdout closed by its reader (`| head`)

configuration comes from the environment: DATABASE_URL, TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TEMPORAL_TASK_QUEUE, TEMPORAL_UI_URL, ANTHROPIC_API_KEY,
ANTHROPIC_BASE_URL (unset: the embedded stack of `make up` and its simulated Claude);
BLOCKBATCH_REVIEWER (who edit/confirm/reject record, default your OS user name),
BLOCKBATCH_SERVE_TOKEN (needed by `serve` on any address but 127.0.0.1/localhost).
"""


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


_positive, _not_negative = _at_least(1), _at_least(0)


def _duration(text: str) -> float:
    """``500ms``, ``2s``, ``1m``, ``3h`` or plain seconds (``2.5``) as seconds (the field
    checks the bounds)."""
    t = text.strip().lower()
    scale = 1.0
    for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if t.endswith(suffix):
            t, scale = t[: -len(suffix)], factor
            break
    try:
        return float(t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (500ms, 2s, 1m, 3h)"
        ) from None


def _budget(text: str) -> float:
    try:
        return parse_budget(text)
    except BudgetError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--max-cost ")) from None


def _share(name: str, *, zero: bool) -> Callable[[str], float]:
    """A fraction: in [0, 1] (``zero``), else in (0, 1]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (0 <= value <= 1 if zero else 0 < value <= 1):  # NaN too
            interval = "[0, 1]" if zero else "(0, 1]"
            raise argparse.ArgumentTypeError(
                f"{name} must be a fraction in {interval}, e.g. 0.95 for 95%; got {text}"
            )
        return value

    return parse


#: Options of their own for option model fields: help, default, choices and bounds come
#: from the field (blockbatch/cli/options.py); tests/unit/test_cli_options.py holds them to it.
MODEL = FieldOption(
    "--model",
    RunOptions,
    "model",
    metavar="MODEL",
    default_text=f"the schema's prompt_config.model, else {DEFAULT_MODEL}",
)
EFFORT = FieldOption("--effort", RunOptions, "effort")
PACK_SIZE = FieldOption("--pack-size", RunOptions, "pack_size", metavar="N")
MODE = FieldOption("--mode", RunOptions, "mode")
PROBE_MODEL = FieldOption("--probe-model", QualityOptions, "probe_model", metavar="MODEL")
MAX_COST = FieldOption("--max-cost", RunOptions, "max_cost_usd", metavar="USD", convert=_budget)
MAX_ROWS = FieldOption("--max-rows", StreamTriggers, "max_rows", metavar="N")
MAX_TOKENS = FieldOption("--max-tokens", StreamTriggers, "max_tokens", metavar="T")
MAX_WAIT = FieldOption(
    "--max-wait",
    StreamTriggers,
    "max_wait_s",
    metavar="2s",
    convert=_duration,
    note="500ms, 2s and 1m work too",
)
MAX_BUFFERED = FieldOption("--max-buffered", StreamTriggers, "max_buffered", metavar="N")
MAX_PAUSE = FieldOption(
    "--max-pause",
    OutageOptions,
    "max_pause_s",
    metavar="3h",
    convert=_duration,
    note="in seconds, or 90m, 3h",
)
TRIGGERS = (MAX_ROWS, MAX_TOKENS, MAX_WAIT, MAX_BUFFERED)
ESCALATE_TO = FieldOption(
    "--escalate-to", EscalationOptions, "model", metavar="MODEL", default_text="no escalation"
)
TO = FieldOption("--to", EscalationOptions, "model", metavar="MODEL", note="required")
SECOND_PACK_SIZE = FieldOption(
    "--second-pack-size", EscalationOptions, "second_pack_size", metavar="N"
)
FIELD_OPTIONS = (
    MODEL,
    EFFORT,
    PACK_SIZE,
    MODE,
    PROBE_MODEL,
    MAX_COST,
    MAX_PAUSE,
    *TRIGGERS,
    ESCALATE_TO,
    TO,
    SECOND_PACK_SIZE,
)
#: What ``--set`` takes: every other field of RunOptions (and of the models in it).
SETTABLE = Settable({o.field: o.flag for o in FIELD_OPTIONS if o.model is RunOptions})

DESCRIPTION_WIDTH = 92
#: A command's help ends here; the exit codes and the environment are in ``--help``'s.
SEE_TOP = f"exit codes and the environment: `{PROG} --help`"

_VERBOSE_HELP = (
    "while following: also the fleet's rate limiter (limits, the share it "
    "admits, this run's share and wait, 429s) on a line of its own when it "
    "held the run back; `status` shows it too"
)


def _settings(p: argparse.ArgumentParser, listed_in: str) -> None:
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        type=SETTABLE.parse,
        metavar="KEY=VALUE",
        help="a rarer run option (repeatable), e.g. --set quality.probe_rate=0 "
        f"--set reuse_answers=false; {listed_in} lists every KEY with its default",
    )


def _source(p: argparse.ArgumentParser) -> None:
    """Where a document's blocks come from: the same for `run`, `estimate`, `calibrate`."""
    p.add_argument("file", metavar="FILE", help=f"document: {DOCUMENT_TYPES}")
    p.add_argument(
        "--schema",
        required=True,
        metavar="SCHEMA.json",
        help="the schema: fields to produce per block plus prompt_config",
    )
    add_field_option(p, MODEL)
    p.add_argument(
        "--format", choices=list(FORMATS), help="document format (default: from the file extension)"
    )
    p.add_argument(
        "--text-field",
        default="text",
        metavar="F",
        help="JSONL key / CSV column holding each block's text; for XLSX a column (sheets "
        "without it are skipped, with a notice) or SHEET!COLUMN (default: %(default)s)",
    )
    p.add_argument(
        "--skip-empty",
        action="store_true",
        help="leave out JSONL/CSV/XLSX records whose text is empty (their lines are listed) "
        "instead of refusing the file",
    )


def _run_inputs(p: argparse.ArgumentParser, listed_in: str) -> None:
    """A run's document, schema and options: the same for `run` and `estimate`."""
    _source(p)
    p.add_argument(
        "--html-all",
        action="store_true",
        help="HTML: send the whole page; by default only its main content is sent and its "
        "navigation, menus and footers are kept as set-aside blocks",
    )
    p.add_argument(
        "--table-rows",
        action="store_true",
        help="one block per table row, with the header row as its context (HTML, DOCX, "
        "PPTX, markdown); by default a table is one block, split by whole rows when large",
    )
    p.add_argument(
        "--pptx-notes",
        action="store_true",
        help="PPTX: each slide's speaker notes as a block of their own",
    )
    for option in (EFFORT, PACK_SIZE, MODE, PROBE_MODEL):
        add_field_option(p, option)
    p.add_argument(
        "--include-boilerplate",
        action="store_true",
        help=RunOptions.model_fields["include_boilerplate"].description,
    )
    _settings(p, listed_in)


def _examples(*args: str, command: str) -> str:
    return "examples:\n" + "\n".join(f"  {PROG} {command} {a}" for a in args)


def _wrapped(text: str) -> str:
    """A command's description at a fixed width: its help keeps the epilog's line breaks
    (RawDescriptionHelpFormatter), so the description is wrapped here."""
    return textwrap.fill(text, width=DESCRIPTION_WIDTH, break_on_hyphens=False)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command line; ``prog`` is how it was invoked (``blockbatch`` as the console script)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", help="print machine-readable JSON on stdout instead of text"
    )
    parser = argparse.ArgumentParser(
        prog=prog,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_wrapped(
            "Run an LLM over every block of a document, follow the run, review, "
            "confirm and export the results. `COMMAND --help` describes each command."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, help_: str, description: str, epilog: str = SEE_TOP
    ) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            parents=[common],
            help=help_,
            description=_wrapped(description),
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    run = command(
        "run",
        "ingest a document, start a run and follow it",
        "Ingest FILE, start a run of SCHEMA over every block and follow it with a "
        "live progress bar. Ctrl-C asks whether to cancel the run or detach from it.",
        epilog=_examples(
            "samples/handbook.md --schema samples/extract.json",
            "rows.jsonl --schema s.json --model claude-sonnet-4-6 --max-cost 5",
            "doc.md --schema s.json --mode batch --no-wait",
            "doc.md --schema s.json --set quality.min_agreement=0.95 --set max_concurrent_packs=4",
            command="run",
        )
        + f"\n\n{SETTABLE.listing()}\n\n{SEE_TOP}",
    )
    _run_inputs(run, "the end of this help")
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
    run.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)

    estimate = command(
        "estimate",
        "quote a run before running it: calls, tokens, cost",
        "Plan the packs exactly as a run would and quote its calls, input / output / cache "
        "tokens and cost, sync and batch side by side. Input is counted with the API's "
        "token-counting endpoint (a few requests; the only Claude calls it makes), output "
        "is the planner's estimate, or what earlier runs of the same schema and model wrote "
        "when Postgres has any. Stores nothing, starts nothing.",
        epilog=_examples(
            "samples/handbook.md --schema samples/extract.json",
            "doc.md --schema s.json --model claude-sonnet-4-6 --pack-size 20 --json",
            command="estimate",
        )
        + f"\n\n{SEE_TOP}",
    )
    _run_inputs(estimate, "`run --help`")
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

    calibrate = command(
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
    _source(calibrate)
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
        type=_positive,
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
        type=_share("--target", zero=False),
        default=DEFAULT_TARGET,
        metavar="SHARE",
        help="the agreement with the alone answers to reach, in (0, 1] (default %(default)s)",
    )

    def run_id_command(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        p = command(name, help_, description)
        p.add_argument("run_id", metavar="RUN_ID")
        return p

    run_id_command(
        "status",
        "show one run: state, counters, cost, links",
        "Show a run's state and counters (live progress while it runs).",
    )
    command(
        "limits",
        "the fleet's rate limiters",
        "The rate limits every worker shares, per API key (by hash) and model: the limits "
        "learned from Claude's answers, what is available now, the rate the fleet allows "
        "itself after 429s (AIMD), calls in flight and each run's share of the last "
        "minute.",
    )
    lst = command("list", "list recent runs", "List runs, newest first.")
    lst.add_argument("--limit", type=_positive, default=20, help="how many (default %(default)s)")
    lst.add_argument(
        "--status",
        help="only runs in this state: created, planning, running, "
        "cancelling, completed, completed_with_failures, failed, cancelled, "
        "budget_exhausted",
    )
    cancel = run_id_command(
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
    watch = run_id_command(
        "watch",
        "re-attach to a run and follow it to the end",
        "Follow a run with the live progress bar, then print its summary. A run being "
        "escalated: the escalation's progress (phase, second packs, blocks compared, kept "
        "and sent up, answered, cost so far) until it ends.",
    )
    watch.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)
    retry = run_id_command(
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
        type=_budget,
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

    escalate = run_id_command(
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

    stream = command(
        "stream",
        "a durable stream: JSONL rows in, one result line out per row",
        "Read JSONL rows from stdin (or follow FILE with --follow, tail -f style, until "
        "Ctrl-C) into a durable stream and write one JSON line per row to stdout as rows "
        "finish: {id, index, ok, value | error: {reason, error}, usage}. A row's id is its "
        "`id` field, else `line:N`. Packs form when --max-rows rows are buffered, their "
        "estimated tokens reach --max-tokens, or the oldest waited --max-wait. A bad line "
        "(not JSON, no text) gets an `invalid_row` line and the stream goes on. At the end "
        "of the input the stream closes, drains and prints a summary to stderr. The stream "
        "is a run: watch, cancel, review and export take its id.",
        epilog="examples:\n"
        f"  producer | {PROG} stream --schema s.json --max-rows 20 --max-wait 500ms\n"
        f"  {PROG} stream --schema s.json --follow events.jsonl --ordered\n"
        f"  {PROG} stream --resume RUN_ID < events.jsonl\n\n{SEE_TOP}",
    )
    stream.add_argument(
        "--schema", metavar="SCHEMA.json", help="the schema (needed unless --resume)"
    )
    for option in TRIGGERS:
        add_field_option(stream, option)
    stream.add_argument(
        "--text-field",
        default="text",
        metavar="F",
        help="the JSON key holding each row's text (default: %(default)s)",
    )
    stream.add_argument(
        "--ordered",
        action="store_true",
        help="print results in input order (default: as rows finish)",
    )
    stream.add_argument(
        "--follow",
        metavar="FILE",
        help="follow FILE as it grows instead of reading stdin; Ctrl-C "
        "closes the stream and drains it",
    )
    stream.add_argument(
        "--resume",
        metavar="RUN_ID",
        help="continue an open stream whose producer died: feed the same "
        "input again; rows already accepted (same id) are not stored "
        "twice, and every finished row is printed",
    )
    add_field_option(stream, MODEL)
    _settings(stream, "`run --help`")

    review = run_id_command(
        "review",
        "show blocks next to their staged overlays",
        "Show each block with its staged overlay, failures with reasons.",
    )
    review.add_argument(
        "--limit", type=_positive, default=20, help="blocks per page (default %(default)s)"
    )
    review.add_argument("--offset", type=_not_negative, default=0, help="skip this many blocks")
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

    reviewer_help = (
        "who is reviewing, recorded with each act (default: "
        "$BLOCKBATCH_REVIEWER, else your OS user name)"
    )
    confirm = run_id_command(
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
    confirm.add_argument("--reviewer", metavar="NAME", help=reviewer_help)
    reject = run_id_command(
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
    reject.add_argument("--reviewer", metavar="NAME", help=reviewer_help)
    edit = run_id_command(
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
    edit.add_argument("--reviewer", metavar="NAME", help=reviewer_help)

    export = run_id_command(
        "export",
        "write the run as JSONL, one line per block",
        "Write one JSON line per block in block order: "
        '{"immutable": {...block...}, "user_defined": {...overlay...}}, '
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

    calls = run_id_command(
        "calls",
        "show the run's LLM call ledger",
        "One line per Claude call: pack path, attempt, purpose, API, stop "
        "reason, tokens, cost, latency, status and the Temporal "
        "workflow/activity ids. --show CALL_ID prints one call in full: "
        "the request as sent and the raw response or error.",
    )
    calls.add_argument(
        "--limit", type=_positive, default=50, help="calls per page (default %(default)s)"
    )
    calls.add_argument("--offset", type=_not_negative, default=0, help="skip this many calls")
    calls.add_argument("--pack", metavar="PATH", help="only this pack and its halves")
    calls.add_argument(
        "--show",
        type=_positive,
        metavar="CALL_ID",
        help="print this call in full: request as sent, raw response or error",
    )
    calls.add_argument(
        "--full",
        action="store_true",
        help="with --show: print the system prompt and tool definitions whole "
        "(default: their first 200 characters, length and sha256)",
    )
    serve = command(
        "serve",
        "serve the review web app",
        "Serve the review web app: runs, each run's blocks in a grid (filter, "
        "edit staged values, confirm or reject), exports and the call ledger. "
        "Bound to 127.0.0.1 unless --host says otherwise; any other address "
        "needs BLOCKBATCH_SERVE_TOKEN set (people then sign in with it).",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default %(default)s: this machine only)",
    )
    serve.add_argument("--port", type=_positive, default=8780, help="port (default %(default)s)")
    serve.add_argument(
        "--reviewer",
        metavar="NAME",
        help="the name acts are recorded under unless a person sets theirs "
        "on the page (default: $BLOCKBATCH_REVIEWER, else the OS user)",
    )
    return parser
