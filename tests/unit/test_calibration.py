"""Calibration's rules: what may be asked, and which size is recommended."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from blockbatch.core.calibration import (
    Calibration,
    CalibrationError,
    CalibrationNote,
    ModelCalibration,
    SizeResult,
    cheapest_choice,
    check_request,
    escalated_result,
    parse_models,
    parse_sizes,
    recommend,
    second_positions,
)
from blockbatch.core.schema import load_schema


def test_sizes_are_parsed_sorted_and_distinct():
    assert parse_sizes("20, 5,10,5") == [5, 10, 20]
    assert parse_sizes([40, 2]) == [2, 40]
    for bad, words in (
        ("", "empty"),
        ("5,x", "whole numbers"),
        ("1,5", "2 or more"),
        ("0", "2 or more"),
        (",".join(str(n) for n in range(2, 12)), "at most"),
    ):
        with pytest.raises(CalibrationError, match=words):
            parse_sizes(bad)


@pytest.mark.parametrize(
    ("sizes", "sample", "blocks", "target", "cap", "words"),
    [
        ([5], 40, 100, 0.0, None, "target"),
        ([5], 40, 100, 1.01, None, "target"),
        ([5], 1, 100, 0.9, None, "at least 2"),
        ([5], 40, 30, 0.9, None, "more than the document's 30 blocks"),
        ([5, 50], 40, 100, 0.9, None, "larger than the sample"),
        ([5, 20], 40, 100, 0.9, 10, "max_batch_size"),
    ],
)
def test_a_calibration_that_cannot_measure_is_refused(sizes, sample, blocks, target, cap, words):
    with pytest.raises(CalibrationError, match=words):
        check_request(sizes, sample, blocks, target, cap)


def test_a_good_request_passes():
    check_request([5, 10, 20, 40], 40, 40, 1.0, None)


def result(size: int, rate: float | None) -> SizeResult:
    return SizeResult(size=size, run_id=f"r{size}", status="completed", rate=rate)


def test_the_recommendation_is_the_largest_size_that_meets_the_target_with_every_smaller_one():
    assert (
        recommend(
            [result(1, None), result(5, 1.0), result(10, 0.96), result(20, 0.9), result(40, 0.8)],
            0.95,
        )
        == 10
    )
    # 40 passing after 20 failed is noise: not recommended
    assert recommend([result(5, 1.0), result(20, 0.9), result(40, 0.97)], 0.95) == 5
    assert recommend([result(5, 0.9), result(10, 0.99)], 0.95) is None
    assert recommend([result(5, None)], 0.95) is None
    assert recommend([result(5, 0.95)], 0.95) == 5


def test_the_quote_line():
    at = datetime(2026, 11, 23, 18, 0, tzinfo=UTC)
    note = CalibrationNote(
        calibration_id="c", recommended=20, target=0.95, created_at=at, document="d.md"
    )
    assert note.text() == "calibrated: size 20 meets 95.0% (calibration c of 2026-11-23)"
    none = note.model_copy(update={"recommended": None})
    assert "no pack size met 95.0%" in none.text() and "use 1" in none.text()


def test_the_advice_names_the_size_or_says_none_meets_the_target():
    at = datetime(2026, 11, 23, 18, 0, tzinfo=UTC)
    calibration = Calibration(
        calibration_id="c",
        document="d.md",
        document_id="doc-1",
        schema_name="s",
        schema_id="schema-1",
        model="m",
        sample=40,
        seed="x",
        target=0.95,
        sizes=[result(1, None), result(5, 0.9)],
        recommended=None,
        created_at=at,
    )
    assert calibration.advice() == (
        "none meets the target of 95.0%: use --pack-size 1 or lower the target"
    )
    assert "recommended pack size: 5" in calibration.model_copy(update={"recommended": 5}).advice()


def test_the_quote_line_names_the_reference_of_a_calibration_across_models():
    at = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)
    note = CalibrationNote(
        calibration_id="cal-1:claude-haiku-5-5",
        recommended=10,
        target=0.95,
        created_at=at,
        document="d.md",
        reference_model="claude-sonnet-5-5",
    )
    assert note.text() == (
        "calibrated: size 10 meets 95.0% against claude-sonnet-5-5 alone "
        "(calibration cal-1:claude-haiku-5-5 of 2026-11-25)"
    )


def test_models_are_parsed_distinct_in_order():
    assert parse_models("claude-haiku-5-5, claude-sonnet-5-5,claude-haiku-5-5") == [
        "claude-haiku-5-5",
        "claude-sonnet-5-5",
    ]
    with pytest.raises(CalibrationError, match="empty"):
        parse_models(" , ")
    with pytest.raises(CalibrationError, match="at most"):
        parse_models([f"m{i}" for i in range(6)])


def calibration(model: str, rates: dict[int, float], costs: dict[int, float]) -> Calibration:
    sizes = [result(1, None)] + [
        result(s, r).model_copy(update={"whole_cost_usd": costs[s]}) for s, r in rates.items()
    ]
    return Calibration(
        calibration_id=f"c:{model}",
        document="d",
        document_id="doc",
        schema_name="s",
        schema_id="sid",
        model=model,
        sample=40,
        seed="x",
        target=0.95,
        sizes=sizes,
        recommended=recommend(sizes, 0.95),
        created_at=datetime(2026, 11, 25, tzinfo=UTC),
    )


def test_the_choice_is_the_cheapest_pair_within_each_models_recommended_sizes():
    cheap = calibration(
        "haiku", {5: 0.97, 10: 0.96, 20: 0.9, 40: 0.97}, {5: 3, 10: 2, 20: 1, 40: 0.5}
    )
    strong = calibration(
        "sonnet", {5: 1.0, 10: 1.0, 20: 0.99, 40: 0.98}, {5: 60, 10: 40, 20: 30, 40: 25}
    )
    choice = cheapest_choice([cheap, strong])
    # haiku 20 and 40 are cheaper, but 20 missed the target (and 40 after it is noise)
    assert choice is not None and (choice.model, choice.size, choice.whole_cost_usd) == (
        "haiku",
        10,
        2,
    )
    worse = calibration("haiku", {5: 0.9, 10: 0.99}, {5: 3, 10: 2})
    only = cheapest_choice([worse, strong])
    assert only is not None and (only.model, only.size) == ("sonnet", 40)
    assert cheapest_choice([worse]) is None
    # equal cost: the larger pack
    tie = calibration("t", {5: 1.0, 10: 1.0}, {5: 1, 10: 1})
    tied = cheapest_choice([tie])
    assert tied is not None and tied.size == 10


def test_the_advice_across_models():
    strong = calibration("sonnet", {5: 1.0}, {5: 60})
    base = ModelCalibration(
        calibration_id="c",
        document="d",
        schema_name="s",
        reference_model="sonnet",
        sample=40,
        target=0.95,
        calibrations=[strong],
        choice=cheapest_choice([strong]),
        created_at=datetime(2026, 11, 25, tzinfo=UTC),
    )
    assert base.advice().startswith("recommended: sonnet at pack size 5 (the cheapest pair")
    none = base.model_copy(update={"choice": None})
    assert "use sonnet alone (--model sonnet --pack-size 1)" in none.advice()


def test_the_second_packing_keeps_every_block_once_and_no_neighbours():
    for count, size in ((30, 5), (40, 10), (100, 20), (7, 3)):
        order = second_positions(count, size)
        assert sorted(order) == list(range(count))
        first = {frozenset((a, a + 1)) for a in range(count - 1) if a // size == (a + 1) // size}
        again = {frozenset(p) for p in itertools.pairwise(order)}
        if count >= 2 * max(3, -(-count // size)):
            assert not first & again, (count, size)


def test_an_escalated_size_takes_the_references_answer_where_the_two_packings_disagree():
    spec = load_schema(
        {
            "name": "s",
            "properties": {"kind": {"type": "string", "enum": ["a", "b", "c"]}},
            "required": ["kind"],
            "prompt_config": {"system_instructions": "Read it."},
        }
    )
    a, b, c = {"kind": "a"}, {"kind": "b"}, {"kind": "c"}
    answers = [
        (a, a, a),  # agree, right: kept
        (b, c, a),  # disagree: sent up, the reference's
        (b, b, a),  # agree on a mistake: kept, wrong
        (None, a, a),  # no first answer: sent up
        (a, None, a),  # no second answer: sent up
        (a, a, None),  # the reference has none: not compared
    ]
    first = SizeResult(size=5, run_id="r1", status="completed", calls=2, cost_usd=0.5)
    second = SizeResult(size=5, run_id="r2", status="completed", calls=2, cost_usd=0.25)
    r = escalated_result(
        spec, 5, first, second, [f"u{i}" for i in range(6)], answers, [(5, 1)] * 6, to="big"
    )
    assert (r.escalated_to, r.second_run_id, r.run_id) == ("big", "r2", "r1")
    assert (r.sent_up, r.compared, r.agreed, r.unanswered) == (3, 5, 4, 1)
    assert (r.calls, r.cost_usd, r.answered) == (4, 0.75, 6)


def test_the_choice_may_be_an_escalated_pair_when_it_is_the_cheapest_that_meets():
    cheap = calibration("haiku", {5: 0.9, 10: 0.85}, {5: 2, 10: 1})
    up = [
        result(5, 0.99).model_copy(update={"whole_cost_usd": 6, "escalated_to": "sonnet"}),
        result(10, 0.97).model_copy(update={"whole_cost_usd": 5, "escalated_to": "sonnet"}),
    ]
    cheap = cheap.model_copy(
        update={"escalation": up, "escalation_recommended": recommend(up, 0.95)}
    )
    strong = calibration("sonnet", {5: 1.0, 10: 1.0}, {5: 60, 10: 40})
    choice = cheapest_choice([cheap, strong])
    assert choice is not None and (choice.model, choice.size, choice.escalate_to) == (
        "haiku",
        10,
        "sonnet",
    )
    assert choice.flags() == "--model haiku --pack-size 10 --escalate-to sonnet"
    # the same cost without escalation wins the tie
    plain = calibration("haiku", {5: 0.96}, {5: 5})
    tied = cheapest_choice(
        [plain.model_copy(update={"escalation": up[1:], "escalation_recommended": 10})]
    )
    assert tied is not None and tied.escalate_to is None
    # an escalated size that misses is not chosen
    missed = cheap.model_copy(update={"escalation_recommended": None})
    assert cheapest_choice([missed, strong]).model == "sonnet"  # type: ignore[union-attr]
