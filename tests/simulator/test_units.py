"""Pure pieces of the simulator: tokenizer, field values, batch validation, scenario."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from blockbatch.simulator.batches import MAX_REQUESTS, validate_batch_requests
from blockbatch.simulator.content import block_result, described_bounds, generate
from blockbatch.simulator.errors import ApiError
from blockbatch.simulator.prompt import Block
from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.tokenizer import count_tokens, truncate_to_tokens


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("   \n\t", 0),
        ("hello", 2),  # 5 letters: chunks of 4
        ("cat sat", 2),
        ("a, b.", 4),
        ("1234567", 3),  # digits in groups of 3
        ('{"a": 1}', 5),  # {" a ": 1 }
        ("a_b", 3),
        ("...", 2),
        ("internationalization", 5),
        ("café", 1),
    ],
)
def test_tokenizer_counts(text, tokens):
    assert count_tokens(text) == tokens


def test_tokenizer_is_not_chars_over_four():
    assert count_tokens("a b c d e f g h") == 8


def test_truncate_to_tokens_keeps_a_prefix_with_that_many_tokens():
    text = "The quick brown fox, jumps over the lazy dog."
    for limit in range(count_tokens(text) + 2):
        cut = truncate_to_tokens(text, limit)
        assert text.startswith(cut)
        assert count_tokens(cut) == min(limit, count_tokens(text))


def test_block_values_depend_only_on_content():
    schema = {
        "block_uid": {"type": "string"},
        "label": {"type": "string", "enum": ["x", "y", "z"]},
        "n": {"type": "integer", "minimum": 10, "maximum": 12},
    }
    one = block_result(Block("a:1", "p", "same text"), schema)
    two = block_result(Block("b:9", "p", "same text"), schema)
    assert one["block_uid"] == "a:1" and two["block_uid"] == "b:9"
    assert {k: v for k, v in one.items() if k != "block_uid"} == {
        k: v for k, v in two.items() if k != "block_uid"
    }
    assert 10 <= one["n"] <= 12


def test_generated_values_have_the_right_types():
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "minLength": 50},
            "i": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3},
            "f": {"type": "number"},
            "b": {"type": "boolean"},
            "a": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
            "o": {"type": "object", "properties": {"k": {"type": ["null", "string"]}}},
            "d": {"type": "string", "format": "date"},
            "c": {"const": "fixed"},
        },
    }
    value = generate(schema, "Some block content here", "root")
    assert isinstance(value["s"], str) and len(value["s"]) >= 50
    assert value["i"] in (1, 2)
    assert isinstance(value["f"], float)
    assert isinstance(value["b"], bool)
    assert len(value["a"]) == 2 and all(isinstance(x, int) for x in value["a"])
    assert isinstance(value["o"]["k"], str)
    assert len(value["d"]) == 10
    assert value["c"] == "fixed"


def test_batch_request_count_is_capped():
    too_many = [{"custom_id": f"r{i}", "params": {}} for i in range(MAX_REQUESTS + 1)]
    with pytest.raises(ApiError) as caught:
        validate_batch_requests({"requests": too_many})
    assert caught.value.status == 400
    assert "at most 100000" in caught.value.message


def test_scenario_defaults_and_strictness():
    scenario = Scenario()
    assert scenario.speed_factor == 0.0 and scenario.truncation_mode == "partial"
    assert scenario.latency.ttft_ms == 500 and scenario.batch.processing_delay_s == 2.0
    with pytest.raises(ValidationError):
        Scenario.model_validate({"faults": {"skip": 0.1}})


def test_scenario_models_must_be_based_on_a_known_model():
    from pydantic import ValidationError

    from blockbatch.simulator.scenario import Scenario

    Scenario(models={"claude-x": {"based_on": "claude-haiku-5-5"}})
    with pytest.raises(ValidationError, match="unknown model 'claude-nope'"):
        Scenario(models={"claude-x": {"based_on": "claude-nope"}})


def test_the_simulated_model_follows_bounds_told_in_a_description() -> None:
    # A strict schema carries its bounds in the description (the SDKs' transform_schema
    # format): a model reads them, and the simulated one follows them.
    told = {"type": "integer", "description": "Risk.\n\n{minimum: 0, maximum: 3}"}
    assert described_bounds(told) == {**told, "minimum": 0, "maximum": 3}
    assert all(0 <= generate(told, f"block {n}", "risk_level") <= 3 for n in range(200))
    text = {"type": "string", "description": "{maxLength: 12}"}
    assert all(len(generate(text, f"block {n}", "summary")) <= 12 for n in range(50))
    # The schema's own bounds win over a description's, and other braces are prose.
    assert (
        described_bounds({"type": "integer", "maximum": 9, "description": "{maximum: 3}"})[
            "maximum"
        ]
        == 9
    )
    assert described_bounds({"type": "string", "description": "a {b} c"}) == {
        "type": "string",
        "description": "a {b} c",
    }
