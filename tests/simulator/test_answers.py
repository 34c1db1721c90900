"""What the simulated Claude answers under the 2026-11 contract, through the real SDK:
thinking (§3), answer channels and structured outputs (§2), refusals and stop reasons
(§0 rule 9), ``max_tokens: 0`` (§5) and tokenizer generations (§0 rule 8)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from blockbatch.simulator.scenario import Faults, Scenario, Thinking
from blockbatch.simulator.testing import TOOL_NAME, make_blocks, pack_params

#: Fields inside the structured-outputs subset (no min/max, no lengths); ``note`` optional
#: and listed first, so the schema order and the answer order differ.
FIELDS: dict[str, Any] = {
    "note": {"type": "string"},
    "word_count": {"type": "integer"},
    "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
    "is_question": {"type": "boolean"},
}
REQUIRED = ["block_uid", "word_count", "sentiment", "is_question"]


def results_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"block_uid": {"type": "string"}, **FIELDS},
                    "required": REQUIRED,
                    "additionalProperties": False,
                },
            }
        },
        "required": ["results"],
        "additionalProperties": False,
    }


def json_params(blocks: list[dict[str, str]], model: str, **extra: Any) -> dict[str, Any]:
    """A pack asking for its answer through ``output_config.format``."""
    params = pack_params(blocks, model=model, fields=FIELDS)
    del params["tools"], params["tool_choice"]
    params["output_config"] = {"format": {"type": "json_schema", "schema": results_schema()}}
    params.update(extra)
    return params


def auto_params(blocks: list[dict[str, str]], model: str, **extra: Any) -> dict[str, Any]:
    """A pack with our tool, strict, under ``tool_choice: auto``."""
    params = pack_params(blocks, model=model, fields=FIELDS)
    params["tools"] = [
        {
            "name": TOOL_NAME,
            "description": "Record one result per block.",
            "input_schema": results_schema(),
            "strict": True,
        }
    ]
    params["tool_choice"] = {"type": "auto"}
    params.update(extra)
    return params


def thinking_of(message: Any) -> int:
    details = message.usage.output_tokens_details
    return details.thinking_tokens if details is not None else 0


# --- thinking (§3) ---------------------------------------------------------------------


async def test_haiku_5_5_forced_tool_answers_without_thinking(client):
    message = await client.messages.create(**pack_params(make_blocks(3), model="claude-haiku-5-5"))
    assert [b.type for b in message.content] == ["tool_use"]
    assert message.stop_reason == "tool_use" and message.stop_details is None
    assert thinking_of(message) == 0


async def test_a_model_that_thinks_by_default_starts_with_an_omitted_thinking_block(client):
    message = await client.messages.create(**json_params(make_blocks(3), "claude-sonnet-5-5"))
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.thinking == "" and thinking.signature
    assert text.type == "text" and message.stop_reason == "end_turn"
    spent = thinking_of(message)
    assert 0 < spent < message.usage.output_tokens  # thinking is billed as output


async def test_thinking_turned_off_the_way_the_model_allows_gives_no_thinking(client):
    blocks = make_blocks(3)
    for params in (
        json_params(blocks, "claude-sonnet-5-5", thinking={"type": "between_tools"}),
        json_params(
            blocks,
            "claude-haiku-5-5",
            thinking={"type": "disabled"},
            output_config={
                "effort": "medium",
                **json_params(blocks, "claude-haiku-5-5")["output_config"],
            },
        ),
    ):
        message = await client.messages.create(**params)
        assert [b.type for b in message.content] == ["text"]
        assert thinking_of(message) == 0


async def test_more_effort_thinks_more_and_the_same_request_thinks_the_same(client):
    blocks = make_blocks(5)
    spent = {}
    for effort in ("low", "medium", "high", "max"):
        params = json_params(blocks, "claude-opus-5-5")
        params["output_config"]["effort"] = effort
        first = await client.messages.create(**params)
        again = await client.messages.create(**params)
        assert thinking_of(first) == thinking_of(again) > 0
        spent[effort] = thinking_of(first)
    assert spent["low"] < spent["medium"] < spent["high"] < spent["max"]


async def test_adaptive_low_effort_may_skip_thinking_on_one_block(sim, client):
    params = json_params(make_blocks(1), "claude-haiku-5-5")
    params["output_config"]["effort"] = "low"
    sim.scenario = Scenario(thinking=Thinking(low_effort_skip=1.0))
    assert thinking_of(await client.messages.create(**params)) == 0
    sim.scenario = Scenario(thinking=Thinking(low_effort_skip=0.0))
    assert thinking_of(await client.messages.create(**params)) > 0


async def test_summarized_display_on_sonnet_4_6_and_enabled_stays_within_its_budget(client):
    blocks = make_blocks(30)
    adaptive = await client.messages.create(
        **json_params(blocks, "claude-sonnet-4-6", thinking={"type": "adaptive"})
    )
    assert adaptive.content[0].type == "thinking" and adaptive.content[0].thinking
    enabled = await client.messages.create(
        **json_params(
            blocks, "claude-sonnet-4-6", thinking={"type": "enabled", "budget_tokens": 1024}
        )
    )
    assert thinking_of(adaptive) > 1024 and thinking_of(enabled) == 1024


async def test_thinking_that_uses_up_max_tokens_leaves_only_the_thinking_block(client):
    message = await client.messages.create(
        **json_params(make_blocks(5), "claude-opus-5-5", max_tokens=40)
    )
    assert message.stop_reason == "max_tokens"
    assert [b.type for b in message.content] == ["thinking"]
    assert message.usage.output_tokens == thinking_of(message) == 40


# --- answer channels and structured outputs (§2) -------------------------------------


async def test_json_format_answers_conforming_json_text_required_properties_first(client):
    blocks = make_blocks(4)
    message = await client.messages.create(**json_params(blocks, "claude-sonnet-5-5"))
    text = next(b for b in message.content if b.type == "text").text
    results = json.loads(text)["results"]
    assert [r["block_uid"] for r in results] == [b["block_uid"] for b in blocks]
    for result, block in zip(results, blocks, strict=True):
        assert list(result) == [*REQUIRED, "note"]
        assert result["word_count"] == len(block["block_content"].split())


async def test_json_cut_at_max_tokens_is_invalid_json_with_stop_max_tokens(sim, client):
    # No jitter: the cut request (another max_tokens) thinks exactly as much as the full one.
    sim.scenario = Scenario(thinking=Thinking(jitter=0))
    blocks = make_blocks(10)
    full = await client.messages.create(**json_params(blocks, "claude-sonnet-5-5"))
    cut = await client.messages.create(
        **json_params(blocks, "claude-sonnet-5-5", max_tokens=thinking_of(full) + 30)
    )
    assert cut.stop_reason == "max_tokens"
    assert cut.usage.output_tokens == thinking_of(full) + 30
    text = cut.content[-1].text
    with pytest.raises(ValueError):
        json.loads(text)


async def test_structured_outputs_suppress_schema_breaking_faults_only(sim, client):
    blocks = make_blocks(12)
    sim.scenario = Scenario(
        seed=3,
        faults=Faults(malformed_tool_input=1.0, skip_block=0.3),
        always_malformed_uids=["doc:4"],
    )
    message = await client.messages.create(**json_params(blocks, "claude-sonnet-5-5"))
    results = json.loads(message.content[-1].text)["results"]
    assert all(isinstance(r["word_count"], int) for r in results)
    assert len(results) < len(blocks)  # skips still happen
    faults = sim.state.stats.log[-1]["faults"]
    assert "malformed_tool_input_suppressed" in faults and "skip_block" in faults
    assert "malformed_tool_input" not in faults


async def test_auto_tool_calls_the_tool_unless_the_model_answers_in_text(sim, client):
    params = auto_params(make_blocks(3), "claude-sonnet-5-5", thinking={"type": "between_tools"})
    called = await client.messages.create(**params)
    assert called.stop_reason == "tool_use"
    assert [b.type for b in called.content] == ["tool_use"]
    assert len(called.content[0].input["results"]) == 3
    sim.scenario = Scenario(faults=Faults(auto_tool_text_rate=1.0))
    texted = await client.messages.create(**params)
    assert texted.stop_reason == "end_turn"
    assert [b.type for b in texted.content] == ["text"]


# --- refusals and stop reasons (§0 rule 9, §2) ---------------------------------------


async def test_a_refused_block_gives_a_billed_200_refusal_with_stop_details(sim, client):
    blocks = make_blocks(3)
    sim.scenario = Scenario(refuse_contents=[blocks[1]["block_content"]])
    message = await client.messages.create(**pack_params(blocks, model="claude-haiku-5-5"))
    assert message.stop_reason == "refusal"
    assert message.stop_details is not None
    assert message.stop_details.type == "refusal"
    assert message.stop_details.category == "cyber"
    assert message.stop_details.explanation
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens < 20
    assert all(b.type == "text" for b in message.content)
    sim.scenario = Scenario(refuse_marker="quick brown", refusal_category="bio")
    marked = await client.messages.create(**pack_params(blocks, model="claude-haiku-5-5"))
    assert marked.stop_reason == "refusal" and marked.stop_details.category == "bio"


async def test_a_normal_answer_sends_stop_details_null(client):
    raw = await client.messages.with_raw_response.create(**pack_params(make_blocks(1)))
    body = json.loads(raw.http_response.text)
    assert "stop_details" in body and body["stop_details"] is None


async def test_output_that_would_overrun_the_context_window_stops_there(client):
    # Haiku 4.5: a 200,000-token window, the old tokenizer, no thinking by default.
    params = pack_params(
        make_blocks(20),
        model="claude-haiku-4-5",
        max_tokens=8000,
        system_text="abcd ",
        system_repeat=197_500,
    )
    counted = await client.messages.count_tokens(
        **{k: v for k, v in params.items() if k != "max_tokens"}
    )
    room = 200_000 - counted.input_tokens
    assert 0 < room < 8000
    message = await client.messages.create(**params)
    assert message.stop_reason == "model_context_window_exceeded"
    assert message.usage.output_tokens == room


async def test_max_tokens_zero_writes_the_cache_and_generates_nothing(client):
    params = pack_params(make_blocks(2), model="claude-haiku-5-5", max_tokens=0, system_repeat=200)
    params["tool_choice"] = {"type": "auto"}
    warm = await client.messages.create(**params)
    assert warm.content == [] and warm.stop_reason == "max_tokens"
    assert warm.usage.output_tokens == 0 and warm.usage.cache_creation_input_tokens > 0
    real = await client.messages.create(
        **pack_params(make_blocks(2, start=5), model="claude-haiku-5-5", system_repeat=200)
    )
    assert real.usage.cache_read_input_tokens == warm.usage.cache_creation_input_tokens


# --- tokenizer generations (§0 rule 8) -----------------------------------------------


async def test_the_new_tokenizer_counts_about_30_percent_more_everywhere(client):
    blocks = make_blocks(10)
    counts, outputs = {}, {}
    for model in ("claude-sonnet-4-6", "claude-opus-4-8"):  # old / new, neither thinks
        params = pack_params(blocks, model=model, system_repeat=200)
        counted = await client.messages.count_tokens(
            **{k: v for k, v in params.items() if k != "max_tokens"}
        )
        message = await client.messages.create(**params)
        usage = message.usage
        assert (
            usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
        ) == counted.input_tokens
        counts[model], outputs[model] = counted.input_tokens, usage.output_tokens
    assert 1.28 < counts["claude-opus-4-8"] / counts["claude-sonnet-4-6"] < 1.32
    assert 1.28 < outputs["claude-opus-4-8"] / outputs["claude-sonnet-4-6"] < 1.32
