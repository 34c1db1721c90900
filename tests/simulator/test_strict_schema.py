"""The simulator's own check of the structured-output schema subset (contract §2).

The request builder has its own implementation; the two agree through tests, not code.
"""

from __future__ import annotations

from typing import Any

import pytest

from blockbatch.simulator.errors import ApiError
from blockbatch.simulator.strict_schema import check_strict_schemas


def obj(
    properties: dict[str, Any], required: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
        **extra,
    }


def refused(*schemas: dict[str, Any], tools: int = 0) -> str:
    named = [(f"tools.{i}.input_schema", s) for i, s in enumerate(schemas[:tools])]
    named += [("output_config.format.schema", s) for s in schemas[tools:]]
    with pytest.raises(ApiError) as caught:
        check_strict_schemas(named)
    assert caught.value.status == 400 and caught.value.error_type == "invalid_request_error"
    return caught.value.message


def test_a_schema_within_the_subset_passes_and_is_counted():
    schema = obj(
        {
            "name": {"type": "string", "format": "email", "pattern": "^[a-z]+$"},
            "tags": {
                "type": "array",
                "items": {"type": "string", "enum": ["a", "b"]},
                "minItems": 1,
            },
            "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
            "note": {"type": ["string", "null"], "default": None},
            "ref": {"$ref": "#/$defs/point"},
        },
        required=["name", "tags"],
        **{"$defs": {"point": obj({"x": {"type": "number"}, "y": {"type": "number"}})}},
    )
    total = check_strict_schemas([("output_config.format.schema", schema)])
    assert (total.optional, total.unions) == (3, 2)


def test_every_object_needs_additional_properties_false():
    inner = {"type": "object", "properties": {"a": {"type": "string"}}}
    message = refused(obj({"inner": inner}))
    assert message.startswith("output_config.format.schema.properties.inner: ")
    assert "additionalProperties" in message
    assert "additionalProperties" in refused({**obj({}), "additionalProperties": True})
    items = {"type": "array", "items": {"type": "object", "properties": {}}}
    assert ".items: " in refused(obj({"list": items}))


@pytest.mark.parametrize(
    "keyword",
    [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "maxItems",
        "uniqueItems",
        "contains",
    ],
)
def test_unsupported_keywords_are_refused(keyword):
    message = refused(obj({"a": {"type": "number", keyword: 1}}))
    assert f"'{keyword}' is not supported" in message


@pytest.mark.parametrize(("min_items", "ok"), [(0, True), (1, True), (2, False)])
def test_array_min_items_only_0_or_1(min_items, ok):
    schema = obj({"a": {"type": "array", "items": {"type": "string"}, "minItems": min_items}})
    if ok:
        check_strict_schemas([("s", schema)])
    else:
        assert "minItems" in refused(schema)


def test_references_are_local_and_never_recursive():
    assert "external" in refused(obj({"a": {"$ref": "https://example.com/s.json"}}))
    assert "not found" in refused(obj({"a": {"$ref": "#/$defs/missing"}}))
    assert "recursive" in refused(obj({"a": {"$ref": "#"}}))
    node = obj({"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}})
    assert "recursive" in refused(
        obj({"root": {"$ref": "#/$defs/node"}}, None, **{"$defs": {"node": node}})
    )
    ping = obj({"b": {"$ref": "#/definitions/pong"}})
    pong = obj({"a": {"$ref": "#/definitions/ping"}})
    assert "recursive" in refused(
        obj({"x": {"$ref": "#/definitions/ping"}}, definitions={"ping": ping, "pong": pong})
    )
    both = {"$ref": "#/$defs/p", "allOf": [{"type": "object"}]}
    assert "allOf" in refused(obj({"a": both}, None, **{"$defs": {"p": obj({})}}))


def test_more_than_20_strict_tools_are_too_complex():
    tool = obj({"a": {"type": "string"}})
    check_strict_schemas([(f"tools.{i}.input_schema", tool) for i in range(20)])
    message = refused(*[tool] * 21, tools=21)
    assert message.startswith("Schema is too complex for compilation")


def test_optional_parameters_are_summed_over_all_strict_schemas():
    # 12 optional parameters each: two schemas make 24 (allowed), three make 36.
    twelve = obj({f"p{i}": {"type": "string"} for i in range(12)}, required=[])
    check_strict_schemas(
        [("tools.0.input_schema", twelve), ("output_config.format.schema", twelve)]
    )
    message = refused(twelve, twelve, twelve, tools=2)
    assert message.startswith("Schema is too complex for compilation: 36 optional")
    # A nested object's optional properties count too; a required one does not.
    nested = obj({"inner": obj({f"q{i}": {"type": "string"} for i in range(25)}, required=[])})
    assert "25 optional" in refused(nested)


def test_union_typed_parameters_are_capped_at_16():
    def unions(n: int, start: int = 0) -> dict[str, Any]:
        half = {f"u{i}": {"type": ["string", "null"]} for i in range(start, start + n // 2)}
        rest = {
            f"v{i}": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
            for i in range(start, start + n - n // 2)
        }
        return obj({**half, **rest})

    check_strict_schemas([("s", unions(16))])
    assert "17 union-typed" in refused(unions(9), unions(8, start=100))
