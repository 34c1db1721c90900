"""Provider batch mode: a run's packs as Anthropic Message Batches, in rounds.

A round is a set of pack attempts (``batch_requests`` rows) submitted together. The
activities here form round 1 from the plan, submit a round (one provider batch per
100,000 requests / 256 MB), look at it, cancel it, stream its results into the ledger,
and apply them: the valid overlays are written by the same ``apply_results`` code as in
sync mode, and whatever is unfinished becomes round n + 1 (halves, single-block retries,
resubmissions). Only ids and counts cross Temporal; requests are built from Postgres.

Idempotency of the create call (which is not idempotent at the provider):

* a part's ``provider_batches`` row is written ``submitting`` (committed) before the
  call, and the batch id is recorded in the same transaction as the request mapping and
  the ledger rows, so a retry that finds an id returns it;
* ``submitted_at`` is set (committed) right before the call and cleared when the API
  answered with an error (nothing was created). If a retry finds it set without a batch
  id, an earlier attempt may have died between the provider creating the batch and our
  commit: it then looks for that orphan in ``batches.list`` (created since, same request
  count, not recorded by anyone) and adopts it instead of paying twice. custom_ids carry
  a tag of the run, so a wrongly adopted batch has no matching results and its requests
  are simply resubmitted next round;
* a transaction-scoped advisory lock per (run, round, part) keeps a zombie attempt and
  its retry from submitting at the same time, and a share lock on the run row makes
  ``mark_run_cancelling`` wait, so no batch is created once the run is cancelling.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import anthropic
import asyncpg
from anthropic.types.messages import MessageBatch
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.db import DbActivities
from activities.llm import API_KEY_REJECTED, RETRYABLE
from blockbatch.models import (
    ApplyResultsInput,
    ApplyRoundInput,
    ApplyRoundOutput,
    BatchCounts,
    BatchOptions,
    BatchRoundInput,
    CollectRoundOutput,
    OpenBatchRunInput,
    OpenBatchRunOutput,
    PollRoundOutput,
    ProviderBatchRef,
    SubmitRoundOutput,
    Totals,
)
from blockbatch.planning import describe_pack, estimate_output_tokens
from blockbatch.prompt import build_request
from blockbatch.registry import Usage, cost_usd
from blockbatch.repo import RunContext, load_run_context

#: The create call was refused for a reason retrying cannot fix (400/413/404).
BATCH_REJECTED = "BatchRejected"
#: The system prompt is cached for an hour: a batch may take long to start processing.
BATCH_CACHE_TTL: Literal["1h"] = "1h"
_ACTIVE_STATUSES = ("created", "planning", "running")
_HEARTBEAT_EVERY_S = 5.0
_FLUSH_EVERY = 200
#: Pack attempts read per query while building a batch.
_PAGE_REQUESTS = 200
#: Clock skew allowed between us and the provider when looking for an orphan batch.
_ORPHAN_SKEW = timedelta(minutes=2)
_ORPHAN_MAX_SCANNED = 2000
_HTTP_STATUS = {"invalid_request_error": 400, "authentication_error": 401,
                "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                "rate_limit_error": 429, "api_error": 500, "overloaded_error": 529}


# ------------------------------------------------------------------ pure helpers


def custom_id_for(run_id: str, pack_path: str, attempt: int) -> str:
    """``p3_0_1_a1-<run tag>`` for pack 3.0.1 attempt 1; matches ``^[a-zA-Z0-9_-]{1,64}$``.

    The tag (8 hex digits of the run id's hash) makes a result line of another run's
    batch unmistakable.
    """
    tag = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    custom_id = f"p{pack_path.replace('.', '_')}_a{attempt}-{tag}"
    if len(custom_id) > 64:
        raise ValueError(f"pack path {pack_path!r} is too deep for a custom_id")
    return custom_id


def batch_params(request: dict[str, Any]) -> dict[str, Any]:
    """``build_request`` keyword arguments as a batch request's ``params`` (no extra_body)."""
    params = {k: v for k, v in request.items() if k != "extra_body"}
    params.update(request.get("extra_body") or {})
    return params


Step = Literal["done", "retry", "split", "resubmit", "fail", "keep", "fatal"]


@dataclass(frozen=True)
class Decision:
    """What to do with one pack attempt once its result is in (and applied)."""

    step: Step
    reason: str = ""


def decide(
    result_type: str,
    *,
    blocks: int,
    remaining: int = 0,
    reason: str = "",
    error_type: str | None = None,
    error_message: str | None = None,
    resubmits: int = 0,
    max_resubmits: int = 5,
    stopping: bool = False,
) -> Decision:
    """The next step for a pack attempt, with the same rules as a sync ProcessPack.

    Args:
        result_type: ``succeeded``, ``errored``, ``expired``, ``canceled`` or ``missing``.
        blocks: how many blocks the attempt held.
        remaining: for ``succeeded``: blocks still pending after ``apply_results``.
        reason: for ``succeeded``: ``apply_results``'s summary (why blocks remain).
        error_type, error_message: for ``errored``: the API error.
        resubmits: how often this pack was already resubmitted.
        max_resubmits: the limit of resubmissions.
        stopping: the run is cancelling: nothing new is scheduled.

    Splits and resubmissions do not consume block attempts; ``retry`` follows a
    per-block failure that ``apply_results`` already charged.
    """
    if result_type == "succeeded":
        if not remaining:
            return Decision("done")
        if stopping:
            return Decision("keep", reason)
        return Decision("retry" if blocks == 1 else "split", reason)
    message = error_message or ""
    if result_type == "errored":
        if error_type in ("authentication_error", "permission_error"):
            return Decision("fatal", f"the API key was rejected by Claude ({error_type}: "
                                     f"{message}); set a valid ANTHROPIC_API_KEY for the "
                                     "workers and start a new run")
        overflow = error_type == "request_too_large" or "too long" in message.lower()
        if error_type in ("invalid_request_error", "request_too_large") and overflow:
            if blocks == 1:
                return Decision("fail", f"prompt too long: {message}")
            return Decision("keep" if stopping else "split", f"prompt too long: {message}")
        if error_type in ("invalid_request_error", "not_found_error"):
            return Decision("fail", f"Claude rejected the request ({error_type}): {message}")
    if stopping:
        return Decision("keep", result_type)
    what = f"{result_type} ({error_type}: {message})" if error_type else result_type
    if resubmits >= max_resubmits:
        return Decision("fail", f"Claude batch request {what} {resubmits + 1} times; "
                                "giving up on these blocks")
    return Decision("resubmit", what)


def _usage_of(message: dict[str, Any]) -> Usage:
    u = message.get("usage") or {}
    creation = u.get("cache_creation") or {}
    return Usage(
        input_tokens=u.get("input_tokens") or 0,
        output_tokens=u.get("output_tokens") or 0,
        cache_creation_input_tokens=u.get("cache_creation_input_tokens") or 0,
        cache_read_input_tokens=u.get("cache_read_input_tokens") or 0,
        cache_creation_1h_tokens=creation.get("ephemeral_1h_input_tokens") or 0,
    )


def _api_error(err: anthropic.APIError, doing: str) -> ApplicationError:
    """Map an API failure to the error Temporal retries (or does not)."""
    if isinstance(err, anthropic.APIStatusError):
        status = err.status_code
        body: dict[str, Any] = err.body if isinstance(err.body, dict) else {}
        raw = body.get("error")
        error: dict[str, Any] = raw if isinstance(raw, dict) else {}
        text = (f"{status} {error.get('type') or type(err).__name__}: "
                f"{error.get('message') or err.message}")
        if status in (401, 403):
            return ApplicationError(
                f"the API key was rejected by Claude while {doing} ({text}); set a valid "
                "ANTHROPIC_API_KEY for the workers and start a new run",
                type=API_KEY_REJECTED, non_retryable=True)
        if status in (408, 409, 429) or status >= 500:
            value = err.response.headers.get("retry-after")
            delay = None
            try:
                delay = timedelta(seconds=min(max(float(value), 0.5), 300)) if value else None
            except ValueError:
                pass
            return ApplicationError(f"Claude answered {text} while {doing}", type=RETRYABLE,
                                    next_retry_delay=delay)
        return ApplicationError(f"Claude refused {doing} ({text})", type=BATCH_REJECTED,
                                non_retryable=True)
    return ApplicationError(f"could not reach Claude while {doing} ({type(err).__name__}); "
                            "will retry", type=RETRYABLE)


@dataclass
class _Part:
    """One provider batch's worth of requests, built from Postgres."""

    index: int
    requests: list[dict[str, Any]] = field(default_factory=list)
    stored: list[dict[str, Any]] = field(default_factory=list)
    nbytes: int = 0


@dataclass
class _Pack:
    path: str
    index: int
    attempt: int
    resubmits: int
    uids: list[str]


# ------------------------------------------------------------------ activities


class BatchActivities:
    """Message Batches activities; one pool and one anthropic client per worker process."""

    def __init__(self, pool: asyncpg.Pool, client: anthropic.AsyncAnthropic) -> None:
        self.pool = pool
        self.client = client
        self._db = DbActivities(pool)
        self._contexts: dict[str, RunContext] = {}

    async def _context(self, conn: asyncpg.Connection, run_id: str) -> RunContext:
        ctx = self._contexts.get(run_id)
        if ctx is None:
            ctx = await load_run_context(conn, run_id)
            self._contexts[run_id] = ctx
        return ctx

    # -------------------------------------------------------------- round 1

    @activity.defn
    async def open_batch_run(self, inp: OpenBatchRunInput) -> OpenBatchRunOutput:
        """Form round 1 from the plan: one request per planned pack (idempotent)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("select 1 from runs where run_id = $1 for update", inp.run_id)
            ctx = await self._context(conn, inp.run_id)
            options = ctx.options.batch or BatchOptions()
            existing = await self._round_size(conn, inp.run_id, 1)
            if existing[0]:
                return OpenBatchRunOutput(options=options, requests=existing[0],
                                          blocks=existing[1])
            rows = await conn.fetch(
                """select block_uid, pack_index from overlays
                   where run_id = $1 and status = 'pending' order by pack_index, block_index""",
                inp.run_id,
            )
            packs: dict[int, list[str]] = {}
            for r in rows:
                packs.setdefault(r["pack_index"], []).append(r["block_uid"])
            failed = await self._enqueue(
                conn, ctx, 1, [_Pack(str(i), i, 1, 0, uids) for i, uids in packs.items()]
            )
            requests, blocks = await self._round_size(conn, inp.run_id, 1)
        return OpenBatchRunOutput(options=options, requests=requests, blocks=blocks,
                                  failed=failed)

    async def _enqueue(
        self, conn: asyncpg.Connection, ctx: RunContext, round_: int, packs: Sequence[_Pack]
    ) -> int:
        """Add pack attempts to a round; a lone block too large for the model fails now.

        Returns:
            How many blocks failed as oversized.
        """
        uids = [u for p in packs for u in p.uids]
        est = dict(await conn.fetch(
            "select block_uid, est_tokens from blocks where block_uid = any($1::text[])", uids
        )) if uids else {}
        rows: list[tuple[Any, ...]] = []
        failed = 0
        for p in packs:
            tokens = [est[u] for u in p.uids]
            outputs = [ctx.options.estimated_output_per_block
                       or estimate_output_tokens(ctx.spec, t) for t in tokens]
            pack = describe_pack(range(len(tokens)), tokens, outputs, ctx.plan_limits())
            if len(p.uids) == 1 and pack.oversized:
                failed += await self._fail(conn, ctx.run_id, p.uids, p.path, (
                    f"block is too large for {ctx.model.id}: about {pack.est_input_tokens:,} "
                    f"input tokens + {pack.max_tokens:,} output tokens exceed the "
                    f"{ctx.model.context_window:,}-token context window; split the block "
                    "in the source document"))
                continue
            rows.append((custom_id_for(ctx.run_id, p.path, p.attempt), p.path, p.index,
                         p.attempt, p.resubmits, p.uids, pack.max_tokens))
        if not rows:
            return failed
        await conn.executemany(
            """insert into batch_requests (run_id, round, custom_id, pack_path, pack_index,
                   pack_attempt, resubmits, block_uids, max_tokens)
               values ($1, $2, $3, $4, $5, $6, $7, $8, $9) on conflict do nothing""",
            [(ctx.run_id, round_, *r) for r in rows],
        )
        return failed

    @staticmethod
    async def _fail(
        conn: asyncpg.Connection, run_id: str, uids: list[str], pack_path: str, reason: str
    ) -> int:
        result = await conn.execute(
            """update overlays set status = 'failed', last_error = $3, pack_path = $4,
                      attempt_count = attempt_count + 1, updated_at = now()
               where run_id = $1 and block_uid = any($2::text[]) and status = 'pending'""",
            run_id, uids, reason[:2000], pack_path,
        )
        return int(result.split()[-1])

    @staticmethod
    async def _round_size(conn: asyncpg.Connection, run_id: str, round_: int) -> tuple[int, int]:
        row = await conn.fetchrow(
            """select count(*) as n, coalesce(sum(cardinality(block_uids)), 0) as blocks
               from batch_requests where run_id = $1 and round = $2""",
            run_id, round_,
        )
        return int(row["n"]), int(row["blocks"])

    # -------------------------------------------------------------- submit

    @activity.defn
    async def submit_round(self, inp: BatchRoundInput) -> SubmitRoundOutput:
        """Submit a round as provider batches; a retry returns the batches already made."""
        async with self.pool.acquire() as conn:
            ctx = await self._context(conn, inp.run_id)
            requests, _ = await self._round_size(conn, inp.run_id, inp.round)
            done = {
                r["part"]: ProviderBatchRef(part=r["part"], provider_batch_id=r["id"],
                                            requests=r["request_count"])
                for r in await conn.fetch(
                    """select part, provider_batch_id as id, request_count
                       from provider_batches where run_id = $1 and round = $2
                         and provider_batch_id is not null order by part""",
                    inp.run_id, inp.round,
                )
            }
        out = SubmitRoundOutput(requests=requests, batches=list(done.values()))
        if sum(b.requests for b in out.batches) == requests:
            return out  # every part is already submitted (or the round is empty)
        options = ctx.options.batch or BatchOptions()
        out.batches = []
        status = [f"round {inp.round}: building requests"]
        heartbeat = asyncio.create_task(_heartbeat_forever(status))
        try:
            async with aclosing(self._parts(ctx, inp, options)) as parts:
                async for part in parts:
                    status[0] = (f"round {inp.round} part {part.index}: "
                                 f"{len(part.requests)} requests, {part.nbytes:,} bytes")
                    ref = done.get(part.index) or await self._submit_part(ctx, inp, part)
                    if ref is None:
                        out.refused = True
                        break
                    out.batches.append(ref)
        finally:
            heartbeat.cancel()
        return out

    async def _parts(
        self, ctx: RunContext, inp: BatchRoundInput, options: BatchOptions
    ) -> AsyncGenerator[_Part, None]:
        """The round's requests, read from Postgres a page at a time, cut into parts.

        The order is fixed (pack_index, pack_path), so a retry cuts the same parts. No
        connection is held while a part is being submitted.
        """
        part = _Part(0)
        after: tuple[int, str] = (-1, "")
        while True:
            async with self.pool.acquire() as conn:
                rows = await conn.fetch(
                    """with page as (
                           select custom_id, pack_index, pack_path, max_tokens, block_uids
                           from batch_requests
                           where run_id = $1 and round = $2 and (pack_index, pack_path) > ($3, $4)
                           order by pack_index, pack_path limit $5)
                       select p.custom_id, p.pack_index, p.pack_path, p.max_tokens,
                              b.block_uid, b.block_type, b.block_content
                       from page p
                       cross join lateral unnest(p.block_uids) with ordinality as u(uid, ord)
                       join blocks b on b.block_uid = u.uid
                       order by p.pack_index, p.pack_path, u.ord""",
                    inp.run_id, inp.round, *after, _PAGE_REQUESTS,
                )
            if not rows:
                break
            for _, group in itertools.groupby(rows, key=lambda r: r["custom_id"]):
                item, stored = self._request(ctx, list(group))
                size = len(json.dumps(item, ensure_ascii=False).encode()) + 1
                if part.requests and (
                    len(part.requests) >= options.max_requests_per_batch
                    or part.nbytes + size > options.max_batch_bytes
                ):
                    yield part
                    part = _Part(part.index + 1)
                part.requests.append(item)
                part.stored.append(stored)
                part.nbytes += size
            after = (rows[-1]["pack_index"], rows[-1]["pack_path"])
        if part.requests:
            yield part

    @staticmethod
    def _request(
        ctx: RunContext, pack: list[asyncpg.Record]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The batch request of one pack attempt, and what the ledger keeps of it."""
        request = build_request(
            ctx.spec,
            [{"block_uid": r["block_uid"], "block_type": r["block_type"],
              "block_content": r["block_content"]} for r in pack],
            max_tokens=pack[0]["max_tokens"],
            model=ctx.model.id,
            cache_ttl=BATCH_CACHE_TTL,
        )
        params = batch_params(request)
        stored = {k: v for k, v in params.items() if k not in ("system", "tools")}
        return {"custom_id": pack[0]["custom_id"], "params": params}, stored

    async def _submit_part(
        self, ctx: RunContext, inp: BatchRoundInput, part: _Part
    ) -> ProviderBatchRef | None:
        """Create one provider batch, exactly once; ``None`` if the run stopped first."""
        key = (inp.run_id, inp.round, part.index)
        async with self.pool.acquire() as guard, guard.transaction():
            # Held until the batch id is recorded: a zombie attempt and its retry queue
            # here, and mark_run_cancelling waits for the share lock on the run row.
            await guard.execute("select pg_advisory_xact_lock(hashtextextended($1, 0))",
                                f"blockbatch-batch:{inp.run_id}:{inp.round}:{part.index}")
            run_status = await guard.fetchval(
                "select status from runs where run_id = $1 for share", inp.run_id
            )
            async with self.pool.acquire() as conn:
                row = await conn.fetchrow(
                    """select provider_batch_id, submitted_at from provider_batches
                       where run_id = $1 and round = $2 and part = $3""", *key,
                )
                if row is not None and row["provider_batch_id"] is not None:
                    return ProviderBatchRef(part=part.index, requests=len(part.requests),
                                            provider_batch_id=row["provider_batch_id"])
                await conn.execute(
                    """insert into provider_batches (run_id, round, part, status,
                           request_count, request_bytes)
                       values ($1, $2, $3, $4, $5, $6)
                       on conflict (run_id, round, part) do update set status = $4,
                           submit_attempts = provider_batches.submit_attempts + 1""",
                    *key, "submitting" if run_status in _ACTIVE_STATUSES else "not_submitted",
                    len(part.requests), part.nbytes,
                )
                if run_status not in _ACTIVE_STATUSES:
                    return None
                batch, note = None, None
                if row is not None and row["submitted_at"] is not None:
                    # An earlier attempt sent the create call and never recorded an answer.
                    batch = await self._find_orphan(conn, len(part.requests),
                                                    row["submitted_at"] - _ORPHAN_SKEW)
                    note = (f"adopted {batch.id}, created by an earlier attempt that stopped "
                            "before recording it") if batch else None
                if batch is None:
                    batch = await self._create(conn, key, part)
                await self._record(conn, ctx, key, part, batch, note)
        return ProviderBatchRef(part=part.index, provider_batch_id=batch.id,
                                requests=len(part.requests))

    async def _create(
        self, conn: asyncpg.Connection, key: tuple[str, int, int], part: _Part
    ) -> MessageBatch:
        # Committed before the call: if we die before recording the answer, the retry
        # knows a batch may exist and looks for it.
        await conn.execute(
            """update provider_batches set submitted_at = clock_timestamp()
               where run_id = $1 and round = $2 and part = $3""", *key,
        )
        try:
            return await self.client.messages.batches.create(
                requests=part.requests  # type: ignore[arg-type]
            )
        except anthropic.APIStatusError as err:
            if err.status_code not in (408, 504):
                # The API answered: no batch was created, nothing to look for on retry.
                await conn.execute(
                    """update provider_batches set submitted_at = null, note = $4
                       where run_id = $1 and round = $2 and part = $3""",
                    *key, f"create refused: {err.status_code} {err.message}"[:1000],
                )
            raise _api_error(err, "creating a message batch") from None
        except anthropic.APIConnectionError as err:
            raise _api_error(err, "creating a message batch") from None

    async def _find_orphan(
        self, conn: asyncpg.Connection, count: int, since: datetime
    ) -> MessageBatch | None:
        """The one unrecorded batch of ``count`` requests created since ``since``, if any."""
        candidates: list[MessageBatch] = []
        scanned = 0
        try:
            async for batch in self.client.messages.batches.list(limit=100):
                scanned += 1
                if batch.created_at < since or scanned > _ORPHAN_MAX_SCANNED:
                    break
                c = batch.request_counts
                total = c.processing + c.succeeded + c.errored + c.canceled + c.expired
                if total == count:
                    candidates.append(batch)
        except anthropic.APIError as err:
            raise _api_error(err, "listing message batches") from None
        if not candidates:
            return None
        claimed = {r["provider_batch_id"] for r in await conn.fetch(
            "select provider_batch_id from provider_batches where provider_batch_id = any($1)",
            [b.id for b in candidates],
        )}
        unclaimed = [b for b in candidates if b.id not in claimed]
        if len(unclaimed) != 1:
            activity.logger.warning("%d candidate orphan batches; submitting anew",
                                    len(unclaimed))
            return None
        activity.logger.warning("adopting orphan batch %s", unclaimed[0].id)
        return unclaimed[0]

    async def _record(
        self, conn: asyncpg.Connection, ctx: RunContext, key: tuple[str, int, int],
        part: _Part, batch: MessageBatch, note: str | None,
    ) -> None:
        """Batch id, request mapping and ledger rows, in one transaction."""
        info = activity.info()
        system, tools = part.requests[0]["params"]["system"], part.requests[0]["params"]["tools"]
        prefix_sha = hashlib.sha256(
            json.dumps({"system": system, "tools": tools}, sort_keys=True).encode()
        ).hexdigest()
        async with conn.transaction():
            await conn.execute(
                """update provider_batches set provider_batch_id = $4, status = $5,
                          expires_at = $6, processing = $7, note = coalesce($8, note),
                          submitted_at = coalesce(submitted_at, clock_timestamp())
                   where run_id = $1 and round = $2 and part = $3""",
                *key, batch.id, batch.processing_status, batch.expires_at,
                batch.request_counts.processing, note,
            )
            await conn.execute(
                """insert into prompt_prefixes (sha256, system, tools) values ($1, $2, $3)
                   on conflict do nothing""",
                prefix_sha, system, tools,
            )
            for start in range(0, len(part.requests), 500):
                chunk = slice(start, start + 500)
                await conn.execute(
                    """with ins as (
                           insert into llm_calls (run_id, pack_path, pack_attempt, block_uids,
                               model, prefix_sha256, request, status, workflow_id,
                               workflow_run_id, activity_id, activity_attempt,
                               provider_batch_id, custom_id)
                           select r.run_id, r.pack_path, r.pack_attempt, r.block_uids, $4, $5,
                                  t.req, 'started', $6, $7, $8, $9, $10, r.custom_id
                           from unnest($2::text[], $3::jsonb[]) as t(cid, req)
                           join batch_requests r on r.run_id = $1 and r.custom_id = t.cid
                           returning call_id, custom_id)
                       update batch_requests r set call_id = ins.call_id, part = $11,
                              provider_batch_id = $10
                       from ins where r.run_id = $1 and r.custom_id = ins.custom_id""",
                    ctx.run_id, [q["custom_id"] for q in part.requests[chunk]],
                    part.stored[chunk], ctx.model.id, prefix_sha, info.workflow_id,
                    info.workflow_run_id, info.activity_id, info.attempt, batch.id, key[2],
                )

    # -------------------------------------------------------------- wait

    @activity.defn
    async def poll_round(self, inp: BatchRoundInput) -> PollRoundOutput:
        """Look at the round's provider batches and record their state."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                """select part, provider_batch_id, status from provider_batches
                   where run_id = $1 and round = $2 and provider_batch_id is not null
                   order by part""",
                inp.run_id, inp.round,
            )
            for r in rows:
                if r["status"] == "ended":
                    continue
                try:
                    batch = await self.client.messages.batches.retrieve(r["provider_batch_id"])
                except anthropic.APIError as err:
                    raise _api_error(err, f"looking at batch {r['provider_batch_id']}") from None
                await self._save_state(conn, inp, r["part"], batch)
            return await self._round_state(conn, inp)

    @activity.defn
    async def cancel_round(self, inp: BatchRoundInput) -> PollRoundOutput:
        """Cancel the round's unfinished provider batches; what already ran is kept."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                """select part, provider_batch_id from provider_batches
                   where run_id = $1 and round = $2 and provider_batch_id is not null
                     and status not in ('ended', 'canceling')""",
                inp.run_id, inp.round,
            )
            for r in rows:
                try:
                    batch = await self.client.messages.batches.cancel(r["provider_batch_id"])
                except anthropic.APIError as err:
                    raise _api_error(err, f"canceling batch {r['provider_batch_id']}") from None
                await conn.execute(
                    """update provider_batches set cancel_requested_at = coalesce(
                           cancel_requested_at, clock_timestamp())
                       where run_id = $1 and round = $2 and part = $3""",
                    inp.run_id, inp.round, r["part"],
                )
                await self._save_state(conn, inp, r["part"], batch)
            return await self._round_state(conn, inp)

    @staticmethod
    async def _save_state(
        conn: asyncpg.Connection, inp: BatchRoundInput, part: int, batch: MessageBatch
    ) -> None:
        c = batch.request_counts
        await conn.execute(
            """update provider_batches set status = $4, processing = $5, succeeded = $6,
                      errored = $7, canceled = $8, expired = $9, ended_at = $10
               where run_id = $1 and round = $2 and part = $3""",
            inp.run_id, inp.round, part, batch.processing_status, c.processing, c.succeeded,
            c.errored, c.canceled, c.expired, batch.ended_at,
        )

    @staticmethod
    async def _round_state(conn: asyncpg.Connection, inp: BatchRoundInput) -> PollRoundOutput:
        rows = await conn.fetch(
            """select status, processing, succeeded, errored, canceled, expired
               from provider_batches
               where run_id = $1 and round = $2 and provider_batch_id is not null
               order by part""",
            inp.run_id, inp.round,
        )
        counts = BatchCounts(**{k: sum(r[k] for r in rows) for k in BatchCounts.model_fields})
        statuses = [r["status"] for r in rows]
        return PollRoundOutput(counts=counts, statuses=statuses,
                               ended=all(s == "ended" for s in statuses))

    # -------------------------------------------------------------- results

    @activity.defn
    async def collect_round(self, inp: BatchRoundInput) -> CollectRoundOutput:
        """Stream the ended batches' results into the ledger (resumes where it stopped)."""
        status = [f"round {inp.round}: collecting"]
        heartbeat = asyncio.create_task(_heartbeat_forever(status))
        try:
            async with self.pool.acquire() as conn:
                ctx = await self._context(conn, inp.run_id)
                parts = await conn.fetch(
                    """select part, provider_batch_id, submitted_at, ended_at
                       from provider_batches
                       where run_id = $1 and round = $2 and status = 'ended'
                         and collected_at is null order by part""",
                    inp.run_id, inp.round,
                )
                for p in parts:
                    await self._collect_part(conn, ctx, inp, p, status)
                return await self._round_totals(conn, inp)
        finally:
            heartbeat.cancel()

    async def _collect_part(
        self, conn: asyncpg.Connection, ctx: RunContext, inp: BatchRoundInput,
        p: asyncpg.Record, status: list[str],
    ) -> None:
        batch_id = p["provider_batch_id"]
        pending: dict[str, int] = dict(await conn.fetch(
            """select custom_id, call_id from batch_requests
               where run_id = $1 and provider_batch_id = $2 and result_type is null""",
            inp.run_id, batch_id,
        ))
        latency_ms = None
        if p["submitted_at"] and p["ended_at"]:
            latency_ms = int((p["ended_at"] - p["submitted_at"]).total_seconds() * 1000)
        rows: list[tuple[Any, ...]] = []
        seen = foreign = 0
        try:
            async for line in await self.client.messages.batches.results(batch_id):
                call_id = pending.pop(line.custom_id, None)
                if call_id is None:
                    foreign += 1  # already recorded by an earlier attempt, or not ours
                    continue
                rows.append(self._ledger_row(ctx, call_id, line.custom_id,
                                             line.result.model_dump(mode="json"), latency_ms))
                seen += 1
                if len(rows) >= _FLUSH_EVERY:
                    await self._flush(conn, inp.run_id, rows)
                    status[0] = f"round {inp.round}: {seen} results of {batch_id} recorded"
        except anthropic.APIError as err:
            await self._flush(conn, inp.run_id, rows)
            raise _api_error(err, f"reading the results of {batch_id}") from None
        for custom_id, call_id in pending.items():
            rows.append(self._ledger_row(ctx, call_id, custom_id, {"type": "missing"}, None))
        await self._flush(conn, inp.run_id, rows)
        if foreign:
            activity.logger.info("%s: %d result lines skipped", batch_id, foreign)
        await conn.execute(
            """update provider_batches set collected_at = clock_timestamp()
               where run_id = $1 and provider_batch_id = $2""",
            inp.run_id, batch_id,
        )

    @staticmethod
    def _ledger_row(
        ctx: RunContext, call_id: int, custom_id: str, result: dict[str, Any],
        latency_ms: int | None,
    ) -> tuple[Any, ...]:
        """(call_id, custom_id, result_type, status, response, http_status, error_type,
        error_message, request_id, stop_reason, usage..., cost, latency) for one line."""
        kind = result.get("type", "missing")
        if kind == "succeeded":
            message = result["message"]
            usage = _usage_of(message)
            return (call_id, custom_id, kind, "succeeded", message, 200, None, None, None,
                    message.get("stop_reason"), usage.input_tokens, usage.output_tokens,
                    usage.cache_creation_input_tokens, usage.cache_read_input_tokens,
                    usage.cache_creation_1h_tokens, cost_usd(ctx.model, usage, batch=True),
                    latency_ms)
        if kind == "errored":
            body = result.get("error") or {}
            error = body.get("error") or {}
            error_type = str(error.get("type") or "api_error")
            return (call_id, custom_id, kind, "failed", None, _HTTP_STATUS.get(error_type),
                    error_type, str(error.get("message") or "")[:4000], body.get("request_id"),
                    None, 0, 0, 0, 0, 0, 0.0, latency_ms)
        messages = {
            "expired": ("failed", "the batch expired (24 h) before this request was processed"),
            "canceled": ("abandoned", "the batch was canceled before this request was processed"),
            "missing": ("failed", "the ended batch had no result for this request"),
        }
        ledger_status, text = messages.get(kind, messages["missing"])
        return (call_id, custom_id, kind if kind in messages else "missing", ledger_status,
                None, None, kind, text, None, None, 0, 0, 0, 0, 0, 0.0, latency_ms)

    @staticmethod
    async def _flush(conn: asyncpg.Connection, run_id: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        async with conn.transaction():
            await conn.executemany(
                """update llm_calls set status = $2, response = $3, http_status = $4,
                          error_type = $5, error_message = $6, request_id = $7,
                          stop_reason = $8, input_tokens = $9, output_tokens = $10,
                          cache_creation_input_tokens = $11, cache_read_input_tokens = $12,
                          cache_creation_1h_tokens = $13, cost_usd = $14, latency_ms = $15,
                          finished_at = clock_timestamp()
                   where call_id = $1 and status = 'started'""",
                [(r[0], *r[3:]) for r in rows],
            )
            await conn.executemany(
                """update batch_requests set result_type = $3
                   where run_id = $1 and custom_id = $2 and result_type is null""",
                [(run_id, r[1], r[2]) for r in rows],
            )
        rows.clear()

    @staticmethod
    async def _round_totals(conn: asyncpg.Connection, inp: BatchRoundInput) -> CollectRoundOutput:
        row = await conn.fetchrow(
            """select count(*) filter (where c.status <> 'started') as calls,
                      coalesce(sum(c.input_tokens), 0) as input_tokens,
                      coalesce(sum(c.output_tokens), 0) as output_tokens,
                      coalesce(sum(c.cache_creation_input_tokens), 0)
                          as cache_creation_input_tokens,
                      coalesce(sum(c.cache_read_input_tokens), 0) as cache_read_input_tokens,
                      coalesce(sum(c.cost_usd), 0)::float8 as cost_usd,
                      count(*) filter (where r.result_type = 'succeeded') as succeeded,
                      count(*) filter (where r.result_type = 'errored') as errored,
                      count(*) filter (where r.result_type = 'canceled') as canceled,
                      count(*) filter (where r.result_type in ('expired', 'missing'))
                          as expired
               from batch_requests r join llm_calls c using (call_id)
               where r.run_id = $1 and r.round = $2""",
            inp.run_id, inp.round,
        )
        totals = Totals(**{k: row[k] for k in (
            "calls", "input_tokens", "output_tokens", "cache_creation_input_tokens",
            "cache_read_input_tokens", "cost_usd")})
        counts = BatchCounts(**{k: row[k] for k in ("succeeded", "errored", "canceled",
                                                     "expired")})
        return CollectRoundOutput(counts=counts, totals=totals)

    # -------------------------------------------------------------- apply

    @activity.defn
    async def apply_round(self, inp: ApplyRoundInput) -> ApplyRoundOutput:
        """Apply each answer (``apply_results``), then schedule round n + 1 from the rest."""
        out = ApplyRoundOutput()
        status = [f"round {inp.round}: applying"]
        heartbeat = asyncio.create_task(_heartbeat_forever(status))
        try:
            async with self.pool.acquire() as conn:
                ctx = await self._context(conn, inp.run_id)
                todo = await conn.fetch(
                    """select r.custom_id, r.pack_path, r.pack_index, r.pack_attempt,
                              r.resubmits, r.block_uids, r.call_id, r.result_type,
                              c.error_type, c.error_message
                       from batch_requests r left join llm_calls c using (call_id)
                       where r.run_id = $1 and r.round = $2 and r.handled_at is null
                         and r.result_type is not null
                       order by r.pack_index, r.pack_path""",
                    inp.run_id, inp.round,
                )
                for n, r in enumerate(todo):
                    status[0] = f"round {inp.round}: applied {n} of {len(todo)}"
                    await self._handle(conn, ctx, inp, r, out)
                out.next_requests, out.next_blocks = await self._round_size(
                    conn, inp.run_id, inp.round + 1)
                out.packs_done = await conn.fetchval(
                    """select count(*) from (select pack_index from overlays where run_id = $1
                       group by pack_index having bool_and(status <> 'pending')) d""",
                    inp.run_id,
                )
        finally:
            heartbeat.cancel()
        return out

    async def _handle(
        self, conn: asyncpg.Connection, ctx: RunContext, inp: ApplyRoundInput,
        r: asyncpg.Record, out: ApplyRoundOutput,
    ) -> None:
        uids: list[str] = list(r["block_uids"])
        remaining, reason = uids, ""
        if r["result_type"] == "succeeded":
            applied = await self._db.apply_results(ApplyResultsInput(
                run_id=inp.run_id, call_id=r["call_id"], pack_path=r["pack_path"],
                max_block_attempts=inp.max_block_attempts,
            ))
            out.completed += applied.completed
            out.failed += len(applied.failed)
            remaining, reason = applied.remaining, applied.reason
        decision = decide(
            r["result_type"], blocks=len(uids), remaining=len(remaining), reason=reason,
            error_type=r["error_type"], error_message=r["error_message"],
            resubmits=r["resubmits"], max_resubmits=inp.max_resubmits,
            stopping=not inp.schedule_next,
        )
        path, index, nxt = r["pack_path"], r["pack_index"], inp.round + 1
        async with conn.transaction():
            if decision.step == "retry":
                out.failed += await self._enqueue(conn, ctx, nxt, [
                    _Pack(path, index, r["pack_attempt"] + 1, r["resubmits"], remaining)])
            elif decision.step == "resubmit":
                still = await conn.fetchval(
                    """select coalesce(array_agg(block_uid order by block_index), '{}')
                       from overlays where run_id = $1 and block_uid = any($2::text[])
                         and status = 'pending'""",
                    inp.run_id, uids,
                )
                if still:
                    out.resubmitted += 1
                    out.failed += await self._enqueue(conn, ctx, nxt, [
                        _Pack(path, index, r["pack_attempt"] + 1, r["resubmits"] + 1,
                              list(still))])
            elif decision.step == "split":
                half = (len(remaining) + 1) // 2
                halves = [h for h in (remaining[:half], remaining[half:]) if h]
                children = [f"{path}.{i}" for i in range(len(halves))]
                await conn.execute(
                    """insert into split_events (run_id, pack_path, reason, block_count,
                           child_paths) values ($1, $2, $3, $4, $5) on conflict do nothing""",
                    inp.run_id, path, decision.reason[:1000], len(remaining), children,
                )
                out.splits += 1
                out.failed += await self._enqueue(conn, ctx, nxt, [
                    _Pack(c, index, 1, 0, h) for c, h in zip(children, halves)])
            elif decision.step == "fail":
                out.failed += await self._fail(conn, inp.run_id, remaining, path,
                                               decision.reason)
            elif decision.step == "fatal":
                out.fatal_error = out.fatal_error or decision.reason
            await conn.execute(
                """update batch_requests set handled_at = clock_timestamp(), outcome = $3
                   where run_id = $1 and custom_id = $2""",
                inp.run_id, r["custom_id"],
                f"{decision.step}: {decision.reason}"[:1000] if decision.reason
                else decision.step,
            )


async def _heartbeat_forever(status: list[str]) -> None:
    while True:
        activity.heartbeat(status[0])
        await asyncio.sleep(_HEARTBEAT_EVERY_S)
