"""The ledger-first call path every Claude call of a worker goes through.

Open the ledger row (under the run's lock and budget: ``blockbatch.store.ledger.open_call``),
reserve with the fleet's limiter, send (a :class:`~blockbatch.send.sender.Sender`: the one step
that knows the provider), settle the reservation, record the answer or the error. The pack
call, the warm-up, the outage probe, the quality probe's single blocks and escalation's
second packs and single blocks all use :class:`CallPath`; nothing else sends a Messages
request.

Pay once: an answer is written to the ledger before anything parses it, and a recorded
answer of an attempt is reused, never asked again. Retries belong to Temporal: a retryable
failure is raised with the server's retry-after (``activities.errors``); only
:meth:`CallPath.ask_alone` tries a failed call again at its next ledger attempt, for the
callers that ask many single blocks in one activity (the quality probe, escalation) and
must not fail them all for one block's error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.errors import RETRYABLE, application_error, call_of_error
from activities.limiter import FleetLimiter
from activities.shared import heartbeat_every_s, heartbeating, origin
from blockbatch.core.budget import Reserved, reservation
from blockbatch.core.call_types import CallFacts, CallModelOutput, LimiterNote, WarmCacheOutput
from blockbatch.core.claude_errors import ClaudeError, is_unreachable
from blockbatch.core.context import RunContext
from blockbatch.core.gateway import answer_cost_usd
from blockbatch.core.planning import Pack
from blockbatch.core.prompt import request_prefix
from blockbatch.core.providers import CLAUDE_API, Route
from blockbatch.core.quality import PROBE_ATTEMPTS
from blockbatch.core.ratelimit import Need
from blockbatch.core.registry import Usage
from blockbatch.core.warm_up import WARM_UP_PATH
from blockbatch.send.sender import NotSent, Sender
from blockbatch.store import ledger

#: Postgres is unreachable for now (restarting, connection lost): worth waiting for.
DB_UNAVAILABLE = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
)
#: How long a received (paid) answer waits for Postgres before the activity gives up.
_RECORD_PATIENCE_S = 300.0
#: A budgeted call that fits once the run's open calls are answered looks again this often,
#: for at most this long (a call left open by a lost worker is marked abandoned when its
#: attempt is retried; past the patience the budget counts as exhausted).
_BUDGET_POLL_S = 0.5
_BUDGET_PATIENCE_S = 300.0
_T = TypeVar("_T")
#: Past this many runs a worker forgets which had an uncached prefix (runs come and go).
_UNCACHED_KEPT = 1000


@dataclass
class Asked:
    """What :meth:`CallPath.ask_alone` came to.

    Attributes:
        call_id: the answered call (``None``: no usable answer; ``error`` says why).
        opened: the last call opened (the failed one, when there is no answer).
        error: why there is no answer.
        answers: the calls sent that came back with an outcome, in order.
        failed: the calls that failed (``None``: the failure names no call).
        over_budget: the run's budget cannot hold the call; nothing was asked.
        stopped: the run is cancelling; nothing was asked, and nothing is to be recorded.
    """

    call_id: int | None = None
    opened: int | None = None
    error: str | None = None
    answers: list[CallModelOutput] = field(default_factory=list)
    failed: list[CallFacts | None] = field(default_factory=list)
    over_budget: bool = False
    stopped: bool = False

    @property
    def calls(self) -> int:
        """New calls that reached Claude (an error naming its call counts)."""
        return len(self.answers) + sum(f is not None for f in self.failed)

    @property
    def cost_usd(self) -> float:
        return sum(a.cost_usd for a in self.answers)


class CallPath:
    """Open, reserve, send, settle, record: one worker's path for every Claude call.

    Args:
        pool: the worker's Postgres pool.
        sender: the provider's sending step (:class:`~blockbatch.send.sender.AnthropicSender`).
        limiter: the fleet's shared rate limiter (``None``: calls go out unpaced).
    """

    def __init__(
        self, pool: asyncpg.Pool, sender: Sender, limiter: FleetLimiter | None = None
    ) -> None:
        self.pool = pool
        self.sender = sender
        self.limiter = limiter
        #: Runs whose prompt prefix this worker saw answered uncached (no cache write or
        #: read at all): their calls count the prefix as input against the rate limits.
        self._uncached: set[str] = set()

    async def open(
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
        reserved: Reserved | None = None,
    ) -> int | None:
        """Insert the ledger row, unless the run stopped; ``None`` means do not call.

        ``reserved``: what a pack call reserves against the run's budget (:meth:`budgeted`);
        without it the call reserves ``worst_case_usd``.

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
                        worst_case_usd=(
                            reserved.worst_usd if reserved is not None else worst_case_usd
                        ),
                        expected_usd=reserved.expected_usd if reserved is not None else None,
                        reserve_usd=reserved.usd if reserved is not None else None,
                        endpoint=await self.sender.endpoint(ctx.route),
                    )
            except ledger.OverBudget as over:
                # Open calls hold the room this one needs; they usually cost far less than
                # their worst case, so wait for their answers before giving up.
                if not over.wait or time.monotonic() > deadline:
                    raise
            activity.heartbeat(f"{pack_path}: waiting for the run's open calls (budget)")
            await asyncio.sleep(_BUDGET_POLL_S)

    async def send(
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
                sent = await self.sender.send(request, ctx.route)
            except NotSent as failed:
                error = failed.error
                if failed.answered:
                    await self._settle_error(reservation, error, failed.headers)
                    return await self._record_error(call_id, uids, failed, started, give_up)
                await self._settle(reservation, used=None)
                await self.finish_failed(
                    call_id, None, failed.ledger_type, failed.ledger_message, None, started
                )
                raise application_error(error, give_up=give_up) from None
            message, headers, request_id = sent.message, sent.headers, sent.request_id
            # Still heartbeating: the ledger write may have to wait for Postgres.
            status[0] = f"call {call_id}: recording the answer"
            answer = await self.record_answer(ctx, call_id, message, request_id, started)
            self.learn_prefix(ctx, message)
            await self._settle(reservation, used=used(message), headers=headers, answered=True)
            answer.limiter_wait_s = round(waited, 1)
            answer.limiter = await self._note(ctx, binding)
            return answer

    async def budgeted(
        self, conn: asyncpg.Connection, ctx: RunContext, pack: Pack, *, again: bool = False
    ) -> tuple[Pack, Reserved | None]:
        """The pack as a budgeted run sends it, and what it reserves
        (``blockbatch.core.budget.reservation``: its expected cost from what the run has
        learned, with a margin from the run's spread; ``max_tokens`` lowered to what that
        pays for). A run without a budget sends the pack as planned and reserves nothing.

        ``again``: a later attempt of the pack (after a truncated answer, say): it may write
        several times its expected output whatever the run's spread, so that a block
        writing more than the run's answers do is not cut at the same place again.
        """
        if ctx.options.max_cost_usd is None:
            return pack, None
        seen = await ledger.observed_output(conn, ctx.run_id)
        reserved = reservation(
            ctx,
            pack,
            ratio=seen.ratio if seen is not None else None,
            thinking=seen.thinking if seen is not None else None,
            spread=seen.spread if seen is not None else None,
            cached_s=await ledger.prefix_cached_s(conn, ctx.run_id),
            again=again,
        )
        if reserved.max_tokens != pack.max_tokens:
            pack = dataclasses.replace(
                pack,
                max_tokens=reserved.max_tokens,
                thinking_tokens=min(pack.thinking_tokens, reserved.max_tokens),
            )
        return pack, reserved

    def need(self, ctx: RunContext, est_input_tokens: int, max_tokens: int) -> Need:
        """What a pack call will count: its input less a cached prompt prefix, and max_tokens.

        Cache reads do not count against the input-token limit on current models; a prefix
        long enough to be cached is assumed read (settling corrects a first call's write),
        unless this worker saw the run's prefix answered uncached.
        """
        cached = ctx.cacheable_prefix_tokens if ctx.run_id not in self._uncached else 0
        return Need(requests=1, input=max(est_input_tokens - cached, 1), output=max_tokens)

    async def warm_up(
        self,
        ctx: RunContext,
        attempt: int,
        request: dict[str, Any],
        worst_usd: float,
        *,
        what: str,
        uncached_means: str = "",
    ) -> WarmCacheOutput:
        """Send a warm-up request (the sync warm-up, a batch round's pre-warm) on the one
        call path, ledger first as purpose ``warm_up`` at pack path ``warm-up`` and
        ``attempt``, and say whether it wrote the prompt cache (a prefix under the model's
        minimum is processed uncached, with no error: contract §5). ``what`` and
        ``uncached_means`` word the warning given when it did not."""
        try:
            call_id = await self.open(
                ctx,
                ctx.run_id,
                WARM_UP_PATH,
                attempt,
                [],
                request,
                purpose="warm_up",
                worst_case_usd=worst_usd,
            )
        except ledger.OverBudget:
            return WarmCacheOutput(called=False, over_budget=True)
        if call_id is None:
            return WarmCacheOutput(called=False)
        # The warm-up writes the prefix to the cache: the API counts it as input.
        answer = await self.send(
            ctx,
            call_id,
            [],
            request,
            Need(1, ctx.cacheable_prefix_tokens, max(request["max_tokens"], 1)),
        )
        cached = wrote_cache(answer)
        if not cached:
            activity.logger.warning(
                "run %s: %s wrote nothing to the prompt cache (the prefix is under %s's "
                "minimum cacheable length?)%s",
                ctx.run_id,
                what,
                ctx.model.id,
                uncached_means,
            )
        return WarmCacheOutput(
            called=True,
            call_id=answer.call_id,
            totals=answer.totals(),
            cached=cached,
            call=CallFacts.of_output(answer),
        )

    def prefix_seen(self, run_id: str, cached: bool) -> None:
        if cached:
            self._uncached.discard(run_id)
            return
        if len(self._uncached) > _UNCACHED_KEPT:
            self._uncached.clear()
        self._uncached.add(run_id)

    def learn_prefix(self, ctx: RunContext, message: dict[str, Any]) -> None:
        """Whether an answer shows the run's prefix in the cache (written or read)."""
        if ctx.cacheable_prefix_tokens:
            usage = Usage.from_message(message)
            self.prefix_seen(
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
        except (*DB_UNAVAILABLE, asyncpg.PostgresError) as exc:
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
        except (*DB_UNAVAILABLE, asyncpg.PostgresError) as exc:
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

    async def record_answer(
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
        # A gateway reports what it charged (blockbatch/core/gateway.py); else our prices.
        cost = answer_cost_usd(ctx.model, message)
        latency_ms = int((time.monotonic() - started) * 1000)

        async def write() -> ledger.Answer | None:
            async with self.pool.acquire() as conn:
                return await ledger.record_answer(
                    conn, call_id, message, request_id, usage, cost, latency_ms
                )

        answer = await patiently(f"record the answer of call {call_id}", _RECORD_PATIENCE_S, write)
        if answer is None:
            # Another worker already recorded an answer for this attempt: use that one.
            raise ApplicationError(
                "pack attempt answered twice; retrying to reuse the recorded answer", type=RETRYABLE
            )
        return answered(answer, reused=False)

    async def _record_error(
        self,
        call_id: int,
        uids: list[str],
        failed: NotSent,
        started: float,
        give_up: bool,
    ) -> CallModelOutput:
        """Record Claude's error answer; raise it, or return it as the attempt's outcome."""
        error = failed.error
        await self.finish_failed(
            call_id,
            error.status,
            error.error_type,
            error.message,
            failed.request_id,
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

    async def unreachable(
        self, run_id: str, error: ClaudeError, route: Route = CLAUDE_API
    ) -> str | None:
        """``host: cause`` when ``error`` reached no server and this worker's endpoint never
        answered the run (the run then ends ``unreachable``: blockbatch/core/outage.py)."""
        if not is_unreachable(error):
            return None
        endpoint = await self.sender.endpoint(route)
        async with self.pool.acquire() as conn:
            if await ledger.endpoint_answered(conn, run_id, endpoint.host):
                return None
        host = error.host or endpoint.host or "api.anthropic.com"
        return f"{host}: {error.message}"

    async def finish_failed(
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

    async def ask_alone(
        self,
        ctx: RunContext,
        path: str,
        uids: list[str],
        request: dict[str, Any],
        pack: Pack,
        *,
        purpose: str,
        aliases: dict[str, str] | None,
    ) -> Asked:
        """Send ``request`` as ledger ``path``, attempts 1 .. :data:`PROBE_ATTEMPTS`: a
        recorded answer is reused (pay once); a failed call is tried at the next attempt
        after the server's retry-after. Never raises for Claude's errors: the blocks then
        have no answer (``Asked.error``). The quality probe's single blocks and
        escalation's second packs and single blocks: many of them share one activity, and
        one block's error must not have the others asked again."""
        asked = Asked()
        for attempt in range(1, PROBE_ATTEMPTS + 1):
            async with self.pool.acquire() as conn:
                previous = await ledger.recorded_answer(conn, ctx.run_id, path, attempt)
            if previous is not None:  # answered before this activity attempt: counted then
                asked.call_id = previous.call_id
                return asked
            async with self.pool.acquire() as conn:
                sent_pack, reserved = await self.budgeted(conn, ctx, pack)
            if sent_pack.max_tokens != request["max_tokens"]:
                request = {**request, "max_tokens": sent_pack.max_tokens}
            try:
                opened = await self.open(
                    ctx,
                    ctx.run_id,
                    path,
                    attempt,
                    uids,
                    request,
                    purpose=purpose,
                    reserved=reserved,
                    block_aliases=aliases,
                )
            except ledger.OverBudget:
                asked.error, asked.over_budget = "the run's budget cannot hold the call", True
                return asked
            if opened is None:
                asked.error, asked.stopped = "the run stopped before the call", True
                return asked
            asked.opened = opened
            try:
                out = await self.send(
                    ctx,
                    opened,
                    uids,
                    request,
                    self.need(ctx, pack.est_input_tokens, sent_pack.max_tokens),
                )
            except ApplicationError as err:
                asked.failed.append(call_of_error(err))
                if err.non_retryable or attempt == PROBE_ATTEMPTS:
                    asked.error = err.message
                    return asked
                await _pause(
                    err.next_retry_delay.total_seconds()
                    if err.next_retry_delay
                    else 2.0 * 2 ** (attempt - 1)
                )
                continue
            asked.answers.append(out)
            if out.outcome != "answered":
                asked.error = out.message or out.outcome
                return asked
            asked.call_id = opened
            return asked
        return asked


def used(message: dict[str, Any]) -> Need:
    """What the API counted for an answer (uncached input and cache writes; output)."""
    usage = Usage.from_message(message)
    return Need(
        requests=1,
        input=usage.input_tokens + usage.cache_creation_input_tokens,
        output=usage.output_tokens,
    )


def answered(answer: ledger.Answer, *, reused: bool) -> CallModelOutput:
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
        activity.heartbeat("single-block ask: waiting to try again")
        await asyncio.sleep(min(left, heartbeat_every_s()))


async def patiently(what: str, patience_s: float, step: Callable[[], Awaitable[_T]]) -> _T:
    """Run ``step``, running it again while Postgres is unreachable, up to ``patience_s``."""
    deadline = time.monotonic() + patience_s
    delay = 0.5
    while True:
        try:
            return await step()
        except DB_UNAVAILABLE as exc:
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
            delay = min(delay * 2, heartbeat_every_s())


def wrote_cache(usage: ledger.Answer | CallModelOutput) -> bool:
    """Whether a warm-up's answer shows its prefix in the prompt cache (written or read)."""
    return (usage.cache_creation_input_tokens + usage.cache_read_input_tokens) > 0
