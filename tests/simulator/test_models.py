"""The Models API (contract §1, "Check at run time") through the SDK's client.models, and
the scenario's model facts that /v1/messages enforces as well."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import anthropic
import pytest
import pytest_asyncio

from blockbatch.core.registry import MODELS, get_model, with_api_facts
from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import make_blocks, pack_params

HI = [{"role": "user", "content": "hi"}]


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(scenario=Scenario(today=dt.date(2026, 11, 25))) as server:
        yield server


async def test_retrieve_gives_the_registry_facts_in_the_sdk_shape(client):
    info = await client.models.retrieve("claude-haiku-5-5")
    assert isinstance(info, anthropic.types.ModelInfo)
    assert (info.id, info.type, info.display_name) == (
        "claude-haiku-5-5",
        "model",
        "Claude Haiku 5.5",
    )
    assert info.lifecycle == "active" and info.retires_at is None
    assert info.line == "haiku"
    assert info.created_at == dt.datetime(2026, 10, 7, tzinfo=dt.UTC)
    assert (info.max_input_tokens, info.max_tokens) == (1_000_000, 128_000)
    caps = info.capabilities
    assert caps is not None
    assert caps.structured_outputs.supported and caps.batch.supported
    assert caps.thinking.supported
    types = caps.thinking.types
    assert (
        types.adaptive.supported,
        types.disabled.supported,
        types.between_tools.supported,
        types.enabled.supported,
    ) == (True, True, False, False)
    assert caps.effort.supported and caps.effort.xhigh is not None


async def test_what_the_api_says_round_trips_through_the_registry(client):
    # core.registry.with_api_facts reads the answer back into the same entry.
    for model in MODELS:
        raw = await client.models.with_raw_response.retrieve(model.id)
        facts = await raw.json()
        merged = with_api_facts(model, facts)
        assert (
            merged.context_window,
            merged.max_output_tokens,
            merged.structured_outputs,
            merged.thinking_types,
            merged.end_of_life,
        ) == (
            model.context_window,
            model.max_output_tokens,
            model.structured_outputs,
            model.thinking_types,
            model.end_of_life,
        ), model.id


async def test_a_deprecated_model_says_when_it_retires(client):
    info = await client.models.retrieve("claude-sonnet-4-5-20250929")
    assert info.id == "claude-sonnet-4-5"
    assert info.lifecycle == "deprecated"
    assert info.retires_at == dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    caps = info.capabilities
    assert caps is not None and not caps.effort.supported


async def test_list_pages_newest_first_and_leaves_out_retired_models(sim, client):
    everything = [m async for m in client.models.list(limit=3)]
    ids = [m.id for m in everything]
    assert ids[0] == "claude-haiku-5-5"  # the newest release
    assert sorted(ids) == sorted(m.id for m in MODELS)
    first = await client.models.list(limit=3)
    assert first.has_more and first.first_id == ids[0] and first.last_id == ids[2]
    after = await client.models.list(limit=3, after_id=ids[2])
    assert [m.id for m in after.data] == ids[3:6]
    before = await client.models.list(limit=2, before_id=ids[3])
    assert [m.id for m in before.data] == ids[1:3] and before.has_more
    sim.scenario = Scenario(today=dt.date(2026, 12, 1))
    later = [m.id async for m in client.models.list()]
    assert "claude-sonnet-4-5" not in later and len(later) == len(ids) - 1


async def test_scenario_facts_override_a_model_for_the_models_api_and_messages(sim, client):
    sim.scenario = Scenario(
        models={"claude-haiku-5-5": {"max_tokens": 1000, "structured_outputs": False}}
    )
    info = await client.models.retrieve("claude-haiku-5-5")
    assert info.max_tokens == 1000
    assert info.capabilities is not None and not info.capabilities.structured_outputs.supported
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(model="claude-haiku-5-5", max_tokens=1001, messages=HI)
    assert "1001 > 1000" in str(caught.value.api_message)
    fmt = {
        "type": "json_schema",
        "schema": {"type": "object", "properties": {}, "additionalProperties": False},
    }
    with pytest.raises(anthropic.BadRequestError):
        await client.messages.create(
            model="claude-haiku-5-5", max_tokens=100, messages=HI, output_config={"format": fmt}
        )


async def test_a_model_the_registry_does_not_know_is_served_with_its_facts(sim, client):
    with pytest.raises(anthropic.NotFoundError):
        await client.models.retrieve("claude-fable-5-2")
    sim.scenario = Scenario(
        models={
            "claude-fable-5-2": {
                "display_name": "Claude Fable 5.2",
                "max_input_tokens": 1_000_000,
                "max_tokens": 128_000,
                "thinking_types": ["adaptive"],
                "forced_tool": False,
                "released": "2026-11-09",
            }
        }
    )
    info = await client.models.retrieve("claude-fable-5-2")
    assert (info.display_name, info.line, info.max_tokens) == ("Claude Fable 5.2", "fable", 128_000)
    assert info.capabilities is not None
    assert not info.capabilities.thinking.types.disabled.supported
    assert (await client.models.list(limit=1)).data[0].id == "claude-fable-5-2"
    answer = await client.messages.create(model="claude-fable-5-2", max_tokens=100, messages=HI)
    assert answer.model == "claude-fable-5-2"
    with pytest.raises(anthropic.BadRequestError):
        await client.messages.create(**pack_params(make_blocks(1), model="claude-fable-5-2"))
    with pytest.raises(anthropic.BadRequestError):
        await client.messages.create(
            model="claude-fable-5-2", max_tokens=100, messages=HI, thinking={"type": "disabled"}
        )


async def test_a_model_based_on_another_takes_its_facts(sim, client):
    sim.scenario = Scenario(
        models={"claude-haiku-5-6": {"based_on": "claude-haiku-5-5", "released": "2026-11-20"}}
    )
    info = await client.models.retrieve("claude-haiku-5-6")
    base = get_model("claude-haiku-5-5")
    assert info.max_input_tokens == base.context_window
    assert info.capabilities is not None and info.capabilities.structured_outputs.supported
    await client.messages.create(**pack_params(make_blocks(1), model="claude-haiku-5-6"))
