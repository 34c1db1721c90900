"""docs/cli.md is every command's `--help` as the parser prints it today."""

from __future__ import annotations

from pathlib import Path

from blockbatch.cli.parser import build_parser
from blockbatch.cli.reference import COMMAND, reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_cli_reference_is_up_to_date() -> None:
    assert PAGE.read_text() == reference(), (
        f"docs/cli.md is out of date with the CLI: run `make docs` ({COMMAND})"
    )


def test_the_reference_has_every_commands_help() -> None:
    text = reference()
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    for name in sub.choices:
        assert f"## `python starter.py {name} --help`" in text, name
    assert "quality.probe_rate=0.03" in text and "exit codes" in text
