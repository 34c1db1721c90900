"""call_model: one Claude call for one pack attempt, written to the ledger before it returns;
with the warm-up, the outage probe (``probe_api``) and the quality probe. Every call goes
through the worker's :class:`~activities.calls.CallPath` (open, reserve, send, settle,
record), whose sending step is the provider's :class:`~blockbatch.send.sender.Sender`.

Pay once: an attempt whose answer is already in the ledger returns that answer without
calling again (``blockbatch.store.ledger.recorded_answer``). A call never starts once the run is
cancelling: it is opened under a share lock on the run row that ``mark_run_cancelling``
must wait for (``blockbatch.store.ledger.open_call``). A call that lost its worker mid-call is marked
abandoned when its attempt is tried again. Retries belong to Temporal: the client runs
with ``max_retries=0`` and retryable failures are raised with the server's retry-after
(``activities.errors``). A run with a budget reserves every call before it is sent
(``blockbatch.store.ledger.open_call``; a pack call its expected cost with a margin, its
``max_tokens`` held to that: ``CallPath.budgeted``, blockbatch/core/budget.py): a call the
budget cannot hold is not made, and says so (``over_budget``, or ``over_budget_split`` when
one of its blocks would fit: the pack is halved); one that would fit once the run's open
calls are answered waits for them first.

A call whose ``max_tokens`` could run past ten minutes streams (``blockbatch.core.prompt.needs_streaming``,
the SDK's own rule) and records its final message like any other answer, with the
stream's request-id and rate-limit headers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import asyncpg
from temporalio import activity

from activities.calls import CallPath, answered, patiently, wrote_cache
from activities.errors import API_UNAVAILABLE, RETRYABLE
from activities.limiter import FleetLimiter
from activities.shared import PerRun, origin
from blockbatch.core.agreement import compare_answers
from blockbatch.core.budget import (
    probe_worst_case,
    refusal_text,
    smaller_fits,
    warm_up_worst_case,
)
from blockbatch.core.call_types import (
    CallFacts,
    CallModelInput,
    CallModelOutput,
    Totals,
    WarmCacheInput,
    WarmCacheOutput,
)
from blockbatch.core.claude_errors import is_outage
from blockbatch.core.context import RunContext
from blockbatch.core.evidence import ground
from blockbatch.core.outage_types import ProbeApiInput, ProbeApiOutput
from blockbatch.core.planning import LEARNING_PACK_BLOCKS
from blockbatch.core.prompt import alias_map, build_request
from blockbatch.core.quality import QUALITY_PROBE, pack_sample, probe_path
from blockbatch.core.quality_types import QualityProbeInput, QualityProbeOutput
from blockbatch.core.ratelimit import Need
from blockbatch.core.results import parse_results
from blockbatch.core.warm_up import WARM_UP_PATH, warm_up_request
from blockbatch.send.sdk import anthropic
from blockbatch.send.sender import AnthropicSender, NotSent, OpenClient
from blockbatch.store import ledger, overlays, quality
from blockbatch.store.runs import cached_run_context, probe_context

#: A run sizes max_tokens from its own answers once this many pack calls were answered, or
#: a learning pack's worth of blocks (core.planning.LEARNING_PACK_BLOCKS), read from the
#: ledger at most every this many seconds per worker.
_OBSERVED_AFTER = 3
_OBSERVED_EVERY_S = 5.0

# Workflows import these from here too; they live in activities.errors.
__all__ = ["API_UNAVAILABLE", "RETRYABLE", "LlmActivities"]

#: How long a call waits for Postgres before it starts (past that, the attempt fails).
_PREPARE_PATIENCE_S = 120.0
#: A pack's probe calls in flight at once (they go through the fleet's limiter too).
_PROBES_AT_ONCE = 4
#: What ``_prepare`` hands ``CallPath.send``: the run, the ledger row, the pack, the request and
#: what it will count against the rate limits.
_Prepared = tuple[RunContext, int, list[str], dict[str, Any], Need]


class LlmActivities:
    """Activities that call Claude; one anthropic client and one pool per worker process."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        client: anthropic.AsyncAnthropic,
        limiter: FleetLimiter | None = None,
        open_client: OpenClient | None = None,
    ) -> None:
        """``open_client``: opens another provider's client for runs that name one
        (``blockbatch.runtime.claude.provider_client``); ``None``: the Claude API only."""
        self.pool = pool
        #: The ledger-first path every call takes; the run's provider sends.
        self.calls = CallPath(pool, AnthropicSender(client, open_client), limiter)
        #: Per run: what its answers wrote per estimated output token.
        self._observed: PerRun[ledger.Observed] = PerRun()

    @activity.defn
    async def call_model(self, inp: CallModelInput) -> CallModelOutput:
        """Call Claude for one pack attempt and record request and answer in the ledger.

        Nothing is paid before the call, yet a Postgres outage there would fail the attempt
        and use up retries that belong to Claude's errors: it is waited out in place.
        """
        prepared = await patiently(
            "prepare the call", _PREPARE_PATIENCE_S, lambda: self._prepare(inp)
        )
        if isinstance(prepared, CallModelOutput):
            return prepared
        give_up = inp.outage_attempts is not None and activity.info().attempt >= inp.outage_attempts
        return await self.calls.send(*prepared, give_up=give_up)

    @activity.defn
    async def probe_api(self, inp: ProbeApiInput) -> ProbeApiOutput:
        """One small call (``max_tokens=1``) to learn whether Claude is back; in the ledger.

        Claude is *up* when it answers anything but 5xx, 529 or nothing: a 429 or a 4xx is
        an answer, and the packs that resume deal with it as they always do.
        """
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, inp.run_id)
            request: dict[str, Any] = {
                "model": ctx.model.id,
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "Reply with OK."}],
            }
            if ctx.shape.thinking is not None:
                # Thinking off the way the run turns it off: the one output token answers.
                request["thinking"] = dict(ctx.shape.thinking)
            try:
                call_id = await ledger.open_probe(
                    conn,
                    run_id=inp.run_id,
                    model=ctx.model.id,
                    request=request,
                    origin=origin(),
                    worst_case_usd=probe_worst_case(ctx),
                    endpoint=await self.calls.sender.endpoint(ctx.route),
                )
            except ledger.OverBudget as over:
                return ProbeApiOutput(
                    up=False,
                    over_budget=True,
                    message=refusal_text(over.budget, recorded=over.recorded, need=over.need),
                )
        if call_id is None:
            return ProbeApiOutput(up=False, message="run is no longer active")
        started = time.monotonic()
        try:
            sent = await self.calls.sender.send(request, ctx.route)
        except NotSent as failed:
            error = failed.error
            await self.calls.finish_failed(
                call_id, error.status, error.error_type, error.message, failed.request_id, started
            )
            return ProbeApiOutput(
                up=not is_outage(error),
                message=error.describe(),
                call_id=call_id,
                call=CallFacts(status="failed", api_error=True, http_status=error.status),
                unreachable=await self.calls.unreachable(inp.run_id, error, ctx.route),
            )
        answer = await self.calls.record_answer(
            ctx, call_id, sent.message, sent.request_id, started
        )
        return ProbeApiOutput(
            up=True,
            message="Claude answered",
            call_id=call_id,
            cost_usd=answer.cost_usd,
            call=CallFacts(status="succeeded", **answer.counts(), cost_usd=answer.cost_usd),
        )

    @activity.defn
    async def warm_cache(self, inp: WarmCacheInput) -> WarmCacheOutput:
        """Write the run's prompt cache with one small call, so every pack can start at once.

        The request is :func:`warm_up_request` (the packs' cache prefix, ``max_tokens: 0``
        where the channel allows it); the ledger holds it as purpose ``warm_up``, and a
        retried activity reuses its recorded answer (pay once). Its usage says whether the
        prefix is in the cache at all (a prefix under the model's minimum is processed
        uncached, with no error: contract §5): ``WarmCacheOutput.cached``, and this worker
        stops counting the run's prefix as read when it is not.
        """
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, inp.run_id)
            previous = await ledger.recorded_answer(
                conn, inp.run_id, WARM_UP_PATH, inp.first_pack + 1
            )
        if previous is not None:  # recorded by an earlier attempt: counted then, not again
            cached = wrote_cache(previous)
            self.calls.prefix_seen(ctx.run_id, cached)
            return WarmCacheOutput(called=True, call_id=previous.call_id, cached=cached)
        if not ctx.cacheable_prefix_tokens:
            return WarmCacheOutput(called=False)
        request = warm_up_request(ctx)
        return await self.calls.warm_up(
            ctx,
            inp.first_pack + 1,
            request,
            warm_up_worst_case(ctx, max_tokens=request["max_tokens"]),
            what="the warm-up",
            uncached_means=": calls count their prefix as uncached input",
        )

    @activity.defn
    async def probe_quality(self, inp: QualityProbeInput) -> QualityProbeOutput:
        """Ask a pack's sampled blocks again alone, one block per call, and compare answers.

        Called once the pack applied its answers (blockbatch/core/quality.py says which blocks). Each
        call is a pack call of one block: the same system prompt and tool, so it reads the
        cached prefix; on the run's ``quality.probe_model`` when it names one (that model's
        answer channel, effort, prices and limits; its own prefix cache); opened in the ledger first (purpose ``quality_probe``, pack path
        ``quality-<block_index>``, attempts 1, 2, ...: a retried activity reuses a recorded
        answer, pay once), under the run's budget and through the fleet's limiter. The
        packed answer stays the overlay; the comparison goes to ``quality_samples``. A call
        that fails is tried again here (up to :data:`~core.quality.PROBE_ATTEMPTS`, after
        the server's retry-after) and then recorded against its sample as ``failed``: the
        probe never fails the pack or the run.
        """
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, inp.run_id)
            if inp.at_least:
                # The quality gate's per-pack samples, chosen the same on every attempt.
                answered = await quality.answered_uids(conn, inp.run_id, inp.pack_index)
                await quality.plan_sample(
                    conn,
                    inp.run_id,
                    pack_sample(answered, inp.at_least, f"{inp.run_id}/{inp.pack_index}"),
                )
            blocks = await quality.to_probe(conn, inp.run_id, inp.pack_index)
            # The calls go to the probe's model when the run names one (priced, limited
            # and shaped as that model's); the packed answers they are compared with
            # stay the run's.
            probe_ctx = await probe_context(conn, ctx)
        gate = asyncio.Semaphore(_PROBES_AT_ONCE)
        calls: list[CallFacts] = []

        async def one(block: quality.ProbeBlock) -> Totals:
            async with gate:
                return await self._probe_block(probe_ctx, block, calls)

        totals = Totals()
        for spent in await asyncio.gather(*(one(b) for b in blocks)):
            totals.add(spent)
        async with self.pool.acquire() as conn:
            sampled, agreeing, failed = await quality.pack_tally(conn, inp.run_id, inp.pack_index)
        totals.quality_sampled, totals.quality_agreeing = sampled, agreeing
        return QualityProbeOutput(
            sampled=sampled, agreeing=agreeing, failed=failed, totals=totals, calls=calls
        )

    async def _probe_block(
        self, ctx: RunContext, block: quality.ProbeBlock, calls: list[CallFacts]
    ) -> Totals:
        """One sampled block asked alone and compared (its sample row says how it went);
        the calls it made are appended to ``calls``."""
        run_id, uid = ctx.run_id, block.block_uid
        path = probe_path(block.block_index)

        async def not_compared(status: str, error: str, call_id: int | None = None) -> None:
            async with self.pool.acquire() as conn:
                await quality.record_not_compared(
                    conn, run_id, block, status=status, error=error, call_id=call_id
                )

        if block.pack_size < 2:
            # Halved down to a pack of one: its answer is already a single answer.
            await not_compared("skipped", "answered alone (a pack of one): nothing to compare")
            return Totals()
        pack = ctx.pack([block.est_tokens])
        aliases = alias_map([uid]) if ctx.options.short_ids else None
        request = build_request(
            ctx.spec,
            [
                {
                    "block_uid": uid,
                    "block_type": block.block_type,
                    "block_content": block.block_content,
                }
            ],
            max_tokens=pack.max_tokens,
            model=ctx.model.id,
            shape=ctx.shape,
            cache_ttl=ctx.options.cache_ttl,
            aliases=aliases,
        )
        asked = await self.calls.ask_alone(
            ctx, path, [uid], request, pack, purpose=QUALITY_PROBE, aliases=aliases
        )
        spent = Totals()
        for made in asked.failed:
            if made is not None:
                calls.append(made)
            spent.add(Totals(calls=1, quality_calls=1))
        for out in asked.answers:
            made = CallFacts.of_output(out)
            if made is not None:
                calls.append(made)
            answer_totals = out.totals()
            answer_totals.quality_calls = answer_totals.calls
            answer_totals.quality_cost_usd = answer_totals.cost_usd
            spent.add(answer_totals)
        if asked.over_budget:
            await not_compared("skipped", "the run's budget cannot hold the probe call")
            return spent
        if asked.stopped:
            await not_compared("skipped", "the run stopped before the probe call")
            return spent
        call_id = asked.call_id
        if call_id is None:
            await not_compared("failed", asked.error or "no answer", asked.opened)
            return spent
        async with self.pool.acquire() as conn:
            answer = await ledger.answer_to_apply(conn, run_id, call_id)
        parsed = parse_results(answer.response, [uid], ctx.spec, answer.block_aliases)
        single = parsed.valid.get(uid)
        if single is None:
            await not_compared(
                "failed", f"the single answer is unusable: {parsed.summary()}", call_id
            )
            return spent
        fields = compare_answers(ctx.spec, block.packed, single)
        # The answer alone's quotes, grounded like the packed answer's (summary: both rates).
        evidence = (
            ground(parsed.evidence.get(uid, {}), single, block.block_content)
            if ctx.spec.prompt_config.evidence
            else None
        )
        async with self.pool.acquire() as conn:
            await quality.record_compared(
                conn,
                run_id,
                block,
                single=single,
                fields=[dataclasses.asdict(f) for f in fields],
                agrees=all(f.agree for f in fields),
                call_id=call_id,
                evidence=evidence,
            )
        return spent

    async def _prepare(self, inp: CallModelInput) -> CallModelOutput | _Prepared:
        """Read the pack and open its ledger row; an outcome instead when not to call."""
        async with self.pool.acquire() as conn:
            previous = await ledger.recorded_answer(
                conn, inp.run_id, inp.pack_path, inp.pack_attempt
            )
            if previous is not None:
                return answered(previous, reused=True)
            ctx = await cached_run_context(conn, inp.run_id)
            blocks = await overlays.pending_blocks(conn, inp.run_id, inp.pack_index, inp.block_uids)
            observed = await self._observed_output(conn, inp.run_id) if blocks else None
        if not blocks:
            return CallModelOutput(outcome="empty", block_uids=[])
        uids = [b.block_uid for b in blocks]
        pack = ctx.pack(
            [b.est_tokens for b in blocks],
            inp.pack_attempt,
            observed.ratio if observed is not None else None,
            observed.thinking if observed is not None else None,
        )
        too_large = ctx.too_large(pack, len(blocks))
        if too_large is not None:
            return CallModelOutput(outcome="oversized", block_uids=uids, message=too_large)
        async with self.pool.acquire() as conn:
            pack, reserved = await self.calls.budgeted(conn, ctx, pack, again=inp.pack_attempt > 1)
        # Short ids: decided here, once, and kept on the ledger row the answer is parsed with.
        aliases = alias_map(uids) if ctx.options.short_ids else None
        request = build_request(
            ctx.spec,
            [
                {
                    "block_uid": b.block_uid,
                    "block_type": b.block_type,
                    "block_content": b.block_content,
                }
                for b in blocks
            ],
            max_tokens=pack.max_tokens,
            model=ctx.model.id,
            shape=ctx.shape,
            cache_ttl=ctx.options.cache_ttl,
            aliases=aliases,
        )
        try:
            call_id = await self.calls.open(
                ctx,
                inp.run_id,
                inp.pack_path,
                inp.pack_attempt,
                uids,
                request,
                est_output_tokens=pack.learn_output_tokens,
                reserved=reserved,
                block_aliases=aliases,
            )
        except ledger.OverBudget as over:
            # A smaller pack may still fit what the budget leaves: halve this one.
            smaller = len(blocks) > 1 and await self._one_block_fits(ctx, blocks[0], over)
            return CallModelOutput(
                outcome="over_budget_split" if smaller else "over_budget",
                block_uids=uids,
                message=refusal_text(over.budget, recorded=over.recorded, need=over.need),
            )
        if call_id is None:
            return CallModelOutput(
                outcome="cancelled", block_uids=uids, message="run is cancelling"
            )
        return (
            ctx,
            call_id,
            uids,
            request,
            self.calls.need(ctx, pack.est_input_tokens, pack.max_tokens),
        )

    async def _one_block_fits(self, ctx: RunContext, block: Any, over: ledger.OverBudget) -> bool:
        """Whether a call of ``block`` alone would fit what the run's recorded cost leaves
        of its budget (``blockbatch.core.budget.smaller_fits``)."""
        async with self.pool.acquire() as conn:
            _, alone = await self.calls.budgeted(conn, ctx, ctx.pack([block.est_tokens]))
        return alone is not None and smaller_fits(over.budget, over.recorded, alone.usd)

    async def _observed_output(
        self, conn: asyncpg.Connection, run_id: str
    ) -> ledger.Observed | None:
        """What the run's answers wrote per estimated output token, and what its calls
        thought per call, once :data:`_OBSERVED_AFTER` of them are in (read at most every
        few seconds)."""

        async def read() -> ledger.Observed | None:
            seen = await ledger.observed_output(conn, run_id)
            # Too few yet: not remembered, the next call looks again.
            if seen is None or (
                seen.calls < _OBSERVED_AFTER and seen.blocks < LEARNING_PACK_BLOCKS
            ):
                return None
            return seen

        return await self._observed.get(run_id, _OBSERVED_EVERY_S, read)
