"""`serve`: the review web app, on 127.0.0.1 unless told otherwise (see blockbatch/web)."""

from __future__ import annotations

import argparse
import os
import socket
from typing import TYPE_CHECKING

from blockbatch.api.errors import BadRequest
from blockbatch.cli.parser import Subparsers, add_command, positive

if TYPE_CHECKING:
    from blockbatch.cli.session import Session


def _check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            raise BadRequest(
                f"cannot listen on {host}:{port} ({err.strerror}): choose another "
                "port with --port, or another address with --host"
            ) from None


async def cmd_serve(args: argparse.Namespace, s: Session) -> int:
    # The web stack loads only for this command: the top-level help builds every
    # command's parser, which imports this module.
    import uvicorn

    from blockbatch.api.review import checked_reviewer
    from blockbatch.web.app import create_app
    from blockbatch.web.security import TOKEN_ENV, check_bind

    token = os.environ.get(TOKEN_ENV) or None
    check_bind(args.host, token)  # before anything listens or connects
    reviewer = checked_reviewer(args.reviewer)
    _check_port_free(args.host, args.port)
    bb = await s.bb(temporal=False)
    app = create_app(bb, s.settings, token=token, reviewer=reviewer, prog=s.con.prog)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    access = f"sign-in with {TOKEN_ENV}" if token else "no sign-in: this machine only"
    s.con.line(
        f"review app on http://{shown}:{args.port}/ ({access}; acts are recorded as "
        f"{reviewer} unless a person sets a name on the page); Ctrl-C stops it"
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    )
    await server.serve()
    return 0


def add_serve_parser(sub: Subparsers) -> None:
    """`serve`'s options."""
    serve = add_command(
        sub,
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
    serve.add_argument("--port", type=positive, default=8780, help="port (default %(default)s)")
    serve.add_argument(
        "--reviewer",
        metavar="NAME",
        help="the name acts are recorded under unless a person sets theirs "
        "on the page (default: $BLOCKBATCH_REVIEWER, else the OS user)",
    )
