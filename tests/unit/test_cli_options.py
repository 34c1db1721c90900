"""Options from one place: the CLI's options, defaults and help come from the option models,
and the rarer fields are set with `--set KEY=VALUE`, checked against the model."""

from __future__ import annotations

import argparse

import pytest
from pydantic import BaseModel

from blockbatch.cli.commands import build_parser
from blockbatch.cli.options import nested_model, show
from blockbatch.cli.parser import EXIT_USAGE, FIELD_OPTIONS, MODEL, SETTABLE
from blockbatch.cli.run import _options
from blockbatch.cli.stream import _opening_options
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.registry import DEFAULT_MODEL
from blockbatch.core.run_types import RunOptions

RUN = ["run", "doc.md", "--schema", "s.json"]


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _field_actions() -> list[tuple[str, argparse.Action]]:
    dests = {o.dest for o in FIELD_OPTIONS}
    return [
        (name, action)
        for name, command in _commands().items()
        for action in command._actions
        if action.dest in dests
    ]


def test_every_option_of_a_model_field_defaults_to_the_fields_default() -> None:
    by_dest = {o.dest: o for o in FIELD_OPTIONS}
    seen = set()
    for name, action in _field_actions():
        option = by_dest[action.dest]
        default = option.info.default
        if option is MODEL:
            # Left out, the schema's model comes first; the help names the model's default.
            assert action.default is None, name
            assert DEFAULT_MODEL in (action.help or ""), name
        else:
            assert action.default == default, (name, option.flag)
        if default is not None and option is not MODEL:
            assert f"(default {show(default)})" in (action.help or ""), (name, option.flag)
        seen.add(option.flag)
    assert seen == {o.flag for o in FIELD_OPTIONS}


def test_a_run_without_options_gets_the_models_defaults() -> None:
    options = _options(build_parser().parse_args(RUN))
    assert options == RunOptions()
    assert "model" not in options.model_fields_set  # the schema's model may still win


def test_every_option_model_field_has_help() -> None:
    def fields(model: type[BaseModel]) -> list[str]:
        found = []
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
            nested = nested_model(info)
            found += fields(nested) if nested else [name]
        return found

    assert len(fields(RunOptions)) == len(SETTABLE.all) + 6  # and six options of their own
    for option in FIELD_OPTIONS:
        assert option.info.description, option.flag


def test_the_run_help_lists_every_setting_with_its_models_default() -> None:
    help_ = _commands()["run"].format_help()
    for key, setting in SETTABLE.all.items():
        assert f"  {key}={show(setting.info.default)} " in help_, key
    assert "quality.probe_rate=0.03 " in help_  # QualityOptions' default, not RunOptions'
    assert "pack_size=" not in help_  # it has an option of its own


def test_set_reaches_top_level_and_nested_fields() -> None:
    args = build_parser().parse_args(
        [
            *RUN,
            "--set",
            "quality.probe_rate=0",
            "--set",
            "reuse_answers=false",
            "--set",
            "outage.probe_max_s=60",
            "--set",
            "quality.min_agreement=0.9",
            "--set",
            "estimated_output_per_block=none",
            "--pack-size",
            "12",
        ]
    )
    options = _options(args)
    assert options.quality == QualityOptions(probe_rate=0.0, min_agreement=0.9)
    assert options.reuse_answers is False and options.pack_size == 12
    assert options.outage is not None and options.outage.probe_max_s == 60.0
    assert options.estimated_output_per_block is None


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("colour=blue", "unknown setting 'colour'; the settings are: batching_enabled, "),
        ("quality.probe_rate=2", "quality.probe_rate: input should be less than or equal to 1"),
        ("quality.min_agreement=0", "quality.min_agreement: input should be greater than 0"),
        ("short_ids=maybe", "short_ids: input should be a valid boolean"),
        ("cache_ttl=2h", "cache_ttl: input should be '5m' or '1h', got '2h'"),
        ("max_concurrent_packs=many", "max_concurrent_packs: input should be a valid integer"),
        ("pack_size=3", "pack_size has an option of its own: --pack-size"),
        ("max_cost_usd=3", "max_cost_usd has an option of its own: --max-cost"),
        ("reuse_answers", "expected KEY=VALUE, got 'reuse_answers'"),
    ],
)
def test_set_refuses_what_the_model_does_not_take(
    setting: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (RUN, ["estimate", "doc.md", "--schema", "s.json"], ["stream"]):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args([*command, "--set", setting])
        assert exit_.value.code == EXIT_USAGE
        err = capsys.readouterr().err
        assert f"argument --set: {says}" in err, err


def test_an_unknown_key_lists_every_valid_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*RUN, "--set", "probe_rate=0"])
    err = capsys.readouterr().err
    for key in SETTABLE.all:
        assert key in err
    assert "quality.probe_rate" in err


@pytest.mark.parametrize(
    ("flag", "bad", "says"),
    [
        ("--pack-size", "0", "input should be greater than or equal to 1, got '0'"),
        ("--mode", "fast", "invalid choice: 'fast' (choose from 'sync', 'batch', 'cheapest')"),
        ("--max-cost", "0", "must be more than $0"),
    ],
)
def test_an_option_of_its_own_is_checked_against_its_field(
    flag: str, bad: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*RUN, flag, bad])
    assert exit_.value.code == EXIT_USAGE
    assert says in capsys.readouterr().err


def test_the_stream_takes_its_triggers_defaults_from_the_model() -> None:
    from blockbatch.core.streams import StreamTriggers

    args = build_parser().parse_args(["stream", "--schema", "s.json"])
    assert (args.max_rows, args.max_tokens, args.max_wait, args.max_buffered) == (
        StreamTriggers().max_rows,
        StreamTriggers().max_tokens,
        StreamTriggers().max_wait_s,
        StreamTriggers().max_buffered,
    )
    assert build_parser().parse_args(["stream", "--max-wait", "500ms"]).max_wait == 0.5


def test_resuming_a_stream_refuses_the_options_that_open_one() -> None:
    resume = ["stream", "--resume", "r1"]
    assert _opening_options(build_parser().parse_args(resume)) == []
    given = build_parser().parse_args(
        [*resume, "--schema", "s.json", "--max-rows", "5", "--set", "reuse_answers=false"]
    )
    assert _opening_options(given) == ["--schema", "--max-rows", "--set"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["stream", "--resume", "r1", "--model", "claude-sonnet-4-6"],
            "error: --resume continues a stream as it was opened: --model cannot change it",
        ),
        (["stream"], "error: stream needs --schema SCHEMA.json (or --resume RUN_ID)"),
        (["calls", "r1", "--full"], "error: --full applies to --show CALL_ID"),
    ],
)
async def test_options_a_command_would_ignore_are_refused_before_it_connects(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from blockbatch.cli import amain
    from blockbatch.runtime.settings import Settings

    # Nothing listens here: a command that tried to connect would fail differently.
    settings = Settings(database_url="postgresql://nobody@127.0.0.1:9/none")
    assert await amain(argv, settings=settings) == EXIT_USAGE
    assert says in capsys.readouterr().err
