"""Packed against single answers: the comparison rules, the tallies and the sample."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbatch.core.agreement import (
    SHORT_TEXT_CHARS,
    TEXT_AGREE_AT,
    FieldAgreement,
    FieldCount,
    Sample,
    SampleCount,
    Tally,
    agreement_text,
    compare_answers,
    sample_blocks,
    sample_size,
    summarize,
    summarize_counts,
    text_similarity,
)
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema

SCHEMA = load_schema(
    {
        "name": "s",
        "properties": {
            "count": {"type": "integer"},
            "score": {"type": "number"},
            "flag": {"type": "boolean"},
            "mood": {"type": "string", "enum": ["Positive", "negative"]},
            "name": {"type": "string"},
            "code": {"type": "string", "maxLength": 20},
            "summary": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "meta": {"type": "object"},
            "note": {"type": "string"},
        },
        "required": ["count", "score", "flag", "mood", "name", "code", "summary", "tags", "meta"],
        "prompt_config": {"system_instructions": "x"},
    }
)
BASE = {
    "block_uid": "d:1",
    "count": 3,
    "score": 0.7,
    "flag": True,
    "mood": "Positive",
    "name": "Acme Corp",
    "code": "A-1",
    "summary": "The board approved the annual budget and hired two new engineers",
    "tags": ["Alpha", "beta"],
    "meta": {"a": 1.0, "b": "X"},
}


def verdicts(packed: dict, single: dict = BASE) -> dict[str, FieldAgreement]:
    return {v.field: v for v in compare_answers(SCHEMA, packed, single)}


def test_identical_answers_agree_on_every_field_and_block_uid_is_not_compared():
    result = verdicts({**BASE, "block_uid": "other"})
    assert "block_uid" not in result
    assert all(v.agree for v in result.values())
    assert result["summary"].kind == "text" and result["summary"].similarity == 1.0
    assert result["count"].kind == "exact" and result["count"].similarity is None


def test_numbers_are_exact_with_a_tiny_float_tolerance():
    assert not verdicts({**BASE, "count": 4})["count"].agree
    assert verdicts({**BASE, "score": 0.1 + 0.6})["score"].agree  # 0.7000000000000001
    assert not verdicts({**BASE, "score": 0.71})["score"].agree
    assert verdicts({**BASE, "count": 3.0})["count"].agree


def test_booleans_and_enums_are_exact_and_a_bool_is_not_a_number():
    assert not verdicts({**BASE, "flag": False})["flag"].agree
    assert not verdicts({**BASE, "flag": 1})["flag"].agree
    assert not verdicts({**BASE, "mood": "negative"})["mood"].agree
    assert verdicts({**BASE, "mood": " positive "})["mood"].agree


def test_short_strings_are_exact_after_normalising():
    assert verdicts({**BASE, "name": "  ACME   corp "})["name"].agree
    assert not verdicts({**BASE, "name": "Acme Corporation"})["name"].agree
    long_code = "X" * (SHORT_TEXT_CHARS + 5)
    # maxLength <= SHORT_TEXT_CHARS: exact whatever the values' length
    assert (
        verdicts({**BASE, "code": long_code}, {**BASE, "code": long_code})["code"].kind == "exact"
    )


def test_free_text_agrees_by_similarity():
    reordered = "Two new engineers were hired and the board approved the annual budget"
    close = verdicts({**BASE, "summary": reordered})["summary"]
    assert close.kind == "text" and close.agree
    assert close.similarity is not None and close.similarity >= TEXT_AGREE_AT
    other = verdicts({**BASE, "summary": "The weather report predicts heavy rain on Sunday"})
    far = other["summary"]
    assert not far.agree and far.similarity is not None and far.similarity < TEXT_AGREE_AT


def test_arrays_and_objects_compare_as_canonical_json():
    assert verdicts({**BASE, "tags": ["alpha", " BETA"]})["tags"].agree
    assert not verdicts({**BASE, "tags": ["beta", "alpha"]})["tags"].agree
    assert verdicts({**BASE, "meta": {"b": "x", "a": 1}})["meta"].agree
    assert not verdicts({**BASE, "meta": {"a": 2, "b": "x"}})["meta"].agree


def test_a_field_absent_on_one_side_disagrees_and_on_both_agrees():
    missing = {k: v for k, v in BASE.items() if k != "summary"}
    result = verdicts(missing)
    assert not result["summary"].agree and result["summary"].kind == "text"
    assert result["summary"].similarity is None
    assert result["note"].agree  # optional, absent in both answers
    assert not verdicts({**BASE, "note": "n"})["note"].agree


def test_text_similarity_is_token_f1():
    assert text_similarity("a b c d", "a b c d") == 1.0
    assert text_similarity("", "") == 1.0
    assert text_similarity("a", "") == 0.0
    assert text_similarity("a b c d", "a b x y") == pytest.approx(0.5)
    assert text_similarity("Hello, World!", "hello world") == 1.0
    assert text_similarity("a a b", "a b b") == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("agreed", "total", "low", "high"),
    [
        (40, 40, 0.9124, 1.0),
        (0, 10, 0.0, 0.2775),
        (5, 10, 0.2366, 0.7634),
        (81, 263, 0.2553, 0.3662),
    ],
)
def test_wilson_interval_matches_known_values(agreed, total, low, high):
    got = Tally(agreed, total).interval()
    assert got == pytest.approx((low, high), abs=1e-4)


def test_the_interval_of_all_or_none_agreeing_reaches_exactly_1_or_0():
    for n in (1, 7, 40, 100, 400):
        assert Tally(n, n).interval()[1] == 1.0
        assert Tally(0, n).interval()[0] == 0.0


def test_an_empty_tally_has_no_rate():
    assert Tally().rate is None and Tally().interval() == (0.0, 1.0)
    tally = Tally()
    tally.add(True)
    tally.add(False)
    assert (tally.agreed, tally.total, tally.rate) == (1, 2, 0.5)


def field(name: str, agree: bool) -> FieldAgreement:
    return FieldAgreement(name, "exact", agree, None)


def test_summarize_buckets_blocks_fields_sizes_and_positions():
    samples = [
        Sample("a", 5, 1, [field("x", True), field("y", True)]),
        Sample("b", 40, 30, [field("x", True), field("y", False)]),
        Sample("c", 40, 7, [field("x", False), field("y", False)]),
        Sample("d", 60, 3, [field("x", True), field("y", True)]),
    ]
    summary = summarize(samples)
    assert (summary.blocks.agreed, summary.blocks.total) == (2, 4)
    assert list(summary.by_pack_size) == ["1-5", "21-50", "51+"]
    assert (summary.by_pack_size["21-50"].agreed, summary.by_pack_size["21-50"].total) == (0, 2)
    assert list(summary.by_position) == ["first 5", "6-20", "21+"]
    assert summary.by_field["y"].rate == 0.5 and summary.lowest_field == "y"


def test_agreement_text():
    assert agreement_text(summarize([])) == "agreement: no sampled blocks yet"
    samples = [
        Sample(str(i), 10, 1, [field("summary", i != 0), field("n", True)]) for i in range(40)
    ]
    text = agreement_text(summarize(samples))
    assert text == "agreement 97.5% on 40 sampled blocks (95% CI 87.1-99.6%); lowest: summary 98%"
    perfect = agreement_text(summarize(samples[1:2]))
    assert perfect == "agreement 100.0% on 1 sampled block (95% CI 20.7-100.0%)"


def test_sample_blocks_is_deterministic_sized_and_in_order():
    uids = [f"doc:{i}" for i in range(200)]
    sample = sample_blocks(uids, 0.03, 5, "run-1")
    assert len(sample) == 6
    assert sample == sample_blocks(list(reversed(uids)), 0.03, 5, "run-1")[::-1]
    assert sample == sorted(sample, key=uids.index)
    assert sample != sample_blocks(uids, 0.03, 5, "run-2")
    assert set(sample) <= set(sample_blocks(uids, 0.1, 5, "run-1"))
    assert len(sample_blocks(uids[:3], 0.03, 5, "s")) == 3
    assert sample_blocks(uids, 0.0, 0, "s") == []
    assert sample_size(100, 0.03, 0) == 3  # not 4: 0.03 * 100 is 3.0000000000000004


def test_sample_blocks_refuses_bad_rates():
    with pytest.raises(ValueError, match="between 0 and 1"):
        sample_blocks(["a"], 1.5, 1, "s")
    with pytest.raises(ValueError, match="minimum"):
        sample_blocks(["a"], 0.5, -1, "s")


def test_quality_options_default_and_bounds():
    assert RunOptions().quality is None
    options = RunOptions(quality=QualityOptions(min_agreement=0.95))
    assert options.quality is not None and options.quality.probe_rate == 0.03
    assert RunOptions.model_validate_json(options.model_dump_json()) == options
    with pytest.raises(ValueError):
        QualityOptions(min_agreement=1.5)


_verdicts = st.lists(
    st.tuples(st.sampled_from(["title", "summary", "date"]), st.booleans()),
    max_size=3,
    unique_by=lambda v: v[0],
)


@given(st.lists(st.tuples(st.integers(1, 80), st.integers(1, 80), _verdicts), max_size=40))
def test_counted_samples_summarize_as_the_samples_do(drawn: list) -> None:
    # A large run's samples are counted in Postgres (store/quality.py ``agreement``),
    # grouped by pack size, position and verdict, their fields by name and verdict (in the
    # order each first appears): the summary is the same as tallying them one by one.
    samples = [
        Sample(f"b{i}", size, pos, [FieldAgreement(f, "exact", a) for f, a in fields])
        for i, (size, pos, fields) in enumerate(drawn)
    ]
    blocks = collections.Counter((s.pack_size, s.position, s.agrees) for s in samples)
    fields = collections.Counter((v.field, v.agree) for s in samples for v in s.fields)
    order = list(dict.fromkeys(v.field for s in samples for v in s.fields))
    counted = summarize_counts(
        [SampleCount(*key, n) for key, n in sorted(blocks.items())],
        [
            FieldCount(*key, n)
            for key, n in sorted(fields.items(), key=lambda kv: (order.index(kv[0][0]), kv[0]))
        ],
    )
    assert counted == summarize(samples)
