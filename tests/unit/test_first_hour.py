"""What a new user reads in their first hour: help defaults, the run summary's wording,
the progress line, and the commands the demo prints (issue 28)."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from blockbatch.cli.commands import build_parser
from blockbatch.cli.parser import FIELD_OPTIONS
from blockbatch.cli.progress import describe, limiter_detail
from blockbatch.core.call_types import LimiterNote
from blockbatch.core.quality_types import QualityResult
from blockbatch.core.run_types import RunOptions, RunProgress, RunResult
from blockbatch.report import next_command, not_done_line, summary_lines

ROOT = Path(__file__).resolve().parents[2]
LINKS = {"run": "u", "packs": "p"}


# --- help defaults come from the option models ------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_max_concurrent_packs_help_states_the_run_options_default() -> None:
    help_ = _subparsers(build_parser())["run"].format_help()
    assert f"max_concurrent_packs={RunOptions().max_concurrent_packs} " in help_
    assert "max_concurrent_packs=8 " not in help_


def test_every_default_the_help_states_is_the_one_used() -> None:
    """A "(default X" in any option's help is the option model's default for options that
    set a model field, else the parser's own default."""
    fields = {o.dest: o for o in FIELD_OPTIONS}
    stated = 0
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            help_ = (action.help or "") % {"default": action.default}
            for value in re.findall(r"\(default:? ([0-9][0-9.,]*|[a-z]+)", help_):
                value = value.rstrip(",.")
                if action.dest in fields and fields[action.dest].default_text is not None:
                    continue  # "(default: the schema's prompt_config.model, else ...)"
                if action.dest in fields:
                    expected = fields[action.dest].info.default
                else:
                    expected = action.default
                if value.isalpha() and not isinstance(expected, str):
                    continue  # "(default: sized from ...)", "(default: the schema's ...)"
                if isinstance(expected, int | float) and not isinstance(expected, bool):
                    assert float(value.replace(",", "")) == expected, (name, action.dest)
                else:
                    assert str(expected) == value, (name, action.dest, value)
                stated += 1
    assert stated >= 10


# --- the run summary -------------------------------------------------------------------


def _quality(probe_calls: int) -> QualityResult:
    return QualityResult.model_validate(
        {
            "sampled": 5,
            "agreement": {"samples": 5, "agreeing": 5, "rate": 1.0},
            "probe_calls": probe_calls,
            "probe_cost_usd": 0.001,
            "run_cost_usd": 0.02,
        }
    )


def test_the_calls_row_says_which_calls_the_ratio_leaves_out() -> None:
    result = RunResult(
        run_id="r",
        status="completed",
        blocks_total=144,
        blocks_ai_complete=144,
        pack_count=4,
        calls=9,
        quality=_quality(5),
        cost_usd=0.02,
    )
    lines = "\n".join(summary_lines(result, baseline=None, links=LINKS))
    assert (
        "9 calls: 4 calls for 144 blocks (36.0 blocks per call; 4 packs, 0 split events), "
        "5 quality probe calls"
    ) in lines


def test_one_pack_and_one_call_are_singular() -> None:
    result = RunResult(
        run_id="r",
        status="completed",
        blocks_total=3,
        blocks_ai_complete=3,
        pack_count=1,
        calls=1,
        split_events=1,
        cost_usd=0.01,
    )
    lines = "\n".join(summary_lines(result, baseline=None, links=LINKS))
    assert "1 call for 3 blocks (3.0 blocks per call; 1 pack, 1 split event)" in lines
    assert "1 packs" not in lines and "1 calls" not in lines


@pytest.mark.parametrize(
    ("cost", "wording"), [(0.0251, "about the same"), (0.0260, "4% more"), (0.0100, "60% saved")]
)
def test_the_saving_never_reads_minus_zero(cost: float, wording: str) -> None:
    result = RunResult(
        run_id="r",
        status="completed",
        blocks_total=3,
        blocks_ai_complete=3,
        pack_count=1,
        calls=1,
        cost_usd=cost,
    )
    lines = "\n".join(summary_lines(result, baseline=0.0250, links=LINKS))
    assert f"one call per block, no caching: $0.0250; {wording})" in lines
    assert "-0%" not in lines


def test_a_cancelled_run_says_cancelled_once_and_suggests_retry_cancelled() -> None:
    result = RunResult(
        run_id="r",
        status="cancelled",
        blocks_total=1200,
        blocks_ai_complete=66,
        blocks_cancelled=1134,
        failure_reasons={"cancelled": 1134},
    )
    assert not_done_line(result) == "1134 cancelled"
    assert next_command(result) == "{prog} retry r --cancelled"
    mixed = result.model_copy(
        update={
            "blocks_failed": 2,
            "blocks_cancelled": 1132,
            "failure_reasons": {"cancelled": 1132, "invalid_value": 2},
        }
    )
    assert not_done_line(mixed) == "2 failed · 1132 cancelled: 2 invalid_value"
    assert next_command(mixed) == "{prog} review r --failed, then {prog} retry r --cancelled"


# --- the progress line -----------------------------------------------------------------


def _progress(status: str = "running", **extra: object) -> RunProgress:
    base: dict[str, object] = {
        "run_id": "r",
        "status": status,
        "blocks_total": 500,
        "blocks_done": 210,
        "blocks_failed": 0,
        "blocks_pending": 290,
        "packs_total": 50,
        "packs_done": 21,
        "packs_running": 8,
        "calls": 29,
        "splits": 0,
        "input_tokens": 900_000,
        "output_tokens": 30_000,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cost_usd": 0.5,
    }
    return RunProgress.model_validate({**base, **extra})


def _held() -> LimiterNote:
    return LimiterNote(
        at=datetime(2026, 11, 23, 10, tzinfo=UTC),
        limits={"requests": 500, "input": 450_000, "output": 90_000},
        learned=True,
        rate=0.5,
        binding="output",
        run_share=0.3,
        runs=3,
        run_throttled=1,
    )


def test_the_progress_line_stays_short_and_the_limiter_detail_goes_to_verbose() -> None:
    p = _progress(limiter_wait_s=41.5, limiter=_held())
    line = describe(p, 95.0)
    assert len(line) <= 80, line
    assert "rpm" not in line and "rate-limited" in line
    assert limiter_detail(p) == (
        "limiter 500 rpm · 450k in · 90k out /min (learned) · admitting 50% · this run 30% "
        "of calls (3 runs) · waited 42 s (last: output) · 1 429s"
    )
    assert limiter_detail(_progress()) is None


@pytest.mark.parametrize("status", ["cancelling", "cancelled", "completed"])
def test_no_eta_once_the_run_is_not_running(status: str) -> None:
    assert "ETA" not in describe(_progress(status), 95.0)
    assert "ETA" in describe(_progress(), 95.0)


# --- the demo's closing words ----------------------------------------------------------


def test_the_demo_prints_commands_that_work_as_printed() -> None:
    from blockbatch.devtools.demo import closing_words

    text = closing_words()
    commands = re.findall(r"`([^`]+)`", text)
    starters = [c for c in commands if "starter.py" in c]
    assert starters, text
    interpreters = set()
    for command in starters:
        argv = shlex.split(command)
        assert argv[0] != "python", command  # the system python lacks the packages
        assert (ROOT / argv[1]).is_file(), command
        interpreters.add(argv[0])
    # Each interpreter printed, run from the repository root as the user would (once each:
    # the commands share one).
    for interpreter in sorted(interpreters):
        probe = subprocess.run(
            [interpreter, "-c", "import temporalio, anthropic"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert probe.returncode == 0, (interpreter, probe.stderr)


def test_watch_verbose_prints_the_limiter_on_a_line_of_its_own() -> None:
    import io

    from blockbatch.cli.console import Console
    from blockbatch.cli.progress import ProgressView

    held = _progress(limiter_wait_s=41.5, limiter=_held())
    quiet, loud = io.StringIO(), io.StringIO()
    ProgressView(Console(out=quiet)).update(held)
    ProgressView(Console(out=loud), verbose=True).update(held)
    assert "rpm" not in quiet.getvalue() and "rate-limited" in quiet.getvalue()
    assert "limiter 500 rpm" in loud.getvalue()
