"""The review grid's controls per schema field, and a row form's edits checked together."""

from __future__ import annotations

import json
from pathlib import Path

from blockbatch.core.schema import load_schema
from blockbatch.web.fields import input_text, own_changes, planned_edits, widget

ROOT = Path(__file__).resolve().parents[2]
DEMO = load_schema(json.loads((ROOT / "samples" / "extract.json").read_text()))
STAGED = {
    "word_count": 12,
    "char_count": 66,
    "first_40_chars": "Drain the queue",
    "block_type": "paragraph",
    "topic": "general",
    "summary": "Drain first.",
    "action_required": True,
    "risk_level": 2,
}


def test_each_demo_field_gets_the_control_its_schema_asks_for() -> None:
    kinds = {f: widget(p) for f, p in DEMO.properties.items()}
    assert {f: w.control for f, w in kinds.items()} == {
        "word_count": "input",
        "char_count": "input",
        "first_40_chars": "input",
        "block_type": "select",
        "topic": "select",
        "summary": "textarea",
        "action_required": "select",
        "risk_level": "select",
    }
    assert kinds["topic"].values == tuple(DEMO.properties["topic"]["enum"])
    assert kinds["topic"].span == 2 and kinds["block_type"].span == 1
    assert kinds["action_required"].values == ("true", "false")
    assert kinds["risk_level"].values == ("0", "1", "2", "3")
    assert kinds["summary"].span == "all"


def test_a_wide_integer_range_is_a_text_box_and_json_values_an_area() -> None:
    assert widget({"type": "integer", "minimum": 0, "maximum": 100}).control == "input"
    assert widget({"type": "array", "items": {"type": "string"}}).control == "textarea"
    assert widget({"type": ["string", "null"]}).control == "textarea"
    numbers = widget({"type": "integer", "enum": [1, 2, 10]})
    assert numbers.control == "select" and numbers.values == ("1", "2", "10")


def test_input_text_is_what_parse_reads_back() -> None:
    assert input_text({"type": "string"}, 'a "quoted" text') == 'a "quoted" text'
    assert input_text({"type": "integer"}, 12) == "12"
    assert input_text({"type": "boolean"}, True) == "true"
    assert input_text({"type": ["string", "null"]}, "x") == "x"


def test_only_changed_fields_are_edited_in_schema_order() -> None:
    typed = {
        "word_count": "13",
        "char_count": "66",
        "topic": "incident_response",
        "action_required": "true",
        "summary": "Drain first.",
    }
    plan = planned_edits(DEMO, STAGED, typed)
    assert plan.errors == {}
    assert list(plan.changes.items()) == [("word_count", 13), ("topic", "incident_response")]


def test_the_same_value_typed_another_way_is_no_change() -> None:
    assert planned_edits(DEMO, STAGED, {"word_count": " 12 ", "risk_level": "2"}).changes == {}


def test_one_refused_field_refuses_the_whole_row() -> None:
    typed = {"word_count": "13", "risk_level": "7", "char_count": "many", "topic": "weather"}
    plan = planned_edits(DEMO, STAGED, typed)
    assert plan.changes == {}
    assert set(plan.errors) == {"risk_level", "char_count", "topic"}
    assert "maximum of 3" in plan.errors["risk_level"]
    assert "not a JSON value" in plan.errors["char_count"]
    assert "is not one of" in plan.errors["topic"]


def test_an_absent_optional_field_left_empty_is_no_change() -> None:
    spec = load_schema(
        {
            "properties": {"note": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["n"],
            "prompt_config": {"system_instructions": "x"},
        }
    )
    assert planned_edits(spec, {"n": 1}, {"note": "", "n": "1"}).changes == {}
    assert planned_edits(spec, {"n": 1}, {"note": "hi"}).changes == {"note": "hi"}


def test_a_field_left_as_shown_is_not_a_change_and_one_changed_by_another_is_stale() -> None:
    """A save sends every field: one left as the page showed it keeps someone else's edit
    since; one both changed is refused as stale, with its text now."""
    was = {"summary": "old", "word_count": "3", "topic": "ops"}
    now = {"summary": "theirs", "word_count": "3", "topic": "ops"}
    typed = {"summary": "old", "word_count": "5", "topic": "ops"}
    assert own_changes(typed, was, now) == ({"word_count": "5"}, {})
    both = {**typed, "summary": "mine"}
    assert own_changes(both, was, now) == (
        {"summary": "mine", "word_count": "5"},
        {"summary": "theirs"},
    )
    # A form that does not say what it showed: every field as sent counts, none is stale.
    assert own_changes(typed, {}, now) == (typed, {})
