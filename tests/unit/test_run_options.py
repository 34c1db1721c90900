"""Run options from the command line and the schema: the model a user names wins, and the
effort a run takes is checked against its model before anything is created."""

from __future__ import annotations

import pytest

from blockbatch.api.inputs import with_schema_model
from blockbatch.cli.commands import build_parser
from blockbatch.cli.run import _options
from blockbatch.core.answer import EffortError, check_effort
from blockbatch.core.outage_types import OutageOptions
from blockbatch.core.registry import DEFAULT_MODEL, get_model
from blockbatch.core.run_types import RunOptions


def test_a_model_the_user_names_wins_over_the_schemas_even_the_default() -> None:
    assert with_schema_model(RunOptions(), "claude-sonnet-4-6").model == "claude-sonnet-4-6"
    named = RunOptions(model=DEFAULT_MODEL)
    assert with_schema_model(named, "claude-sonnet-4-6").model == DEFAULT_MODEL
    args = build_parser().parse_args(
        ["run", "d.md", "--schema", "s.json", "--model", DEFAULT_MODEL]
    )
    assert with_schema_model(_options(args), "claude-sonnet-4-6").model == DEFAULT_MODEL
    unnamed = build_parser().parse_args(["run", "d.md", "--schema", "s.json"])
    assert with_schema_model(_options(unnamed), "claude-sonnet-4-6").model == ("claude-sonnet-4-6")


def test_effort_is_a_run_option_checked_against_the_model() -> None:
    args = build_parser().parse_args(["estimate", "d.md", "--schema", "s.json", "--effort", "high"])
    assert _options(args).effort == "high"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "d.md", "--schema", "s.json", "--effort", "huge"])
    check_effort(get_model("claude-opus-5-5"), "high")
    check_effort(get_model("claude-haiku-4-5"), None)
    with pytest.raises(EffortError, match="claude-haiku-4-5 takes no effort setting"):
        check_effort(get_model("claude-haiku-4-5"), "low")


def test_max_pause_limits_a_runs_pause_and_takes_hours() -> None:
    def pause(*extra: str) -> float:
        args = build_parser().parse_args(["run", "d.md", "--schema", "s.json", *extra])
        outage = _options(args).outage
        return (outage or OutageOptions()).max_pause_s

    assert pause() == 3 * 3600  # a few hours by default: no pause without end
    assert pause("--max-pause", "90m") == 5400
    assert pause("--max-pause", "3h") == 3 * 3600
    assert pause("--max-pause", "45") == 45
    for bad in ("0", "soon", "30d"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["run", "d.md", "--schema", "s.json", "--max-pause", bad])
