"""A call whose max_tokens could run past the SDK's ten minutes streams (contract §8), and is
recorded, paid once and applied like any other call."""

from __future__ import annotations

import pytest

import blockbatch.send.sender
from blockbatch.core.prompt import needs_streaming
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc


async def test_a_long_call_streams_and_lands_like_any_other(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    streamed: list[int] = []

    def spy(max_tokens: int, model_limit: int | None = None) -> bool:
        decided = needs_streaming(max_tokens, model_limit)
        if decided:
            streamed.append(max_tokens)
        return decided

    monkeypatch.setattr(blockbatch.send.sender, "needs_streaming", spy)
    doc = await bbstack.bb.ingest_bytes(markdown_doc(4), name="long.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=300))
    # 12,000 output tokens expected a block, asked for twice over: 24,000, past the
    # 21,333 the SDK lets a call take without streaming.
    options = RunOptions(
        pack_size=2,
        estimated_output_per_block=12_000,
        output_budget=64_000,
        quality=QualityOptions(probe_rate=0),
    )
    run_id = await bbstack.bb.start_run(doc, schema_id, options)
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 4
    packs = await bbstack.pool.fetch(
        """select status, request_id, (request->>'max_tokens')::int as max_tokens,
                  output_tokens from llm_calls where run_id = $1 and purpose = 'pack'""",
        run_id,
    )
    assert len(packs) == 2 and all(p["max_tokens"] > 21_333 for p in packs)
    assert sorted(streamed) == sorted(p["max_tokens"] for p in packs)
    # Recorded like a plain answer: its request-id, its usage, once.
    assert all(
        p["status"] == "succeeded" and p["request_id"] and p["output_tokens"] > 0 for p in packs
    )
