"""Forming round 1 and submitting a round as provider batches (``open_batch_run``,
``submit_round``); requests are built from Postgres, never carried through Temporal."""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import asyncpg

from activities.batches.create import submit_part
from activities.batches.prewarm import decide_cache, round_plan
from activities.batches.rounds import enqueue
from activities.bedrock_jobs import BedrockSender
from activities.shared import heartbeating
from blockbatch.core.batch_types import (
    BatchOptions,
    BatchRoundInput,
    OpenBatchRunInput,
    OpenBatchRunOutput,
    SubmitRoundOutput,
)
from blockbatch.core.batching import (
    BATCH_CACHE_TTL,
    WARM_FOR_S,
    PackAttempt,
    Part,
    PartCutter,
    batch_params,
    without_cache_control,
)
from blockbatch.core.budget import refusal_text, worst_case_usd
from blockbatch.core.context import RunContext
from blockbatch.core.prompt import alias_map, build_request
from blockbatch.send.sender import Sender
from blockbatch.store import batches, ledger, overlays, provider_batches
from blockbatch.store.runs import budget_for_share, cached_run_context, lock_run

#: Pack attempts read per query while building a batch.
_PAGE_REQUESTS = 200


async def open_batch_run(pool: asyncpg.Pool, inp: OpenBatchRunInput) -> OpenBatchRunOutput:
    """Form the first round from the plan: one request per planned pack (idempotent).

    On a cold cache where it pays (:func:`blockbatch.core.batching.round_cache`, plan
    ``lead``), round 1 is one request alone, which writes the prefix at the batch price,
    and the other planned packs are round 2; the output counts them all.
    """
    async with pool.acquire() as conn, conn.transaction():
        await lock_run(conn, inp.run_id)
        ctx = await cached_run_context(conn, inp.run_id)
        options = ctx.options.batch or BatchOptions()
        existing = await _opened(conn, inp.run_id)
        if existing[0]:
            return OpenBatchRunOutput(options=options, requests=existing[0], blocks=existing[1])
        packs = await overlays.pending_by_pack(conn, inp.run_id)
        attempts = [PackAttempt(str(i), i, 1, 0, uids) for i, uids in packs.items()]
        plan = (await decide_cache(conn, ctx, len(attempts), lead=True)).plan
        failed: dict[str, int] = {}
        if plan == "lead":
            # The first pack that fits goes ahead alone; the rest wait for round 2.
            while attempts and not (await batches.round_size(conn, inp.run_id, 1))[0]:
                _add(failed, await enqueue(conn, ctx, 1, attempts[:1]))
                attempts = attempts[1:]
            _add(failed, await enqueue(conn, ctx, 2, attempts))
        else:
            _add(failed, await enqueue(conn, ctx, 1, attempts))
        await batches.round_cache_plan(conn, inp.run_id, 1, plan)
        requests, blocks = await _opened(conn, inp.run_id)
    return OpenBatchRunOutput(
        options=options,
        requests=requests,
        blocks=blocks,
        failed=sum(failed.values()),
        failed_reasons=failed,
    )


async def _opened(conn: asyncpg.Connection, run_id: str) -> tuple[int, int]:
    """The planned packs' requests and blocks: round 1, and its followers with a lead."""
    requests, blocks = await batches.round_size(conn, run_id, 1)
    if requests and await batches.recorded_cache_plan(conn, run_id, 1) == "lead":
        more = await batches.round_size(conn, run_id, 2)
        requests, blocks = requests + more[0], blocks + more[1]
    return requests, blocks


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for code, n in more.items():
        total[code] = total.get(code, 0) + n


async def submit_round(
    pool: asyncpg.Pool, sender: Sender, inp: BatchRoundInput
) -> SubmitRoundOutput:
    """Submit a round as provider batches; a retry returns the batches already made.

    A run with a budget first sizes the round to fit it (:func:`fit_budget`). Its
    requests carry ``cache_control`` unless the round's cache plan is ``none``
    (:func:`~activities.batches.prewarm.round_plan`: a prefix under the model's minimum, or
    too few requests on a cold cache to repay a write).
    """
    async with pool.acquire() as conn:
        ctx = await cached_run_context(conn, inp.run_id)
        done = await provider_batches.submitted_refs(conn, inp.run_id, inp.round)
        round_requests, _ = await batches.round_size(conn, inp.run_id, inp.round)
    # A Bedrock round under a job's minimum runs sync, at on-demand prices.
    sync = isinstance(sender, BedrockSender) and sender.bedrock.jobs.config.runs_sync(
        round_requests
    )
    over_budget = 0 if done else await fit_budget(pool, ctx, inp, batch_prices=not sync)
    async with pool.acquire() as conn:
        requests, _ = await batches.round_size(conn, inp.run_id, inp.round)
        cache_control = await round_plan(conn, ctx, inp.round) != "none"
        if not done:
            warm = await batches.prefix_recently_cached(conn, ctx.run_id, WARM_FOR_S)
            await batches.mark_round_warm(conn, ctx.run_id, inp.round, warm)
    out = SubmitRoundOutput(requests=requests, batches=list(done.values()), over_budget=over_budget)
    if sum(b.requests for b in out.batches) == requests:
        return out  # every part is already submitted (or the round is empty)
    options = ctx.options.batch or BatchOptions()
    if isinstance(sender, BedrockSender):  # its per-model quota of records per job
        limit = min(options.max_requests_per_batch, sender.bedrock.jobs.config.max_records)
        options = options.model_copy(update={"max_requests_per_batch": limit})
    out.batches = []
    async with (
        heartbeating(f"round {inp.round}: building requests") as status,
        aclosing(_parts(pool, ctx, inp, options, cache_control)) as parts,
    ):
        async for part in parts:
            status[0] = (
                f"round {inp.round} part {part.index}: "
                f"{len(part.requests)} requests, {part.nbytes:,} bytes"
            )
            ref = done.get(part.index) or await submit_part(pool, sender, ctx, inp, part)
            if ref is None:
                out.refused = True
                break
            out.batches.append(ref)
    return out


async def fit_budget(
    pool: asyncpg.Pool, ctx: RunContext, inp: BatchRoundInput, *, batch_prices: bool = True
) -> int:
    """Size a round not yet submitted to the run's budget, at batch prices (worst case;
    at on-demand prices without ``batch_prices``: a Bedrock round run sync).

    Under the run's budget lock (``blockbatch.store.ledger.budget_use``): the round keeps its requests,
    in submission order, while what the ledger holds plus their worst cases fits the
    budget; the rest are taken out of the round and their blocks end ``budget_exhausted``
    (no request is made for them). Rounds run one at a time, so nothing else of the run
    is open meanwhile. Returns how many blocks ended so (0: the round fits, or no budget).
    """
    async with pool.acquire() as conn, conn.transaction():
        _, budget = await budget_for_share(conn, inp.run_id)
        if budget is None:
            return 0
        recorded, open_reserved = await ledger.budget_use(conn, inp.run_id)
        requests = await batches.round_requests(conn, inp.run_id, inp.round)
        est = await batches.block_tokens(conn, [u for r in requests for u in r.block_uids])
        held = recorded + open_reserved
        for cut, r in enumerate(requests):  # noqa: B007 - `cut` is read after the break
            pack = ctx.pack([est[u] for u in r.block_uids])
            need = worst_case_usd(
                ctx.model,
                input_tokens=pack.est_input_tokens,
                max_tokens=r.max_tokens,
                prefix_tokens=ctx.cacheable_prefix_tokens,
                cache_ttl=BATCH_CACHE_TTL,
                batch=batch_prices,
            )
            if held + need > budget:
                break
            held += need
        else:
            return 0
        dropped = requests[cut:]
        await batches.drop_requests(conn, inp.run_id, inp.round, [r.custom_id for r in dropped])
        reason = refusal_text(budget, recorded=held, need=need)
        failed = 0
        for r in dropped:
            failed += await overlays.fail_pending(
                conn,
                inp.run_id,
                reason,
                r.pack_path,
                reason_code="budget_exhausted",
                block_uids=r.block_uids,
            )
        return failed


async def _parts(
    pool: asyncpg.Pool,
    ctx: RunContext,
    inp: BatchRoundInput,
    options: BatchOptions,
    cache_control: bool = True,
) -> AsyncGenerator[Part, None]:
    """The round's requests, read from Postgres a page at a time, cut into parts.

    The order is fixed (pack_index, pack_path), so a retry cuts the same parts. No
    connection is held while a part is being submitted.
    """
    cutter = PartCutter(options)
    after: tuple[int, str] = (-1, "")
    while True:
        async with pool.acquire() as conn:
            rows = await batches.request_page(conn, inp.run_id, inp.round, after, _PAGE_REQUESTS)
        if not rows:
            break
        for _, group in itertools.groupby(rows, key=lambda r: r.custom_id):
            closed = cutter.add(*_request(ctx, list(group), cache_control))
            if closed is not None:
                yield closed
        after = (rows[-1].pack_index, rows[-1].pack_path)
    last = cutter.last()
    if last is not None:
        yield last


def _request(
    ctx: RunContext, pack: list[batches.RequestBlock], cache_control: bool = True
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str] | None]:
    """The batch request of one pack attempt, and what the ledger keeps of it: the request
    without system and tools, and its short ids (alias -> block_uid, ``None`` without).
    Without ``cache_control`` its system prompt carries no breakpoint.

    The aliases follow the request's block order, which is fixed (``request_page``): an
    orphan batch adopted after a crash was built with the same ones as recorded here.
    """
    aliases = alias_map([r.block_uid for r in pack]) if ctx.options.short_ids else None
    request = build_request(
        ctx.spec,
        [
            {"block_uid": r.block_uid, "block_type": r.block_type, "block_content": r.block_content}
            for r in pack
        ],
        max_tokens=pack[0].max_tokens,
        model=ctx.model.id,
        shape=ctx.shape,
        cache_ttl=BATCH_CACHE_TTL,
        aliases=aliases,
    )
    params = batch_params(request if cache_control else without_cache_control(request))
    # The prefix (system prompt and tools) is the ledger's once per run (activities/llm.py).
    stored = {k: v for k, v in params.items() if k not in ("system", "tools")}
    return {"custom_id": pack[0].custom_id, "params": params}, stored, aliases
