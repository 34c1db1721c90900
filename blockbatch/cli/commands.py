"""The command line put together: ``build_parser`` asks each command module for its
command (``add_<command>_parser``, beside its ``cmd_<command>``), in the order the help lists
them; the shared pieces (program, exit codes, option types) are in blockbatch/cli/parser.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from blockbatch.cli.calibrate import add_calibrate_parser
from blockbatch.cli.check import add_check_parser
from blockbatch.cli.inspect import (
    add_calls_parser,
    add_limits_parser,
    add_list_parser,
    add_status_parser,
)
from blockbatch.cli.parser import EPILOG, PROG, Subparsers, wrapped
from blockbatch.cli.review import (
    add_confirm_parser,
    add_edit_parser,
    add_export_parser,
    add_reject_parser,
    add_review_parser,
)
from blockbatch.cli.run import (
    add_cancel_parser,
    add_escalate_parser,
    add_estimate_parser,
    add_retry_parser,
    add_run_parser,
    add_watch_parser,
)
from blockbatch.cli.serve import add_serve_parser
from blockbatch.cli.stream import add_stream_parser


def _adders() -> list[Callable[[Subparsers], object]]:
    """Each command's ``add_<command>_parser``, in the order the help lists them."""
    return [
        add_run_parser,
        add_estimate_parser,
        add_calibrate_parser,
        add_status_parser,
        add_limits_parser,
        add_list_parser,
        add_cancel_parser,
        add_watch_parser,
        add_retry_parser,
        add_escalate_parser,
        add_stream_parser,
        add_review_parser,
        add_confirm_parser,
        add_reject_parser,
        add_edit_parser,
        add_export_parser,
        add_calls_parser,
        add_serve_parser,
        add_check_parser,
    ]


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command line; ``prog`` is how it was invoked (``blockbatch`` as the console script)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=wrapped(
            "Run an LLM over every block of a document, follow the run, review, "
            "confirm and export the results. `COMMAND --help` describes each command."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _adders():
        add(sub)
    return parser
