"""Every current model finishes a run through the answer channel it takes, with no request
the contract rejects (contract §1-§3; blockbatch/core/answer.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


@pytest.mark.parametrize(
    ("model", "channel"),
    [
        ("claude-haiku-5-5", "strict_tool"),
        ("claude-sonnet-5-5", "json"),
        ("claude-opus-5-5", "json"),
        ("claude-sonnet-4-6", "strict_tool"),
    ],
)
async def test_a_run_finishes_on_the_channel_its_model_takes(
    bbstack: Stack, model: str, channel: str
) -> None:
    doc = await bbstack.bb.ingest_bytes(markdown_doc(12), name="c.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=1500))
    run_id = await bbstack.bb.start_run(
        doc, schema_id, RunOptions(model=model, pack_size=4, quality=QualityOptions(probe_rate=0))
    )
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 12
    calls = await bbstack.pool.fetch(
        """select c.purpose, c.status, c.http_status, c.request, c.cache_read_input_tokens,
                  p.tools from llm_calls c join prompt_prefixes p on p.sha256 = c.prefix_sha256
           where c.run_id = $1 order by c.call_id""",
        run_id,
    )
    assert all(c["status"] == "succeeded" for c in calls), [
        (c["purpose"], c["http_status"]) for c in calls
    ]
    packs = [c for c in calls if c["purpose"] == "pack"]
    request, tools = _json(packs[0]["request"]), _json(packs[0]["tools"])
    if channel == "json":
        assert tools == [] and "format" in request["output_config"]
    else:
        assert tools[0]["strict"] is True and request["tool_choice"]["type"] == "tool"
    assert "temperature" not in json.dumps(request)
    # The warm-up wrote the prefix the packs read.
    assert all(c["cache_read_input_tokens"] > 0 for c in packs)


async def test_a_batch_run_on_the_json_channel_keeps_the_format_in_each_request(
    bbstack: Stack,
) -> None:
    bbstack.sim.scenario(batch={"processing_delay_s": 0.1})
    doc = await bbstack.bb.ingest_bytes(markdown_doc(8), name="b.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=600))
    run_id = await bbstack.bb.start_run(
        doc, schema_id, RunOptions(model="claude-sonnet-5-5", mode="batch", pack_size=4)
    )
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 8
    rows = await bbstack.pool.fetch(
        "select request from llm_calls where run_id = $1 and purpose = 'batch_request'", run_id
    )
    assert rows and all("format" in _json(r["request"])["output_config"] for r in rows)
