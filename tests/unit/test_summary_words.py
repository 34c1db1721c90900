"""Every line of the run summary and the quote reads on its own (issue 33 point 15): no
line needs the docs to decode, none reads as a contradiction."""

from __future__ import annotations

from blockbatch.cli.quote import output_text
from blockbatch.core.planning import OutputRatios, replan_text
from blockbatch.core.run_types import RunResult
from blockbatch.report import summary_lines

LINKS = {"run": "http://ui/run", "packs": "http://ui/packs"}


def _rows(result: RunResult) -> dict[str, str]:
    lines = summary_lines(result, baseline=None, links=LINKS)
    return {line[2:15].strip(): line[15:] for line in lines[1:]}


def _result(**fields: object) -> RunResult:
    return RunResult.model_validate(
        {
            "run_id": "r1",
            "status": "completed",
            "model": "claude-haiku-5-5",
            "blocks_total": 144,
            "blocks_ai_complete": 144,
            **fields,
        }
    )


def test_a_re_plan_says_what_changed_and_why() -> None:
    ratios = OutputRatios(overall=0.65, by_type={}, blocks=5, source="run")
    text = replan_text(1, 7, 4, ratios)
    assert text == (
        "packs 1-6 re-planned as 1-3: answers so far are 0.65x as long as the schema's "
        "estimate (5 answered blocks of this run), so each pack takes more blocks"
    )
    rows = _rows(_result(calls=4, pack_count=4, input_tokens=100, plan_changes=[text]))
    assert rows["re-planned"] == (
        "packs 1-6 as 1-3: answers so far are 0.65x as long as the schema's estimate (5 "
        "answered blocks of this run), so each pack takes more blocks"
    )
    longer = OutputRatios(overall=1.8, by_type={"table": 3.1}, blocks=8, source="run")
    assert replan_text(2, 5, 9, longer).endswith(
        "1.80x as long as the schema's estimate (8 answered blocks of this run; table "
        "blocks 3.10x), so each pack takes fewer blocks"
    )


def test_a_fully_reused_run_says_it_sent_nothing() -> None:
    rows = _rows(_result(calls=0, blocks_reused=144))
    assert rows["calls"] == "none: every answer was reused from earlier runs (144 blocks)"
    assert rows["cache hits"] == "none: no prompt was sent"
    assert not any("0 calls for 0 blocks" in v or v.startswith("0%") for v in rows.values())


def test_a_run_that_called_keeps_its_call_count_and_cache_rate() -> None:
    rows = _rows(
        _result(
            calls=4,
            pack_count=4,
            input_tokens=300,
            cache_read_input_tokens=700,
        )
    )
    assert rows["calls"].startswith("4 calls for 144 blocks (36.0 blocks per call")
    assert rows["cache hits"] == "70% of prompt tokens read from the cache"


def test_the_quotes_output_line_says_where_its_figure_comes_from() -> None:
    first = output_text("other_schemas", {"calls": 4, "ratio": 0.67, "runs": 1}, "model")
    assert first == (
        "no run of this schema yet: 4 answers of other schemas on this model were 0.67x as "
        "long as the planner estimates, and the quote counts this run's at that; the run "
        "itself starts from the planner's estimate and learns from its own answers"
    )
    learned = output_text("ledger", {"calls": 40, "ratio": 0.62, "runs": 2}, "model")
    assert learned == (
        "from 2 earlier runs of this schema on this model: their 40 answers were 0.62x as "
        "long as the planner estimates, and the quote counts them at that"
    )
    assert "leans high" in output_text("planner", None)
