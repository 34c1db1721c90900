"""The run pipeline end to end: real Postgres, Temporal dev server and simulated Claude."""

from __future__ import annotations

import math
from typing import Any

import pytest

from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunInput, RunOptions, RunResult
from tests.conftest import Stack
from tests.helpers import block_content, extract_schema, loose_schema, markdown_doc
from tests.waiting import until

DETERMINISTIC = ("word_count", "char_count", "first_40_chars", "block_type")


async def run_doc(
    s: Stack, n_blocks: int, schema: dict[str, Any] | None = None, **options: Any
) -> tuple[str, RunResult]:
    doc = await s.bb.ingest_bytes(markdown_doc(n_blocks), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(schema or extract_schema())
    run_id = await s.bb.start_run(doc, schema_id, RunOptions(**options))
    async with s.worker():
        result = await s.bb.wait(run_id)
    return run_id, result


async def overlays(s: Stack, run_id: str) -> list[dict[str, Any]]:
    rows = await s.pool.fetch(
        """select o.block_uid, o.status, o.staging, o.attempt_count, o.last_error,
                  b.block_content, b.block_type
           from overlays o join blocks b using (block_uid)
           where run_id = $1 order by o.block_index""",
        run_id,
    )
    return [dict(r) for r in rows]


def assert_true_to_content(rows: list[dict[str, Any]]) -> None:
    """Each overlay's deterministic fields come from its own block (no bleed, no shift)."""
    for r in rows:
        if r["status"] != "ai_complete":
            continue
        content = r["block_content"]
        assert r["staging"]["word_count"] == len(content.split()), r["block_uid"]
        assert r["staging"]["first_40_chars"] == content[:40], r["block_uid"]


async def test_run_completes_every_block_with_few_calls_and_cache_reads(bbstack: Stack) -> None:
    # output_budget 2,048: packs bound by output, so that what the answers write matters.
    schema = extract_schema(instruction_words=1500)
    run_id, result = await run_doc(bbstack, 200, schema, output_budget=2048)
    assert result.status == "completed"
    assert result.blocks_total == 200
    assert result.blocks_ai_complete == 200
    assert result.calls <= 200 / 5, result
    rows = await overlays(bbstack, run_id)
    assert all(r["status"] == "ai_complete" for r in rows)
    assert_true_to_content(rows)
    calls = await bbstack.pool.fetch(
        """select cache_creation_input_tokens, cache_read_input_tokens from llm_calls
           where run_id = $1 and status = 'succeeded' order by call_id""",
        run_id,
    )
    assert calls[0]["cache_creation_input_tokens"] > 0
    assert all(c["cache_read_input_tokens"] > 0 for c in calls[1:])
    assert result.cache_read_input_tokens > 0 and result.cost_usd > 0

    # The quality probe, at its default (3%, at least 5): 6 of the 200 blocks asked again
    # alone once their pack was applied, reading the cached prompt; each single answer
    # compared with the packed one, which stays the overlay.
    samples = await bbstack.pool.fetch(
        """select q.status, q.agrees, q.pack_size, q.position, q.packed, q.single, o.staging,
                  c.purpose, cardinality(c.block_uids) as n, c.cache_read_input_tokens
           from quality_samples q
           join overlays o on o.run_id = q.run_id and o.block_uid = q.block_uid
           join llm_calls c on c.call_id = q.llm_call_id
           where q.run_id = $1""",
        run_id,
    )
    assert len(samples) == 6 and all(r["status"] == "compared" for r in samples), samples
    assert all(r["agrees"] and r["packed"] == r["staging"] == r["single"] for r in samples)
    assert all(
        (r["purpose"], r["n"]) == ("quality_probe", 1)
        and r["pack_size"] >= 2
        and 1 <= r["position"] <= r["pack_size"]
        and r["cache_read_input_tokens"] > 0
        for r in samples
    )
    q = result.quality
    assert q is not None and (q.sampled, q.agreement.agreeing, q.probe_calls) == (6, 6, 6)
    # 3% of the blocks, each a call of its own (a cached prompt, one answer): about 5% of
    # the run here (docs/benchmarks.md, 8b, measures it on the cost suites).
    assert 0 < q.probe_cost_usd < 0.1 * result.cost_usd
    assert q.text.startswith("agreement 100.0% on 6 sampled blocks")
    assert (await bbstack.bb.result(run_id)).quality == q

    # Packs that learn: the schema's first run sends a learning pack of 5 blocks first (no
    # warm-up call), then plans the rest from what it wrote, and says so.
    first = await bbstack.pool.fetch(
        """select purpose, cardinality(block_uids) as n, pack_path from llm_calls
           where run_id = $1 order by call_id limit 2""",
        run_id,
    )
    assert next((r["purpose"], r["n"], r["pack_path"]) for r in first) == ("pack", 5, "0")
    planned = await bbstack.pool.fetchrow(
        "select packs_before, packs_after, ratios from plan_changes where run_id = $1", run_id
    )
    assert planned is not None and planned["packs_after"] < planned["packs_before"], planned
    assert 0 < planned["ratios"]["overall"] < 1  # the schema's estimate leans high
    assert result.pack_count == planned["packs_after"]
    assert result.plan_changes and result.plan_changes[0].startswith(
        f"packs 1-{planned['packs_before'] - 1} re-planned as 1-{planned['packs_after'] - 1}"
    )
    assert (await bbstack.bb.result(run_id)).plan_changes == result.plan_changes
    # A later run of the same schema and model plans from what this one wrote at once: the
    # warm-up start, no learning pack, about as many packs for the same blocks.
    # (Reuse off: the same blocks again would take this run's answers, no pack at all.)
    again_id, again = await run_doc(bbstack, 200, schema, output_budget=2048, reuse_answers=False)
    purposes = [
        r["purpose"]
        for r in await bbstack.pool.fetch(
            "select purpose from llm_calls where run_id = $1 order by call_id", again_id
        )
    ]
    assert again.status == "completed" and purposes[0] == "warm_up"
    assert abs(again.pack_count - result.pack_count) <= 2 and again.plan_changes == []


async def test_no_batching_gives_same_values_one_call_per_block(bbstack: Stack) -> None:
    schema = extract_schema(instruction_words=300)
    # 10 blocks (40, then 20 before): enough for packs of several blocks (a learning pack
    # of 5, then the rest planned), so fewer calls than blocks, against one call per block.
    batched_id, batched = await run_doc(bbstack, 10, schema)
    # The same blocks again: reuse off, or the first run's answers would stand in.
    single_id, single = await run_doc(
        bbstack, 10, schema, batching_enabled=False, reuse_answers=False
    )
    assert single.status == batched.status == "completed"
    assert single.calls == 10 + 1  # and the warm-up call that writes the prompt cache
    assert batched.calls < 10
    assert len(await overlays(bbstack, batched_id)) == 10
    a = {r["block_uid"]: r["staging"] for r in await overlays(bbstack, batched_id)}
    b = {r["block_uid"]: r["staging"] for r in await overlays(bbstack, single_id)}
    assert a.keys() == b.keys()
    for uid in a:
        for field in DETERMINISTIC:
            assert a[uid][field] == b[uid][field], (uid, field)


async def _faulty_run(
    s: Stack, schema: dict[str, Any] | None = None
) -> tuple[str, RunResult, list[dict[str, Any]]]:
    # The simulator draws faults from each request's bytes and how often it came: keep the
    # bytes independent of timing. One pack at a time (the max_tokens a pack asks for
    # follows the answers that came before it), and no quality probe (its sample is seeded by
    # the random run id, and its one-block request is byte for byte a split pack's).
    run_id, result = await run_doc(
        s,
        60,
        schema or extract_schema(instruction_words=200),
        pack_size=20,
        max_block_attempts=6,
        max_concurrent_packs=1,
        quality=QualityOptions(probe_rate=0),
    )
    return run_id, result, await overlays(s, run_id)


async def _assert_exactly_once(s: Stack, run_id: str, result: RunResult) -> None:
    assert result.status == "completed"
    assert result.blocks_ai_complete + result.blocks_failed == result.blocks_total
    # Pay once: never two answered calls for the same pack attempt.
    dup = await s.pool.fetchval(
        """select count(*) from (select 1 from llm_calls where run_id = $1 and status = 'succeeded'
           group by pack_path, pack_attempt having count(*) > 1) d""",
        run_id,
    )
    assert dup == 0


async def test_truncated_output_is_halved_until_done(bbstack: Stack) -> None:
    bbstack.sim.scenario(faults={"truncate": 0.5}, seed=1)
    # Besides the fault (its dice roll on each request's bytes), a first guess of 10 output
    # tokens a block: packs of 20 ask for far less than they write and are cut off for real.
    run_id, result = await run_doc(
        bbstack,
        60,
        extract_schema(instruction_words=200),
        pack_size=20,
        max_block_attempts=6,
        estimated_output_per_block=10,
    )
    rows = await overlays(bbstack, run_id)
    await _assert_exactly_once(bbstack, run_id, result)
    assert result.split_events > 0
    assert all(r["status"] == "ai_complete" for r in rows)
    assert_true_to_content(rows)


async def test_skipped_duplicate_unknown_uids_end_with_every_block_once(bbstack: Stack) -> None:
    bbstack.sim.scenario(
        faults={"skip_block": 0.05, "duplicate_uid": 0.05, "unknown_uid": 0.05}, seed=2
    )
    run_id, result, rows = await _faulty_run(bbstack)
    await _assert_exactly_once(bbstack, run_id, result)
    assert result.split_events > 0
    assert result.blocks_ai_complete == 60
    assert_true_to_content(rows)
    reasons = await bbstack.pool.fetch("select reason from split_events where run_id = $1", run_id)
    text = " ".join(r["reason"] for r in reasons)
    assert "missing" in text or "duplicate" in text


async def test_malformed_tool_input_is_split_and_recovered(bbstack: Stack) -> None:
    bbstack.sim.scenario(faults={"malformed_tool_input": 0.4}, seed=6)
    run_id, result, rows = await _faulty_run(bbstack, loose_schema())
    await _assert_exactly_once(bbstack, run_id, result)
    assert result.split_events > 0
    assert result.blocks_ai_complete == 60
    assert_true_to_content(rows)


async def test_block_that_never_succeeds_fails_alone_with_reason(bbstack: Stack) -> None:
    doc = await bbstack.bb.ingest_bytes(markdown_doc(30), name="doc.md", fmt="markdown")
    bad = f"{doc}:7"
    bbstack.sim.scenario(always_skip_contents=[await block_content(bbstack.pool, bad)])
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=200))
    run_id = await bbstack.bb.start_run(
        doc, schema_id, RunOptions(pack_size=10, max_block_attempts=2)
    )
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed_with_failures"
    assert (result.blocks_ai_complete, result.blocks_failed) == (29, 1)
    row = await bbstack.pool.fetchrow(
        "select status, attempt_count, last_error from overlays where run_id = $1 and block_uid = $2",
        run_id,
        bad,
    )
    assert row["status"] == "failed"
    assert row["attempt_count"] == 2
    assert "missing" in row["last_error"]


async def test_cancel_mid_run_starts_no_call_after_signal(bbstack: Stack) -> None:
    doc = await bbstack.bb.ingest_bytes(markdown_doc(120), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=200))
    run_id = await bbstack.bb.start_run(
        doc, schema_id, RunOptions(pack_size=4, max_concurrent_packs=2)
    )
    async with bbstack.worker():

        async def twelve_done() -> bool:
            done = await bbstack.pool.fetchval(
                "select count(*) from overlays where run_id = $1 and status = 'ai_complete'", run_id
            )
            return bool(done >= 12)

        await until(twelve_done, "twelve blocks done", interval=0.1)
        # Answers held until the cancel has landed: the run cannot finish first.
        async with bbstack.sim.holding():
            await bbstack.bb.cancel(run_id)
        result = await bbstack.bb.wait(run_id)
    assert result.status == "cancelled"
    assert result.blocks_cancelled > 0
    assert result.blocks_ai_complete + result.blocks_cancelled == 120
    late = await bbstack.pool.fetchval(
        """select count(*) from llm_calls c join runs r using (run_id)
           where c.run_id = $1 and c.started_at > r.cancel_requested_at""",
        run_id,
    )
    assert late == 0
    pending = await bbstack.pool.fetchval(
        "select count(*) from overlays where run_id = $1 and status = 'pending'", run_id
    )
    assert pending == 0


async def test_rejected_api_key_fails_run_fast_without_retry_storm(bbstack: Stack) -> None:
    bbstack.sim.scenario(auth={"valid_keys": ["some-other-key"]})
    _, result = await run_doc(
        bbstack, 60, extract_schema(instruction_words=200), pack_size=10, max_concurrent_packs=3
    )
    assert result.status == "failed"
    assert "API key was rejected" in (result.error or "")
    assert "sim-test-key" not in (result.error or "")
    assert result.calls <= 3
    assert result.blocks_cancelled == 60


async def test_packs_in_flight_outlive_continue_as_new_on_the_dev_server(bbstack: Stack) -> None:
    # Each call takes a while, so packs are in flight whenever an execution is full
    # (2 packs a history): they carry over and report to the next execution.
    bbstack.sim.scenario(speed_factor=1.0, latency={"ttft_ms": 400, "per_output_token_ms": 0})
    doc = await bbstack.bb.ingest_bytes(markdown_doc(24), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema())
    run_id = await bbstack.bb.start_run(
        doc, schema_id, RunOptions(pack_size=2, max_concurrent_packs=4), packs_per_history=2
    )
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
        progress = await bbstack.bb.progress(run_id)  # a query: the worker answers it
    assert result.status == "completed" and result.blocks_ai_complete == 24
    carried = []
    history = await bbstack.bb.handle(run_id).fetch_history()
    run_ids = []
    while True:
        started = history.events[0].workflow_execution_started_event_attributes
        carried.append(started)
        if not started.continued_execution_run_id:
            break
        run_ids.append(started.continued_execution_run_id)
        history = await bbstack.bb.client.get_workflow_handle(
            f"run-{run_id}", run_id=started.continued_execution_run_id
        ).fetch_history()
    assert len(run_ids) >= 5  # 12 packs, 2 per history
    # Some execution started with packs still running from the one before.
    inputs = [
        await bbstack.bb.client.data_converter.decode(s.input.payloads, [RunInput]) for s in carried
    ]
    assert any(inp[0].running for inp in inputs)
    rows = await overlays(bbstack, run_id)
    assert_true_to_content(rows)
    calls = await bbstack.pool.fetchval(
        "select count(*) from llm_calls where run_id = $1 and purpose = 'pack'", run_id
    )
    assert calls == 12  # each pack called once, whichever execution it reported to
    assert (progress.packs_done, progress.blocks_done) == (12, 24)


async def test_max_tokens_follows_what_the_runs_answers_wrote(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    import activities.llm
    from blockbatch.core.planning import (
        LEARNING_PACK_BLOCKS,
        PACK_OUTPUT_OVERHEAD_TOKENS,
        learned_headroom,
    )
    from blockbatch.core.registry import get_model

    monkeypatch.setattr(activities.llm, "_OBSERVED_EVERY_S", 0.0)  # read the ledger each call
    # One pack at a time, so each call sees every answer before it.
    run_id, result = await run_doc(bbstack, 24, pack_size=4, max_concurrent_packs=1)
    assert result.status == "completed" and result.blocks_ai_complete == 24
    calls = await bbstack.pool.fetch(
        """select (request->>'max_tokens')::int as max_tokens, est_output_tokens as est,
                  output_tokens, stop_reason
           from llm_calls where run_id = $1 and purpose = 'pack' order by call_id""",
        run_id,
    )
    assert len(calls) == 6 and all(c["stop_reason"] == "tool_use" for c in calls)
    # The ledger's estimate is the planner's (old-tokenizer) shape; before any answer the
    # call asks for twice it in the run model's tokens (the answers' ratio carries that).
    scale = get_model(RunOptions().model).tokenizer_scale
    for i, call in enumerate(calls):
        # Before three answers or a learning pack's worth of answered blocks (here two
        # packs of four): twice the estimate.
        if i < 3 and 4 * i < LEARNING_PACK_BLOCKS:
            assert call["max_tokens"] == pytest.approx(
                max(
                    256,
                    2
                    * (
                        PACK_OUTPUT_OVERHEAD_TOKENS
                        + (call["est"] - PACK_OUTPUT_OVERHEAD_TOKENS) * scale
                    ),
                ),
                abs=8,
            )
            continue
        ratio = sum(c["output_tokens"] for c in calls[:i]) / sum(c["est"] for c in calls[:i])
        want = math.ceil(call["est"] * ratio * learned_headroom(4))
        assert call["max_tokens"] == min(8192, max(256, want)), (i, ratio)
    assert calls[0]["est"] > PACK_OUTPUT_OVERHEAD_TOKENS
