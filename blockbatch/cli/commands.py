"""The command line put together: ``build_parser`` asks each command module for its
command (``add_<command>_parser``, beside its ``cmd_<command>``), in the order the help lists
them; the shared pieces (program, exit codes, option types) are in blockbatch/cli/parser.py.

A command's module is imported when that command is parsed or run, not before: ``status``
loads what ``status`` uses, not the run options, the review pages or the web app
(tests/unit/test_cli_imports.py). Only the top-level help and the generated reference build
every command.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from types import ModuleType

from blockbatch.cli.parser import EPILOG, PROG, wrapped

#: Each command and the module of blockbatch/cli/ that holds its ``add_<command>_parser``
#: and ``cmd_<command>``, in the order the help lists them.
COMMANDS = {
    "run": "run",
    "estimate": "run",
    "calibrate": "calibrate",
    "status": "inspect",
    "limits": "inspect",
    "list": "inspect",
    "cancel": "run",
    "watch": "run",
    "retry": "run",
    "escalate": "run",
    "stream": "stream",
    "review": "review",
    "confirm": "review",
    "reject": "review",
    "edit": "review",
    "export": "review",
    "calls": "inspect",
    "serve": "serve",
    "check": "check",
}


def command_module(name: str) -> ModuleType:
    """The module of ``name``'s ``add_<name>_parser`` and ``cmd_<name>``."""
    return importlib.import_module(f"blockbatch.cli.{COMMANDS[name]}")


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, when it is its first word (the top level takes no other
    option than ``--help``); ``None`` for anything else (``--help``, a typo, nothing)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def build_parser(prog: str = PROG, only: str | None = None) -> argparse.ArgumentParser:
    """The command line; ``prog`` is how it was invoked (``blockbatch`` as the console script).

    ``only``: build that command alone, which parses its arguments and prints its help
    exactly as the whole parser does (argparse looks a command up by its name, and lists
    the others only in the top level's help and its unknown-command error, which need the
    whole parser); ``None`` builds every command.
    """
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
    for name in [only] if only is not None else COMMANDS:
        getattr(command_module(name), f"add_{name}_parser")(sub)
    return parser
