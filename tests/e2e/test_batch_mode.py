"""Provider batch mode end to end: Message Batches on the simulator, real Postgres and Temporal."""

from __future__ import annotations

from typing import Any

import pytest

from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.registry import Usage, cost_usd, get_model
from blockbatch.core.run_types import RunOptions, RunProgress, RunResult
from blockbatch.runtime.claude import anthropic_client
from blockbatch.store import batches as batch_store
from tests.conftest import Stack
from tests.helpers import TEST_BATCH_POLLS, block_content, extract_schema, markdown_doc
from tests.waiting import until

DETERMINISTIC = ("word_count", "char_count", "first_40_chars", "block_type")


async def start(s: Stack, n_blocks: int, **options: Any) -> str:
    doc = await s.bb.ingest_bytes(markdown_doc(n_blocks), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(instruction_words=300))
    options.setdefault("batch", TEST_BATCH_POLLS)
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
    # Every batch request reads a warm cache here (the default, 0.95, is best effort).
    bbstack.sim.scenario(batch={"processing_delay_s": 0.5, "warm_cache_hit_rate": 1.0})
    doc = await bbstack.bb.ingest_bytes(markdown_doc(40), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=1500))
    model = get_model(RunOptions().model)
    hits_before = await bbstack.pool.fetchrow(
        "select reads, requests from batch_cache_hits where model = $1", model.id
    )
    async with bbstack.worker():
        batch_id = await bbstack.bb.start_run(
            doc, schema_id, RunOptions(pack_size=8, mode="batch", batch=TEST_BATCH_POLLS)
        )
        batch = await bbstack.bb.wait(batch_id)
        sync_id = await bbstack.bb.start_run(
            doc,
            schema_id,
            RunOptions(pack_size=8, reuse_answers=False, quality=QualityOptions(probe_rate=0)),
        )
        sync = await bbstack.bb.wait(sync_id)
    assert sync.status == batch.status == "completed"
    assert batch.blocks_ai_complete == 40
    # Sync mode adds one warm-up call that writes the prompt cache before the packs start;
    # batch mode sends one of its requests ahead instead, which writes it at batch prices.
    assert (batch.calls, sync.calls) == (5, 6)
    a = {r["block_uid"]: r["staging"] for r in await overlays(bbstack, sync_id)}
    b = {r["block_uid"]: r["staging"] for r in await overlays(bbstack, batch_id)}
    assert a.keys() == b.keys()
    for uid in a:
        for field in DETERMINISTIC:
            assert a[uid][field] == b[uid][field], (uid, field)

    # Two provider batches, recorded with their counts: the lead request alone (round 1),
    # then the four others (round 2); one ledger row per pack attempt.
    lead, rest = await provider_batches(bbstack, batch_id)
    assert (lead["round"], lead["status"], lead["succeeded"], lead["request_count"]) == (
        1,
        "ended",
        1,
        1,
    )
    assert (rest["round"], rest["status"], rest["succeeded"], rest["request_count"]) == (
        2,
        "ended",
        4,
        4,
    )
    assert rest["submitted_at"] is not None and rest["ended_at"] is not None
    calls = await bbstack.pool.fetch(
        """select c.*, r.pack_path as r_path from llm_calls c
           join batch_requests r using (call_id) where c.run_id = $1 order by call_id""",
        batch_id,
    )
    assert len(calls) == 5
    by_batch = {pb["provider_batch_id"] for pb in (lead, rest)}
    for c in calls:
        assert c["status"] == "succeeded" and c["provider_batch_id"] in by_batch
        assert c["custom_id"].startswith(f"p{c['pack_path']}_a1-")
        assert c["response"]["usage"]["service_tier"] == "batch"
        usage = Usage(
            input_tokens=c["input_tokens"],
            output_tokens=c["output_tokens"],
            cache_creation_input_tokens=c["cache_creation_input_tokens"],
            cache_read_input_tokens=c["cache_read_input_tokens"],
            cache_creation_1h_tokens=c["cache_creation_1h_tokens"],
        )
        assert float(c["cost_usd"]) == round(cost_usd(model, usage, batch=True), 8)
    # The system prompt is cached for an hour: written once by the lead request (at the
    # batch price: no sync pre-warm), read by every request of round 2.
    system = await bbstack.pool.fetchval(
        "select system from prompt_prefixes where sha256 = $1", calls[0]["prefix_sha256"]
    )
    assert system[-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert not await bbstack.pool.fetchval(
        "select count(*) from llm_calls where run_id = $1 and purpose = 'warm_up'", batch_id
    )
    first, *others = calls
    assert first["provider_batch_id"] == lead["provider_batch_id"]
    assert first["cache_creation_1h_tokens"] > 0 and not first["cache_read_input_tokens"]
    assert all(c["cache_read_input_tokens"] > 0 for c in others)
    assert not any(c["cache_creation_input_tokens"] for c in others)
    assert batch.cost_usd < sync.cost_usd
    # The model's measured batch hit rate counts the four requests sent on the warm
    # prefix, not the lead that wrote it.
    hits = await bbstack.pool.fetchrow(
        "select reads, requests from batch_cache_hits where model = $1", model.id
    )
    before = (hits_before["reads"], hits_before["requests"]) if hits_before else (0, 0)
    assert (hits["reads"] - before[0], hits["requests"] - before[1]) == (4, 4)
    rounds = await bbstack.pool.fetch(
        "select round, cache_plan, warm_at_submit from batch_rounds where run_id = $1 order by 1",
        batch_id,
    )
    assert [tuple(r) for r in rounds] == [(1, "lead", False), (2, "read", True)]
    # A batch request may have run any time after its batch was submitted: the prefix
    # counts as cached from then, not from when its result was collected.
    async with bbstack.pool.acquire() as conn:
        assert await batch_store.prefix_recently_cached(conn, batch_id, 45 * 60)
        await conn.execute(
            """update llm_calls set started_at = now() - interval '1 hour'
               where run_id = $1 and purpose = 'batch_request'""",
            batch_id,
        )
        assert not await batch_store.prefix_recently_cached(conn, batch_id, 45 * 60)
    await assert_paid_once(bbstack, batch_id)


async def test_a_lone_request_sends_no_cache_control_and_pays_no_write(bbstack: Stack) -> None:
    # A single request on a cold cache would write the prefix at the 1-hour price (twice
    # the input price) for no reader: it goes without cache_control and no pre-warm.
    bbstack.sim.scenario(batch={"processing_delay_s": 0.5})
    doc = await bbstack.bb.ingest_bytes(markdown_doc(6), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=1500))
    async with bbstack.worker():
        run_id = await bbstack.bb.start_run(
            doc, schema_id, RunOptions(pack_size=8, mode="batch", batch=TEST_BATCH_POLLS)
        )
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 6
    [call] = await bbstack.pool.fetch("select * from llm_calls where run_id = $1", run_id)
    assert call["purpose"] == "batch_request"
    assert call["cache_creation_input_tokens"] == call["cache_read_input_tokens"] == 0
    system = await bbstack.pool.fetchval(
        "select system from prompt_prefixes where sha256 = $1", call["prefix_sha256"]
    )
    assert not any("cache_control" in block for block in system)


async def test_truncated_and_skipped_results_are_halved_into_a_second_round(
    bbstack: Stack,
) -> None:
    bbstack.sim.scenario(
        batch={"processing_delay_s": 0.5}, seed=1, faults={"truncate": 0.4, "skip_block": 0.05}
    )
    run_id, result = await run_batch(bbstack, 60, pack_size=12, max_block_attempts=6)
    assert result.status == "completed"
    assert result.blocks_ai_complete == 60
    assert result.split_events > 0
    rows = await overlays(bbstack, run_id)
    assert_true_to_content(rows)
    batches = await provider_batches(bbstack, run_id)
    rounds = [b["round"] for b in batches]
    assert rounds == list(range(1, max(rounds) + 1)), "one provider batch per round"
    assert max(rounds) >= 2
    # Round 1 is the lead request, round 2 the other planned packs; the halves went into
    # later rounds under their own pack paths.
    requests = await bbstack.pool.fetch(
        "select round, pack_path, pack_attempt from batch_requests where run_id = $1", run_id
    )
    assert [r["pack_path"] for r in requests if r["round"] == 1] == ["0"]
    halves = [r for r in requests if "." in r["pack_path"]]
    assert halves and all(h["round"] >= 2 for h in halves)
    reasons = " ".join(
        r["reason"]
        for r in await bbstack.pool.fetch(
            "select reason from split_events where run_id = $1", run_id
        )
    )
    assert "max_tokens" in reasons
    # Splits do not consume attempts: only a block truncated alone is charged again.
    alone = {
        r["uid"]
        for r in await bbstack.pool.fetch(
            """select block_uids[1] as uid from batch_requests
           where run_id = $1 and cardinality(block_uids) = 1""",
            run_id,
        )
    }
    assert all(r["attempt_count"] == 1 for r in rows if r["block_uid"] not in alone)
    await assert_paid_once(bbstack, run_id)


async def test_errored_and_expired_requests_are_resubmitted_without_losing_blocks(
    bbstack: Stack,
) -> None:
    bbstack.sim.scenario(
        batch={"processing_delay_s": 0.3, "errored_rate": 0.3, "expired_rate": 0.2}, seed=5
    )
    run_id, result = await run_batch(bbstack, 60, pack_size=6)
    assert result.status == "completed"
    assert result.blocks_ai_complete == 60
    kinds = {
        r["error_type"]: r["n"]
        for r in await bbstack.pool.fetch(
            """select error_type, count(*) as n from llm_calls
           where run_id = $1 and status = 'failed' group by error_type""",
            run_id,
        )
    }
    assert kinds.get("api_error", 0) > 0 and kinds.get("expired", 0) > 0, kinds
    assert len(await provider_batches(bbstack, run_id)) >= 2
    # Resubmissions are new pack attempts of the same pack path, and cost no block attempt.
    resubmitted = await bbstack.pool.fetchval(
        "select count(*) from batch_requests where run_id = $1 and resubmits > 0", run_id
    )
    assert resubmitted > 0
    rows = await overlays(bbstack, run_id)
    assert all(r["attempt_count"] == 1 for r in rows)
    assert_true_to_content(rows)
    await assert_paid_once(bbstack, run_id)


async def test_round_larger_than_the_batch_limit_is_split_into_several_batches(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    import activities.batches.submit

    monkeypatch.setattr(activities.batches.submit, "_PAGE_REQUESTS", 2)  # read in small pages
    bbstack.sim.scenario(batch={"processing_delay_s": 0.2})
    options = TEST_BATCH_POLLS.model_copy(update={"max_requests_per_batch": 3})
    run_id, result = await run_batch(bbstack, 50, pack_size=5, batch=options)
    assert result.status == "completed" and result.blocks_ai_complete == 50
    batches = await provider_batches(bbstack, run_id)
    # The lead request alone, then the nine others in parts of three.
    assert [(b["round"], b["part"], b["request_count"]) for b in batches] == [
        (1, 0, 1),
        (2, 0, 3),
        (2, 1, 3),
        (2, 2, 3),
    ]
    assert len({b["provider_batch_id"] for b in batches}) == 4
    await assert_paid_once(bbstack, run_id)


async def wait_for_batch(s: Stack, run_id: str) -> dict[str, Any]:
    """The first provider batch of the run, once it has an id."""

    async def submitted() -> dict[str, Any] | None:
        row = await s.pool.fetchrow(
            """select * from provider_batches where run_id = $1
               and provider_batch_id is not null order by round, part limit 1""",
            run_id,
        )
        return None if row is None else dict(row)

    return await until(submitted, "a provider batch submitted", interval=0.1)


async def wait_for_phase(s: Stack, run_id: str, phase: str) -> RunProgress:
    """The run's progress once its batch round is in ``phase``."""

    async def in_phase() -> RunProgress | None:
        progress = await s.bb.progress(run_id)
        return progress if progress.batch is not None and progress.batch.phase == phase else None

    return await until(in_phase, f"the batch round in {phase!r}", interval=0.1)


async def test_cancel_while_processing_cancels_the_provider_batch(bbstack: Stack) -> None:
    bbstack.sim.scenario(batch={"processing_delay_s": 120})
    run_id = await start(bbstack, 30, pack_size=5)
    async with bbstack.worker():
        pb = await wait_for_batch(bbstack, run_id)
        progress = await wait_for_phase(bbstack, run_id, "processing")
        assert progress.batch is not None
        assert progress.batch.provider_batch_ids == [pb["provider_batch_id"]]
        assert progress.batch.requests == 1  # the lead request; five wait for round 2
        await bbstack.bb.cancel(run_id)
        result = await bbstack.bb.wait(run_id)
    assert result.status == "cancelled"
    assert result.blocks_cancelled == 30 and result.blocks_ai_complete == 0

    client = anthropic_client(bbstack.settings)
    batch = await client.messages.batches.retrieve(pb["provider_batch_id"])
    assert batch.processing_status in ("canceling", "ended")
    assert batch.cancel_initiated_at is not None
    if batch.processing_status == "ended":
        assert batch.request_counts.canceled == 1
    [row] = await provider_batches(bbstack, run_id)
    assert row["status"] == "ended" and row["canceled"] == 1
    assert row["cancel_requested_at"] is not None
    # Every submitted request is closed in the ledger; no new batch after the cancel (the
    # five requests waiting for round 2 are never sent).
    ledger = await bbstack.pool.fetch(
        "select purpose, status, error_type from llm_calls where run_id = $1", run_id
    )
    assert [(r["purpose"], r["status"], r["error_type"]) for r in ledger] == [
        ("batch_request", "abandoned", "canceled")
    ]
    assert len(await provider_batches(bbstack, run_id)) == 1
    rows = await overlays(bbstack, run_id)
    assert {r["status"] for r in rows} == {"cancelled"}
    await client.close()


async def test_worker_restart_while_waiting_resumes_polling_without_resubmitting(
    bbstack: Stack,
) -> None:
    bbstack.sim.scenario(batch={"processing_delay_s": 0.2}, seed=6, faults={"truncate": 0.3})
    run_id = await start(bbstack, 40, pack_size=8)
    client = anthropic_client(bbstack.settings)
    # No batch ends while the simulator holds answers: the worker stops with its first batch
    # still processing at the provider, however slow this machine.
    bbstack.sim.hold()
    try:
        async with bbstack.worker():
            pb = await wait_for_batch(bbstack, run_id)
            await wait_for_phase(bbstack, run_id, "processing")
        batch = await client.messages.batches.retrieve(pb["provider_batch_id"])
        assert batch.processing_status == "in_progress"
    finally:
        bbstack.sim.release()
    # No worker while the batch ends at the provider; the workflow waits on a durable timer.

    async def ended() -> bool:
        batch = await client.messages.batches.retrieve(pb["provider_batch_id"])
        return batch.processing_status == "ended"

    await until(ended, "the first batch ended at the provider", interval=0.1)
    await client.close()
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 40
    batches = await provider_batches(bbstack, run_id)
    assert [b["round"] for b in batches] == list(range(1, len(batches) + 1))
    assert all(b["submit_attempts"] == 1 for b in batches)
    client = anthropic_client(bbstack.settings)
    listed = [b async for b in client.messages.batches.list(limit=100)]
    await client.close()
    ours = {b["provider_batch_id"] for b in batches}
    assert ours <= {b.id for b in listed}
    assert len(listed) == len(ours), "the simulator holds no batch we did not record"
    await assert_paid_once(bbstack, run_id)


async def test_rounds_continue_as_new_with_their_state(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    import workflows.batch

    monkeypatch.setattr(workflows.batch, "HISTORY_EVENTS_PER_RUN", 1)
    bbstack.sim.scenario(batch={"processing_delay_s": 0.2}, seed=8, faults={"truncate": 0.5})
    run_id, result = await run_batch(bbstack, 40, pack_size=10, max_block_attempts=8)
    assert result.status == "completed" and result.blocks_ai_complete == 40
    rounds = await bbstack.pool.fetchval(
        "select max(round) from provider_batches where run_id = $1", run_id
    )
    assert rounds >= 2
    history = await bbstack.bb.handle(run_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id, "the last round ran in a continued run"
    assert started.input.payloads  # RunInput carried the round across
    await assert_paid_once(bbstack, run_id)


async def test_block_that_never_succeeds_fails_alone_after_its_attempts(bbstack: Stack) -> None:
    doc = await bbstack.bb.ingest_bytes(markdown_doc(20), name="doc.md", fmt="markdown")
    bad = f"{doc}:7"
    bbstack.sim.scenario(
        batch={"processing_delay_s": 0.1},
        always_skip_contents=[await block_content(bbstack.pool, bad)],
    )
    run_id, result = await run_batch(bbstack, 20, pack_size=10, max_block_attempts=2)
    assert result.status == "completed_with_failures"
    assert (result.blocks_ai_complete, result.blocks_failed) == (19, 1)
    row = await bbstack.pool.fetchrow(
        """select status, attempt_count, last_error, pack_path from overlays
           where run_id = $1 and block_uid = $2""",
        run_id,
        bad,
    )
    # Halving 10 -> 5 -> 3 -> 2 -> 1 cost no attempt; the lone block then had two.
    assert row["status"] == "failed" and row["attempt_count"] == 2
    assert "missing" in row["last_error"]
    attempts = await bbstack.pool.fetch(
        """select round, pack_attempt from batch_requests
           where run_id = $1 and pack_path = $2 order by round""",
        run_id,
        row["pack_path"],
    )
    assert [a["pack_attempt"] for a in attempts] == [1, 2]
    assert attempts[1]["round"] == attempts[0]["round"] + 1
    await assert_paid_once(bbstack, run_id)
