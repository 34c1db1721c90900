"""The command line's shared pieces: the program, exit codes, the top-level help, the option
types and helpers every command uses. Each command declares its own options beside its
``cmd_<command>`` (``add_<command>_parser``); blockbatch/cli/commands.py puts them together."""

from __future__ import annotations

import argparse
import shlex
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from blockbatch.cli.options import FieldOption, Settable, add_field_option
from blockbatch.core.budget import BudgetError, parse_budget
from blockbatch.core.escalation_types import EscalationOptions
from blockbatch.core.ingest import EXTENSIONS, FORMATS
from blockbatch.core.outage_types import OutageOptions
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.registry import DEFAULT_MODEL
from blockbatch.core.run_types import RunOptions
from blockbatch.core.streams import StreamTriggers

#: The subcommands of the command line, each command module adds its own to.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

#: The program the help and the generated reference are written for.
PROG = "python starter.py"


#: The entry script that runs the command line from a checkout.
STARTER = Path(__file__).resolve().parents[2] / "starter.py"


def starter_prog(python: str = "python", starter: str = STARTER.name) -> str:
    """The command line as the entry script runs it: ``<python> <starter>``, each quoted
    for a shell (the one spelling of the program outside the console script)."""
    return f"{shlex.quote(python)} {shlex.quote(starter)}"


def invoked_prog(argv0: str) -> str:
    """The program as the user typed it, to write the next command in: ``blockbatch`` for
    the console script, ``python <path as typed>/starter.py`` for starter.py."""
    name = Path(argv0).name
    if name == STARTER.name:
        return starter_prog(starter=argv0)
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


positive, not_negative = _at_least(1), _at_least(0)


def duration(text: str) -> float:
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


def budget_usd(text: str) -> float:
    try:
        return parse_budget(text)
    except BudgetError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--max-cost ")) from None


def share(name: str, *, zero: bool) -> Callable[[str], float]:
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
MODE = FieldOption(
    "--mode",
    RunOptions,
    "mode",
    extra_choices=("cheapest",),
    note="cheapest: quote both and run the one expected to cost less (for a run that can "
    "wait). Batch's half price covers input, output and the cache prices; its cache hits "
    "are best effort (30-98%), so with few requests it can cost more than sync, which "
    "reads the cache every call: `run --mode batch` warns when the quote says so",
)
PROVIDER = FieldOption("--provider", RunOptions, "provider")
PROBE_MODEL = FieldOption("--probe-model", QualityOptions, "probe_model", metavar="MODEL")
MAX_COST = FieldOption("--max-cost", RunOptions, "max_cost_usd", metavar="USD", convert=budget_usd)
MAX_ROWS = FieldOption("--max-rows", StreamTriggers, "max_rows", metavar="N")
MAX_TOKENS = FieldOption("--max-tokens", StreamTriggers, "max_tokens", metavar="T")
MAX_WAIT = FieldOption(
    "--max-wait",
    StreamTriggers,
    "max_wait_s",
    metavar="2s",
    convert=duration,
    note="500ms, 2s and 1m work too",
)
MAX_BUFFERED = FieldOption("--max-buffered", StreamTriggers, "max_buffered", metavar="N")
MAX_PAUSE = FieldOption(
    "--max-pause",
    OutageOptions,
    "max_pause_s",
    metavar="3h",
    convert=duration,
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
    PROVIDER,
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

VERBOSE_HELP = (
    "while following: also the fleet's rate limiter (limits, the share it "
    "admits, this run's share and wait, 429s) on a line of its own when it "
    "held the run back; `status` shows it too"
)


def add_settings_option(p: argparse.ArgumentParser, listed_in: str) -> None:
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        type=SETTABLE.parse,
        metavar="KEY=VALUE",
        help="a rarer run option (repeatable), e.g. --set quality.probe_rate=0 "
        f"--set reuse_answers=false; {listed_in} lists every KEY with its default",
    )


def add_source_options(p: argparse.ArgumentParser) -> None:
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


def add_run_inputs(p: argparse.ArgumentParser, listed_in: str) -> None:
    """A run's document, schema and options: the same for `run` and `estimate`."""
    add_source_options(p)
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
        "PPTX, PDF, markdown); by default a table is one block, split by whole rows when large",
    )
    p.add_argument(
        "--pptx-notes",
        action="store_true",
        help="PPTX: each slide's speaker notes as a block of their own",
    )
    for option in (EFFORT, PACK_SIZE, MODE, PROVIDER, PROBE_MODEL):
        add_field_option(p, option)
    p.add_argument(
        "--include-boilerplate",
        action="store_true",
        help=RunOptions.model_fields["include_boilerplate"].description,
    )
    add_settings_option(p, listed_in)


def examples(*args: str, command: str) -> str:
    return "examples:\n" + "\n".join(f"  {PROG} {command} {a}" for a in args)


def wrapped(text: str) -> str:
    """A command's description at a fixed width: its help keeps the epilog's line breaks
    (RawDescriptionHelpFormatter), so the description is wrapped here."""
    return textwrap.fill(text, width=DESCRIPTION_WIDTH, break_on_hyphens=False)


def add_command(
    sub: Subparsers, name: str, help_: str, description: str, epilog: str = SEE_TOP
) -> argparse.ArgumentParser:
    """A command's parser: its help line, description, epilog and the shared ``--json``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", help="print machine-readable JSON on stdout instead of text"
    )
    return sub.add_parser(
        name,
        parents=[common],
        help=help_,
        description=wrapped(description),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_run_id_command(
    sub: Subparsers, name: str, help_: str, description: str
) -> argparse.ArgumentParser:
    """A command on one run: its first argument is RUN_ID."""
    p = add_command(sub, name, help_, description)
    p.add_argument("run_id", metavar="RUN_ID")
    return p


#: Who is reviewing, for confirm, reject and edit.
REVIEWER_HELP = (
    "who is reviewing, recorded with each act (default: "
    "$BLOCKBATCH_REVIEWER, else your OS user name)"
)
