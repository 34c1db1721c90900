"""The next command to type, in a neutral form that each front door renders as its own.

A message below the front doors (``core``, ``store``, ``api``) that tells the user what to do
next does not spell a program or an option: the same advice reaches a person at the
``blockbatch`` console script, at the repository's entry script and at the Python API. It writes
:data:`PROG` where the program goes and :func:`option` where an option goes; the front door
that shows the message calls :func:`render` with the program the user invoked (the CLI:
the console script or the entry script, from ``sys.argv[0]``) and its own way of naming an
option (``--text-field body`` on the command line, ``text_field='body'`` in Python).
"""

from __future__ import annotations

import re
import shlex
from typing import Literal

#: Where the program the user invoked goes in a message: ``f"`{PROG} list`"``.
PROG = "{prog}"

#: The program named where no front door renders a message for the person reading it (the
#: Temporal UI's details): the console script ``pip install`` puts on the path.
CONSOLE_SCRIPT = "blockbatch"

#: How a front door names options: ``cli`` (``--skip-empty``) or ``python`` (``skip_empty``).
Style = Literal["cli", "python"]

#: Python parameters whose command-line option has another name.
_CLI_NAMES = {"fmt": "format"}

_OPTION = re.compile(r"\{(option|flag):([a-z_]+)(?:=([^{}]*))?\}")


def option(name: str, value: str | None = None) -> str:
    """Where an option goes in a message: its Python parameter ``name`` (``text_field``,
    ``fmt``), with the ``value`` to give it, if the message suggests one."""
    return "{option:" + name + (f"={value}" if value is not None else "") + "}"


def flag(name: str) -> str:
    """Where a switch goes in a message (``--skip-empty``; ``skip_empty=True`` in Python)."""
    return "{flag:" + name + "}"


def render(text: str, prog: str, style: Style = "cli") -> str:
    """``text`` with :data:`PROG` as ``prog`` and each :func:`option` and :func:`flag` in
    ``style``."""

    def _option(found: re.Match[str]) -> str:
        kind, name, value = found.group(1), found.group(2), found.group(3)
        if style == "cli":
            dashed = "--" + _CLI_NAMES.get(name, name).replace("_", "-")
            return dashed if value is None else f"{dashed} {shlex.quote(value)}"
        if kind == "flag":
            return f"{name}=True"
        return name if value is None else f"{name}={value!r}"

    return _OPTION.sub(_option, text.replace(PROG, prog))


def for_any_reader(text: str) -> str:
    """``text`` for a reader no front door serves (the Temporal UI): the program as
    :data:`CONSOLE_SCRIPT`, options as on the command line."""
    return render(text, CONSOLE_SCRIPT)
