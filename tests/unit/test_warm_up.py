"""The warm-up by the contract, the uncached-prefix fact, and long calls that stream
(activities/llm.py), without Postgres or Temporal."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from anthropic import AsyncAnthropic

from activities.llm import LlmActivities
from blockbatch.core.context import RunContext
from blockbatch.core.quote import quote_context
from blockbatch.core.registry import get_model
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from blockbatch.core.warm_up import stand_in_request, warm_up_request
from blockbatch.send.sender import AnthropicSender

SCHEMA: dict[str, Any] = {
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "negative"]},
        "note": {"type": "string", "maxLength": 80},
    },
    "required": ["sentiment"],
    "prompt_config": {"system_instructions": "Rate the tone. " * 400},
}


def ctx_for(model: str, **options: Any) -> RunContext:
    ctx = quote_context(RunOptions(model=model, **options), load_schema(SCHEMA), get_model(model))
    return RunContext(
        run_id="run-1",
        document_id="",
        schema_id="",
        options=ctx.options,
        spec=ctx.spec,
        model=ctx.model,
    )


def prefix(request: dict[str, Any]) -> str:
    return json.dumps([request.get(k) for k in ("system", "tools", "thinking")])


@pytest.mark.parametrize("model", ["claude-haiku-5-5", "claude-sonnet-4-6", "claude-haiku-4-5"])
def test_forced_tool_channels_warm_with_max_tokens_0_and_tool_choice_auto(model: str) -> None:
    ctx = ctx_for(model)
    assert ctx.shape.forced
    warm, pack = warm_up_request(ctx), stand_in_request(ctx)
    assert warm["max_tokens"] == 0
    assert warm["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert pack["tool_choice"]["type"] == "tool"
    # The same system prompt, tools and thinking: the packs' cache prefix.
    assert prefix(warm) == prefix(pack)
    assert "output_config" not in warm or "format" not in warm["output_config"]


def test_auto_tool_channel_warms_with_max_tokens_0_as_it_is() -> None:
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "meta": {"type": "object"}}}
    model = get_model("claude-opus-5-5")
    ctx = quote_context(RunOptions(model=model.id), load_schema(schema), model)
    assert ctx.shape.channel == "auto_tool"
    warm = warm_up_request(ctx)
    assert warm["max_tokens"] == 0 and warm["tool_choice"]["type"] == "auto"
    assert {k: v for k, v in warm.items() if k != "max_tokens"} == {
        k: v for k, v in stand_in_request(ctx).items() if k != "max_tokens"
    }


@pytest.mark.parametrize("model", ["claude-sonnet-5-5", "claude-opus-5-5"])
def test_json_channel_warms_with_the_smallest_real_request(model: str) -> None:
    ctx = ctx_for(model)
    assert ctx.shape.channel == "json"
    warm = warm_up_request(ctx)
    # max_tokens 0 is refused with output_config.format: one stand-in block, room for
    # its one result, the format as the packs send it.
    assert warm == stand_in_request(ctx)
    assert warm["max_tokens"] >= 1 and "format" in warm["output_config"]
    assert len(json.loads(warm["messages"][0]["content"][1]["text"])) == 1


def test_a_worker_stops_counting_an_uncached_prefix_as_read() -> None:
    ctx = ctx_for("claude-haiku-5-5")
    assert ctx.cacheable_prefix_tokens > 0
    worker = LlmActivities(pool=None, client=None)  # type: ignore[arg-type]  # the request needs neither
    est = ctx.cacheable_prefix_tokens + 500
    assert worker.calls.need(ctx, est, 100).input == 500
    nothing = {"usage": {"input_tokens": est, "output_tokens": 0}}
    worker.calls.learn_prefix(ctx, nothing)
    assert worker.calls.need(ctx, est, 100).input == est
    other = RunContext(
        run_id="run-2",
        document_id="",
        schema_id="",
        options=ctx.options,
        spec=ctx.spec,
        model=ctx.model,
    )
    assert worker.calls.need(other, est, 100).input == 500  # a fact of one run only
    read = {"usage": {"input_tokens": 500, "cache_read_input_tokens": est - 500}}
    worker.calls.learn_prefix(ctx, read)
    assert worker.calls.need(ctx, est, 100).input == 500


# --- long calls stream -------------------------------------------------------------------

MESSAGE: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-haiku-5-5",
    "content": [
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "record_block_results",
            "input": {"results": []},
        }
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "stop_details": None,
    "usage": {"input_tokens": 10, "output_tokens": 5},
}


def _sse(message: dict[str, Any]) -> bytes:
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {**message["usage"], "output_tokens": 0},
    }
    block = message["content"][0]
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}},
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def test_a_call_past_the_sdks_ten_minutes_streams_and_answers_the_same() -> None:
    seen: list[bool] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        seen.append(bool(body.get("stream")))
        headers = {"request-id": "req_1", "anthropic-ratelimit-requests-limit": "50"}
        if body.get("stream"):
            return httpx2.Response(
                200, content=_sse(MESSAGE), headers={**headers, "content-type": "text/event-stream"}
            )
        return httpx2.Response(200, json=MESSAGE, headers=headers)

    async def both() -> list[tuple[dict[str, Any], Any]]:
        client = AsyncAnthropic(
            api_key="x",
            base_url="http://claude.test",
            max_retries=0,
            timeout=600.0,
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handle)),
        )
        sender = AnthropicSender(client)
        request = stand_in_request(ctx_for("claude-haiku-5-5"))
        short = await sender.send({**request, "max_tokens": 1_000})
        long = await sender.send({**request, "max_tokens": 64_000})
        await client.close()
        return [(short.message, short.headers), (long.message, long.headers)]

    (short, short_headers), (long, long_headers) = asyncio.run(both())
    assert seen == [False, True]
    assert long["content"] == short["content"]
    assert long["content"][0]["input"] == MESSAGE["content"][0]["input"]
    assert long["usage"]["output_tokens"] == 5 and long["stop_reason"] == "tool_use"
    # The ledger gets the request-id, the limiter the rate-limit headers, either way.
    assert long_headers.get("request-id") == short_headers.get("request-id") == "req_1"
    assert long_headers.get("anthropic-ratelimit-requests-limit") == "50"


def test_the_estimate_says_an_old_schemas_temperature_is_ignored() -> None:
    from blockbatch.api.quote import estimate
    from blockbatch.core.schema import TEMPERATURE_NOTICE

    old = {**SCHEMA, "prompt_config": {**SCHEMA["prompt_config"], "temperature": 0}}
    q = asyncio.run(
        estimate(b"# A\n\nSome text.\n", old, fmt="markdown", count=False, history=False)
    )
    assert TEMPERATURE_NOTICE in q.notes
