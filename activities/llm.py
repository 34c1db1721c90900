"""call_model: one Claude call for one pack attempt, written to the ledger before it returns.

Pay once: an attempt whose answer is already in the ledger returns that answer without
calling again. A call never starts once the run is cancelling (checked under a row lock
that ``mark_run_cancelling`` must wait for). Retries belong to Temporal: the client runs
with ``max_retries=0`` and retryable failures are raised with the server's retry-after.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import anthropic
import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from core.context import RunContext
from core.models import CallModelInput, CallModelOutput
from core.planning import describe_pack, estimate_output_tokens
from core.prompt import build_request, prefix_sha256
from core.registry import Usage, cost_usd
from store.runs import cached_run_context

#: ApplicationError type that stops the whole run (401/403): retrying cannot help.
API_KEY_REJECTED = "ApiKeyRejected"
RETRYABLE = "ClaudeUnavailable"
_HEARTBEAT_EVERY_S = 5.0
_ACTIVE_STATUSES = ("created", "planning", "running")
#: Postgres is unreachable for now (restarting, connection lost): worth waiting for.
_DB_UNAVAILABLE = (OSError, TimeoutError, asyncpg.InterfaceError,
                   asyncpg.PostgresConnectionError, asyncpg.OperatorInterventionError)
#: How long a received (paid) answer waits for Postgres before the activity gives up.
_RECORD_PATIENCE_S = 300.0
#: How long a call waits for Postgres before it starts (past that, the attempt fails).
_PREPARE_PATIENCE_S = 120.0
_T = TypeVar("_T")
#: What ``_prepare`` hands ``_send``: the run, the ledger row, the pack and the request.
_Prepared = tuple[RunContext, int, list[str], dict[str, Any]]


def _retry_after(err: anthropic.APIStatusError) -> timedelta | None:
    value = err.response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    if seconds is None:
        return None
    # Jitter: callers told the same retry-after must not all come back in the same instant.
    seconds = min(max(seconds, 0.5), 300) * (1 + random.uniform(0, 0.5))
    return timedelta(seconds=seconds)


class LlmActivities:
    """Activities that call Claude; one anthropic client and one pool per worker process."""

    def __init__(self, pool: asyncpg.Pool, client: anthropic.AsyncAnthropic) -> None:
        self.pool = pool
        self.client = client

    @activity.defn
    async def call_model(self, inp: CallModelInput) -> CallModelOutput:
        """Call Claude for one pack attempt and record request and answer in the ledger.

        Nothing is paid before the call, yet a Postgres outage there would fail the attempt
        and use up retries that belong to Claude's errors: it is waited out in place.
        """
        prepared = await _patiently("prepare the call", _PREPARE_PATIENCE_S,
                                    lambda: self._prepare(inp))
        if isinstance(prepared, CallModelOutput):
            return prepared
        return await self._send(*prepared)

    async def _prepare(self, inp: CallModelInput) -> CallModelOutput | _Prepared:
        """Read the pack and open its ledger row; an outcome instead when not to call."""
        async with self.pool.acquire() as conn:
            previous = await conn.fetchrow(
                """select call_id, block_uids, stop_reason, input_tokens, output_tokens,
                          cache_creation_input_tokens, cache_read_input_tokens, cost_usd
                   from llm_calls where run_id = $1 and pack_path = $2 and pack_attempt = $3
                     and status = 'succeeded'""",
                inp.run_id, inp.pack_path, inp.pack_attempt,
            )
            if previous is not None:
                return self._summary(previous, reused=True)
            ctx = await cached_run_context(conn, inp.run_id)
            blocks = await self._pending_blocks(conn, inp)
        if not blocks:
            return CallModelOutput(outcome="empty", block_uids=[])
        uids = [b["block_uid"] for b in blocks]
        spec, model = ctx.spec, ctx.model
        outputs = [
            ctx.options.estimated_output_per_block or estimate_output_tokens(spec, b["est_tokens"])
            for b in blocks
        ]
        pack = describe_pack(range(len(blocks)), [b["est_tokens"] for b in blocks], outputs,
                             ctx.plan_limits())
        if len(blocks) == 1 and pack.oversized:
            return CallModelOutput(
                outcome="oversized", block_uids=uids,
                message=(f"block is too large for {model.id}: about {pack.est_input_tokens:,} "
                         f"input tokens + {pack.max_tokens:,} output tokens exceed the "
                         f"{model.context_window:,}-token context window; split the block "
                         "in the source document"),
            )
        request = build_request(
            spec,
            [{"block_uid": b["block_uid"], "block_type": b["block_type"],
              "block_content": b["block_content"]} for b in blocks],
            max_tokens=pack.max_tokens,
            model=model.id,
            cache_ttl=ctx.options.cache_ttl,
        )
        call_id = await self._open_call(ctx, inp, uids, request)
        if call_id is None:
            return CallModelOutput(outcome="cancelled", block_uids=uids,
                                   message="run is cancelling")
        return ctx, call_id, uids, request

    async def _pending_blocks(
        self, conn: asyncpg.Connection, inp: CallModelInput
    ) -> list[asyncpg.Record]:
        if inp.block_uids is None:
            return await conn.fetch(
                """select b.block_uid, b.block_type, b.block_content, b.est_tokens
                   from overlays o join blocks b using (block_uid)
                   where o.run_id = $1 and o.pack_index = $2 and o.status = 'pending'
                   order by o.block_index""",
                inp.run_id, inp.pack_index,
            )
        return await conn.fetch(
            """select b.block_uid, b.block_type, b.block_content, b.est_tokens
               from overlays o join blocks b using (block_uid)
               where o.run_id = $1 and o.block_uid = any($2::text[]) and o.status = 'pending'
               order by o.block_index""",
            inp.run_id, inp.block_uids,
        )

    async def _open_call(
        self, ctx: RunContext, inp: CallModelInput, uids: list[str], request: dict[str, Any]
    ) -> int | None:
        """Insert the ledger row, unless the run stopped; ``None`` means do not call."""
        info = activity.info()
        prefix_sha = prefix_sha256(request["system"], request["tools"])
        stored_request = {k: v for k, v in request.items() if k not in ("system", "tools")}
        async with self.pool.acquire() as conn, conn.transaction():
            status = await conn.fetchval(
                "select status from runs where run_id = $1 for share", inp.run_id
            )
            if status not in _ACTIVE_STATUSES:
                return None
            await conn.execute(
                """insert into prompt_prefixes (sha256, system, tools) values ($1, $2, $3)
                   on conflict do nothing""",
                prefix_sha, request["system"], request["tools"],
            )
            # An earlier attempt that never recorded an answer lost its worker mid-call.
            await conn.execute(
                """update llm_calls set status = 'abandoned', finished_at = now(),
                          error_message = 'worker lost before the answer was recorded'
                   where run_id = $1 and pack_path = $2 and pack_attempt = $3
                     and status = 'started'""",
                inp.run_id, inp.pack_path, inp.pack_attempt,
            )
            return await conn.fetchval(
                """insert into llm_calls (run_id, pack_path, pack_attempt, block_uids, model,
                       prefix_sha256, request, status, workflow_id, workflow_run_id,
                       activity_id, activity_attempt)
                   values ($1, $2, $3, $4, $5, $6, $7, 'started', $8, $9, $10, $11)
                   returning call_id""",
                inp.run_id, inp.pack_path, inp.pack_attempt, uids, ctx.model.id, prefix_sha,
                stored_request, info.workflow_id, info.workflow_run_id, info.activity_id,
                info.attempt,
            )

    async def _send(
        self, ctx: RunContext, call_id: int, uids: list[str], request: dict[str, Any]
    ) -> CallModelOutput:
        started = time.monotonic()
        heartbeat = asyncio.create_task(_heartbeat_forever())
        try:
            try:
                raw = await self.client.messages.with_raw_response.create(**request)
                message = (await raw.parse()).model_dump(mode="json")
                request_id = raw.headers.get("request-id")
            except anthropic.APIStatusError as err:
                return await self._record_error(call_id, uids, err, started)
            except anthropic.APIConnectionError as err:
                await self._finish_failed(call_id, None, type(err).__name__, str(err), None,
                                          started)
                raise ApplicationError(
                    f"could not reach Claude ({type(err).__name__}); will retry",
                    type=RETRYABLE,
                ) from None
            # Still heartbeating: the ledger write may have to wait for Postgres.
            return await self._record_answer(ctx, call_id, message, request_id, started)
        finally:
            heartbeat.cancel()

    async def _record_answer(
        self, ctx: RunContext, call_id: int, message: dict[str, Any], request_id: str | None,
        started: float,
    ) -> CallModelOutput:
        """Write a received answer to the ledger, waiting out a Postgres outage.

        The answer is already paid for: failing the activity here would make its retry call
        Claude again, so a lost connection (Postgres restarting) is retried in place.
        """
        usage = Usage.from_message(message)
        cost = cost_usd(ctx.model, usage)
        latency_ms = int((time.monotonic() - started) * 1000)
        row = await _patiently(
            f"record the answer of call {call_id}", _RECORD_PATIENCE_S,
            lambda: self._write_answer(call_id, message, request_id, usage, cost, latency_ms),
        )
        return self._summary(row, reused=False)

    async def _write_answer(
        self, call_id: int, message: dict[str, Any], request_id: str | None, usage: Usage,
        cost: float, latency_ms: int,
    ) -> asyncpg.Record:
        async with self.pool.acquire() as conn:
            try:
                row = await conn.fetchrow(
                    """update llm_calls set status = 'succeeded', response = $2, http_status = 200,
                              request_id = $3, stop_reason = $4, input_tokens = $5,
                              output_tokens = $6, cache_creation_input_tokens = $7,
                              cache_read_input_tokens = $8, cache_creation_1h_tokens = $9,
                              cost_usd = $10, latency_ms = $11, finished_at = now()
                       where call_id = $1
                       returning call_id, block_uids, stop_reason, input_tokens, output_tokens,
                                 cache_creation_input_tokens, cache_read_input_tokens, cost_usd""",
                    call_id, message, request_id, message.get("stop_reason"),
                    usage.input_tokens, usage.output_tokens, usage.cache_creation_input_tokens,
                    usage.cache_read_input_tokens, usage.cache_creation_1h_tokens, cost,
                    latency_ms,
                )
            except asyncpg.UniqueViolationError:
                # Another worker already recorded an answer for this attempt: use that one.
                await conn.execute(
                    """update llm_calls set status = 'failed', response = $2,
                              error_type = 'duplicate_attempt', finished_at = now(),
                              error_message = 'answer discarded: this pack attempt was already '
                                              || 'answered by another worker'
                       where call_id = $1""",
                    call_id, message,
                )
                raise ApplicationError("pack attempt answered twice; retrying to reuse the "
                                       "recorded answer", type=RETRYABLE) from None
        return row

    async def _record_error(
        self, call_id: int, uids: list[str], err: anthropic.APIStatusError, started: float
    ) -> CallModelOutput:
        body = err.body if isinstance(err.body, dict) else {}
        error = body.get("error") if isinstance(body.get("error"), dict) else {}
        error_type = str(error.get("type") or type(err).__name__)
        message = str(error.get("message") or err.message)
        status = err.status_code
        await self._finish_failed(call_id, status, error_type, message, err.request_id, started)
        if status in (401, 403):
            raise ApplicationError(
                f"the API key was rejected by Claude ({status} {error_type}: {message}); "
                "set a valid ANTHROPIC_API_KEY for the workers and start a new run",
                type=API_KEY_REJECTED,
                non_retryable=True,
            )
        if status in (408, 409, 429) or status >= 500:
            raise ApplicationError(
                f"Claude answered {status} {error_type}: {message}",
                type=RETRYABLE,
                next_retry_delay=_retry_after(err),
            )
        if status == 400 and "too long" in message.lower():
            return CallModelOutput(outcome="overflow", block_uids=uids, call_id=call_id,
                                   message=f"prompt too long: {message}")
        if status == 413:
            return CallModelOutput(outcome="overflow", block_uids=uids, call_id=call_id,
                                   message=f"request too large: {message}")
        return CallModelOutput(outcome="request_error", block_uids=uids, call_id=call_id,
                               message=f"Claude rejected the request ({status} {error_type}): "
                                       f"{message}")

    async def _finish_failed(
        self, call_id: int, status: int | None, error_type: str, message: str,
        request_id: str | None, started: float,
    ) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(
                """update llm_calls set status = 'failed', http_status = $2, error_type = $3,
                          error_message = $4, request_id = $5, latency_ms = $6,
                          finished_at = now()
                   where call_id = $1""",
                call_id, status, error_type, message[:4000], request_id,
                int((time.monotonic() - started) * 1000),
            )

    @staticmethod
    def _summary(row: asyncpg.Record, *, reused: bool) -> CallModelOutput:
        return CallModelOutput(
            outcome="answered",
            block_uids=list(row["block_uids"]),
            call_id=row["call_id"],
            stop_reason=row["stop_reason"],
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cache_creation_input_tokens=row["cache_creation_input_tokens"],
            cache_read_input_tokens=row["cache_read_input_tokens"],
            cost_usd=float(row["cost_usd"]),
            reused=reused,
        )


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
            activity.logger.warning("cannot %s yet: Postgres unavailable (%s); retrying in "
                                    "%.1fs", what, type(exc).__name__, delay)
            activity.heartbeat()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


async def _heartbeat_forever() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(_HEARTBEAT_EVERY_S)
