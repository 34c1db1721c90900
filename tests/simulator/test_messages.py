"""The simulator's /v1/messages, driven through the real anthropic SDK."""

from __future__ import annotations

import anthropic
import pytest
from anthropic.types import Message, MessageTokensCount

from blockbatch.simulator.testing import make_blocks, pack_params, results_by_uid
from tests.helpers import error_body

MODEL = "claude-sonnet-4-5"


async def test_pack_answer_parses_into_sdk_message_with_one_result_per_block(client):
    blocks = make_blocks(5)
    message = await client.messages.create(**pack_params(blocks))

    assert isinstance(message, Message)
    assert message.id.startswith("msg_")
    assert message.type == "message" and message.role == "assistant"
    assert message.stop_reason == "tool_use" and message.stop_sequence is None
    assert message.content[0].type == "tool_use"
    assert message.content[0].id.startswith("toolu_")
    assert message.content[0].name == "record_block_results"
    assert message.usage.service_tier == "standard"
    assert message.usage.cache_creation is not None
    results = results_by_uid(message)
    assert sorted(results) == sorted(b["block_uid"] for b in blocks)
    for block in blocks:
        result = results[block["block_uid"]]
        content = block["block_content"]
        assert result["word_count"] == len(content.split())
        assert result["first_40_chars"] == content[:40]
        assert result["sentiment"] in ("positive", "negative", "neutral")
        assert 0 <= result["confidence"] <= 1
        assert isinstance(result["is_question"], bool)
        assert result["summary"].startswith("About: ")
        assert len(result["summary"]) <= 80


async def test_computed_fields_follow_each_blocks_content(client):
    fields = {
        "char_count": {"type": "integer"},
        "block_type": {"type": "string"},
        "revised_text": {"type": "string"},
        "normalized_text": {"type": "string"},
        "uid_echo": {"type": "string"},
        "rating": {"type": "integer", "minimum": 3, "maximum": 5},
        "short": {"type": "string", "maxLength": 5},
        "labels": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "meta": {"type": "object", "properties": {"n": {"type": "integer"}}},
    }
    blocks = [
        {"block_uid": "d:0", "block_type": "heading", "block_content": "  Hello   big\nworld  "},
        {"block_uid": "d:1", "block_type": "table", "block_content": "a | b"},
    ]
    message = await client.messages.create(**pack_params(blocks, fields=fields))

    first = results_by_uid(message)["d:0"]
    assert first["char_count"] == len("  Hello   big\nworld  ")
    assert first["block_type"] == "heading"
    assert first["revised_text"] == first["normalized_text"] == "HELLO BIG WORLD"
    assert first["uid_echo"] == "d:0"
    assert 3 <= first["rating"] <= 5
    assert len(first["short"]) <= 5
    assert all(label in ("a", "b") for label in first["labels"])
    assert isinstance(first["meta"]["n"], int)


async def test_same_block_gets_same_values_in_any_pack(client):
    blocks = make_blocks(12)
    big = results_by_uid(await client.messages.create(**pack_params(blocks)))
    alone = results_by_uid(await client.messages.create(**pack_params([blocks[7]])))
    reordered = results_by_uid(
        await client.messages.create(**pack_params([blocks[7], blocks[2], blocks[0]]))
    )

    assert alone["doc:7"] == big["doc:7"] == reordered["doc:7"]
    assert reordered["doc:2"] == big["doc:2"]


async def test_string_content_and_no_forced_tool_gives_text(client):
    message = await client.messages.create(
        model=MODEL, max_tokens=200, messages=[{"role": "user", "content": "Say hello to me"}]
    )
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text"
    assert "Say hello to me" in message.content[0].text


async def test_count_tokens_matches_billed_prompt_tokens(client):
    params = pack_params(make_blocks(4), system_repeat=200)
    counted = await client.messages.count_tokens(
        **{k: v for k, v in params.items() if k != "max_tokens"}
    )
    first = await client.messages.create(**params)
    second = await client.messages.create(**params)

    assert isinstance(counted, MessageTokensCount)
    for message in (first, second):
        usage = message.usage
        total = (
            usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
        )
        assert total == counted.input_tokens


async def test_output_tokens_grow_with_the_answer(client):
    small = await client.messages.create(**pack_params(make_blocks(1)))
    large = await client.messages.create(**pack_params(make_blocks(10)))
    assert 0 < small.usage.output_tokens < large.usage.output_tokens


async def test_every_response_carries_a_request_id(client):
    raw = await client.messages.with_raw_response.create(**pack_params(make_blocks(1)))
    assert raw.headers["request-id"].startswith("req_")
    with pytest.raises(anthropic.NotFoundError) as caught:
        await client.messages.create(
            model="xyz", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    request_id = caught.value.request_id
    assert request_id is not None and request_id.startswith("req_")
    assert error_body(caught.value)["request_id"] == caught.value.request_id
