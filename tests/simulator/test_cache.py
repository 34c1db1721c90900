"""Prompt caching: writes, reads, TTLs and minimum lengths, on an injected clock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import pytest_asyncio

from blockbatch.core.registry import get_model
from blockbatch.simulator.clock import FakeClock
from blockbatch.simulator.prompt import FORMAT_PROMPT_TOKENS
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import make_blocks, pack_params
from blockbatch.simulator.tokenizer import count_tokens
from tests.simulator.sdk import sdk_client

SYSTEM = "You extract fields from document blocks carefully. "


@pytest_asyncio.fixture
async def clock() -> FakeClock:
    return FakeClock()


@pytest_asyncio.fixture
async def client(clock: FakeClock) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with SimulatorServer(clock=clock) as sim:
        yield sdk_client(sim.base_url)


def total(usage) -> int:
    return usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens


async def test_cache_write_then_read_within_ttl_then_miss_after(client, clock):
    params = pack_params(make_blocks(3), system_text=SYSTEM, system_repeat=200)
    first = (await client.messages.create(**params)).usage
    assert first.cache_creation_input_tokens > 1024
    assert first.cache_read_input_tokens == 0
    assert first.cache_creation.ephemeral_5m_input_tokens == first.cache_creation_input_tokens

    clock.advance(299)
    other_blocks = pack_params(make_blocks(2, start=10), system_text=SYSTEM, system_repeat=200)
    second = (await client.messages.create(**other_blocks)).usage
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0

    clock.advance(299)  # the read refreshed the TTL
    third = (await client.messages.create(**params)).usage
    assert third.cache_read_input_tokens == first.cache_creation_input_tokens

    clock.advance(301)
    fourth = (await client.messages.create(**params)).usage
    assert fourth.cache_read_input_tokens == 0
    assert fourth.cache_creation_input_tokens == first.cache_creation_input_tokens
    assert {total(u) for u in (first, third, fourth)} == {total(first)}


async def test_input_tokens_are_only_those_after_the_breakpoint(client):
    params = pack_params(make_blocks(2), system_text=SYSTEM, system_repeat=200)
    usage = (await client.messages.create(**params)).usage
    tools_and_system = count_tokens(params["system"][0]["text"])
    assert usage.cache_creation_input_tokens > tools_and_system  # the tool comes first
    assert usage.input_tokens == total(usage) - usage.cache_creation_input_tokens


async def test_one_hour_ttl_is_reported_separately_and_lasts(client, clock):
    params = pack_params(make_blocks(1), system_text=SYSTEM, system_repeat=200, cache_ttl="1h")
    first = (await client.messages.create(**params)).usage
    assert first.cache_creation.ephemeral_1h_input_tokens == first.cache_creation_input_tokens
    assert first.cache_creation.ephemeral_5m_input_tokens == 0
    clock.advance(3000)
    second = (await client.messages.create(**params)).usage
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    clock.advance(3601)
    third = (await client.messages.create(**params)).usage
    assert third.cache_read_input_tokens == 0


async def test_prefix_below_model_minimum_is_not_cached(client):
    params = pack_params(make_blocks(1), system_text=SYSTEM, system_repeat=3)
    for _ in range(2):
        usage = (await client.messages.create(**params)).usage
        assert usage.cache_creation_input_tokens == 0
        assert usage.cache_read_input_tokens == 0
        assert usage.input_tokens == total(usage)


async def test_minimum_depends_on_the_model(client):
    # ~2,000 tokens: enough for Sonnet 4.5 (1,024), not for Haiku 4.5 (4,096).
    assert get_model("claude-haiku-4-5").min_cacheable_tokens == 4096
    for model, cached in (("claude-sonnet-4-5", True), ("claude-haiku-4-5", False)):
        params = pack_params(make_blocks(1), model=model, system_text=SYSTEM, system_repeat=150)
        usage = (await client.messages.create(**params)).usage
        assert (usage.cache_creation_input_tokens > 0) is cached


async def test_cache_is_per_model_and_per_prefix(client):
    sonnet = pack_params(
        make_blocks(1), model="claude-sonnet-4-5", system_text=SYSTEM, system_repeat=200
    )
    await client.messages.create(**sonnet)
    other_model = {**sonnet, "model": "claude-opus-4-5"}
    assert (await client.messages.create(**other_model)).usage.cache_read_input_tokens == 0
    other_prefix = pack_params(make_blocks(1), system_text=SYSTEM + "!", system_repeat=200)
    assert (await client.messages.create(**other_prefix)).usage.cache_read_input_tokens == 0
    alias = {**sonnet, "model": "claude-sonnet-4-5-20250929"}
    assert (await client.messages.create(**alias)).usage.cache_read_input_tokens > 0


async def test_longest_cached_prefix_is_read_and_the_rest_written(client):
    base = pack_params(make_blocks(2), system_text=SYSTEM, system_repeat=200)
    await client.messages.create(**base)
    extended = {
        **base,
        "system": [
            {
                "type": "text",
                "text": base["system"][0]["text"],
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "text", "text": "More rules. " * 50, "cache_control": {"type": "ephemeral"}},
        ],
    }
    usage = (await client.messages.create(**extended)).usage
    assert usage.cache_read_input_tokens > 0
    assert usage.cache_creation_input_tokens == count_tokens("More rules. " * 50)


def _format(params: dict, note_type: str) -> dict:
    """``params`` answering through ``output_config.format`` instead of the tool."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["results"],
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["block_uid", "note"],
                    "properties": {"block_uid": {"type": "string"}, "note": {"type": note_type}},
                },
            }
        },
    }
    out = {k: v for k, v in params.items() if k not in ("tools", "tool_choice")}
    out["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return out


async def test_the_output_format_is_part_of_the_cached_prefix(client):
    """Contract §2/§5: the format adds a hidden prompt billed as input, and changing it
    invalidates the cache; the same format reads it."""
    base = pack_params(
        make_blocks(2), model="claude-haiku-5-5", system_text=SYSTEM, system_repeat=200
    )
    no_tools = {k: v for k, v in base.items() if k not in ("tools", "tool_choice")}
    plain = (await client.messages.create(**{**no_tools, "max_tokens": 0})).usage
    assert plain.cache_creation_input_tokens > 0
    first = (await client.messages.create(**_format(base, "string"))).usage
    assert first.cache_read_input_tokens == 0  # a warm-up without the format is not it
    assert total(first) >= total(plain) + FORMAT_PROMPT_TOKENS
    again = (await client.messages.create(**_format(base, "string"))).usage
    assert again.cache_read_input_tokens == first.cache_creation_input_tokens
    changed = (await client.messages.create(**_format(base, "boolean"))).usage
    assert changed.cache_read_input_tokens == 0


async def test_thinking_and_effort_key_the_messages_layer_only(client):
    """Contract §5: a thinking or effort change misses breakpoints in the messages, not
    the one on the system prompt."""
    params = pack_params(
        make_blocks(2), model="claude-sonnet-5", system_text=SYSTEM, system_repeat=200
    )
    params["tool_choice"] = {"type": "auto"}
    first_user = params["messages"][0]["content"][0]
    first_user["text"] = "Rules for this document. " * 150
    first_user["cache_control"] = {"type": "ephemeral"}
    await client.messages.create(**params)
    same = (await client.messages.create(**params)).usage
    assert same.cache_creation_input_tokens == 0
    system_part = same.cache_read_input_tokens
    other_effort = {**params, "output_config": {"effort": "low"}}
    usage = (await client.messages.create(**other_effort)).usage
    assert 0 < usage.cache_read_input_tokens < system_part
    default_effort = {**params, "output_config": {"effort": "high"}}  # Sonnet 5's default
    assert (await client.messages.create(**default_effort)).usage.cache_read_input_tokens == (
        system_part
    )
    thinking_off = {**params, "thinking": {"type": "disabled"}}
    usage = (await client.messages.create(**thinking_off)).usage
    assert 0 < usage.cache_read_input_tokens < system_part
