"""Where the CLI writes: text or JSON on stdout, notes and errors on stderr, styled by rich.

Colours and bold only on a terminal and only without ``NO_COLOR``; piped output is plain
text, byte for byte what a script may parse.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from rich.console import Console as RichConsole
from rich.text import Text

from blockbatch.cli.parser import PROG
from blockbatch.core.commands import render

STATUS_COLORS = {
    "completed": "green",
    "ai_complete": "green",
    "confirmed": "green",
    "completed_with_failures": "yellow",
    "budget_exhausted": "yellow",
    "failed": "red",
    "cancelled": "yellow",
    "cancelling": "yellow",
    "rejected": "yellow",
    "running": "cyan",
    "planning": "cyan",
    "pending": "dim",
    "succeeded": "green",
}
#: Wider than any table we print: tables keep their natural width (a pipe has no width).
_UNBOUNDED = 1_000_000

Part = str | Text


class _Rich(RichConsole):
    """A rich console that lets a closed stdout surface as :class:`BrokenPipeError`.

    rich's default exits the process with status 1 from inside the write; the CLI's
    ``main`` handles a closed pipe in one place instead (quietly, status 141).
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(32, "Broken pipe")


def rich_console(out: TextIO, *, tty: bool, color: bool, width: int | None = None) -> RichConsole:
    """A rich console on ``out``: no markup or highlighting, ANSI styles only if ``color``."""
    return _Rich(
        file=out,
        force_terminal=tty,
        force_interactive=tty,
        color_system="auto" if color else None,
        no_color=not color,
        width=width,
        markup=False,
        highlight=False,
        emoji=False,
        soft_wrap=True,
    )


class Console:
    """Output of one command; ``json_mode`` keeps stdout machine-readable."""

    def __init__(
        self,
        json_mode: bool = False,
        out: TextIO | None = None,
        err: TextIO | None = None,
        prog: str = PROG,
    ) -> None:
        self.json = json_mode
        #: The program the user invoked: the commands in every message are written with it.
        self.prog = prog
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.tty = _isatty(self.out)
        self.color = self.tty and not os.environ.get("NO_COLOR")
        self.rich = rich_console(self.out, tty=self.tty, color=self.color)
        self.err_tty = _isatty(self.err)
        self.rich_err = rich_console(
            self.err, tty=self.err_tty, color=self.err_tty and not os.environ.get("NO_COLOR")
        )

    def line(self, *parts: Part) -> None:
        """One line on stdout; ``parts`` are plain strings or styled :class:`Text`.

        Piped, the text goes out exactly as given; on a terminal rich styles it (and drops
        control characters a block's content might carry).
        """
        _emit(self.rich, self.out, self.tty, [self._render(p) for p in parts])

    def note(self, text: str) -> None:
        """A remark for the person at the terminal (stderr, so JSON on stdout stays clean)."""
        _emit(self.rich_err, self.err, self.err_tty, (self._render(text),))

    def error(self, message: str, code: int) -> None:
        """``error: message`` on stderr; in JSON mode also ``{"error", "exit_code"}``."""
        message = render(message, self.prog)
        _emit(self.rich_err, self.err, self.err_tty, (Text("error:", "bold red"), f" {message}"))
        if self.json:
            self.data({"error": message, "exit_code": code})

    def data(self, obj: Any) -> None:
        """``obj`` as indented JSON on stdout (plain, never styled)."""
        text = json.dumps(obj, indent=2, default=str, ensure_ascii=False)
        self.out.write(render(text, self.prog) + "\n")
        self.out.flush()

    def _render(self, part: Part) -> Part:
        """A message from below the CLI with its commands in this program's words
        (``blockbatch.core.commands``); styled text is rendered where it is made."""
        return render(part, self.prog) if isinstance(part, str) else part

    def style(self, text: str, *names: str) -> Text:
        """``text`` in rich styles (``"bold"``, ``"dim"``, ``"red"`` ...), shown on a terminal."""
        return Text(render(text, self.prog), style=" ".join(n for n in names if n))

    def status(self, status: str) -> Text:
        """A run, block or call status in its colour."""
        return self.style(status, STATUS_COLORS.get(status, ""))

    def table(
        self, headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()
    ) -> None:
        """Columns as wide as their widest cell, two spaces apart; ``right`` are right-aligned.

        The table keeps its natural width (ids are never cut); lines carry no trailing blanks.
        """
        from rich.measure import Measurement
        from rich.table import Table

        table = Table(
            box=None,
            pad_edge=False,
            padding=(0, 1),
            show_edge=False,
            header_style="bold" if self.color else "",
        )
        for i, header in enumerate(headers):
            table.add_column(header, justify="right" if i in right else "left", no_wrap=True)
        for row in rows:
            table.add_row(
                *(
                    c
                    if isinstance(c, Text)
                    else Text("" if c is None else render(str(c), self.prog))
                    for c in row
                )
            )
        width = Measurement.get(
            self.rich, self.rich.options.update_width(_UNBOUNDED), table
        ).maximum
        sized = rich_console(self.out, tty=self.tty, color=self.color, width=max(width, 1))
        with sized.capture() as captured:
            sized.print(table)
        for text in captured.get().splitlines():
            self.out.write(text.rstrip() + "\n")
        self.out.flush()


def _emit(rich: RichConsole, stream: TextIO, tty: bool, parts: Sequence[Part]) -> None:
    if tty:
        rich.print(Text.assemble(*parts))
    else:
        stream.write("".join(p.plain if isinstance(p, Text) else p for p in parts) + "\n")
    stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def human_tokens(n: int) -> str:
    """A token count in a few characters: 950, 1.2k, 12k, 1.3M."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def human_seconds(s: float) -> str:
    """A duration in a few characters: 42s, 3m05s, 1h02m."""
    s = round(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
