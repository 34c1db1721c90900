"""The OpenAI-compatible gateway's wire (blockbatch/core/gateway.py): a pack's Messages
request as a chat completion, the completion read back as a Message with the gateway's own
usage and cost, its errors classified like Claude's, and its model ids."""

from __future__ import annotations

import json

import pytest

from blockbatch.core.gateway import (
    GatewayShapeError,
    answer_cost_usd,
    answer_error,
    chat_request,
    error_of,
    message_of,
    reported_cost_usd,
)
from blockbatch.core.providers import batch_refused, resolve_model, wire_model
from blockbatch.core.registry import UnknownModelError, Usage, cost_usd, get_model
from blockbatch.core.run_types import RunOptions
from blockbatch.simulator.testing import make_blocks, pack_params


def test_a_pack_goes_out_as_a_forced_function_call_with_its_cache_marker() -> None:
    request = pack_params(make_blocks(2), model="claude-haiku-5-5")
    request["tool_choice"]["disable_parallel_tool_use"] = True
    request["thinking"] = {"type": "disabled"}
    body = chat_request(request, "anthropic/claude-haiku-5.5")

    assert body["model"] == "anthropic/claude-haiku-5.5"
    assert body["max_tokens"] == request["max_tokens"]
    system, user = body["messages"]
    assert system["role"] == "system"
    # The prompt-caching guide: cache_control on a content part of the system message.
    assert system["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert system["content"][-1]["text"] == request["system"][-1]["text"]
    assert [p["text"] for p in user["content"]] == [
        b["text"] for b in request["messages"][0]["content"]
    ]
    (tool,) = body["tools"]
    assert tool["type"] == "function"
    assert tool["function"]["parameters"] == request["tools"][0]["input_schema"]
    assert body["tool_choice"] == {
        "type": "function",
        "function": {"name": tool["function"]["name"]},
    }
    assert body["parallel_tool_calls"] is False
    assert "thinking" not in body and "reasoning" not in body


def test_a_json_channel_request_goes_out_as_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"results": {"type": "array"}}}
    request = {
        "model": "claude-sonnet-5-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
    }
    body = chat_request(request, "anthropic/claude-sonnet-5.5")
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == schema


def test_a_request_the_gateway_cannot_carry_is_refused_with_what_it_holds() -> None:
    request = {
        "model": "claude-haiku-5-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
    }
    with pytest.raises(GatewayShapeError, match="'image' block"):
        chat_request(request, "anthropic/claude-haiku-5.5")


COMPLETION = {
    "id": "gen-123",
    "model": "anthropic/claude-haiku-5.5",
    "provider": "Anthropic",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "record_results", "arguments": '{"results": []}'},
                    }
                ],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 1200,
        "completion_tokens": 80,
        "total_tokens": 1280,
        "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 0},
        "cost": 0.00042,
    },
}


def test_a_completion_reads_back_as_a_message_with_the_gateways_usage_and_cost() -> None:
    message = message_of(COMPLETION, "claude-haiku-5-5")
    assert message["model"] == "claude-haiku-5-5"
    assert message["stop_reason"] == "tool_use"
    (tool,) = message["content"]
    assert tool == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "record_results",
        "input": {"results": []},
    }
    usage = Usage.from_message(message)
    # prompt_tokens counts the cached tokens too (OpenAI's convention): the rest is input.
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens) == (
        200,
        1000,
        80,
    )
    assert reported_cost_usd(message) == pytest.approx(0.00042)
    # What the gateway said is kept for the ledger.
    assert message["gateway"]["usage"]["prompt_tokens"] == 1200


@pytest.mark.parametrize(
    ("finish", "stop"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")],
)
def test_finish_reasons_are_the_messages_stop_reasons(finish: str, stop: str) -> None:
    completion = json.loads(json.dumps(COMPLETION))
    completion["choices"][0]["finish_reason"] = finish
    assert message_of(completion, "claude-haiku-5-5")["stop_reason"] == stop


def test_the_cost_of_a_gateway_answer_is_what_the_gateway_charged() -> None:
    model = get_model("claude-haiku-5-5")
    message = message_of(COMPLETION, model.id)
    ours = cost_usd(model, Usage.from_message(message))
    assert ours != pytest.approx(0.00042)  # the gateway's figure differs from our prices
    assert answer_cost_usd(model, message) == pytest.approx(0.00042)
    # The Claude API's answer (no gateway figure) is priced at the registry's prices.
    claude = {"usage": {"input_tokens": 1000, "output_tokens": 10}}
    assert answer_cost_usd(model, claude) == cost_usd(model, Usage.from_message(claude))


def test_an_answer_without_a_reported_cost_has_none() -> None:
    completion = json.loads(json.dumps(COMPLETION))
    del completion["usage"]["cost"]
    assert reported_cost_usd(message_of(completion, "claude-haiku-5-5")) is None
    assert reported_cost_usd({"usage": {"input_tokens": 3}}) is None  # the Claude API's


def test_a_200_answer_carrying_an_error_is_an_error_of_its_code() -> None:
    body = {"error": {"code": 429, "message": "Rate limit exceeded"}}
    error = error_of(200, answer_error(body), retry_after="7")
    assert (error.kind, error.status, error.retry_after_s) == ("retryable", 429, 7.0)
    # Without a code the upstream failed mid-answer: retried.
    assert error_of(200, {"message": "upstream"}).kind == "retryable"


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (401, "fatal", "key_rejected"),
        (402, "fatal", "billing"),
        (404, "fatal", "model_unavailable"),
        (408, "retryable", None),
        (502, "retryable", None),
        (503, "retryable", None),
        (400, "rejected", None),
    ],
)
def test_gateway_statuses_are_classified_like_claudes(
    status: int, kind: str, code: str | None
) -> None:
    error = error_of(status, {"code": status, "message": "m"}, model="claude-haiku-5-5")
    assert (error.kind, error.code) == (kind, code)


def test_a_moderation_flag_rejects_the_request_not_the_key() -> None:
    error = error_of(
        403,
        {"code": 403, "message": "input flagged", "metadata": {"reasons": ["violence"]}},
    )
    assert (error.kind, error.code, error.status) == ("rejected", None, 403)
    assert "violence" in error.message


@pytest.mark.parametrize(
    ("given", "model", "wire"),
    [
        ("anthropic/claude-haiku-5.5", "claude-haiku-5-5", "anthropic/claude-haiku-5.5"),
        ("claude-haiku-5-5", "claude-haiku-5-5", "anthropic/claude-haiku-5.5"),
        ("anthropic/claude-sonnet-5", "claude-sonnet-5", "anthropic/claude-sonnet-5"),
        ("anthropic/claude-opus-4.7:beta", "claude-opus-4-7", "anthropic/claude-opus-4.7:beta"),
    ],
)
def test_gateway_ids_are_the_registry_models(given: str, model: str, wire: str) -> None:
    found, sent = resolve_model("gateway", given)
    assert (found.id, sent) == (model, wire)
    assert wire_model("gateway", found.id, None) == wire.split(":")[0]


def test_a_gateway_id_elsewhere_says_which_provider_takes_it() -> None:
    with pytest.raises(UnknownModelError, match="--provider gateway"):
        resolve_model("anthropic", "anthropic/claude-haiku-5.5")
    with pytest.raises(UnknownModelError, match="gateway model 'anthropic/claude-nope-9'"):
        resolve_model("gateway", "anthropic/claude-nope-9")


def test_batch_mode_on_the_gateway_is_refused_with_the_reason() -> None:
    reason = batch_refused("gateway", "batch")
    assert reason is not None and "no batch jobs" in reason and "--mode sync" in reason
    with pytest.raises(ValueError, match="no batch jobs"):
        RunOptions(provider="gateway", mode="batch")
    assert RunOptions(provider="gateway", mode="sync").provider == "gateway"
