"""The structured-outputs subset (blockbatch/core/structured.py): what is kept, dropped or refused."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from blockbatch.core.structured import (
    DROPPED,
    MAX_OPTIONAL,
    MAX_UNIONS,
    UNEXPRESSIBLE,
    counts,
    simple_pattern,
    translate,
)
from tests.helpers import examples


def obj(
    properties: dict[str, Any], required: list[str] | None = None, **more: Any
) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        **more,
    }


def test_every_object_gets_additional_properties_false() -> None:
    got = translate(
        obj(
            {
                "a": obj({"b": {"type": "string"}}),
                "c": {"type": "array", "items": obj({"d": {"type": "integer"}})},
            }
        )
    )
    assert got is not None
    assert got["additionalProperties"] is False
    assert got["properties"]["a"]["additionalProperties"] is False
    assert got["properties"]["c"]["items"]["additionalProperties"] is False


def test_bounds_leave_the_grammar_for_the_description_and_the_rest_is_kept() -> None:
    schema = obj(
        {
            "name": {
                "type": "string",
                "minLength": 1,
                "maxLength": 40,
                "description": "who",
                "pattern": "^[A-Z][a-z]+$",
                "format": "email",
                "default": "x",
            },
            "score": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "multipleOf": 0.5,
                "exclusiveMaximum": 2,
            },
            "tags": {
                "type": "array",
                "items": {"type": "string", "enum": ["a", "b"]},
                "minItems": 3,
                "maxItems": 5,
                "uniqueItems": True,
            },
            "kind": {"const": "k"},
        }
    )
    got = translate(schema)
    assert got is not None
    # As the SDKs' transform_schema writes them: the model still reads every bound.
    assert got["properties"]["name"] == {
        "type": "string",
        "description": "who\n\n{minLength: 1, maxLength: 40}",
        "pattern": "^[A-Z][a-z]+$",
        "format": "email",
        "default": "x",
    }
    assert got["properties"]["score"] == {
        "type": "number",
        "description": "{minimum: 0, maximum: 1, multipleOf: 0.5, exclusiveMaximum: 2}",
    }
    assert got["properties"]["tags"] == {
        "type": "array",
        "minItems": 1,
        "items": {"type": "string", "enum": ["a", "b"]},
        "description": "{minItems: 3, maxItems: 5, uniqueItems: True}",
    }
    assert got["properties"]["kind"] == {"const": "k"}


def test_a_format_outside_the_list_is_dropped_and_one_of_becomes_any_of() -> None:
    got = translate(
        obj(
            {
                "when": {"type": "string", "format": "iso-week"},
                "v": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            }
        )
    )
    assert got is not None
    assert got["properties"]["when"] == {"type": "string"}
    assert got["properties"]["v"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}


def test_the_original_is_not_changed() -> None:
    schema = obj({"a": {"type": "string", "maxLength": 3}})
    before = copy.deepcopy(schema)
    translate(schema)
    assert schema == before


@pytest.mark.parametrize(
    ("why", "field"),
    [
        ("free-form object", {"type": "object"}),
        ("a map", {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}),
        ("untyped", {"description": "anything"}),
        ("array without items", {"type": "array"}),
        ("not", {"type": "string", "not": {"const": "x"}}),
        ("if/then", {"type": "string", "if": {"const": "a"}, "then": {"minLength": 2}}),
        (
            "prefixItems",
            {"type": "array", "items": {"type": "string"}, "prefixItems": [{"type": "string"}]},
        ),
        ("enum of objects", {"enum": [{"a": 1}]}),
        ("lookahead", {"type": "string", "pattern": "^(?=a)a+$"}),
        ("backreference", {"type": "string", "pattern": "(a)\\1"}),
        ("word boundary", {"type": "string", "pattern": "\\bword\\b"}),
        ("large repeat", {"type": "string", "pattern": "^a{1,500}$"}),
        ("external $ref", {"$ref": "https://example.com/s.json"}),
        ("unresolved $ref", {"$ref": "#/$defs/missing"}),
    ],
)
def test_what_the_subset_cannot_say_does_not_fit(why: str, field: dict[str, Any]) -> None:
    assert translate(obj({"f": field})) is None, why


def test_recursion_does_not_fit_but_local_refs_do() -> None:
    flat = obj({"a": {"$ref": "#/$defs/name"}}, None, **{"$defs": {"name": {"type": "string"}}})
    assert translate(flat) is not None
    tree = obj(
        {"root": {"$ref": "#/$defs/node"}},
        None,
        **{
            "$defs": {
                "node": obj({"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}})
            }
        },
    )
    assert translate(tree) is None


def test_all_of_with_a_ref_does_not_fit() -> None:
    schema = obj(
        {"a": {"allOf": [{"$ref": "#/$defs/n"}, {"type": "string"}]}},
        None,
        **{"$defs": {"n": {"type": "string"}}},
    )
    assert translate(schema) is None


def test_the_limits_on_optional_and_union_parameters() -> None:
    optional = {f"o{i}": {"type": "string"} for i in range(MAX_OPTIONAL)}
    assert translate(obj(optional, required=[])) is not None
    more = {**optional, "one_more": {"type": "string"}}
    assert translate(obj(more, required=[])) is None
    assert translate(obj(more, required=["one_more"])) is not None
    unions = {f"u{i}": {"type": ["string", "null"]} for i in range(MAX_UNIONS)}
    assert translate(obj(unions)) is not None
    assert (
        translate(obj({**unions, "x": {"anyOf": [{"type": "string"}, {"type": "null"}]}})) is None
    )
    assert counts(obj(unions, required=[])) == (MAX_UNIONS, MAX_UNIONS)


@pytest.mark.parametrize(
    ("pattern", "simple"),
    [
        ("^[a-z]+$", True),
        ("^\\d{3}-\\d{4}$", True),
        ("^(?:ab)+$", True),
        ("\\\\b", True),  # an escaped backslash followed by b, not a word boundary
        ("(?!x)", False),
        ("(?<=a)b", False),
        ("(?<!a)b", False),
        ("\\B", False),
        ("\\k<n>", False),
        ("(", False),
        ("a{101}", False),
        ("a{2,100}", True),
    ],
)
def test_simple_patterns(pattern: str, simple: bool) -> None:
    assert simple_pattern(pattern) is simple


# --- whatever the schema -------------------------------------------------------------

_LEAF: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer", "minimum": 0},
        {"type": "number", "maximum": 9},
        {"type": "boolean"},
        {"type": "string", "maxLength": 5},
        {"enum": ["a", "b", None]},
        {"type": ["string", "null"]},
        {"type": "string", "format": "date"},
        {"type": "string", "pattern": "^x+$"},
        {"type": "string", "not": {"const": "a"}},
        {"type": "object"},
        {"const": 3},
    ]
)


def _is_required(key: str) -> bool:
    """The signature of a drawn function that says which keys are required."""
    return True


def _schemas(depth: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    return st.recursive(
        _LEAF,
        lambda inner: st.one_of(
            st.builds(
                lambda items, lo: {"type": "array", "items": items, "minItems": lo},
                inner,
                st.integers(0, 4),
            ),
            st.builds(
                lambda props, req: obj(props, [k for k in props if req(k)]),
                st.dictionaries(st.sampled_from("abcdefgh"), inner, min_size=1, max_size=5),
                st.functions(like=_is_required, returns=st.booleans(), pure=True),
            ),
            st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        ),
        max_leaves=12,
    )


def _nodes(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *[n for v in node.values() for n in _nodes(v)]]
    if isinstance(node, list):
        return [n for v in node for n in _nodes(v)]
    return []


@settings(max_examples=examples(100), deadline=None)
@given(_schemas())
def test_a_translation_is_in_the_subset_or_none(schema: dict[str, Any]) -> None:
    got = translate(schema)
    if got is None:
        return
    Draft202012Validator.check_schema(got)
    for node in _nodes(got):
        if node.get("type") == "object" or "properties" in node:
            assert node["additionalProperties"] is False
        assert not set(node) & (DROPPED | UNEXPRESSIBLE)
        if "minItems" in node:
            assert node["minItems"] in (0, 1)
    optional, unions = counts(got)
    assert optional <= MAX_OPTIONAL and unions <= MAX_UNIONS
    # Translating again changes nothing: the subset is a fixed point.
    assert translate(got) == got
    json.dumps(got)
