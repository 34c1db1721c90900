"""submit_round never pays twice: retries after a crash around the create call.

The provider's create call is not idempotent. These tests run the activity directly
(Temporal's ActivityEnvironment) against real Postgres and the simulator, and make the
create call fail in the two ways that matter: the API answered with an error (nothing
was created), and the batch was created but its id never reached our commit.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anthropic
import httpx2
from temporalio.testing import ActivityEnvironment

from activities.batches import BatchActivities
from activities.db import DbActivities
from blockbatch.core.batch_types import BatchRoundInput, OpenBatchRunInput
from blockbatch.core.run_types import PlanRunInput, RunOptions
from blockbatch.runtime.claude import anthropic_client
from blockbatch.send.sender import AnthropicSender
from blockbatch.store import repo
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc


class FlakyCreate:
    """An anthropic client whose ``messages.batches.create`` fails once, as told."""

    def __init__(self, real: anthropic.AsyncAnthropic, *, after_create: bool) -> None:
        self.real = real
        self.after_create = after_create
        batches = real.messages.batches
        self.messages = SimpleNamespace(
            batches=SimpleNamespace(
                create=self.create, list=batches.list, retrieve=batches.retrieve
            )
        )

    async def create(self, **kwargs: Any) -> Any:
        request = httpx2.Request("POST", "http://simulator/v1/messages/batches")
        if self.after_create:
            await self.real.messages.batches.create(**kwargs)
            # The batch exists at the provider, but the answer is lost on the way back.
            raise anthropic.APIConnectionError(request=request)
        response = httpx2.Response(
            529,
            request=request,
            json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        )
        raise anthropic.InternalServerError("Overloaded", response=response, body=response.json())


async def planned_run(s: Stack) -> str:
    doc = await s.bb.ingest_bytes(markdown_doc(20), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(instruction_words=200))
    async with s.pool.acquire() as conn:
        run_id = await repo.create_run(conn, doc, schema_id, RunOptions(mode="batch", pack_size=5))
    env = ActivityEnvironment()
    plan = await env.run(DbActivities(s.pool).plan_run, PlanRunInput(run_id=run_id))
    assert plan.mode == "batch"
    opened = await env.run(
        BatchActivities(s.pool, AnthropicSender(anthropic_client(s.settings))).open_batch_run,
        OpenBatchRunInput(run_id=run_id),
    )
    assert (opened.requests, opened.blocks) == (4, 20)
    return run_id


async def submit_with(s: Stack, client: Any, run_id: str) -> Any:
    return await ActivityEnvironment().run(
        BatchActivities(s.pool, AnthropicSender(client)).submit_round,
        BatchRoundInput(run_id=run_id, round=1),
    )


async def listed_batches(client: anthropic.AsyncAnthropic) -> list[str]:
    return [b.id async for b in client.messages.batches.list(limit=100)]


async def test_batch_created_but_not_recorded_is_adopted_on_retry(bbstack: Stack) -> None:
    bbstack.sim.scenario(batch={"processing_delay_s": 60})
    run_id = await planned_run(bbstack)
    async with anthropic_client(bbstack.settings) as client:
        try:
            await submit_with(bbstack, FlakyCreate(client, after_create=True), run_id)
        except Exception as exc:  # noqa: BLE001 - the activity fails and Temporal retries it
            assert "could not reach Claude" in str(exc)
        else:
            raise AssertionError("the first attempt should have failed")
        [orphan] = await listed_batches(client)
        row = await bbstack.pool.fetchrow(
            "select * from provider_batches where run_id = $1", run_id
        )
        assert row["status"] == "submitting" and row["provider_batch_id"] is None
        assert row["submitted_at"] is not None, "the create call is marked as in doubt"

        out = await submit_with(bbstack, client, run_id)
        assert [b.provider_batch_id for b in out.batches] == [orphan]
        assert await listed_batches(client) == [orphan], "nothing was submitted twice"
        row = await bbstack.pool.fetchrow(
            "select * from provider_batches where run_id = $1", run_id
        )
        assert row["provider_batch_id"] == orphan and row["status"] == "in_progress"
        assert row["submit_attempts"] == 2 and "adopted" in row["note"]
        mapped = await bbstack.pool.fetchval(
            """select count(*) from batch_requests r join llm_calls c using (call_id)
               where r.run_id = $1 and r.provider_batch_id = $2
                 and c.provider_batch_id = $2 and c.status = 'started'""",
            run_id,
            orphan,
        )
        # Every request of the round (here the lead request alone: the prefix is cold).
        assert mapped == await bbstack.pool.fetchval(
            "select count(*) from batch_requests where run_id = $1 and round = 1", run_id
        )
        assert mapped >= 1

        # A further retry (say the worker died after the commit) returns the same batch.
        again = await submit_with(bbstack, client, run_id)
        assert again.batches == out.batches
        assert await listed_batches(client) == [orphan]


async def test_create_refused_by_the_api_is_simply_retried(bbstack: Stack) -> None:
    bbstack.sim.scenario(batch={"processing_delay_s": 60})
    run_id = await planned_run(bbstack)
    async with anthropic_client(bbstack.settings) as client:
        try:
            await submit_with(bbstack, FlakyCreate(client, after_create=False), run_id)
        except Exception as exc:  # noqa: BLE001
            assert "529" in str(exc)
        else:
            raise AssertionError("the first attempt should have failed")
        row = await bbstack.pool.fetchrow(
            "select * from provider_batches where run_id = $1", run_id
        )
        assert row["submitted_at"] is None, "the API answered: no batch can exist"
        out = await submit_with(bbstack, client, run_id)
        assert [b.provider_batch_id for b in out.batches] == await listed_batches(client)
        row = await bbstack.pool.fetchrow(
            "select * from provider_batches where run_id = $1", run_id
        )
        assert row["note"].startswith("create refused: 529")


async def test_no_batch_is_created_once_the_run_is_cancelling(bbstack: Stack) -> None:
    run_id = await planned_run(bbstack)
    await bbstack.pool.execute("update runs set status = 'cancelling' where run_id = $1", run_id)
    async with anthropic_client(bbstack.settings) as client:
        out = await submit_with(bbstack, client, run_id)
        assert out.refused and out.batches == []
        assert await listed_batches(client) == []
    row = await bbstack.pool.fetchrow("select * from provider_batches where run_id = $1", run_id)
    assert row["status"] == "not_submitted"
