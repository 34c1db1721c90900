"""Where the CLI writes: text or JSON on stdout, notes and errors on stderr, plain ANSI."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

_COLORS = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
STATUS_COLORS = {"completed": "green", "ai_complete": "green", "confirmed": "green",
                 "failed": "red", "cancelled": "yellow", "cancelling": "yellow",
                 "running": "cyan", "planning": "cyan", "pending": "dim", "succeeded": "green"}


class Console:
    """Output of one command; ``json_mode`` keeps stdout machine-readable."""

    def __init__(self, json_mode: bool = False, out: TextIO | None = None,
                 err: TextIO | None = None) -> None:
        self.json = json_mode
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.tty = _isatty(self.out)
        self.color = self.tty and not os.environ.get("NO_COLOR")

    def line(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        """A remark for the person at the terminal (stderr, so JSON on stdout stays clean)."""
        print(text, file=self.err, flush=True)

    def error(self, message: str, code: int) -> None:
        print(f"error: {message}", file=self.err, flush=True)
        if self.json:
            self.data({"error": message, "exit_code": code})

    def data(self, obj: Any) -> None:
        print(json.dumps(obj, indent=2, default=str, ensure_ascii=False), file=self.out,
              flush=True)

    def style(self, text: str, *names: str) -> str:
        if not self.color or not names:
            return text
        codes = ";".join(_COLORS[n] for n in names if n in _COLORS)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def status(self, status: str) -> str:
        return self.style(status, STATUS_COLORS.get(status, ""))

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]],
              right: Sequence[int] = ()) -> None:
        """Columns padded to their widest cell; ``right`` are right-aligned column numbers."""
        cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in r]
                                              for r in rows]
        widths = [max(len(_plain(r[i])) for r in cells) for i in range(len(headers))]
        for n, row in enumerate(cells):
            parts = []
            for i, cell in enumerate(row):
                pad = " " * (widths[i] - len(_plain(cell)))
                parts.append(pad + cell if i in right else cell + pad)
            text = "  ".join(parts).rstrip()
            self.line(self.style(text, "bold") if n == 0 else text)


def _plain(text: str) -> str:
    while "\x1b[" in text:
        start = text.index("\x1b[")
        end = text.index("m", start)
        text = text[:start] + text[end + 1:]
    return text


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def human_tokens(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def human_seconds(s: float) -> str:
    s = round(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
