"""The request rules of the current API contract, enforced through the real SDK.

Each test names the contract section it holds the simulator to
(/work/shared/reference/claude-api-2026-11.md).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import anthropic
import pytest

from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.testing import make_blocks, pack_params, results_tool
from tests.helpers import error_body

HI = [{"role": "user", "content": "hi"}]
LEGACY = {"anthropic-version": "2023-06-01"}


async def bad(client: anthropic.AsyncAnthropic, *, count: bool = False, **params: Any) -> str:
    """The message of the 400 a request gets (messages.create, or count_tokens)."""
    with pytest.raises(anthropic.BadRequestError) as caught:
        if count:
            params.pop("max_tokens", None)
            await client.messages.count_tokens(**params)
        else:
            await client.messages.create(**params)
    assert caught.value.type == "invalid_request_error"
    return str(caught.value.api_message)


def plain(model: str = "claude-haiku-5-5", **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 100, "messages": HI, **extra}


# Contract §0 rule 1, §4: sampling parameters are removed under 2026-10-21.


@pytest.mark.parametrize("field", ["temperature", "top_p", "top_k"])
@pytest.mark.parametrize("count", [False, True])
async def test_sampling_is_refused_under_the_current_version_even_at_its_default(
    client, field, count
):
    value = 1 if field != "top_p" else 0.99
    message = await bad(
        client, count=count, **plain("claude-sonnet-4-6"), extra_body={field: value}
    )
    assert message == f"{field}: Extra inputs are not permitted"


async def test_the_sdk_sends_the_current_version(sim, client):
    raw = await client.messages.with_raw_response.create(**plain())
    assert raw.http_request.headers["anthropic-version"] == "2026-10-21"


async def test_under_2023_06_01_the_old_per_model_sampling_rules_hold(client):
    legacy: dict[str, Any] = {"extra_headers": LEGACY}
    # Sonnet 4.6 takes any temperature in range.
    await client.messages.create(
        **plain("claude-sonnet-4-6"), extra_body={"temperature": 0}, **legacy
    )
    # Sonnet 5.5 and Opus 4.7 take only the default.
    await client.messages.create(
        **plain("claude-sonnet-5-5"), extra_body={"temperature": 1}, **legacy
    )
    for model in ("claude-sonnet-5-5", "claude-opus-4-7", "claude-sonnet-5"):
        message = await bad(client, **plain(model), extra_body={"temperature": 0}, **legacy)
        assert message.startswith("temperature: ")
    # Haiku 5.5: temperature=1 or top_p=0.99, never both.
    await client.messages.create(**plain(), extra_body={"temperature": 1}, **legacy)
    await client.messages.create(**plain(), extra_body={"top_p": 0.99}, **legacy)
    await bad(client, **plain(), extra_body={"temperature": 0.5}, **legacy)
    await bad(client, **plain(), extra_body={"temperature": 1, "top_p": 0.99}, **legacy)


# Contract §4: no prefill on 4.6+ and 5.x; Haiku 4.5 still takes one.


async def test_a_trailing_assistant_turn_is_refused_where_prefill_is_not_supported(client):
    turns = [*HI, {"role": "assistant", "content": "Sure"}]
    message = await bad(client, **plain("claude-haiku-5-5", messages=turns))
    assert "prefill" in message
    await bad(client, **plain("claude-sonnet-4-6", messages=turns))
    answer = await client.messages.create(**plain("claude-haiku-4-5", messages=turns))
    assert answer.type == "message"


# Contract §0 rule 2: forced tool_choice is model-scoped, on count_tokens too.


@pytest.mark.parametrize("count", [False, True])
async def test_forced_tool_choice_is_refused_on_sonnet_5_5_and_opus_5_5(client, count):
    for model in ("claude-sonnet-5-5", "claude-opus-5-5"):
        params = pack_params(make_blocks(1), model=model)
        message = await bad(client, count=count, **params)
        assert message == 'tool_choice: type "tool" and "any" are not supported for this model'
    params = pack_params(make_blocks(1), model="claude-sonnet-5-5")
    params["tool_choice"] = {"type": "any"}
    await bad(client, count=count, **params)


async def test_forced_tool_choice_is_accepted_on_haiku_5_5_with_disable_parallel(client):
    params = pack_params(make_blocks(1), model="claude-haiku-5-5")
    params["tool_choice"] = {**params["tool_choice"], "disable_parallel_tool_use": True}
    answer = await client.messages.create(**params)
    assert any(block.type == "tool_use" for block in answer.content)
    params["tool_choice"] = {**params["tool_choice"], "disable_parallel_tool_use": "yes"}
    await bad(client, **params)


async def test_auto_tool_choice_with_a_strict_tool_is_accepted_on_sonnet_5_5(client):
    tool = {**results_tool({"word_count": {"type": "integer"}}), "strict": True}
    items = tool["input_schema"]["properties"]["results"]["items"]
    items["additionalProperties"] = False
    tool["input_schema"]["additionalProperties"] = False
    answer = await client.messages.create(
        **plain("claude-sonnet-5-5"), tools=[tool], tool_choice={"type": "auto"}
    )
    assert answer.type == "message"


# Contract §3: thinking values per model.


@pytest.mark.parametrize(
    ("model", "thinking", "ok"),
    [
        ("claude-haiku-5-5", {"type": "adaptive"}, True),
        ("claude-haiku-5-5", {"type": "adaptive", "display": "summarized"}, True),
        ("claude-haiku-5-5", {"type": "disabled"}, True),
        ("claude-haiku-5-5", {"type": "between_tools"}, False),
        ("claude-sonnet-5-5", {"type": "between_tools"}, True),
        ("claude-sonnet-5-5", {"type": "disabled"}, False),
        ("claude-opus-5-5", {"type": "disabled"}, False),
        ("claude-opus-5-5", {"type": "enabled", "budget_tokens": 2048}, False),
        ("claude-haiku-4-5", {"type": "enabled", "budget_tokens": 2048}, True),
        ("claude-haiku-4-5", {"type": "adaptive"}, False),
    ],
)
async def test_thinking_types_follow_the_model(client, model, thinking, ok):
    params = plain(model, max_tokens=4096, thinking=thinking)
    if ok:
        assert (await client.messages.create(**params)).type == "message"
    else:
        assert "is not supported for this model" in await bad(client, **params)


async def test_opus_5_5_refuses_disabled_thinking_with_its_own_words(client):
    message = await bad(client, **plain("claude-opus-5-5", thinking={"type": "disabled"}))
    assert message.startswith('"thinking.type.disabled" is not supported for this model.')


@pytest.mark.parametrize("effort", ["xhigh", "max"])
async def test_thinking_off_at_xhigh_or_max_effort_is_refused(client, effort):
    await bad(client, **plain(thinking={"type": "disabled"}, output_config={"effort": effort}))
    await bad(
        client,
        **plain(
            "claude-sonnet-5-5",
            thinking={"type": "between_tools"},
            output_config={"effort": effort},
        ),
    )
    await client.messages.create(
        **plain(thinking={"type": "disabled"}, output_config={"effort": "high"})
    )


@pytest.mark.parametrize(
    ("thinking", "fragment"),
    [
        ({"type": "between_tools", "display": "omitted"}, "Extra inputs"),
        ({"type": "adaptive", "display": "loud"}, "display"),
        ({"type": "enabled", "budget_tokens": 1000}, "budget_tokens"),
        ({"type": "enabled", "budget_tokens": 4096}, "budget_tokens"),  # not < max_tokens
    ],
)
async def test_thinking_fields_are_checked(client, thinking, fragment):
    params = plain("claude-sonnet-4-6", max_tokens=4096, thinking=thinking)
    assert fragment in await bad(client, **params)


# Contract §2, §3: output_config.


async def test_effort_only_where_the_model_has_one(client):
    await client.messages.create(**plain(output_config={"effort": "low"}))
    assert "effort" in await bad(
        client, **plain("claude-haiku-4-5", output_config={"effort": "low"})
    )
    assert "effort" in await bad(
        client, **plain(extra_body={"output_config": {"effort": "extreme"}})
    )


OBJECT = {
    "type": "object",
    "properties": {"a": {"type": "string"}},
    "required": ["a"],
    "additionalProperties": False,
}


async def test_output_config_format_is_accepted_and_its_schema_checked(client):
    fmt = {"type": "json_schema", "schema": OBJECT}
    await client.messages.create(**plain(output_config={"format": fmt}))
    loose = {**OBJECT, "additionalProperties": True}
    message = await bad(
        client, **plain(output_config={"format": {"type": "json_schema", "schema": loose}})
    )
    assert "additionalProperties" in message


async def test_output_format_needs_its_beta(client):
    fmt = {"type": "json_schema", "schema": OBJECT}
    message = await bad(client, **plain(extra_body={"output_format": fmt}))
    assert "structured-outputs-2025-11-13" in message
    await client.messages.create(
        **plain(extra_body={"output_format": fmt}),
        extra_headers={"anthropic-beta": "structured-outputs-2025-11-13"},
    )


async def test_structured_outputs_only_where_the_model_has_them(sim, client):
    sim.scenario = Scenario(models={"claude-haiku-5-5": {"structured_outputs": False}})
    fmt = {"type": "json_schema", "schema": OBJECT}
    message = await bad(client, **plain(output_config={"format": fmt}))
    assert "structured outputs are not supported" in message


async def test_strict_tool_schemas_are_checked_on_count_tokens_too(client):
    tool = {
        "name": "t",
        "strict": True,
        "input_schema": {**OBJECT, "properties": {"a": {"type": "string", "maxLength": 5}}},
    }
    for count in (False, True):
        message = await bad(client, count=count, **plain(tools=[tool]))
        assert "'maxLength' is not supported" in message
    tool["strict"] = False  # a non-strict tool may use any keyword
    await client.messages.create(**plain(tools=[tool]))


# Contract §5: max_tokens 0 pre-warms, with limits.


async def test_max_tokens_zero_is_accepted_but_not_with_its_conflicts(client):
    params = pack_params(make_blocks(1), model="claude-haiku-5-5", max_tokens=0)
    params["tool_choice"] = {"type": "auto"}
    answer = await client.messages.create(**params)
    assert answer.stop_reason == "max_tokens"
    fmt = {"type": "json_schema", "schema": OBJECT}
    conflicts: list[tuple[dict[str, Any], str]] = [
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"output_config": {"format": fmt}}, "output_config.format"),
        (
            {"model": "claude-sonnet-4-6", "thinking": {"type": "enabled", "budget_tokens": 1024}},
            "thinking",
        ),
    ]
    for change, fragment in conflicts:
        assert fragment in await bad(client, **{**params, **change})
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.post("/v1/messages", body={**params, "stream": True}, cast_to=object)
    assert "stream" in error_body(caught.value)["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.post("/v1/messages", body={**params, "max_tokens": -1}, cast_to=object)
    assert "greater than or equal to 0" in error_body(caught.value)["error"]["message"]


async def test_stream_must_be_a_boolean(client):
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.post("/v1/messages", body={**plain(), "stream": "yes"}, cast_to=object)
    assert "stream" in error_body(caught.value)["error"]["message"]


# Contract §4, breaking changes 2 and 3 of 2026-10-21.


async def test_documents_in_assistant_turns_and_citations_in_user_turns_are_refused(client):
    cited = [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "x",
                    "citations": [
                        {
                            "type": "char_location",
                            "cited_text": "x",
                            "document_index": 0,
                            "start_char_index": 0,
                            "end_char_index": 1,
                        }
                    ],
                }
            ],
        }
    ]
    assert "citations" in await bad(client, **plain(messages=cited))


# Contract §1, "Not in the table": retired models are 404 on every endpoint.


@pytest.mark.parametrize("model", ["claude-opus-4-1", "claude-3-5-haiku-latest"])
async def test_retired_models_are_404_everywhere(client, model):
    for call in (
        client.messages.create(**plain(model)),
        client.messages.count_tokens(model=model, messages=HI),
        client.models.retrieve(model),
    ):
        with pytest.raises(anthropic.NotFoundError) as caught:
            await call
        assert error_body(caught.value)["error"] == {
            "type": "not_found_error",
            "message": f"model: {model}",
        }


async def test_a_model_is_retired_from_its_end_of_life_day(sim, client):
    sim.scenario = Scenario(today=dt.date(2026, 11, 29))
    await client.messages.create(**plain("claude-sonnet-4-5"))
    sim.scenario = Scenario(today=dt.date(2026, 11, 30))
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.create(**plain("claude-sonnet-4-5"))
