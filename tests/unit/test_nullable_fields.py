"""A field that takes a string takes what the person typed (issue 33 point 10), in
``edit`` (``parse_field_input``) and in the review grid (``web/fields.py``), also where
the schema allows ``null`` or another type beside the string."""

from __future__ import annotations

from typing import Any

import pytest

from blockbatch.core.review import EditError, edited_overlay, parse_field_input
from blockbatch.core.schema import load_schema
from blockbatch.web.fields import input_text, planned_edits, widget

SPEC = load_schema(
    {
        "properties": {
            "product": {"type": ["string", "null"], "maxLength": 40},
            "notes": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "code": {"type": ["string", "integer"]},
            "count": {"type": ["integer", "null"]},
        },
        "prompt_config": {"system_instructions": "Name the product."},
    }
)
PRODUCT = SPEC.properties["product"]


@pytest.mark.parametrize(
    ("field", "typed", "value"),
    [
        ("product", "SmartThermo 3", "SmartThermo 3"),
        ("product", "null", None),
        ("product", "", None),
        ("product", "12", "12"),  # not one of its other types: the text
        ("product", '"quoted" on purpose', '"quoted" on purpose'),
        ("notes", "call back Tuesday", "call back Tuesday"),
        ("notes", "   ", None),
        ("code", "A-7", "A-7"),
        ("code", "7", 7),
        ("count", "3", 3),
        ("count", "null", None),
    ],
)
def test_a_field_that_takes_a_string_takes_the_text_as_typed(
    field: str, typed: str, value: Any
) -> None:
    parsed = parse_field_input(SPEC, field, typed)
    assert parsed == value and type(parsed) is type(value)
    full = {"product": None, "notes": None, "code": "A", "count": None}
    assert edited_overlay(SPEC, full, field, parsed)[field] == value


def test_a_field_without_a_string_still_says_it_wants_json() -> None:
    with pytest.raises(EditError, match=r"'three' is not a JSON value .* takes integer or null"):
        parse_field_input(SPEC, "count", "three")


def test_the_grid_shows_a_nullable_string_as_text_and_null_as_an_empty_box() -> None:
    assert input_text(PRODUCT, "SmartThermo 3") == "SmartThermo 3"  # no JSON quotes
    assert input_text(PRODUCT, None) == ""
    assert input_text(SPEC.properties["count"], None) == "null"
    assert widget(PRODUCT).control == "input"  # a short string's box, not a JSON area


def test_the_grid_saves_a_typed_nullable_string_and_leaves_an_untouched_null() -> None:
    staged = {"product": None, "notes": "n", "code": "A", "count": 1}
    typed = {"product": "SmartThermo 3", "notes": "n", "code": "A", "count": "1"}
    edits = planned_edits(SPEC, staged, typed)
    assert edits.errors == {}
    assert edits.changes == {"product": "SmartThermo 3"}
    untouched = planned_edits(SPEC, staged, {"product": "", "notes": "n"})
    assert untouched.changes == {} and untouched.errors == {}
