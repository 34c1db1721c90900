"""Review rules: reading a typed value for a field, and checking an edited overlay."""

from __future__ import annotations

import pytest

from blockbatch.core.review import (
    EditError,
    edited_overlay,
    id_columns,
    parse_field_input,
    row_identity,
)
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
        ("summary", "x" * 21, r"^summary: 21 characters; at most 20 characters$"),
        ("tags", ["a", 1], r"tags.1: 1 is not of type 'string'"),
        ("summary", None, r"summary: None is not of type 'string'"),
    ],
)
def test_an_edit_the_schema_refuses_says_where_and_why(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(EditError, match=message):
        edited_overlay(SPEC, STAGED, field, value)


def test_a_length_error_states_the_limit_instead_of_repeating_the_value() -> None:
    spec = load_schema(
        {
            "name": "t",
            "properties": {"summary": {"type": "string", "maxLength": 160}},
            "prompt_config": {"system_instructions": "Annotate."},
        }
    )
    with pytest.raises(EditError) as refused:
        edited_overlay(spec, {"summary": "ok"}, "summary", "word " * 60)
    assert str(refused.value) == "summary: 300 characters; at most 160 characters"


def test_the_row_identity_is_the_first_column_other_than_the_text_by_default() -> None:
    columns = ["subject", "text", "ticket_id"]
    assert id_columns(columns, "text", None, []) == ["subject"]
    assert id_columns(["text", "ticket_id"], "text", None, []) == ["ticket_id"]
    assert id_columns(None, None, None, ["level"]) == []  # markdown: no columns, no identity
    assert id_columns(columns, "text", ["ticket_id"], []) == ["ticket_id"]
    assert (
        row_identity({"ticket_id": "T-0011", "n": 3}, ["ticket_id", "n"]) == "ticket_id T-0011  n 3"
    )


def test_an_id_column_the_input_does_not_have_is_refused_naming_the_ones_it_has() -> None:
    with pytest.raises(ValueError, match="no column 'ticket'; its columns are: subject, ticket_id"):
        id_columns(["subject", "text", "ticket_id"], "text", ["ticket"], [])
