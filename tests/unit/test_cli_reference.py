"""docs/cli.md is every command's `--help` as the parser prints it today."""

from __future__ import annotations

import argparse
from pathlib import Path

from blockbatch.cli.commands import build_parser
from blockbatch.cli.reference import COMMAND, reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_cli_reference_is_up_to_date() -> None:
    assert PAGE.read_text() == reference(), (
        f"docs/cli.md is out of date with the CLI: run `make docs` ({COMMAND})"
    )


def test_the_reference_has_every_commands_help() -> None:
    text = reference()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in sub.choices:
        assert f"## `python starter.py {name} --help`" in text, name
    assert "quality.probe_rate=0.03" in text and "exit codes" in text


def test_every_example_in_the_help_parses() -> None:
    import shlex

    from blockbatch.core.registry import get_model

    examples = [
        line.strip()
        for line in reference().splitlines()
        if line.startswith(("  python starter.py ", "  producer | python"))
    ]
    assert len(examples) >= 8
    for example in examples:
        argv = shlex.split(example.split("|")[-1].split("<")[0])
        assert argv[:2] == ["python", "starter.py"], example
        args = build_parser().parse_args(argv[2:])  # a usage error exits the test
        if getattr(args, "model", None):
            get_model(args.model)
