"""Processes as /proc shows them, for tests that check what a stack or benchmark left."""

from __future__ import annotations

from pathlib import Path


def cmdline(pid: int) -> str:
    """The process's command line, space-joined; "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (children of each of its threads, recursively)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            continue
    return found | {d for c in found for d in descendants(c)}
