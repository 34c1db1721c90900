"""Evidence rules: finding a quote in its block, the spans stored, the answer's schema, and
parsing an answer that carries quotes (blockbatch/core/evidence.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbatch.core.evidence import (
    EVIDENCE_KEY,
    EVIDENCE_RULE,
    GroundingCount,
    ground,
    grounding_text,
    locate,
    spans,
    ungrounded,
)
from blockbatch.core.planning import estimate_output_tokens
from blockbatch.core.prompt import TOOL_NAME, build_request, build_system, build_tool
from blockbatch.core.results import parse_results
from blockbatch.core.schema import SchemaError, SchemaSpec, load_schema
from blockbatch.core.structured import translate

TEXT = "The pump at Station 4\nfailed  on Monday; call Dana before noon."


def spec(evidence: bool = True, fields: dict[str, Any] | None = None) -> SchemaSpec:
    return load_schema(
        {
            "name": "t",
            "properties": fields
            or {
                "summary": {"type": "string"},
                "urgent": {"type": "boolean"},
                "note": {"type": ["string", "null"]},
            },
            "required": ["summary", "urgent"] if fields is None else list(fields),
            "prompt_config": {"system_instructions": "Read it.", "evidence": evidence},
        }
    )


def test_an_exact_quote_gets_its_first_span():
    e = locate("call Dana", TEXT)
    assert (e.match, e.start, e.end) == ("exact", TEXT.index("call Dana"), TEXT.index(" before"))
    assert TEXT[e.start : e.end] == "call Dana"


def test_a_quote_across_a_line_break_or_in_another_case_matches_normalised():
    e = locate("station 4 FAILED on monday", TEXT)
    assert e.match == "normalised"
    assert TEXT[e.start : e.end] == "Station 4\nfailed  on Monday"


def test_a_quote_the_block_does_not_hold_is_missing_with_its_reason():
    assert locate("the valve leaked", TEXT).model_dump(exclude_none=True) == {
        "quote": "the valve leaked",
        "match": "missing",
        "reason": "quote_not_found",
    }
    for nothing in ("", "   ", None, 3):
        e = locate(nothing, TEXT)
        assert (e.match, e.reason, e.start) == ("missing", "no_quote", None)


def test_ground_covers_every_valued_field_and_flags_the_ungrounded_ones():
    overlay = {"summary": "Pump failed", "urgent": True, "note": None}
    quotes = {"summary": "pump at station 4", "urgent": "before tomorrow"}
    evidence = ground(quotes, overlay, TEXT)
    assert set(evidence) == {"summary", "urgent"}  # a null has nothing to support
    assert evidence["summary"]["match"] == "normalised"
    assert evidence["urgent"] == {
        "quote": "before tomorrow",
        "match": "missing",
        "reason": "quote_not_found",
    }
    assert ungrounded(evidence) == ["urgent"]
    count = GroundingCount()
    count.add(evidence)
    assert (count.values, count.grounded, count.missing, count.rate) == (2, 1, 1, 0.5)
    assert grounding_text(count, 1) == (
        "grounding 50.0% of 2 values (0 exact, 1 normalised); 1 ungrounded in 1 block"
    )


@given(st.text(min_size=1, max_size=60), st.data())
def test_any_piece_of_a_block_is_found_where_it_is(text, data):
    start = data.draw(st.integers(0, len(text) - 1))
    end = data.draw(st.integers(start + 1, len(text)))
    quote = text[start:end]
    e = locate(quote, text)
    if not quote.strip():
        assert e.match == "missing"
        return
    assert e.match == "exact"
    assert text[e.start : e.end] == quote


@given(st.lists(st.sampled_from(["Ab", "cd", "É", "ß", "ﬁ", "x"]), min_size=1, max_size=8))
def test_a_respaced_recased_quote_maps_back_to_the_characters_it_covers(words):
    text = "\n  ".join(words)
    e = locate(" ".join(w.upper() for w in words), text)
    assert e.match in ("exact", "normalised")
    assert (e.start, e.end) == (0, len(text))


def test_spans_split_where_quotes_overlap():
    evidence = {
        "a": {"match": "exact", "start": 0, "end": 10},
        "b": {"match": "exact", "start": 5, "end": 15},
        "c": {"match": "missing"},
        "d": {"match": "exact", "start": 90, "end": 99},  # beyond the block: ignored
    }
    assert spans(evidence, 20) == [(0, 5, ["a"]), (5, 10, ["a", "b"]), (10, 15, ["b"])]


def test_a_schema_asking_for_evidence_gets_a_quote_per_field_on_every_channel():
    s = spec()
    item = build_tool(s)["input_schema"]["properties"]["results"]["items"]
    assert item["required"] == ["block_uid", "summary", "urgent", EVIDENCE_KEY]
    quotes = item["properties"][EVIDENCE_KEY]
    assert list(quotes["properties"]) == ["summary", "urgent", "note"]
    assert quotes["required"] == ["summary", "urgent"]
    assert translate(build_tool(s)["input_schema"]) is not None  # fits the strict subset
    rules = build_system(s)[-1]["text"]
    assert rules.endswith("6. " + EVIDENCE_RULE)
    request = build_request(
        s,
        [{"block_uid": "d:0", "block_type": "p", "block_content": "x"}],
        max_tokens=50,
        model="claude-sonnet-5-5",
    )
    schema = request["output_config"]["format"]["schema"]
    assert EVIDENCE_KEY in schema["properties"]["results"]["items"]["required"]


def test_a_schema_without_evidence_sends_what_it_always_sent():
    plain = spec(evidence=False)
    assert EVIDENCE_KEY not in json.dumps(build_tool(plain))
    assert "evidence" not in build_system(plain)[-1]["text"]


def test_evidence_refuses_a_field_of_its_name_and_question_mode():
    with pytest.raises(SchemaError, match="'evidence' is reserved"):
        spec(True, {"evidence": {"type": "string"}})
    with pytest.raises(SchemaError, match=r"cannot be used with prompt_config\.questions"):
        load_schema(
            {
                "properties": {"answer": {"type": "string"}},
                "prompt_config": {"system_instructions": "x", "evidence": True, "questions": True},
            }
        )
    # Without evidence a field may be called so.
    assert "evidence" in spec(False, {"evidence": {"type": "string"}}).properties


def test_evidence_grows_the_expected_output_by_a_quote_per_field():
    on, off = spec(), spec(evidence=False)
    grown = estimate_output_tokens(on, 100) - estimate_output_tokens(off, 100)
    assert 3 * 16 <= grown <= 3 * 30
    # A short block's quotes are at most the block.
    assert estimate_output_tokens(on, 3) - estimate_output_tokens(off, 3) < grown


def _answer(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "stop_reason": "tool_use",
        "content": [{"type": "tool_use", "name": TOOL_NAME, "input": {"results": results}}],
    }


def test_parsing_keeps_quotes_apart_from_the_fields():
    s = spec()
    parsed = parse_results(
        _answer(
            [
                {"block_uid": "a", "summary": "s", "urgent": True, "evidence": {"summary": "q"}},
                {"block_uid": "b", "summary": "s", "urgent": False, "evidence": "not an object"},
                {"block_uid": "c", "summary": "s", "urgent": False},
                {"block_uid": "d", "summary": 1, "urgent": False, "evidence": {}},
            ]
        ),
        ["a", "b", "c", "d"],
        s,
    )
    assert parsed.valid["a"] == {"summary": "s", "urgent": True}
    assert parsed.evidence == {"a": {"summary": "q"}, "b": {}, "c": {}}
    assert list(parsed.invalid) == ["d"]  # a value's own fault, not its evidence's


def test_an_evidence_object_from_a_schema_that_asked_for_none_is_invalid():
    parsed = parse_results(
        _answer([{"block_uid": "a", "summary": "s", "urgent": True, "evidence": {}}]),
        ["a"],
        spec(evidence=False),
    )
    assert "a" in parsed.invalid and not parsed.evidence


def test_the_grid_marks_each_span_and_escapes_everything_else():
    from blockbatch.web.app import marked

    content = 'Ask <b>Dana</b> & "Lee" before <script>alert(1)</script> noon'
    evidence = ground(
        {
            "who": '<b>Dana</b> & "Lee"',
            "when": "before <script>alert(1)</script>",
            "x": "never said",
        },
        {"who": "Dana", "when": "noon", "x": "?"},
        content,
    )
    html = str(marked(content, evidence))
    assert "<script>" not in html and "<b>" not in html
    assert html == (
        "Ask "
        '<mark class="ev" data-fields="who" title="who">&lt;b&gt;Dana&lt;/b&gt; &amp; '
        "&#34;Lee&#34;</mark> "
        '<mark class="ev" data-fields="when" title="when">before &lt;script&gt;alert(1)'
        "&lt;/script&gt;</mark> noon"
    )
    assert str(marked(content, None)) == str(marked(content, {}))


def test_the_summary_reports_grounding_beside_agreement():
    from blockbatch.core.commands import PROG
    from blockbatch.core.quality import grounding_result
    from blockbatch.core.quality_types import QualityResult
    from blockbatch.core.run_types import RunResult
    from blockbatch.report import quality_rows

    counts = {"summary": GroundingCount(values=10, exact=9, missing=1), "urgent": GroundingCount()}
    counts["urgent"].add({"a": {"match": "normalised"}})
    found = grounding_result(counts, blocks_ungrounded=1)
    assert found is not None
    assert found.rate.samples == 11 and found.rate.agreeing == 10
    assert found.by_field["urgent"].rate == 1.0
    assert grounding_result({}, 0) is None
    both = grounding_result(
        counts,
        1,
        sampled=(GroundingCount(values=4, exact=3, missing=1), GroundingCount(values=4, exact=4)),
    )
    assert both is not None and both.sampled_packed is not None
    assert both.sampled_alone is not None
    assert (both.sampled_packed.rate, both.sampled_alone.rate) == (0.75, 1.0)
    assert both.text.endswith("; sampled blocks: packed 75.0%, alone 100.0%")
    only = RunResult(
        run_id="r1", status="completed", quality=QualityResult(probed=False, grounding=found)
    )
    assert quality_rows(only) == [
        (
            "grounding",
            (
                "grounding 90.9% of 11 values (9 exact, 1 normalised); 1 ungrounded in 1 block; "
                f"see `{PROG} review r1 --reason ungrounded`"
            ),
        )
    ]
    probed = RunResult(
        run_id="r1", status="completed", quality=QualityResult(text="agreement", grounding=found)
    )
    assert [k for k, _ in quality_rows(probed)][:2] == ["quality", "grounding"]


def test_the_quote_says_what_evidence_adds():
    from blockbatch.core.quote import quote, quote_context
    from blockbatch.core.quote_tokens import planner_tokens
    from blockbatch.core.registry import get_model
    from blockbatch.core.run_types import RunOptions

    blocks = [120] * 40
    figures = {}
    for on in (False, True):
        ctx = quote_context(RunOptions(), spec(evidence=on), get_model("claude-haiku-5-5"))
        figures[on] = quote(ctx, blocks, planner_tokens(ctx, blocks, "warm"), document="d")
    off, with_quotes = figures[False], figures[True]
    assert off.evidence_output_tokens == 0 and not any("evidence" in n for n in off.notes)
    assert with_quotes.evidence_output_tokens >= 40 * 3 * 16
    assert with_quotes.sync.output_tokens > off.sync.output_tokens
    assert with_quotes.sync.cost_usd > off.sync.cost_usd
    assert 0 < with_quotes.evidence_cost_usd < with_quotes.sync.cost_usd
    note = next(n for n in with_quotes.notes if n.startswith("evidence:"))
    assert f"{with_quotes.evidence_output_tokens:,} output tokens" in note
