"""A round's prompt cache: the sync pre-warm before a batch round (``prewarm_round``), and
the rule both it and ``submit_round`` follow (:func:`round_plan`).

Message Batches read the cache best effort, and a batch's requests run concurrently, so
a prefix the batch writes itself is read by fewer of them than one already cached
(contract §5, "Batches"; conformance audit row 5). Batches take no ``max_tokens: 0``
request, so the pre-warm is one sync call (the run's warm-up request, with the batch's
1-hour TTL) through the ledger-first :class:`~activities.calls.CallPath`, like sync
mode's warm-up. Whether a round sends a lead request ahead (the run's first round),
pre-warms, reads a prefix still cached, writes it itself, or sends no ``cache_control`` at
all is :func:`blockbatch.core.batching.round_cache`'s choice, kept per round in
``batch_rounds``.
"""

from __future__ import annotations

import asyncpg

from activities.calls import CallPath, wrote_cache
from blockbatch.core.batch_types import BatchRoundInput
from blockbatch.core.batching import (
    BATCH_CACHE_TTL,
    BATCH_WARM_HIT_RATE,
    MIN_MEASURED_REQUESTS,
    WARM_FOR_S,
    CachePlan,
    RoundCache,
    round_cache,
)
from blockbatch.core.budget import warm_up_worst_case
from blockbatch.core.call_types import WarmCacheOutput
from blockbatch.core.context import RunContext
from blockbatch.core.warm_up import WARM_UP_PATH, warm_up_request
from blockbatch.store import batches, ledger, provider_batches
from blockbatch.store.runs import cached_run_context


async def warm_hit_rate(conn: asyncpg.Connection, model: str) -> float:
    """The share of a warm batch's requests expected to read the prefix: the ledger's
    measurement on this model once it has :data:`MIN_MEASURED_REQUESTS` of them, else
    our assumption (:data:`BATCH_WARM_HIT_RATE`)."""
    reads, requests = await batches.batch_cache_hits(conn, model)
    return reads / requests if requests >= MIN_MEASURED_REQUESTS else BATCH_WARM_HIT_RATE


async def round_plan(conn: asyncpg.Connection, ctx: RunContext, round_: int) -> CachePlan:
    """How round ``round_`` uses the prompt cache: decided once, at its pre-warm step (or
    for round 1, when it is formed: a lead request, :func:`~activities.batches.submit.open_batch_run`),
    and kept, so the submission and any retry follow the same decision."""
    kept = await batches.recorded_cache_plan(conn, ctx.run_id, round_)
    if kept is not None:
        return kept
    requests, _ = await batches.round_size(conn, ctx.run_id, round_)
    plan = await decide_cache(conn, ctx, requests, lead=False)
    return await batches.round_cache_plan(conn, ctx.run_id, round_, plan.plan)


async def decide_cache(
    conn: asyncpg.Connection, ctx: RunContext, requests: int, *, lead: bool
) -> RoundCache:
    """:func:`blockbatch.core.batching.round_cache` for ``requests`` of the run, now: warm
    if the run touched its prefix recently, at the model's measured warm hit rate."""
    return round_cache(
        ctx.model,
        ctx.cacheable_prefix_tokens,
        requests,
        warm=await batches.prefix_recently_cached(conn, ctx.run_id, WARM_FOR_S),
        hit_rate=await warm_hit_rate(conn, ctx.model.id),
        lead=lead,
    )


async def prewarm_round(calls: CallPath, inp: BatchRoundInput) -> WarmCacheOutput:
    """Write the prefix before a round's batches, when :func:`round_plan` says so.

    Recorded in the ledger as purpose ``warm_up``, pack path ``warm-up``, attempt = the
    round: a retried activity reuses its answer (pay once). Nothing is sent once the
    round's batches exist, nor when the budget cannot hold the call (``over_budget``: the
    round then goes without a pre-warm, and the round's own budget check decides).
    """
    async with calls.pool.acquire() as conn:
        ctx = await cached_run_context(conn, inp.run_id)
        previous = await ledger.recorded_answer(conn, inp.run_id, WARM_UP_PATH, inp.round)
        if previous is not None:
            cached = wrote_cache(previous)
            return WarmCacheOutput(called=True, call_id=previous.call_id, cached=cached)
        if await provider_batches.submitted_refs(conn, inp.run_id, inp.round):
            return WarmCacheOutput(called=False)
        plan = await round_plan(conn, ctx, inp.round)
    if plan != "pre-warm":
        return WarmCacheOutput(called=False)
    request = warm_up_request(ctx, BATCH_CACHE_TTL)
    return await calls.warm_up(
        ctx,
        inp.round,
        request,
        warm_up_worst_case(
            ctx, max_tokens=max(request["max_tokens"], 1), cache_ttl=BATCH_CACHE_TTL
        ),
        what="the batch pre-warm",
    )
