"""Retry only what failed: ``starter.py retry RUN_ID`` and ``Blockbatch.retry``, end to end.

Runs end with failures because the simulator refuses any request holding a marker string
(``reject_marker``), returns a wrongly typed field for chosen blocks
(``always_malformed_contents``) or rejects the API key; the scenario is then fixed and the run
retried in place. What the retry sent is read from the ledger (rows after the retry
began); what it changed, from the overlay change log (``overlay_changes``, written by a
trigger, so nothing can change an overlay unseen).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import asyncpg
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.db import DbActivities
from blockbatch.api import (
    BlockNotRetryable,
    NotFound,
    NothingToRetry,
    RetryStarted,
    RetryUnderWay,
    RunStillActive,
    UnknownBlock,
    UnknownReason,
)
from blockbatch.core.ingest import parse_document
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.retry_types import PlanRetryInput, RetryRequest
from blockbatch.core.run_types import FinishRunInput, PlanRunInput, RunOptions
from blockbatch.core.schema import load_schema
from blockbatch.core.workflow_names import NOTHING_TO_RETRY, RUN_NOT_FINISHED
from blockbatch.store import overlays, repo, retries, runs
from tests.conftest import Stack
from tests.helpers import (
    REJECT_MARKER,
    TEST_BATCH_POLLS,
    block_content,
    extract_schema,
    loose_schema,
    marked_document,
)
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

BATCH = TEST_BATCH_POLLS


async def start(
    s: Stack, n: int, marked: set[int], schema: dict[str, Any] | None = None, **options: Any
) -> tuple[str, list[str]]:
    """Start a run of ``n`` paragraphs (``marked`` ones carry the reject marker)."""
    doc = await s.bb.ingest_bytes(marked_document(n, marked), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(schema or extract_schema(instruction_words=200))
    # No quality probe: a retry's calls are checked to hold only the blocks it retried.
    run_id = await s.bb.start_run(
        doc,
        schema_id,
        RunOptions(**{"pack_size": 4, "quality": QualityOptions(probe_rate=0), **options}),
    )
    return run_id, [f"{doc}:{i}" for i in range(n)]


async def finished_run(s: Stack, n: int, marked: set[int], **options: Any) -> tuple[str, list[str]]:
    """A run that has ended under the current scenario."""
    run_id, uids = await start(s, n, marked, **options)
    async with s.worker():
        await s.bb.wait(run_id)
    return run_id, uids


async def failed_run(
    s: Stack, n: int = 8, marked: frozenset[int] = frozenset({2, 5}), **options: Any
) -> tuple[str, list[str]]:
    """A run ``completed_with_failures``: the ``marked`` blocks failed ``request_rejected``."""
    s.sim.scenario(reject_marker=REJECT_MARKER, batch={"processing_delay_s": 0.2})
    run_id, uids = await finished_run(s, n, set(marked), **options)
    assert await states(s.pool, run_id) == {
        u: ("failed", "request_rejected") if i in marked else ("ai_complete", None)
        for i, u in enumerate(uids)
    }
    assert await runs_status(s.pool, run_id) == "completed_with_failures"
    return run_id, uids


async def states(pool: asyncpg.Pool, run_id: str) -> dict[str, tuple[str, str | None]]:
    rows = await pool.fetch(
        "select block_uid, status, reason_code from overlays where run_id = $1", run_id
    )
    return {r["block_uid"]: (r["status"], r["reason_code"]) for r in rows}


async def runs_status(pool: asyncpg.Pool, run_id: str) -> str:
    return str(await pool.fetchval("select status from runs where run_id = $1", run_id))


async def snapshot(pool: asyncpg.Pool) -> dict[str, Any]:
    """Everything a retry could change, in the whole (per-test) database."""
    return {
        table: [dict(r) for r in await pool.fetch(f"select * from {table} order by {key}")]
        for table, key in (
            ("runs", "run_id"),
            ("overlays", "run_id, block_uid"),
            ("overlay_changes", "id"),
            ("run_retries", "run_id, retry"),
            ("llm_calls", "call_id"),
            ("batch_requests", "run_id, custom_id"),
            ("provider_batches", "run_id, round, part"),
        )
    }


async def overlay_rows(pool: asyncpg.Pool, run_id: str, uids: list[str]) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in await pool.fetch(
            "select * from overlays where run_id = $1 and block_uid = any($2::text[]) "
            "order by block_uid",
            run_id,
            uids,
        )
    ]


async def last_call(pool: asyncpg.Pool, run_id: str) -> int:
    return int(
        await pool.fetchval(
            "select coalesce(max(call_id), 0) from llm_calls where run_id = $1", run_id
        )
    )


async def calls_after(pool: asyncpg.Pool, run_id: str, call_id: int) -> list[asyncpg.Record]:
    """Ledger rows written after ``call_id`` (the retry's)."""
    return await pool.fetch(
        """select call_id, pack_path, block_uids, status, cost_usd::float8 as cost, purpose
           from llm_calls where run_id = $1 and call_id > $2 order by call_id""",
        run_id,
        call_id,
    )


def answered_blocks(calls: list[asyncpg.Record]) -> list[str]:
    return sorted(u for c in calls if c["status"] == "succeeded" for u in c["block_uids"])


async def latest_run_id(s: Stack, run_id: str) -> str:
    return (await s.bb.handle(run_id).describe()).run_id


# --------------------------------------------------------------------------- the main path


async def test_retry_sends_only_the_failed_blocks_and_leaves_the_successes_unchanged(
    bbstack: Stack, cli: Cli
) -> None:
    pool = bbstack.pool
    run_id, uids = await failed_run(bbstack)
    failed = [uids[2], uids[5]]
    succeeded = [u for u in uids if u not in failed]
    before = dict(await pool.fetchrow("select * from runs where run_id = $1", run_id))
    before_ok = await overlay_rows(pool, run_id, succeeded)
    first_execution = await latest_run_id(bbstack, run_id)
    call_mark = await last_call(pool, run_id)

    bbstack.sim.scenario()  # the endpoint no longer refuses the marked blocks
    async with bbstack.worker():
        out = await cli("retry", run_id)
    assert out.code == 0, out.out + out.err
    assert f"started retry 1 of run {run_id}: 2 failed blocks (2 request_rejected) of 8" in out.out
    assert f"run {run_id}: completed" in out.out
    assert "8 ok · 0 failed · 0 cancelled · 8 total" in out.out
    assert "retries      retried 1×: 2 blocks (request_rejected) → completed in" in out.out

    (retry,) = await bbstack.bb.retries(run_id)
    assert (retry.retry, retry.block_count, retry.reasons) == (1, 2, {"request_rejected": 2})
    assert (retry.previous_status, retry.final_status) == ("completed_with_failures", "completed")
    assert retry.finished_at is not None and retry.first_pack == before["pack_count"]

    # Only the failed blocks were sent again, each answered once, in new packs.
    new_calls = await calls_after(pool, run_id, call_mark)
    assert {u for c in new_calls for u in c["block_uids"]} == set(failed)
    assert answered_blocks(new_calls) == sorted(failed)
    assert all(int(c["pack_path"].split(".")[0]) >= retry.first_pack for c in new_calls)
    started_since = await pool.fetch(
        "select block_uids from llm_calls where run_id = $1 and started_at >= $2",
        run_id,
        retry.started_at,
    )
    assert {u for r in started_since for u in r["block_uids"]} == set(failed)

    # The change log: the successes did not change at all; the failed blocks went back to
    # pending and then to done.
    changes = await retries.overlay_changes(pool, run_id, since=retry.started_at)
    assert {c.block_uid for c in changes} == set(failed)
    for uid in failed:
        assert [(c.old_status, c.new_status) for c in changes if c.block_uid == uid] == [
            ("failed", "pending"),
            ("pending", "ai_complete"),
        ]
    assert await overlay_rows(pool, run_id, succeeded) == before_ok

    # The run's counters, ledger and cost include both executions.
    after = await pool.fetchrow("select * from runs where run_id = $1", run_id)
    new_answers = [c for c in new_calls if c["status"] != "started"]
    assert (after["status"], after["error"]) == ("completed", None)
    assert (after["blocks_ai_complete"], after["blocks_failed"]) == (8, 0)
    assert after["calls"] == before["calls"] + len(new_answers)
    assert float(after["cost_usd"]) == pytest.approx(
        float(before["cost_usd"]) + sum(c["cost"] for c in new_calls), abs=1e-6
    )
    assert float(after["cost_usd"]) > float(before["cost_usd"])
    assert after["pack_count"] == retry.pack_count > before["pack_count"]
    assert after["finished_at"] > before["finished_at"]

    # Same workflow id, a new execution; the first one is still there to look at.
    assert retry.workflow_run_id == await latest_run_id(bbstack, run_id) != first_execution
    first = await bbstack.client.get_workflow_handle(
        f"run-{run_id}", run_id=first_execution
    ).describe()
    assert first.status == WorkflowExecutionStatus.COMPLETED
    latest = await bbstack.bb.handle(run_id).describe()
    assert (await latest.static_summary() or "").startswith(
        f"run {run_id}: retry 1 of 2 blocks (2 request_rejected)"
    )
    ours = [
        {
            p.key.name: p.value
            for p in d.typed_search_attributes.search_attributes
            if p.key.name.startswith("Blockbatch")
        }
        for d in (first, latest)
    ]
    assert ours[0] == ours[1] and ours[0]["BlockbatchRunId"] == run_id
    history = await bbstack.bb.handle(run_id).fetch_history()
    activities = {
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    assert "plan_retry" in activities and "plan_run" not in activities

    # status, status --json and watch show the retry.
    status = await cli("status", run_id)
    assert status.code == 0 and "completed" in status.out
    assert "retries      retried 1×: 2 blocks (request_rejected) → completed" in status.out
    status_json = (await cli("status", run_id, "--json")).json()
    assert [r["block_count"] for r in status_json["retries"]] == [2]
    watched = await cli("watch", run_id, "--json")
    assert watched.code == 0
    assert watched.json()["status"] == "completed" and len(watched.json()["retries"]) == 1


async def test_retry_by_reason_then_by_block_takes_only_those(bbstack: Stack, cli: Cli) -> None:
    pool = bbstack.pool
    doc = await bbstack.bb.ingest_bytes(marked_document(8, {5}), name="doc.md", fmt="markdown")
    corrupt, rejected = f"{doc}:1", f"{doc}:5"
    bbstack.sim.scenario(
        reject_marker=REJECT_MARKER, always_malformed_contents=[await block_content(pool, corrupt)]
    )
    run_id, _ = await finished_run(bbstack, 8, {5}, schema=loose_schema())
    found = await states(pool, run_id)
    assert (found[corrupt], found[rejected]) == (
        ("failed", "invalid_value"),
        ("failed", "request_rejected"),
    )

    # --reason: the invalid value is retried (fixed now); the rejected block is left alone.
    bbstack.sim.scenario(reject_marker=REJECT_MARKER)
    mark, rejected_before = (
        await last_call(pool, run_id),
        await overlay_rows(pool, run_id, [rejected]),
    )
    async with bbstack.worker():
        out = await cli("retry", run_id, "--reason", "invalid_value")
    assert out.code == 5, out.out + out.err  # done, with the rejected block still failed
    assert "1 failed block (1 invalid_value)" in out.out
    assert answered_blocks(await calls_after(pool, run_id, mark)) == [corrupt]
    assert {u for c in await calls_after(pool, run_id, mark) for u in c["block_uids"]} == {corrupt}
    assert await overlay_rows(pool, run_id, [rejected]) == rejected_before
    (first,) = await bbstack.bb.retries(run_id)
    assert not await retries.overlay_changes(
        pool, run_id, since=first.started_at, block_uids=[rejected]
    )
    assert (await states(pool, run_id))[corrupt] == ("ai_complete", None)

    # --block (by index, as review and confirm take it): just that block.
    bbstack.sim.scenario()
    mark = await last_call(pool, run_id)
    async with bbstack.worker():
        out = await cli("retry", run_id, "--block", "5")
    assert out.code == 0, out.out + out.err
    assert answered_blocks(await calls_after(pool, run_id, mark)) == [rejected]
    assert await runs_status(pool, run_id) == "completed"
    assert "retried 2×: 1 block (invalid_value) → completed_with_failures" in out.out
    second = (await bbstack.bb.retries(run_id))[1]
    assert second.selection["blocks"] == [rejected] and second.first_pack == first.pack_count
    changed = {
        c.block_uid for c in await retries.overlay_changes(pool, run_id, since=second.started_at)
    }
    assert changed == {rejected}


async def test_cancelled_blocks_are_retried_only_when_asked(bbstack: Stack, cli: Cli) -> None:
    pool = bbstack.pool
    bbstack.sim.scenario(auth={"valid_keys": ["some-other-key"]})
    run_id, _ = await finished_run(bbstack, 4, set(), pack_size=2, max_concurrent_packs=1)
    assert await runs_status(pool, run_id) == "failed"
    assert set((await states(pool, run_id)).values()) == {("cancelled", "key_rejected")}
    bbstack.sim.scenario()  # the key is accepted again

    before = await snapshot(pool)
    refused = await cli("retry", run_id)
    assert refused.code == 7 and refused.err.count("\n") == 1, refused.err
    assert (
        f"run {run_id} has no failed blocks (4 cancelled: 4 key_rejected); nothing to "
        "retry (cancelled blocks are retried only when asked: --cancelled)"
    ) in refused.err
    assert await snapshot(pool) == before

    async with bbstack.worker():
        out = await cli("retry", run_id, "--cancelled")
    assert out.code == 0, out.out + out.err
    assert f"started retry 1 of run {run_id}: 4 failed or cancelled blocks" in out.out
    assert set((await states(pool, run_id)).values()) == {("ai_complete", None)}
    (retry,) = await bbstack.bb.retries(run_id)
    assert (retry.previous_status, retry.reasons, retry.final_status) == (
        "failed",
        {"key_rejected": 4},
        "completed",
    )
    assert retry.previous_error and "API key" in retry.previous_error


# --------------------------------------------------------------------------- refused


async def test_bad_retries_are_refused_with_their_exit_codes_and_change_nothing(
    bbstack: Stack, cli: Cli
) -> None:
    pool = bbstack.pool
    run_id, uids = await failed_run(bbstack, 8, frozenset({5}))
    bbstack.sim.scenario()
    done_id, _ = await finished_run(bbstack, 4, set())
    active_id, _ = await start(bbstack, 4, set())  # no worker: it stays 'created'
    try:
        executions = {r: await latest_run_id(bbstack, r) for r in (run_id, done_id)}
        before = await snapshot(pool)
        cases = [
            (["nope"], 3, "no run 'nope'"),
            (
                [run_id, "--reason", "bogus"],
                2,
                "unknown reason code bogus; the codes are: missing_from_answer, invalid_value",
            ),
            ([run_id, "--block", "doc-x:99"], 3, f"run {run_id} has no block doc-x:99"),
            (
                [run_id, "--block", "5", "0"],
                8,
                f"only failed blocks can be retried, not {uids[0]} (ai_complete)",
            ),
            (
                [run_id, "--reason", "truncated"],
                7,
                (
                    f"run {run_id} has no failed blocks with reason truncated (7 done, 1 failed: "
                    "1 request_rejected); nothing to retry"
                ),
            ),
            ([done_id], 7, f"run {done_id} has no failed blocks (4 done); nothing to retry"),
            (
                [active_id],
                6,
                (f"run {active_id} is still created: only a finished run can be retried"),
            ),
        ]
        for args, code, message in cases:
            out = await cli("retry", *args)
            assert (out.code, out.err.count("\n")) == (code, 1), (args, out.out, out.err)
            assert message in out.err, (args, out.err)
            assert "Traceback" not in out.err
        as_json = await cli("retry", done_id, "--json")
        assert as_json.code == 7 and as_json.json()["exit_code"] == 7

        # The API raises the same refusals as types.
        api_cases: list[tuple[type[Exception], dict[str, Any], str]] = [
            (NotFound, {}, "nope"),
            (UnknownReason, {"reasons": ["bogus"]}, run_id),
            (UnknownBlock, {"blocks": ["doc-x:99"]}, run_id),
            (BlockNotRetryable, {"blocks": [uids[0]]}, run_id),
            (BlockNotRetryable, {"blocks": [uids[5]], "reasons": ["truncated"]}, run_id),
            (NothingToRetry, {}, done_id),
            (RunStillActive, {}, active_id),
        ]
        for kind, kwargs, target in api_cases:
            with pytest.raises(kind):
                await bbstack.bb.retry(target, **kwargs)
        assert await snapshot(pool) == before
        # No execution was started for any of them.
        assert {r: await latest_run_id(bbstack, r) for r in executions} == executions
    finally:
        await bbstack.bb.handle(active_id).terminate("test over")


async def test_two_retries_at_once_one_runs_the_other_is_refused(bbstack: Stack, cli: Cli) -> None:
    pool = bbstack.pool
    run_id, uids = await failed_run(bbstack)
    failed = [uids[2], uids[5]]
    # A model that answers (the failed run's rejections gone), whose answers the simulator
    # holds back until the CLI has asked too: the retry is still running while the others
    # ask. (Slow answers were not enough: a loaded CI machine started the CLI after them.)
    bbstack.sim.scenario()
    mark = await last_call(pool, run_id)
    bbstack.sim.call("POST", "/_sim/hold")

    async with bbstack.worker():
        try:
            outcomes = await asyncio.gather(
                bbstack.bb.retry(run_id), bbstack.bb.retry(run_id), return_exceptions=True
            )
            started = [o for o in outcomes if isinstance(o, RetryStarted)]
            refused = [o for o in outcomes if isinstance(o, RetryUnderWay)]
            assert (len(started), len(refused)) == (1, 1), outcomes
            # The refusal is the running retry's answer to the ``retry`` Update.
            assert f"a retry of run {run_id} is already under way" in str(refused[0])
            # The retry returned once claimed: the run reads running again.
            assert await runs_status(pool, run_id) == "running"
            again = await cli("retry", run_id, "--no-wait")
            assert again.code == 6 and again.err.count("\n") == 1, again.err
            assert f"run {run_id}" in again.err
        finally:
            bbstack.sim.call("POST", "/_sim/release")
        watch = await cli("watch", run_id, "--json")
    assert watch.code == 0, watch.out + watch.err
    assert json.loads(watch.out)["status"] == "completed"

    (retry,) = await bbstack.bb.retries(run_id)
    assert retry.workflow_run_id == started[0].workflow_run_id
    new_calls = await calls_after(pool, run_id, mark)
    assert answered_blocks(new_calls) == sorted(failed)  # each block answered exactly once
    assert {u for c in new_calls for u in c["block_uids"]} == set(failed)


async def test_a_retry_that_loses_the_race_at_claim_time_changes_nothing(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked, then the run changed (another retry finished first): the new execution's
    # plan_retry refuses, leaves everything as it was, and the caller gets the refusal
    # from the ``retry`` Update.
    run_id, _ = await failed_run(bbstack, 4, frozenset({1}))
    bbstack.sim.scenario()
    stale = await bbstack.bb.check_retry(run_id)
    async with bbstack.worker():
        await bbstack.bb.retry(run_id)
        await bbstack.bb.wait(run_id)
        assert await runs_status(bbstack.pool, run_id) == "completed"
        before = await snapshot(bbstack.pool)

        async def checked_before(*_: Any, **__: Any) -> Any:
            return stale

        monkeypatch.setattr(bbstack.bb, "check_retry", checked_before)
        with pytest.raises(NothingToRetry) as refusal:
            await bbstack.bb.retry(run_id)
    assert f"run {run_id} has no failed blocks left to retry (4 done)" in str(refusal.value)
    assert f"of run {run_id} was refused: " in str(refusal.value)
    assert await snapshot(bbstack.pool) == before


# --------------------------------------------------------------------------- plan_retry


async def _planned_run(pool: asyncpg.Pool, failed: set[int], n: int = 8) -> tuple[str, list[str]]:
    """A finished run in Postgres alone: planned, ``failed`` blocks failed, the rest done."""
    text = marked_document(n, set())
    async with pool.acquire() as conn:
        doc = await repo.save_document(
            conn, "doc.md", "markdown", text, parse_document(text, "markdown")
        )
        schema_id = await repo.save_schema(conn, load_schema(extract_schema(200)))
        run_id = await repo.create_run(conn, doc, schema_id, RunOptions(pack_size=3))
    await ActivityEnvironment().run(DbActivities(pool).plan_run, PlanRunInput(run_id=run_id))
    uids = [f"{doc}:{i}" for i in range(n)]
    bad = [uids[i] for i in sorted(failed)]
    async with pool.acquire() as conn:
        await overlays.fail_pending(
            conn, run_id, "refused", "0", reason_code="request_rejected", block_uids=bad
        )
        await conn.execute(
            """update overlays set status = 'ai_complete', staging = '{}'
                              where run_id = $1 and status = 'pending'""",
            run_id,
        )
        await runs.close_run(conn, run_id, "completed", None)
    return run_id, uids


def as_claim(workflow_run_id: str) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_run_id=workflow_run_id)
    return env


async def test_plan_retry_returns_the_same_plan_to_its_claim_and_refuses_another(
    pool: asyncpg.Pool,
) -> None:
    run_id, uids = await _planned_run(pool, failed={1, 4, 6})
    acts = DbActivities(pool)
    pack_count = await pool.fetchval("select pack_count from runs where run_id = $1", run_id)
    inp = PlanRetryInput(run_id=run_id, retry=RetryRequest())

    plan = await as_claim("wr-1").run(acts.plan_retry, inp)
    assert (plan.retry, plan.blocks, plan.first_pack, plan.block_count) == (1, 3, pack_count, 8)
    assert plan.pack_count > plan.first_pack and plan.mode == "sync"
    assert (plan.totals.blocks_done, plan.totals.blocks_failed) == (5, 0)
    rows = {
        r["block_uid"]: r
        for r in await pool.fetch("select * from overlays where run_id = $1", run_id)
    }
    for i in (1, 4, 6):
        row = rows[uids[i]]
        assert (row["status"], row["attempt_count"], row["reason_code"], row["last_error"]) == (
            "pending",
            0,
            None,
            None,
        )
        assert plan.first_pack <= row["pack_index"] < plan.pack_count
    run = await pool.fetchrow("select * from runs where run_id = $1", run_id)
    assert (run["status"], run["pack_count"], run["finished_at"]) == (
        "running",
        plan.pack_count,
        None,
    )

    # A worker crashed after the commit: the retried activity returns the same plan and
    # changes nothing.
    after_first = await snapshot(pool)
    assert await as_claim("wr-1").run(acts.plan_retry, inp) == plan
    assert await snapshot(pool) == after_first
    # Another execution cannot claim the run while this retry runs.
    with pytest.raises(ApplicationError) as caught:
        await as_claim("wr-2").run(acts.plan_retry, inp)
    assert caught.value.type == RUN_NOT_FINISHED and caught.value.non_retryable
    assert await snapshot(pool) == after_first

    # The retry finishes (its blocks never ran here: they end failed, 'unfinished');
    # its record is closed, and the next retry is number 2 with packs after these.
    await ActivityEnvironment().run(
        acts.finish_run, FinishRunInput(run_id=run_id, status="completed")
    )
    (record,) = await retries.history(pool, run_id)
    assert record.final_status == "completed_with_failures" and record.finished_at
    nothing = PlanRetryInput(run_id=run_id, retry=RetryRequest(reasons=["truncated"]))
    before = await snapshot(pool)
    with pytest.raises(ApplicationError) as caught:
        await as_claim("wr-3").run(acts.plan_retry, nothing)
    assert caught.value.type == NOTHING_TO_RETRY and caught.value.non_retryable
    assert await snapshot(pool) == before
    second = await as_claim("wr-4").run(acts.plan_retry, inp)
    assert (second.retry, second.blocks, second.first_pack) == (2, 3, plan.pack_count)


async def test_the_change_log_records_every_change_and_nothing_else(pool: asyncpg.Pool) -> None:
    run_id, uids = await _planned_run(pool, failed={2})
    logged = await retries.overlay_changes(pool, run_id)
    # Planned rows are inserted (not logged); each block's one change is.
    assert sorted((c.block_uid, c.old_status, c.new_status) for c in logged) == sorted(
        (u, "pending", "failed" if i == 2 else "ai_complete") for i, u in enumerate(uids)
    )
    assert [c.reason_code for c in logged if c.block_uid == uids[2]] == ["request_rejected"]
    assert all(c.value_changed == (c.block_uid != uids[2]) for c in logged)
    # An update that changes neither status, staging nor confirmed writes no row.
    await pool.execute(
        "update overlays set updated_at = now(), attempt_count = 2 where run_id = $1", run_id
    )
    assert len(await retries.overlay_changes(pool, run_id)) == len(logged)
    await pool.execute(
        "update overlays set confirmed = staging where run_id = $1 and block_uid = $2",
        run_id,
        uids[0],
    )
    (last,) = (await retries.overlay_changes(pool, run_id))[len(logged) :]
    assert (last.block_uid, last.old_status, last.new_status, last.value_changed) == (
        uids[0],
        "ai_complete",
        "ai_complete",
        True,
    )
    # Deleting the run deletes its log (and its retries).
    await pool.execute("delete from overlays where run_id = $1", run_id)
    await pool.execute("delete from runs where run_id = $1", run_id)
    assert await pool.fetchval("select count(*) from overlay_changes") == 0


# --------------------------------------------------------------------------- batch mode


async def test_a_batch_mode_run_is_retried_in_rounds_after_its_own(bbstack: Stack) -> None:
    pool = bbstack.pool
    run_id, uids = await failed_run(bbstack, 8, frozenset({5}), mode="batch", batch=BATCH)
    last_round = await pool.fetchval(
        "select max(round) from provider_batches where run_id = $1", run_id
    )
    mark = await last_call(pool, run_id)
    ok = [u for u in uids if u != uids[5]]
    before_ok = await overlay_rows(pool, run_id, ok)

    bbstack.sim.scenario(batch={"processing_delay_s": 0.2})
    async with bbstack.worker():
        started = await bbstack.bb.retry(run_id)  # answers once a worker claimed it
        assert (started.retry, started.blocks) == (1, 1)
        result = await bbstack.bb.wait(run_id)
    assert (result.status, result.blocks_ai_complete, result.blocks_failed) == ("completed", 8, 0)

    (retry,) = await bbstack.bb.retries(run_id)
    assert retry.first_round == last_round + 1
    members = await pool.fetch(
        "select round, pack_path, block_uids from batch_requests where run_id = $1 and round >= $2",
        run_id,
        retry.first_round,
    )
    assert members and {u for m in members for u in m["block_uids"]} == {uids[5]}
    assert all(int(m["pack_path"].split(".")[0]) >= retry.first_pack for m in members)
    batches = await pool.fetch(
        "select round, status from provider_batches where run_id = $1 and round > $2",
        run_id,
        last_round,
    )
    assert batches and {b["status"] for b in batches} == {"ended"}
    new_calls = await calls_after(pool, run_id, mark)
    assert answered_blocks(new_calls) == [uids[5]]
    assert {c["purpose"] for c in new_calls} == {"batch_request"}
    assert await overlay_rows(pool, run_id, ok) == before_ok
    assert not await retries.overlay_changes(pool, run_id, since=retry.started_at, block_uids=ok)
