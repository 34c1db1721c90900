"""call_model: one Claude call for one pack attempt, written to the ledger before it returns.

Pay once: an attempt whose answer is already in the ledger returns that answer without
calling again (``blockbatch.store.ledger.recorded_answer``). A call never starts once the run is
cancelling: it is opened under a share lock on the run row that ``mark_run_cancelling``
must wait for (``blockbatch.store.ledger.open_call``). A call that lost its worker mid-call is marked
abandoned when its attempt is tried again. Retries belong to Temporal: the client runs
with ``max_retries=0`` and retryable failures are raised with the server's retry-after
(``activities.errors``). A run with a budget reserves every call's worst case before it is
sent (``blockbatch.store.ledger.open_call``, blockbatch/core/budget.py): a call the budget cannot hold is not
made, and says so (``over_budget``); one that would fit once the run's open calls are
answered waits for them first.

A call whose ``max_tokens`` could run past ten minutes streams (``blockbatch.core.prompt.needs_streaming``,
the SDK's own rule) and records its final message like any other answer, with the
stream's request-id and rate-limit headers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.endpoint import client_endpoint
from activities.errors import (
    API_UNAVAILABLE,
    RETRYABLE,
    application_error,
    call_of_error,
    from_api_error,
)
from activities.limiter import FleetLimiter
from activities.sdk import anthropic
from activities.shared import PerRun, heartbeating, origin
from blockbatch.core.agreement import compare_answers
from blockbatch.core.budget import (
    pack_worst_case,
    probe_worst_case,
    refusal_text,
    warm_up_worst_case,
)
from blockbatch.core.claude_errors import ClaudeError, is_outage, is_unreachable
from blockbatch.core.context import RunContext
from blockbatch.core.evidence import ground
from blockbatch.core.models import (
    CallFacts,
    CallModelInput,
    CallModelOutput,
    LimiterNote,
    ProbeApiInput,
    ProbeApiOutput,
    QualityProbeInput,
    QualityProbeOutput,
    Totals,
    WarmCacheInput,
    WarmCacheOutput,
)
from blockbatch.core.planning import LEARNING_PACK_BLOCKS
from blockbatch.core.prompt import alias_map, build_request, needs_streaming, request_prefix
from blockbatch.core.quality import PROBE_ATTEMPTS, QUALITY_PROBE, pack_sample, probe_path
from blockbatch.core.ratelimit import Need
from blockbatch.core.registry import Usage, cost_usd
from blockbatch.core.results import parse_results
from blockbatch.core.warm_up import WARM_UP_PATH, warm_up_request
from blockbatch.store import ledger, overlays, quality
from blockbatch.store.runs import cached_run_context, probe_context

#: A run sizes max_tokens from its own answers once this many pack calls were answered, or
#: a learning pack's worth of blocks (core.planning.LEARNING_PACK_BLOCKS), read from the
#: ledger at most every this many seconds per worker.
_OBSERVED_AFTER = 3
_OBSERVED_EVERY_S = 5.0

# Workflows import these from here too; they live in activities.errors.
__all__ = ["API_UNAVAILABLE", "RETRYABLE", "LlmActivities"]

#: Postgres is unreachable for now (restarting, connection lost): worth waiting for.
_DB_UNAVAILABLE = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
)
#: How long a received (paid) answer waits for Postgres before the activity gives up.
_RECORD_PATIENCE_S = 300.0
#: How long a call waits for Postgres before it starts (past that, the attempt fails).
_PREPARE_PATIENCE_S = 120.0
#: A budgeted call that fits once the run's open calls are answered looks again this often,
#: for at most this long (a call left open by a lost worker is marked abandoned when its
#: attempt is retried; past the patience the budget counts as exhausted).
_BUDGET_POLL_S = 0.5
_BUDGET_PATIENCE_S = 300.0
_T = TypeVar("_T")
#: Past this many runs a worker forgets which had an uncached prefix (runs come and go).
_UNCACHED_KEPT = 1000
#: A pack's probe calls in flight at once (they go through the fleet's limiter too).
_PROBES_AT_ONCE = 4
#: What ``_prepare`` hands ``_send``: the run, the ledger row, the pack, the request and
#: what it will count against the rate limits.
_Prepared = tuple[RunContext, int, list[str], dict[str, Any], Need]


class LlmActivities:
    """Activities that call Claude; one anthropic client and one pool per worker process."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        client: anthropic.AsyncAnthropic,
        limiter: FleetLimiter | None = None,
    ) -> None:
        self.pool = pool
        self.client = client
        #: The fleet's shared rate limiter (``None``: calls go out unpaced).
        self.limiter = limiter
        #: Per run: what its answers wrote per estimated output token.
        self._observed: PerRun[ledger.Observed] = PerRun()
        #: Runs whose prompt prefix this worker saw answered uncached (no cache write or
        #: read at all): their calls count the prefix as input against the rate limits.
        self._uncached: set[str] = set()

    @activity.defn
    async def call_model(self, inp: CallModelInput) -> CallModelOutput:
        """Call Claude for one pack attempt and record request and answer in the ledger.

        Nothing is paid before the call, yet a Postgres outage there would fail the attempt
        and use up retries that belong to Claude's errors: it is waited out in place.
        """
        prepared = await _patiently(
            "prepare the call", _PREPARE_PATIENCE_S, lambda: self._prepare(inp)
        )
        if isinstance(prepared, CallModelOutput):
            return prepared
        give_up = inp.outage_attempts is not None and activity.info().attempt >= inp.outage_attempts
        return await self._send(*prepared, give_up=give_up)

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
                    endpoint=await client_endpoint(self.client),
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
            raw = await self.client.messages.with_raw_response.create(**request)
            message = (await raw.parse()).model_dump(mode="json")
        except anthropic.APIError as err:
            error = from_api_error(err)
            request_id = err.request_id if isinstance(err, anthropic.APIStatusError) else None
            await self._finish_failed(
                call_id, error.status, error.error_type, error.message, request_id, started
            )
            return ProbeApiOutput(
                up=not is_outage(error),
                message=error.describe(),
                call_id=call_id,
                call=CallFacts(status="failed", api_error=True, http_status=error.status),
                unreachable=await self._unreachable(inp.run_id, error),
            )
        answer = await self._record_answer(
            ctx, call_id, message, raw.headers.get("request-id"), started
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
            cached = (previous.cache_creation_input_tokens + previous.cache_read_input_tokens) > 0
            self._prefix_seen(ctx.run_id, cached)
            return WarmCacheOutput(called=True, call_id=previous.call_id, cached=cached)
        if not ctx.cacheable_prefix_tokens:
            return WarmCacheOutput(called=False)
        request = warm_up_request(ctx)
        try:
            call_id = await self._open_call(
                ctx,
                inp.run_id,
                WARM_UP_PATH,
                inp.first_pack + 1,
                [],
                request,
                purpose="warm_up",
                worst_case_usd=warm_up_worst_case(ctx, max_tokens=request["max_tokens"]),
            )
        except ledger.OverBudget:
            return WarmCacheOutput(called=False, over_budget=True)
        if call_id is None:
            return WarmCacheOutput(called=False)
        # The warm-up writes the prefix to the cache: the API counts it as input.
        answer = await self._send(
            ctx,
            call_id,
            [],
            request,
            Need(1, ctx.cacheable_prefix_tokens, max(request["max_tokens"], 1)),
        )
        cached = (answer.cache_creation_input_tokens + answer.cache_read_input_tokens) > 0
        if not cached:
            activity.logger.warning(
                "run %s: the warm-up wrote nothing to the prompt cache (the prefix is under "
                "%s's minimum cacheable length?): calls count their prefix as uncached input",
                ctx.run_id,
                ctx.model.id,
            )
        return WarmCacheOutput(
            called=True,
            call_id=answer.call_id,
            totals=answer.totals(),
            cached=cached,
            call=CallFacts.of_output(answer),
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
        spent = Totals()
        call_id: int | None = None
        for attempt in range(1, PROBE_ATTEMPTS + 1):
            async with self.pool.acquire() as conn:
                previous = await ledger.recorded_answer(conn, run_id, path, attempt)
            if previous is not None:  # answered before this activity attempt: counted then
                call_id = previous.call_id
                break
            try:
                opened = await self._open_call(
                    ctx,
                    run_id,
                    path,
                    attempt,
                    [uid],
                    request,
                    purpose=QUALITY_PROBE,
                    worst_case_usd=pack_worst_case(ctx, pack),
                    block_aliases=aliases,
                )
            except ledger.OverBudget:
                await not_compared("skipped", "the run's budget cannot hold the probe call")
                return spent
            if opened is None:
                await not_compared("skipped", "the run stopped before the probe call")
                return spent
            try:
                out = await self._send(
                    ctx,
                    opened,
                    [uid],
                    request,
                    self._need(ctx, pack.est_input_tokens, pack.max_tokens),
                )
            except ApplicationError as err:
                failed_call = call_of_error(err)
                if failed_call is not None:
                    calls.append(failed_call)
                spent.add(Totals(calls=1, quality_calls=1))
                if err.non_retryable or attempt == PROBE_ATTEMPTS:
                    await not_compared("failed", err.message, opened)
                    return spent
                await _pause(
                    err.next_retry_delay.total_seconds()
                    if err.next_retry_delay
                    else 2.0 * 2 ** (attempt - 1)
                )
                continue
            made = CallFacts.of_output(out)
            if made is not None:
                calls.append(made)
            answer_totals = out.totals()
            answer_totals.quality_calls = answer_totals.calls
            answer_totals.quality_cost_usd = answer_totals.cost_usd
            spent.add(answer_totals)
            if out.outcome != "answered":
                await not_compared("failed", out.message or out.outcome, opened)
                return spent
            call_id = opened
            break
        assert call_id is not None
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
                return _answered(previous, reused=True)
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
            call_id = await self._open_call(
                ctx,
                inp.run_id,
                inp.pack_path,
                inp.pack_attempt,
                uids,
                request,
                est_output_tokens=pack.learn_output_tokens,
                worst_case_usd=pack_worst_case(ctx, pack),
                block_aliases=aliases,
            )
        except ledger.OverBudget as over:
            return CallModelOutput(
                outcome="over_budget",
                block_uids=uids,
                message=refusal_text(over.budget, recorded=over.recorded, need=over.need),
            )
        if call_id is None:
            return CallModelOutput(
                outcome="cancelled", block_uids=uids, message="run is cancelling"
            )
        return ctx, call_id, uids, request, self._need(ctx, pack.est_input_tokens, pack.max_tokens)

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

    async def _open_call(
        self,
        ctx: RunContext,
        run_id: str,
        pack_path: str,
        pack_attempt: int,
        uids: list[str],
        request: dict[str, Any],
        *,
        purpose: str = "pack",
        est_output_tokens: int | None = None,
        block_aliases: dict[str, str] | None = None,
        worst_case_usd: float | None = None,
    ) -> int | None:
        """Insert the ledger row, unless the run stopped; ``None`` means do not call.

        Raises:
            ledger.OverBudget: the run's budget cannot hold the call (after waiting, as
                long as the run's open calls may still leave room for it).
        """
        prefix = request_prefix(request)
        stored_request = {k: v for k, v in request.items() if k not in ("system", "tools")}
        deadline = time.monotonic() + _BUDGET_PATIENCE_S
        while True:
            try:
                async with self.pool.acquire() as conn:
                    return await ledger.open_call(
                        conn,
                        run_id=run_id,
                        pack_path=pack_path,
                        pack_attempt=pack_attempt,
                        block_uids=uids,
                        model=ctx.model.id,
                        prefix=prefix,
                        request=stored_request,
                        origin=origin(),
                        purpose=purpose,
                        est_output_tokens=est_output_tokens,
                        block_aliases=block_aliases,
                        worst_case_usd=worst_case_usd,
                        endpoint=await client_endpoint(self.client),
                    )
            except ledger.OverBudget as over:
                # Open calls hold the room this one needs; they usually cost far less than
                # their worst case, so wait for their answers before giving up.
                if not over.wait or time.monotonic() > deadline:
                    raise
            activity.heartbeat(f"{pack_path}: waiting for the run's open calls (budget)")
            await asyncio.sleep(_BUDGET_POLL_S)

    async def _send(
        self,
        ctx: RunContext,
        call_id: int,
        uids: list[str],
        request: dict[str, Any],
        need: Need,
        *,
        give_up: bool = False,
    ) -> CallModelOutput:
        """Send the request once the fleet's limiter admits it, then settle.

        ``give_up``: if Claude is down, report it instead of retrying.
        """
        async with heartbeating(f"call {call_id}: waiting for Claude") as status:
            reservation, waited, binding = await self._reserve(ctx, need, status)
            started = time.monotonic()
            try:
                message, headers = await self._call(request)
                request_id = headers.get("request-id")
            except anthropic.APIStatusError as err:
                error = from_api_error(err)
                await self._settle_error(reservation, error, err.response.headers)
                return await self._record_error(call_id, uids, err, error, started, give_up)
            except anthropic.APIConnectionError as err:
                await self._settle(reservation, used=None)
                await self._finish_failed(
                    call_id, None, type(err).__name__, str(err), None, started
                )
                raise application_error(from_api_error(err), give_up=give_up) from None
            # Still heartbeating: the ledger write may have to wait for Postgres.
            status[0] = f"call {call_id}: recording the answer"
            answer = await self._record_answer(ctx, call_id, message, request_id, started)
            self._learn_prefix(ctx, message)
            await self._settle(reservation, used=_used(message), headers=headers, answered=True)
            answer.limiter_wait_s = round(waited, 1)
            answer.limiter = await self._note(ctx, binding)
            return answer

    async def _call(self, request: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Send one request: the answer as JSON and the response headers.

        A request whose ``max_tokens`` the SDK would not send without streaming (it
        could run past ten minutes) streams, and its final message is the answer.
        """
        limit = anthropic._constants.MODEL_NONSTREAMING_TOKENS.get(request["model"])
        if needs_streaming(request["max_tokens"], limit):
            async with self.client.messages.stream(**request) as stream:
                final = await stream.get_final_message()
                return final.model_dump(mode="json"), stream.response.headers
        raw = await self.client.messages.with_raw_response.create(**request)
        return (await raw.parse()).model_dump(mode="json"), raw.headers

    def _need(self, ctx: RunContext, est_input_tokens: int, max_tokens: int) -> Need:
        """What a pack call will count: its input less a cached prompt prefix, and max_tokens.

        Cache reads do not count against the input-token limit on current models; a prefix
        long enough to be cached is assumed read (settling corrects a first call's write),
        unless this worker saw the run's prefix answered uncached.
        """
        cached = ctx.cacheable_prefix_tokens if ctx.run_id not in self._uncached else 0
        return Need(requests=1, input=max(est_input_tokens - cached, 1), output=max_tokens)

    def _prefix_seen(self, run_id: str, cached: bool) -> None:
        if cached:
            self._uncached.discard(run_id)
            return
        if len(self._uncached) > _UNCACHED_KEPT:
            self._uncached.clear()
        self._uncached.add(run_id)

    def _learn_prefix(self, ctx: RunContext, message: dict[str, Any]) -> None:
        """Whether an answer shows the run's prefix in the cache (written or read)."""
        if ctx.cacheable_prefix_tokens:
            usage = Usage.from_message(message)
            self._prefix_seen(
                ctx.run_id, usage.cache_creation_input_tokens + usage.cache_read_input_tokens > 0
            )

    async def _reserve(
        self, ctx: RunContext, need: Need, status: list[str]
    ) -> tuple[int | None, float, str | None]:
        """Wait for the fleet's limiter to admit the call: its reservation id, the seconds
        waited and the limit waited for."""
        if self.limiter is None:
            return None, 0.0, None
        reservation, waited, binding = await self.limiter.acquire(
            run_id=ctx.run_id,
            model=ctx.model.id,
            need=need,
            weight=ctx.options.weight,
            status=status,
        )
        if waited >= 1:
            activity.logger.info("rate limiter: waited %.1f s (%s)", waited, binding)
        return reservation, waited, binding

    async def _note(self, ctx: RunContext, binding: str | None) -> LimiterNote | None:
        """Best effort: the limiter as the run sees it, for its progress and the UI."""
        if self.limiter is None:
            return None
        try:
            note = await self.limiter.note(ctx.run_id, ctx.model.id)
        except (*_DB_UNAVAILABLE, asyncpg.PostgresError) as exc:
            activity.logger.debug("rate limiter: no note (%s)", type(exc).__name__)
            return None
        if note is None:
            return None
        return LimiterNote(at=datetime.now(UTC), binding=binding, **note)

    async def _settle(
        self,
        reservation: int | None,
        *,
        used: Need | None,
        headers: Any = None,
        throttled_after_s: float | None = None,
        answered: bool = False,
        error_code: str | None = None,
    ) -> None:
        """Best effort: a reservation left unsettled costs the fleet one refill, no more."""
        if self.limiter is None or reservation is None:
            return
        try:
            await self.limiter.settle(
                reservation,
                used=used,
                headers=dict(headers) if headers is not None else None,
                throttled_after_s=throttled_after_s,
                answered=answered,
                error_code=error_code,
            )
        except (*_DB_UNAVAILABLE, asyncpg.PostgresError) as exc:
            activity.logger.warning(
                "rate limiter: reservation %s not settled (%s)", reservation, type(exc).__name__
            )

    async def _settle_error(
        self, reservation: int | None, error: ClaudeError, headers: Any
    ) -> None:
        status = error.status or 0
        if status == 429:
            # The error code says what the 429 is: a ramp limit holds the fleet without a
            # cut, a spend cap changes nothing (core.ratelimit.throttle_of).
            await self._settle(
                reservation,
                used=None,
                headers=headers,
                throttled_after_s=error.retry_after_s or 0.0,
                error_code=error.error_code,
            )
        else:
            # Answered (a 4xx) or not (5xx): the request counted, its tokens did not.
            await self._settle(
                reservation, used=Need(1, 0, 0), headers=headers, answered=status < 500
            )

    async def _record_answer(
        self,
        ctx: RunContext,
        call_id: int,
        message: dict[str, Any],
        request_id: str | None,
        started: float,
    ) -> CallModelOutput:
        """Write a received answer to the ledger, waiting out a Postgres outage.

        The answer is already paid for: failing the activity here would make its retry call
        Claude again, so a lost connection (Postgres restarting) is retried in place.
        """
        usage = Usage.from_message(message)
        cost = cost_usd(ctx.model, usage)
        latency_ms = int((time.monotonic() - started) * 1000)

        async def write() -> ledger.Answer | None:
            async with self.pool.acquire() as conn:
                return await ledger.record_answer(
                    conn, call_id, message, request_id, usage, cost, latency_ms
                )

        answer = await _patiently(f"record the answer of call {call_id}", _RECORD_PATIENCE_S, write)
        if answer is None:
            # Another worker already recorded an answer for this attempt: use that one.
            raise ApplicationError(
                "pack attempt answered twice; retrying to reuse the recorded answer", type=RETRYABLE
            )
        return _answered(answer, reused=False)

    async def _record_error(
        self,
        call_id: int,
        uids: list[str],
        err: anthropic.APIStatusError,
        error: ClaudeError,
        started: float,
        give_up: bool,
    ) -> CallModelOutput:
        """Record Claude's error answer; raise it, or return it as the attempt's outcome."""
        await self._finish_failed(
            call_id,
            error.status,
            error.error_type,
            error.message,
            err.request_id,
            started,
            error.error_code,
        )
        if error.kind in ("fatal", "retryable"):
            # A fatal error (key, spend limit, billing, model) stops the run's calls; the
            # rest is retried by Temporal, or decided by the pack policy.
            raise application_error(error, give_up=give_up)
        return CallModelOutput(
            outcome="overflow" if error.kind == "overflow" else "request_error",
            block_uids=uids,
            call_id=call_id,
            message=error.describe(),
            error=error,
        )

    async def _unreachable(self, run_id: str, error: ClaudeError) -> str | None:
        """``host: cause`` when ``error`` reached no server and this worker's endpoint never
        answered the run (the run then ends ``unreachable``: blockbatch/core/outage.py)."""
        if not is_unreachable(error):
            return None
        endpoint = await client_endpoint(self.client)
        async with self.pool.acquire() as conn:
            if await ledger.endpoint_answered(conn, run_id, endpoint.host):
                return None
        host = error.host or endpoint.host or "api.anthropic.com"
        return f"{host}: {error.message}"

    async def _finish_failed(
        self,
        call_id: int,
        status: int | None,
        error_type: str,
        message: str,
        request_id: str | None,
        started: float,
        error_code: str | None = None,
    ) -> None:
        async with self.pool.acquire() as conn:
            await ledger.record_error(
                conn,
                call_id,
                status,
                error_type,
                message,
                request_id,
                int((time.monotonic() - started) * 1000),
                error_code,
            )


def _used(message: dict[str, Any]) -> Need:
    """What the API counted for an answer (uncached input and cache writes; output)."""
    usage = Usage.from_message(message)
    return Need(
        requests=1,
        input=usage.input_tokens + usage.cache_creation_input_tokens,
        output=usage.output_tokens,
    )


def _answered(answer: ledger.Answer, *, reused: bool) -> CallModelOutput:
    return CallModelOutput(
        outcome="answered",
        block_uids=answer.block_uids,
        call_id=answer.call_id,
        stop_reason=answer.stop_reason,
        **answer.counts(),
        cost_usd=answer.cost_usd,
        reused=reused,
    )


async def _pause(seconds: float) -> None:
    """Wait before a probe call's next attempt (at most 30 s), heartbeating meanwhile."""
    deadline = time.monotonic() + min(max(seconds, 0.5), 30.0)
    while (left := deadline - time.monotonic()) > 0:
        activity.heartbeat("quality probe: waiting to try again")
        await asyncio.sleep(min(left, 5.0))


async def _patiently(what: str, patience_s: float, step: Callable[[], Awaitable[_T]]) -> _T:
    """Run ``step``, running it again while Postgres is unreachable, up to ``patience_s``."""
    deadline = time.monotonic() + patience_s
    delay = 0.5
    while True:
        try:
            return await step()
        except _DB_UNAVAILABLE as exc:
            if time.monotonic() + delay > deadline:
                raise
            activity.logger.warning(
                "cannot %s yet: Postgres unavailable (%s); retrying in %.1fs",
                what,
                type(exc).__name__,
                delay,
            )
            activity.heartbeat()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
