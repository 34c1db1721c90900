"""Drawing a run's summary makes no network call and writes nothing (issue 36, point 3):
``blockbatch/report.py`` reads Postgres; counting a prefix happens at the run's end, in the
API (``blockbatch.api.quote.count_run_prefix``)."""

from __future__ import annotations

import ast
from pathlib import Path

REPORT = Path(__file__).resolve().parents[2] / "blockbatch" / "report.py"
#: What would reach the network or write: the SDK, the front door's calls, the writers.
FORBIDDEN = ("anthropic", "activities", "blockbatch.api", "blockbatch.store.repo")


def test_the_summary_imports_nothing_that_calls_claude_or_writes() -> None:
    tree = ast.parse(REPORT.read_text())
    names = [
        (getattr(node, "lineno", 0), name)
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    ]
    wrong = [
        f"report.py:{line} imports {name}" for line, name in names if name.startswith(FORBIDDEN)
    ]
    assert not wrong, "\n".join(wrong)
