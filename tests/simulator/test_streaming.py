"""``stream: true`` (contract §8 "Long calls"): the events the SDK accumulates give the same
Message as the non-streaming answer, whatever the answer holds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import make_blocks, pack_params
from tests.simulator.test_answers import auto_params, json_params

BLOCKS = make_blocks(6)


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(
        scenario=Scenario(refuse_contents=[BLOCKS[5]["block_content"]])
    ) as server:
        yield server


def comparable(message: Any) -> dict[str, Any]:
    """The Message as JSON without what differs between any two answers (ids), and
    without the SDK's own parse fields."""
    data = message.model_dump(mode="json", exclude_none=False)
    data.pop("id")
    for block in data["content"]:
        block.pop("id", None)
        block.pop("parsed_output", None)
    data.pop("parsed_output", None)
    return data


REQUESTS = {
    "forced tool, no thinking": pack_params(BLOCKS[:5], model="claude-haiku-5-5"),
    "json after omitted thinking": json_params(BLOCKS[:5], "claude-sonnet-5-5"),
    "summarized thinking": json_params(
        BLOCKS[:5], "claude-sonnet-4-6", thinking={"type": "adaptive"}
    ),
    "auto tool": auto_params(BLOCKS[:5], "claude-sonnet-5-5", thinking={"type": "between_tools"}),
    "cut at max_tokens": json_params(BLOCKS[:5], "claude-opus-5-5", max_tokens=400),
    "refusal": pack_params(BLOCKS, model="claude-haiku-5-5"),
}


@pytest.mark.parametrize("name", list(REQUESTS))
async def test_streamed_answer_accumulates_to_the_non_streaming_message(client, name):
    params = REQUESTS[name]
    plain = await client.messages.create(**params)
    async with client.messages.stream(**params) as stream:
        kinds = [event.type async for event in stream]
        streamed = await stream.get_final_message()
    assert comparable(streamed) == comparable(plain)
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "message_delta" in kinds


async def test_stream_carries_request_id_and_event_stream_type(client):
    async with client.messages.with_streaming_response.create(
        **pack_params(BLOCKS[:2], model="claude-haiku-5-5"), stream=True
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["request-id"].startswith("req_")
        text = "".join([chunk async for chunk in response.iter_text()])
    assert text.startswith("event: message_start\n")
    assert "event: content_block_delta" in text and "input_json_delta" in text
