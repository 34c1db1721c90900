"""Provider batch mode end to end: Message Batches on the simulator, real Postgres and Temporal."""

from __future__ import annotations

import asyncio
from typing import Any

from blockbatch.models import BatchOptions, RunOptions, RunResult
from blockbatch.registry import Usage, cost_usd, get_model
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc

DETERMINISTIC = ("word_count", "char_count", "first_40_chars", "block_type")
#: Fast polling for tests; real runs start at 5 s and back off to 5 minutes.
FAST = BatchOptions(poll_initial_s=0.2, poll_max_s=1.0)


async def start(s: Stack, n_blocks: int, **options: Any) -> str:
    doc = await s.bb.ingest_bytes(markdown_doc(n_blocks), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(instruction_words=300))
    options.setdefault("batch", FAST)
    return await s.bb.start_run(doc, schema_id, RunOptions(mode="batch", **options))


async def run_batch(s: Stack, n_blocks: int, **options: Any) -> tuple[str, RunResult]:
    run_id = await start(s, n_blocks, **options)
    async with s.worker():
        result = await s.bb.wait(run_id)
    return run_id, result


async def overlays(s: Stack, run_id: str) -> list[dict[str, Any]]:
    rows = await s.pool.fetch(
        """select o.block_uid, o.status, o.staging, o.attempt_count, o.last_error,
                  b.block_content
           from overlays o join blocks b using (block_uid)
           where run_id = $1 order by o.block_index""",
        run_id,
    )
    return [dict(r) for r in rows]


async def provider_batches(s: Stack, run_id: str) -> list[dict[str, Any]]:
    rows = await s.pool.fetch(
        "select * from provider_batches where run_id = $1 order by round, part", run_id
    )
    return [dict(r) for r in rows]


def assert_true_to_content(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        if r["status"] == "ai_complete":
            assert r["staging"]["word_count"] == len(r["block_content"].split()), r["block_uid"]
            assert r["staging"]["first_40_chars"] == r["block_content"][:40], r["block_uid"]


async def assert_paid_once(s: Stack, run_id: str) -> None:
    dup = await s.pool.fetchval(
        """select count(*) from (select 1 from llm_calls where run_id = $1
           and status = 'succeeded' group by pack_path, pack_attempt having count(*) > 1) d""",
        run_id,
    )
    assert dup == 0
    started = await s.pool.fetchval(
        "select count(*) from llm_calls where run_id = $1 and status = 'started'", run_id
    )
    assert started == 0, "every submitted request has its result in the ledger"


async def test_batch_mode_gives_the_same_overlays_as_sync_at_batch_prices(bbstack: Stack) -> None:
    bbstack.sim.scenario(batch={"processing_delay_s": 0.5})
    doc = await bbstack.bb.ingest_bytes(markdown_doc(40), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=1500))
    async with bbstack.worker():
        batch_id = await bbstack.bb.start_run(
            doc, schema_id, RunOptions(pack_size=8, mode="batch", batch=FAST)
        )
        batch = await bbstack.bb.wait(batch_id)
        sync_id = await bbstack.bb.start_run(doc, schema_id, RunOptions(pack_size=8))
        sync = await bbstack.bb.wait(sync_id)
    assert sync.status == batch.status == "completed"
    assert batch.blocks_ai_complete == 40
    assert batch.calls == sync.calls == 5
    a = {r["block_uid"]: r["staging"] for r in await overlays(bbstack, sync_id)}
    b = {r["block_uid"]: r["staging"] for r in await overlays(bbstack, batch_id)}
    assert a.keys() == b.keys()
    for uid in a:
        for field in DETERMINISTIC:
            assert a[uid][field] == b[uid][field], (uid, field)

    # One provider batch, recorded with its counts; one ledger row per pack attempt.
    [pb] = await provider_batches(bbstack, batch_id)
    assert (pb["round"], pb["status"], pb["succeeded"], pb["request_count"]) == (1, "ended", 5, 5)
    assert pb["submitted_at"] is not None and pb["ended_at"] is not None
    calls = await bbstack.pool.fetch(
        """select c.*, r.pack_path as r_path from llm_calls c
           join batch_requests r using (call_id) where c.run_id = $1 order by call_id""",
        batch_id,
    )
    assert len(calls) == 5
    model = get_model(RunOptions().model)
    for c in calls:
        assert c["status"] == "succeeded" and c["provider_batch_id"] == pb["provider_batch_id"]
        assert c["custom_id"].startswith(f"p{c['pack_path']}_a1-")
        assert c["response"]["usage"]["service_tier"] == "batch"
        usage = Usage(input_tokens=c["input_tokens"], output_tokens=c["output_tokens"],
                      cache_creation_input_tokens=c["cache_creation_input_tokens"],
                      cache_read_input_tokens=c["cache_read_input_tokens"],
                      cache_creation_1h_tokens=c["cache_creation_1h_tokens"])
        assert float(c["cost_usd"]) == round(cost_usd(model, usage, batch=True), 8)
    # The system prompt is cached for an hour: written once, read by the other packs.
    system = await bbstack.pool.fetchval(
        "select system from prompt_prefixes where sha256 = $1", calls[0]["prefix_sha256"]
    )
    assert system[-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert calls[0]["cache_creation_1h_tokens"] > 0
    assert all(c["cache_read_input_tokens"] > 0 for c in calls[1:])
    assert batch.cost_usd < sync.cost_usd
    await assert_paid_once(bbstack, batch_id)
