"""The run summary names the model a run used and shows thinking when there was any."""

from __future__ import annotations

from blockbatch.core.run_types import RunResult
from blockbatch.report import summary_dict, summary_lines

LINKS = {"run": "http://ui/run", "packs": "http://ui/packs"}


def _result(**fields: object) -> RunResult:
    return RunResult.model_validate(
        {
            "run_id": "r1",
            "status": "completed",
            "model": "claude-haiku-5-5",
            "blocks_total": 10,
            "blocks_ai_complete": 10,
            "calls": 2,
            "pack_count": 2,
            "input_tokens": 1_000,
            "output_tokens": 900,
            "cost_usd": 0.001,
            **fields,
        }
    )


def test_the_summary_names_the_model_and_shows_thinking() -> None:
    lines = summary_lines(_result(thinking_tokens=600), baseline=None, links=LINKS)
    assert any(line.split() == ["model", "claude-haiku-5-5"] for line in lines), lines
    assert any("output 900 (thinking 600)" in line for line in lines), lines


def test_no_thinking_no_thinking_figure() -> None:
    lines = summary_lines(_result(), baseline=None, links=LINKS)
    assert not any("thinking" in line for line in lines)


def test_a_model_priced_from_configuration_says_so() -> None:
    result = _result(model="claude-x-6", priced_from_configuration=True)
    lines = summary_lines(result, baseline=None, links=LINKS)
    assert any("claude-x-6 (priced from configuration" in line for line in lines)
    data = summary_dict(result, baseline=None, links=LINKS)
    assert (data["model"], data["priced_from_configuration"]) == ("claude-x-6", True)
