"""`starter.py`: the command line front door (run, estimate, calibrate, watch, retry, status,
list, cancel, review, edit, confirm, reject, export, calls, serve, stream). ``main(argv, client)`` runs one command and returns its exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from blockbatch.cli.commands import build_parser, command_module, command_of
from blockbatch.cli.console import Console
from blockbatch.cli.parser import (
    EXIT_BUDGET_EXHAUSTED,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_NOT_RETRYABLE,
    EXIT_NOTHING_TO_RETRY,
    EXIT_OK,
    EXIT_PIPE_CLOSED,
    EXIT_RUN_ACTIVE,
    EXIT_RUN_FAILED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    EXIT_WITH_FAILURES,
    PROG,
    invoked_prog,
)
from blockbatch.runtime.process import exit_process
from blockbatch.runtime.settings import Settings, load_settings

if TYPE_CHECKING:
    from temporalio.client import Client

    from blockbatch.cli.session import Session

__all__ = [
    "EXIT_BUDGET_EXHAUSTED",
    "EXIT_INTERRUPTED",
    "EXIT_NOTHING_TO_RETRY",
    "EXIT_NOT_FOUND",
    "EXIT_NOT_RETRYABLE",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "EXIT_RUN_ACTIVE",
    "EXIT_RUN_FAILED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "EXIT_WITH_FAILURES",
    "amain",
    "main",
    "run",
]

Command = Callable[[argparse.Namespace, "Session"], Awaitable[int]]


def command(name: str) -> Command:
    """``cmd_<name>`` of the command's module (blockbatch/cli/commands.py), imported now."""
    handler: Command = getattr(command_module(name), f"cmd_{name}")
    return handler


def classify(exc: BaseException, settings: Settings) -> tuple[int, str] | None:
    """(exit code, one-line message) for errors a user can cause or fix; None for bugs."""
    from temporalio.service import RPCError, RPCStatusCode

    from blockbatch.api.errors import (
        BAD_INPUT,
        UNAVAILABLE,
        BlockNotRetryable,
        NotFound,
        NothingToRetry,
        RunStillActive,
    )

    if isinstance(exc, UNAVAILABLE):
        return EXIT_UNAVAILABLE, str(exc)
    if isinstance(exc, RunStillActive):
        return EXIT_RUN_ACTIVE, str(exc)
    if isinstance(exc, NothingToRetry):
        return EXIT_NOTHING_TO_RETRY, str(exc)
    if isinstance(exc, BlockNotRetryable):
        return EXIT_NOT_RETRYABLE, str(exc)
    if isinstance(exc, NotFound):
        return EXIT_NOT_FOUND, str(exc)
    if isinstance(exc, BAD_INPUT):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, FileNotFoundError):
        return EXIT_USAGE, f"{exc.strerror or 'no such file'}: {exc.filename or exc}"
    if isinstance(exc, RPCError) and exc.status in (
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
    ):
        return EXIT_UNAVAILABLE, (
            f"lost contact with Temporal at "
            f"{settings.resolved_temporal_address} ({exc.message}); "
            "check that it is running (`make up`)"
        )
    if isinstance(exc, ConnectionError | OSError) and "connect" in str(exc).lower():
        return EXIT_UNAVAILABLE, f"lost a connection ({exc}); check the stack (`make status`)"
    return None


async def amain(
    argv: Sequence[str] | None = None,
    client: Client | None = None,
    settings: Settings | None = None,
) -> int:
    """Run one command in the current event loop; return its exit code."""
    prog = invoked_prog(sys.argv[0]) if argv is None else PROG
    words = sys.argv[1:] if argv is None else list(argv)
    try:
        # The named command's parser alone: its module is all this process imports of the CLI.
        args = build_parser(prog, only=command_of(words)).parse_args(words)
    except SystemExit as exit_:  # --help, or a usage error already printed by argparse
        return int(exit_.code or 0)
    from blockbatch.cli.session import Session

    con = Console(json_mode=args.json, prog=prog)
    settings = settings or load_settings()
    session = Session(settings, con, client)
    try:
        return await command(args.command)(args, session)
    except BrokenPipeError:
        raise  # stdout closed by its reader: not an error to report, see main()
    except Exception as exc:
        known = classify(exc, settings)
        if known is None:
            raise
        con.error(known[1], known[0])
        return known[0]
    finally:
        await session.close()


def main(argv: Sequence[str] | None = None, client: Client | None = None) -> int:
    """Entry point of ``python starter.py``; settings come from the environment."""
    try:
        return asyncio.run(amain(argv, client))
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`review RUN | head`): stop quietly, like any Unix tool.
        # Point stdout at /dev/null so the interpreter's last flush cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PIPE_CLOSED


def run() -> NoReturn:
    """The command line's process entry (``python starter.py``, the ``blockbatch`` script):
    :func:`main`, then leave without finalizing (``runtime.process.exit_process``)."""
    exit_process(main())
