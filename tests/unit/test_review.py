"""Review rules: reading a typed value for a field, and checking an edited overlay."""

from __future__ import annotations

import pytest

from blockbatch.core.review import EditError, edited_overlay, parse_field_input
from blockbatch.core.schema import load_schema

SPEC = load_schema(
    {
        "name": "t",
        "properties": {
            "summary": {"type": "string", "maxLength": 20},
            "word_count": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}},
            "note": {"type": ["string", "null"]},
        },
        "required": ["summary", "word_count"],
        "prompt_config": {"system_instructions": "Annotate."},
    }
)
STAGED = {"summary": "short", "word_count": 3, "tags": ["a"], "note": None}


def test_a_string_field_takes_the_text_as_typed() -> None:
    assert parse_field_input(SPEC, "summary", ' "quoted" 12 ') == ' "quoted" 12 '


@pytest.mark.parametrize(
    ("field", "text", "value"),
    [
        ("word_count", "12", 12),
        ("tags", '["x", "y"]', ["x", "y"]),
        ("note", "null", None),
    ],
)
def test_other_fields_take_json(field: str, text: str, value: object) -> None:
    assert parse_field_input(SPEC, field, text) == value


def test_text_that_is_not_json_names_the_field_and_its_type() -> None:
    with pytest.raises(EditError, match=r"word_count: 'twelve' is not a JSON value .*integer"):
        parse_field_input(SPEC, "word_count", "twelve")


def test_an_unknown_field_lists_the_fields() -> None:
    with pytest.raises(EditError, match="no field 'words'; its fields are: summary"):
        parse_field_input(SPEC, "words", "1")
    with pytest.raises(EditError, match="no field 'words'"):
        edited_overlay(SPEC, STAGED, "words", 1)


def test_a_valid_edit_changes_only_its_field() -> None:
    assert edited_overlay(SPEC, STAGED, "word_count", 7) == {**STAGED, "word_count": 7}
    assert STAGED["word_count"] == 3  # the staged overlay itself is left alone


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("word_count", -1, r"word_count: -1 is less than the minimum of 0"),
        ("word_count", "7", r"word_count: '7' is not of type 'integer'"),
        ("summary", "x" * 21, r"summary: 'x{21}' is too long"),
        ("tags", ["a", 1], r"tags.1: 1 is not of type 'string'"),
        ("summary", None, r"summary: None is not of type 'string'"),
    ],
)
def test_an_edit_the_schema_refuses_says_where_and_why(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(EditError, match=message):
        edited_overlay(SPEC, STAGED, field, value)
