"""Schema loading: a usable schema becomes a SchemaSpec; a bad one names every problem."""

from __future__ import annotations

import json
from typing import Any

import pytest

from blockbatch.core.registry import DEFAULT_MODEL
from blockbatch.core.schema import (
    TEMPERATURE_NOTICE,
    PromptConfig,
    SchemaError,
    SchemaSpec,
    load_schema,
)


def schema(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "tone",
        "properties": {
            "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
            "summary": {"type": "string", "maxLength": 200},
        },
        "prompt_config": {"system_instructions": "Rate the tone of each block."},
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def problems(source: Any) -> list[str]:
    with pytest.raises(SchemaError) as err:
        load_schema(source)
    return err.value.problems


def test_minimal_schema_loads_with_defaults() -> None:
    spec = load_schema(schema())
    assert spec.name == "tone"
    assert spec.required == ["sentiment", "summary"]
    assert spec.prompt_config.model == DEFAULT_MODEL
    assert spec.prompt_config.per_block_prompt == ""
    assert spec.prompt_config.temperature is None


def test_json_text_and_bytes_load_alike() -> None:
    text = json.dumps(schema())
    assert load_schema(text) == load_schema(text.encode()) == load_schema(schema())


def test_name_argument_wins_then_name_then_title_then_default() -> None:
    assert load_schema(schema(), name="given").name == "given"
    assert load_schema(schema(name=None, title="Titled")).name == "Titled"
    assert load_schema(schema(name=None)).name == "schema"


def test_explicit_required_is_kept() -> None:
    assert load_schema(schema(required=["sentiment"])).required == ["sentiment"]


def test_overlay_json_schema_forbids_extra_fields() -> None:
    spec = load_schema(schema(required=["sentiment"]))
    overlay = spec.overlay_json_schema()
    assert overlay == {
        "type": "object",
        "properties": spec.properties,
        "required": ["sentiment"],
        "additionalProperties": False,
    }
    overlay["properties"]["sentiment"]["enum"].append("mutated")
    assert "mutated" not in spec.properties["sentiment"]["enum"]


def test_content_hash_ignores_key_order_and_spelled_out_defaults() -> None:
    a = load_schema(schema())
    reordered = json.loads(json.dumps(schema()), object_pairs_hook=lambda p: dict(reversed(p)))
    b = load_schema(reordered)
    explicit = schema()
    explicit["prompt_config"] = {**explicit["prompt_config"], "model": DEFAULT_MODEL}
    c = load_schema(explicit)
    assert a.content_hash() == b.content_hash() == c.content_hash()
    assert len(a.content_hash()) == 64


def test_content_hash_changes_with_instructions() -> None:
    other = schema(prompt_config={"system_instructions": "Something else."})
    assert load_schema(schema()).content_hash() != load_schema(other).content_hash()


def test_spec_survives_a_dump_and_validate_round_trip() -> None:
    spec = load_schema(schema(description="d", required=["summary"]))
    assert SchemaSpec.model_validate_json(spec.model_dump_json()) == spec


def test_full_prompt_config_is_accepted() -> None:
    config: dict[str, Any] = {
        "system_instructions": "x",
        "per_block_prompt": "y",
        "model": "claude-haiku-4-5-20251001",
        "temperature": 0,
        "max_tokens_per_block": 300,
        "max_batch_size": 5,
    }
    spec = load_schema(schema(prompt_config=config))
    assert spec.prompt_config == PromptConfig(**config)


# --- errors --------------------------------------------------------------------------


def test_bad_json_error_names_line_and_column() -> None:
    with pytest.raises(SchemaError, match=r"not valid JSON: .* at line 2, column 15"):
        load_schema('{"name": "x",\n "properties" {}}')


def test_non_object_json_is_rejected() -> None:
    assert "got an array" in problems("[1, 2]")[0]


def test_missing_properties_is_an_error() -> None:
    assert any("'properties' is missing or empty" in p for p in problems(schema(properties={})))
    missing = schema()
    del missing["properties"]
    assert any("'properties' is missing" in p for p in problems(missing))


def test_properties_not_an_object_is_an_error() -> None:
    assert any("got an array" in p for p in problems(schema(properties=["a"])))


def test_invalid_property_schema_names_the_property() -> None:
    found = problems(schema(properties={"score": {"type": "number", "minimum": "low"}}))
    assert len(found) == 1
    assert "property 'score'" in found[0] and "minimum" in found[0]


def test_unknown_type_names_the_property_and_the_types() -> None:
    found = problems(schema(properties={"x": {"type": "strng"}}))
    assert found == [
        (
            "property 'x' has unknown type 'strng'; use one of string, number, integer, boolean, "
            "array, object, null"
        )
    ]


def test_property_that_is_not_an_object_is_rejected() -> None:
    assert "property 'x' must be a JSON Schema object" in problems(schema(properties={"x": 3}))[0]


def test_block_uid_property_is_reserved() -> None:
    found = problems(schema(properties={"block_uid": {"type": "string"}}))
    assert any("'block_uid' is reserved" in p for p in found)


def test_required_naming_unknown_property_is_rejected() -> None:
    found = problems(schema(required=["sentiment", "score"]))
    assert found == [
        (
            "'required' names 'score', which is not in 'properties'; add the field or remove it "
            "from 'required'"
        )
    ]


def test_ref_is_rejected() -> None:
    found = problems(schema(properties={"x": {"$ref": "#/$defs/y"}}))
    assert "uses $ref" in found[0]


def test_missing_prompt_config_is_an_error() -> None:
    assert any("'prompt_config' is missing" in p for p in problems(schema(prompt_config=None)))


def test_missing_or_blank_system_instructions_is_an_error() -> None:
    assert problems(schema(prompt_config={"model": DEFAULT_MODEL})) == [
        (
            "prompt_config.system_instructions is missing; write the instructions the model "
            "follows for every block"
        )
    ]
    blank = problems(schema(prompt_config={"system_instructions": "  "}))
    assert blank[0].startswith("prompt_config.system_instructions is empty")


def test_unknown_model_lists_known_models() -> None:
    found = problems(schema(prompt_config={"system_instructions": "x", "model": "gpt-4o"}))
    assert found[0].startswith("prompt_config.model: unknown model 'gpt-4o'; known models: ")
    assert DEFAULT_MODEL in found[0]


@pytest.mark.parametrize("size", [0, -3, 2.5, True, "4"])
def test_max_batch_size_must_be_a_positive_integer(size: Any) -> None:
    found = problems(schema(prompt_config={"system_instructions": "x", "max_batch_size": size}))
    assert found[0].startswith("prompt_config.max_batch_size: ")


@pytest.mark.parametrize("temperature", [-0.1, 1.5, "0.5"])
def test_temperature_out_of_range_is_rejected(temperature: Any) -> None:
    config = {"system_instructions": "x", "temperature": temperature}
    assert problems(schema(prompt_config=config))[0].startswith("prompt_config.temperature: ")


def test_unknown_prompt_config_key_lists_allowed_keys() -> None:
    found = problems(schema(prompt_config={"system_instructions": "x", "max_batch": 5}))
    assert found[0].startswith("prompt_config.max_batch is not a known key; allowed keys: ")
    assert "max_batch_size" in found[0]


def test_unknown_top_level_keys_are_named() -> None:
    found = problems(schema(fields={}, prompt={}))
    assert found[0].startswith("unknown top-level key(s) 'fields', 'prompt'; allowed: ")


def test_allowed_top_level_keys_are_accepted() -> None:
    extra = {
        "title": "T",
        "description": "D",
        "type": "object",
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "additionalProperties": False,
    }
    spec = load_schema(schema(**extra))
    assert spec.description == "D"


def test_every_problem_is_reported_at_once() -> None:
    bad = {
        "properties": {"block_uid": {"type": "string"}},
        "required": ["nope"],
        "prompt_config": {"system_instructions": "x", "temperature": 3},
        "extra": 1,
    }
    with pytest.raises(SchemaError) as err:
        load_schema(bad)
    assert len(err.value.problems) == 4
    assert "has 4 problems" in str(err.value)


def test_schema_error_is_a_value_error() -> None:
    assert issubclass(SchemaError, ValueError)


def test_an_old_schemas_temperature_is_accepted_with_a_notice() -> None:
    config = {"system_instructions": "x", "temperature": 0.2}
    spec = load_schema(schema(prompt_config=config))
    assert spec.notices == [TEMPERATURE_NOTICE]
    assert "no longer takes sampling parameters" in TEMPERATURE_NOTICE
    assert load_schema(schema()).notices == []


# --- keywords inside a property ------------------------------------------------------


def test_a_typo_inside_a_property_is_refused_with_did_you_mean() -> None:
    found = problems(
        schema(
            properties={
                "sentiment": {"type": "string", "enums": ["positive", "negative"]},
            }
        )
    )
    assert found == [
        (
            "property 'sentiment' has unknown keyword 'enums' (did you mean "
            "'enum'?); see docs/SCHEMAS.md for the keywords a field may use"
        )
    ]


def test_a_typo_in_a_nested_schema_names_its_path() -> None:
    found = problems(
        schema(
            properties={
                "tags": {"type": "array", "items": {"type": "string", "maxLenght": 20}},
                "who": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "desc": "x"}},
                    "additionalProperties": False,
                },
            }
        )
    )
    assert any(
        "property 'tags' has unknown keyword 'maxLenght' at items (did you mean 'maxLength'?)" in p
        for p in found
    )
    assert any("property 'who' has unknown keyword 'desc' at properties/name" in p for p in found)


def test_field_names_of_a_nested_object_are_not_keywords() -> None:
    spec = load_schema(
        schema(
            properties={
                "who": {
                    "type": "object",
                    "properties": {"enums": {"type": "string"}},
                    "required": ["enums"],
                    "additionalProperties": False,
                },
            }
        )
    )
    assert "who" in spec.properties


def test_every_keyword_the_docs_name_is_accepted() -> None:
    spec = load_schema(
        schema(
            properties={
                "label": {
                    "type": "string",
                    "enum": ["a", "b"],
                    "description": "d",
                    "title": "t",
                    "default": "a",
                    "examples": ["a"],
                    "$comment": "c",
                    "deprecated": False,
                },
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 9,
                    "pattern": "^[a-z]+$",
                    "format": "email",
                },
                "score": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "exclusiveMinimum": -1,
                    "exclusiveMaximum": 2,
                    "multipleOf": 0.5,
                },
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 0,
                    "maxItems": 3,
                    "uniqueItems": True,
                },
                "kind": {"const": "x"},
                "either": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "body": {"type": "string", "x-blockbatch-revision": True},
            }
        )
    )
    assert len(spec.properties) == 7


def test_the_shipped_samples_still_load() -> None:
    from pathlib import Path

    samples = Path(__file__).resolve().parents[2] / "samples"
    for path in sorted(samples.glob("*.json")):
        assert load_schema(path.read_bytes()).properties, path


def test_the_schema_docs_name_only_keywords_and_keys_a_schema_may_use() -> None:
    import re
    from pathlib import Path

    from blockbatch.core.schema import FIELD_KEYWORDS

    docs = (Path(__file__).resolve().parents[2] / "docs" / "SCHEMAS.md").read_text()
    keywords = docs.split("## Field types and keywords")[1].split("The rest of draft")[0]
    table = [line for line in keywords.splitlines() if line.startswith("| ")][1:]
    named = {
        re.match(r'"?([$\w-]+)', k).group(1)  # type: ignore[union-attr]  # every cell names one
        for line in table
        for k in re.findall(r"`([^`]+)`", line.split("|")[2])
    }
    types = {"date", "date-time", "email", "uri", "uuid"}  # format values, not keywords
    assert named - types <= FIELD_KEYWORDS, (named - types) - FIELD_KEYWORDS
    assert {"enum", "maxLength", "x-blockbatch-revision"} <= named
    config = docs.split("## `prompt_config`")[1].split("## Field types")[0]
    keys = set(re.findall(r"^\| `(\w+)` \|", config, re.MULTILINE))
    assert keys == set(PromptConfig.model_fields)
