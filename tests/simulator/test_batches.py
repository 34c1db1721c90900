"""The Message Batches API end to end through the SDK's client.messages.batches."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anthropic
import pytest
import pytest_asyncio
from anthropic.types.messages import MessageBatch

from blockbatch.simulator.clock import FakeClock
from blockbatch.simulator.scenario import Batch, Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import make_blocks, pack_params, results_by_uid
from tests.helpers import error_body
from tests.simulator.sdk import sdk_client
from tests.waiting import until


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(scenario=Scenario(batch=Batch(processing_delay_s=0))) as server:
        yield server


def requests(count: int) -> list[dict]:
    return [
        {"custom_id": f"pack-{i}", "params": pack_params(make_blocks(3, start=3 * i))}
        for i in range(count)
    ]


async def wait_until_ended(client, batch_id: str) -> MessageBatch:

    async def ended() -> MessageBatch | None:
        batch = await client.messages.batches.retrieve(batch_id)
        return batch if batch.processing_status == "ended" else None

    return await until(ended, f"batch {batch_id} ended")


async def test_batch_round_trip_gives_the_same_answers_as_messages(sim, client):
    sim.scenario = Scenario(batch=Batch(processing_delay_s=0.2))
    created = await client.messages.batches.create(requests=requests(3))
    assert created.id.startswith("msgbatch_")
    assert created.type == "message_batch"
    assert created.processing_status == "in_progress"
    assert created.request_counts.processing == 3
    assert created.results_url is None and created.ended_at is None
    assert created.expires_at > created.created_at

    ended = await wait_until_ended(client, created.id)
    assert ended.request_counts.succeeded == 3 and ended.request_counts.processing == 0
    assert ended.ended_at is not None
    assert ended.results_url == f"{sim.base_url}/v1/messages/batches/{created.id}/results"

    lines = [line async for line in await client.messages.batches.results(created.id)]
    assert sorted(line.custom_id for line in lines) == ["pack-0", "pack-1", "pack-2"]
    for line in lines:
        assert line.result.type == "succeeded"
        assert line.result.message.usage.service_tier == "batch"
    by_id = {line.custom_id: line.result.message for line in lines}
    direct = await client.messages.create(**pack_params(make_blocks(3, start=3)))
    assert results_by_uid(by_id["pack-1"]) == results_by_uid(direct)
    assert sim.state.stats.snapshot()["batch_tokens"]["output"] > 0


async def test_cancel_before_processing_cancels_every_request(sim, client):
    sim.scenario = Scenario(batch=Batch(processing_delay_s=60))
    created = await client.messages.batches.create(requests=requests(2))
    canceling = await client.messages.batches.cancel(created.id)
    assert canceling.processing_status == "canceling"
    assert canceling.cancel_initiated_at is not None
    ended = await wait_until_ended(client, created.id)
    assert ended.request_counts.canceled == 2
    lines = [line async for line in await client.messages.batches.results(created.id)]
    assert {line.result.type for line in lines} == {"canceled"}


async def test_errored_and_expired_requests(sim, client):
    sim.scenario = Scenario(batch=Batch(processing_delay_s=0, errored_rate=0.4, expired_rate=0.3))
    bad = {"custom_id": "bad-model", "params": {**pack_params(make_blocks(1)), "model": "xyz"}}
    created = await client.messages.batches.create(requests=[*requests(20), bad])
    ended = await wait_until_ended(client, created.id)
    counts = ended.request_counts
    assert counts.errored > 0 and counts.expired > 0 and counts.succeeded > 0
    assert counts.errored + counts.expired + counts.succeeded == 21
    lines = {
        line.custom_id: line.result
        async for line in await client.messages.batches.results(created.id)
    }
    assert lines["bad-model"].type in ("errored", "expired")


async def test_invalid_params_error_only_their_own_request(client):
    bad = {"custom_id": "bad-model", "params": {**pack_params(make_blocks(1)), "model": "xyz"}}
    created = await client.messages.batches.create(requests=[*requests(1), bad])
    await wait_until_ended(client, created.id)
    lines = {
        line.custom_id: line.result
        async for line in await client.messages.batches.results(created.id)
    }
    assert lines["pack-0"].type == "succeeded"
    assert lines["bad-model"].type == "errored"
    assert lines["bad-model"].error.error.type == "not_found_error"
    assert lines["bad-model"].error.error.message == "model: xyz"


async def test_list_pages_newest_first(client):
    ids = [(await client.messages.batches.create(requests=requests(1))).id for _ in range(5)]
    page = await client.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[::-1][:2]
    assert page.has_more is True
    assert page.first_id == ids[4] and page.last_id == ids[3]
    every = [batch.id async for batch in await client.messages.batches.list(limit=2)]
    assert every == ids[::-1]


async def test_delete_only_after_the_batch_ended(sim, client):
    sim.scenario = Scenario(batch=Batch(processing_delay_s=60))
    pending = await client.messages.batches.create(requests=requests(1))
    with pytest.raises(anthropic.BadRequestError):
        await client.messages.batches.delete(pending.id)
    await client.messages.batches.cancel(pending.id)
    await wait_until_ended(client, pending.id)
    deleted = await client.messages.batches.delete(pending.id)
    assert deleted.id == pending.id and deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.batches.retrieve(pending.id)


@pytest.mark.parametrize(
    ("batch_requests", "fragment"),
    [
        ([], "at least 1"),
        ([{"custom_id": "has space", "params": {}}], "custom_id"),
        ([{"custom_id": "a" * 65, "params": {}}], "custom_id"),
        ([{"custom_id": "same", "params": {}}, {"custom_id": "same", "params": {}}], "duplicate"),
    ],
)
async def test_invalid_batches_are_400(client, batch_requests, fragment):
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.batches.create(requests=batch_requests)
    assert fragment in error_body(caught.value)["error"]["message"]


async def test_results_of_unknown_batch_is_404(client):
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.batches.retrieve("msgbatch_nope")


def cached_requests(count: int) -> list[dict]:
    """Requests sharing a system prompt long enough to be cached."""
    return [
        {
            "custom_id": f"pack-{i}",
            "params": pack_params(make_blocks(3, start=3 * i), system_repeat=300),
        }
        for i in range(count)
    ]


async def batch_usages(client, batch_id: str) -> list:
    await wait_until_ended(client, batch_id)
    return [
        line.result.message.usage async for line in await client.messages.batches.results(batch_id)
    ]


@pytest.mark.parametrize(("rate", "low", "high"), [(1.0, 19, 19), (0.0, 0, 0), (0.5, 4, 15)])
async def test_batch_cache_hits_are_best_effort(sim, client, rate, low, high):
    # Contract §5, "Batches": hits are best-effort ("30% to 98%"); a missed hit writes
    # and pays the prefix instead.
    sim.scenario = Scenario(batch=Batch(processing_delay_s=0, cache_hit_rate=rate))
    created = await client.messages.batches.create(requests=cached_requests(20))
    usages = await batch_usages(client, created.id)
    reads = [u for u in usages if u.cache_read_input_tokens > 0]
    assert low <= len(reads) <= high
    writes = [u for u in usages if u.cache_creation_input_tokens > 0]
    assert len(reads) + len(writes) == 20


async def test_a_prefix_cached_before_the_batch_is_read_at_the_warm_rate(sim, client):
    # Contract §5: a batch's requests run concurrently and an entry is readable only once
    # the first response starts, so a cold batch misses more than one whose prefix was
    # written before it (a sync pre-warm, the FAQ's advice): the two rates are separate.
    sim.scenario = Scenario(
        batch=Batch(processing_delay_s=0, cache_hit_rate=0.0, warm_cache_hit_rate=1.0)
    )
    cold = await client.messages.batches.create(requests=cached_requests(10))
    cold_usages = await batch_usages(client, cold.id)
    assert [u.cache_read_input_tokens > 0 for u in cold_usages] == [False] * 10
    sim.state.engine.reset()
    warm_up = pack_params(make_blocks(1, start=99), system_repeat=300)
    first = await client.messages.create(**warm_up)
    assert first.usage.cache_creation_input_tokens > 0
    warm = await client.messages.batches.create(requests=cached_requests(10))
    warm_usages = await batch_usages(client, warm.id)
    assert all(u.cache_read_input_tokens > 0 for u in warm_usages)
    assert not any(u.cache_creation_input_tokens for u in warm_usages)


async def test_batch_cache_hits_are_the_same_for_the_same_seed(sim, client):
    sim.scenario = Scenario(seed=7, batch=Batch(processing_delay_s=0, warm_cache_hit_rate=0.5))
    hits = []
    for _ in range(2):
        sim.state.engine.reset()  # an empty cache, and every body's first arrival again
        await client.messages.create(**pack_params(make_blocks(1, start=99), system_repeat=300))
        created = await client.messages.batches.create(requests=cached_requests(12))
        hits.append([u.cache_read_input_tokens > 0 for u in await batch_usages(client, created.id)])
    assert hits[0] == hits[1]
    assert 0 < sum(hits[0]) < 12


async def test_the_default_batch_cache_hit_rate_misses_some_hits(sim, client):
    assert Scenario().batch.cache_hit_rate == 0.7
    created = await client.messages.batches.create(requests=cached_requests(30))
    reads = [u for u in await batch_usages(client, created.id) if u.cache_read_input_tokens]
    assert 10 <= len(reads) < 29


@contextlib.asynccontextmanager
async def on_a_fake_clock(
    processing_delay_s: float,
) -> AsyncIterator[tuple[SimulatorServer, anthropic.AsyncAnthropic, FakeClock]]:
    """A simulator whose clock moves only when told, and an SDK client of it."""
    clock = FakeClock()
    scenario = Scenario(batch=Batch(processing_delay_s=processing_delay_s))
    async with (
        SimulatorServer(scenario=scenario, clock=clock) as sim,
        sdk_client(sim.base_url) as client,
    ):
        yield sim, client, clock


async def test_a_canceled_batch_keeps_and_bills_what_it_processed():
    # A quarter of the processing time passes between creating and canceling, however fast
    # this machine is.
    async with on_a_fake_clock(4) as (sim, client, clock):
        created = await client.messages.batches.create(requests=requests(10))  # type: ignore[arg-type]  # plain dicts
        clock.advance(1)
        await client.messages.batches.cancel(created.id)
        ended = await wait_until_ended(client, created.id)
        counts = ended.request_counts
        assert counts.succeeded == 2  # floor(1/4 of 10): processing advances evenly
        assert counts.succeeded + counts.canceled == 10
        lines = [line async for line in await client.messages.batches.results(created.id)]
        assert sum(line.result.type == "succeeded" for line in lines) == counts.succeeded
        assert sim.state.stats.snapshot()["batch_tokens"]["output"] > 0


@pytest.mark.parametrize("field", ["temperature", "top_p", "top_k"])
async def test_sampling_in_a_batch_fails_the_create_call_naming_the_request(client, field):
    # Contract §4: each request of a batch is validated against the version at creation.
    bad = {"custom_id": "hot", "params": {**pack_params(make_blocks(1)), field: 1}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.batches.create(requests=[*requests(2), bad])
    assert caught.value.api_message == f"requests.2.params.{field}: Extra inputs are not permitted"


async def test_a_batch_created_under_2023_06_01_keeps_its_sampling_rules(client):
    legacy = {"anthropic-version": "2023-06-01"}
    ok = {"custom_id": "warm", "params": {**pack_params(make_blocks(1)), "temperature": 0.2}}
    hot = {
        "custom_id": "hot",
        "params": {
            **pack_params(make_blocks(1), model="claude-sonnet-5"),
            "temperature": 0.2,
            "tool_choice": {"type": "auto"},
        },
    }
    created = await client.messages.batches.create(requests=[ok, hot], extra_headers=legacy)
    await wait_until_ended(client, created.id)
    lines = {
        line.custom_id: line.result
        async for line in await client.messages.batches.results(created.id)
    }
    assert lines["warm"].type == "succeeded"
    assert lines["hot"].type == "errored"
    assert lines["hot"].error.error.message.startswith("temperature: ")


async def test_max_tokens_zero_in_a_batch_is_400(client):
    warm = {
        "custom_id": "warm",
        "params": {**pack_params(make_blocks(1)), "max_tokens": 0, "tool_choice": {"type": "auto"}},
    }
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.batches.create(requests=[warm])
    assert caught.value.api_message == (
        "requests.0.params.max_tokens: 0 is not supported in a Message Batch"
    )


async def test_no_batch_ends_while_answers_are_held():
    # Due long ago on the simulator's clock, the batch stays in progress until the release.
    async with on_a_fake_clock(2) as (sim, client, clock):
        sim.state.gate.clear()  # POST /_sim/hold
        created = await client.messages.batches.create(requests=requests(2))  # type: ignore[arg-type]  # plain dicts
        clock.advance(60)
        held = await client.messages.batches.retrieve(created.id)
        assert held.processing_status == "in_progress" and held.request_counts.processing == 2
        listed = [b async for b in client.messages.batches.list(limit=10)]
        assert [b.processing_status for b in listed] == ["in_progress"]
        sim.state.gate.set()  # POST /_sim/release
        ended = await client.messages.batches.retrieve(created.id)
        assert ended.processing_status == "ended" and ended.request_counts.succeeded == 2
