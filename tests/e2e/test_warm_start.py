"""No serial start: one warm-up call writes the prompt cache, then every pack starts at once
and reads it (before, pack 0 ran alone first, a whole pack's latency on every run)."""

from __future__ import annotations

from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc

#: This run is about the warm-up and the packs: no quality probe's calls among them.
NO_PROBE = QualityOptions(probe_rate=0)


async def test_a_warm_up_call_writes_the_cache_and_every_pack_reads_it(bbstack: Stack) -> None:
    bbstack.sim.scenario(speed_factor=1.0, latency={"ttft_ms": 400, "per_output_token_ms": 0})
    doc = await bbstack.bb.ingest_bytes(markdown_doc(16), name="w.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=1500))
    run_id = await bbstack.bb.start_run(doc, schema_id, RunOptions(pack_size=4, quality=NO_PROBE))
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 16
    calls = await bbstack.pool.fetch(
        """select purpose, status, block_uids, max_tokens, cache_creation_input_tokens as wrote,
                  cache_read_input_tokens as read, started_at, finished_at
           from (select *, (request->>'max_tokens')::int as max_tokens from llm_calls) c
           where run_id = $1 order by call_id""",
        run_id,
    )
    warm, packs = calls[0], calls[1:]
    # The default model takes a forced tool: the warm-up generates nothing (contract §5).
    assert (warm["purpose"], warm["status"], warm["max_tokens"]) == ("warm_up", "succeeded", 0)
    assert warm["block_uids"] == [] and warm["wrote"] > 0
    assert [c["purpose"] for c in packs] == ["pack"] * 4
    assert all(c["read"] > 0 and c["wrote"] == 0 for c in packs), packs  # all read it
    # Every pack was sent before the first one's answer came back: none waited for another.
    assert max(c["started_at"] for c in packs) < min(c["finished_at"] for c in packs)
    assert result.calls == 5  # the warm-up is a call, counted and paid like any other
