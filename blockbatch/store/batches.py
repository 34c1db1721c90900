"""Batch mode in Postgres: a round's requests (``batch_requests``): membership, the
requests as submitted, and what became of each result. The provider batches that carry
them are in ``blockbatch/store/provider_batches.py``.

Every write is idempotent (``on conflict do nothing``, ``result_type is null``), so a
retried activity finds what an earlier attempt already wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import asyncpg

from blockbatch.core.batch_types import BatchCounts, CollectRoundOutput
from blockbatch.core.batching import CachePlan, ResultRow
from blockbatch.core.call_types import Totals
from blockbatch.core.endpoint import Endpoint
from blockbatch.store import ledger

# ------------------------------------------------------------------ a round's requests


class NewRequest(NamedTuple):
    """One pack attempt to add to a round."""

    custom_id: str
    pack_path: str
    pack_index: int
    pack_attempt: int
    resubmits: int
    block_uids: list[str]
    max_tokens: int


async def add_requests(
    conn: asyncpg.Connection, run_id: str, round_: int, requests: Sequence[NewRequest]
) -> None:
    """Add pack attempts to a round (a request already there is left as it is)."""
    await conn.executemany(
        """insert into batch_requests (run_id, round, custom_id, pack_path, pack_index,
               pack_attempt, resubmits, block_uids, max_tokens)
           values ($1, $2, $3, $4, $5, $6, $7, $8, $9) on conflict do nothing""",
        [(run_id, round_, *r) for r in requests],
    )


async def last_round(conn: asyncpg.Connection, run_id: str) -> int:
    """The highest round the run has used so far (0 before its first)."""
    return int(
        await conn.fetchval(
            """select greatest(
               (select coalesce(max(round), 0) from batch_requests where run_id = $1),
               (select coalesce(max(round), 0) from provider_batches where run_id = $1))""",
            run_id,
        )
    )


async def block_tokens(conn: asyncpg.Connection, uids: list[str]) -> dict[str, int]:
    """Each block's estimated input tokens, by block_uid."""
    if not uids:
        return {}
    return dict(
        await conn.fetch(
            "select block_uid, est_tokens from blocks where block_uid = any($1::text[])", uids
        )
    )


async def round_size(conn: asyncpg.Connection, run_id: str, round_: int) -> tuple[int, int]:
    """How many requests and blocks a round holds."""
    row = await conn.fetchrow(
        """select count(*) as n, coalesce(sum(cardinality(block_uids)), 0) as blocks
           from batch_requests where run_id = $1 and round = $2""",
        run_id,
        round_,
    )
    return int(row["n"]), int(row["blocks"])


class RoundRequest(NamedTuple):
    """A request of a round as budgeting sees it."""

    custom_id: str
    pack_path: str
    block_uids: list[str]
    max_tokens: int


async def round_requests(conn: asyncpg.Connection, run_id: str, round_: int) -> list[RoundRequest]:
    """A round's requests in submission order (pack_index, pack_path)."""
    rows = await conn.fetch(
        """select custom_id, pack_path, block_uids, max_tokens from batch_requests
           where run_id = $1 and round = $2 order by pack_index, pack_path""",
        run_id,
        round_,
    )
    return [
        RoundRequest(r["custom_id"], r["pack_path"], list(r["block_uids"]), r["max_tokens"])
        for r in rows
    ]


async def drop_requests(
    conn: asyncpg.Connection, run_id: str, round_: int, custom_ids: list[str]
) -> None:
    """Take requests out of a round not yet submitted (the run's budget cannot hold them)."""
    await conn.execute(
        """delete from batch_requests where run_id = $1 and round = $2
             and custom_id = any($3::text[]) and provider_batch_id is null""",
        run_id,
        round_,
        custom_ids,
    )


class RequestBlock(NamedTuple):
    """One block of one request of a round, as a page of :func:`request_page` lists it."""

    custom_id: str
    pack_index: int
    pack_path: str
    max_tokens: int
    block_uid: str
    block_type: str
    block_content: str


async def request_page(
    conn: asyncpg.Connection, run_id: str, round_: int, after: tuple[int, str], limit: int
) -> list[RequestBlock]:
    """Up to ``limit`` requests after ``after`` (pack_index, pack_path), block by block.

    The order is fixed (pack_index, pack_path, then the blocks' order in the request), so
    a retry reads the same requests in the same order.
    """
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
        run_id,
        round_,
        *after,
        limit,
    )
    return [RequestBlock(*r) for r in rows]


@dataclass(frozen=True)
class Collected:
    """A request of a round whose result is recorded but not yet handled."""

    custom_id: str
    pack_path: str
    pack_index: int
    pack_attempt: int
    resubmits: int
    block_uids: list[str]
    call_id: int | None
    result_type: str
    error_type: str | None
    error_message: str | None
    error_code: str | None = None


async def results_to_handle(conn: asyncpg.Connection, run_id: str, round_: int) -> list[Collected]:
    """The round's recorded results not handled yet, in pack order."""
    rows = await conn.fetch(
        """select r.custom_id, r.pack_path, r.pack_index, r.pack_attempt,
                  r.resubmits, r.block_uids, r.call_id, r.result_type,
                  c.error_type, c.error_message, c.error_code
           from batch_requests r left join llm_calls c using (call_id)
           where r.run_id = $1 and r.round = $2 and r.handled_at is null
             and r.result_type is not null
           order by r.pack_index, r.pack_path""",
        run_id,
        round_,
    )
    return [Collected(**{**dict(r), "block_uids": list(r["block_uids"])}) for r in rows]


async def mark_handled(conn: asyncpg.Connection, run_id: str, custom_id: str, outcome: str) -> None:
    """Record what followed a request's result (``<step>: <reason>``)."""
    await conn.execute(
        """update batch_requests set handled_at = clock_timestamp(), outcome = $3
           where run_id = $1 and custom_id = $2""",
        run_id,
        custom_id,
        outcome[:1000],
    )


async def uncollected_requests(
    conn: asyncpg.Connection, run_id: str, provider_batch_id: str
) -> dict[str, int]:
    """The call_id of each request of a provider batch with no result recorded yet."""
    return dict(
        await conn.fetch(
            """select custom_id, call_id from batch_requests
           where run_id = $1 and provider_batch_id = $2 and result_type is null""",
            run_id,
            provider_batch_id,
        )
    )


async def round_totals(conn: asyncpg.Connection, run_id: str, round_: int) -> CollectRoundOutput:
    """Result counts, calls, tokens and cost (batch prices) of a round, from the ledger."""
    row = await conn.fetchrow(
        """select count(*) filter (where c.status <> 'started') as calls,
                  coalesce(sum(c.input_tokens), 0) as input_tokens,
                  coalesce(sum(c.output_tokens), 0) as output_tokens,
                  coalesce(sum(c.thinking_tokens), 0) as thinking_tokens,
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
        run_id,
        round_,
    )
    totals = Totals(
        **{
            k: row[k]
            for k in (
                "calls",
                "input_tokens",
                "output_tokens",
                "thinking_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
                "cost_usd",
            )
        }
    )
    counts = BatchCounts(**{k: row[k] for k in ("succeeded", "errored", "canceled", "expired")})
    return CollectRoundOutput(counts=counts, totals=totals)


# ------------------------------------------------------------------ ledger rows of a round


async def open_batch_calls(
    conn: asyncpg.Connection,
    *,
    run_id: str,
    custom_ids: list[str],
    stored: list[dict[str, Any]],
    model: str,
    prefix_sha: str,
    origin: ledger.Origin,
    provider_batch_id: str,
    part: int,
    aliases: list[dict[str, str] | None] | None = None,
    endpoint: Endpoint | None = None,
) -> None:
    """Insert a ``started`` ledger row per request of a created provider batch, and map
    each ``batch_requests`` row to its call and batch (call inside the caller's
    transaction, with the batch id). ``aliases``: each request's short ids (alias ->
    block_uid), the record its answer is mapped back with; ``None``: none use them."""
    await conn.execute(
        """with ins as (
               insert into llm_calls (run_id, pack_path, pack_attempt, block_uids,
                   model, prefix_sha256, request, status, workflow_id,
                   workflow_run_id, activity_id, activity_attempt,
                   provider_batch_id, custom_id, purpose, provider, api, block_aliases,
                   endpoint_host)
               select r.run_id, r.pack_path, r.pack_attempt, r.block_uids, $4, $5,
                      t.req, 'started', $6, $7, $8, $9, $10, r.custom_id,
                      'batch_request', $13, 'message_batches', t.aliases, $14
               from unnest($2::text[], $3::jsonb[], $12::jsonb[]) as t(cid, req, aliases)
               join batch_requests r on r.run_id = $1 and r.custom_id = t.cid
               returning call_id, custom_id)
           update batch_requests r set call_id = ins.call_id, part = $11,
                  provider_batch_id = $10
           from ins where r.run_id = $1 and r.custom_id = ins.custom_id""",
        run_id,
        custom_ids,
        stored,
        model,
        prefix_sha,
        origin.workflow_id,
        origin.workflow_run_id,
        origin.activity_id,
        origin.activity_attempt,
        provider_batch_id,
        part,
        aliases or [None] * len(custom_ids),
        endpoint.provider if endpoint else "anthropic",
        endpoint.host if endpoint else None,
    )


async def record_results(conn: asyncpg.Connection, run_id: str, rows: Sequence[ResultRow]) -> None:
    """Record batch result lines in the ledger and on their requests (one transaction).

    Only a ``started`` ledger row, and a request without a result, is written: a line
    recorded by an earlier attempt is left as it is.
    """
    if not rows:
        return
    async with conn.transaction():
        await conn.executemany(
            """update llm_calls set status = $2, response = $3, http_status = $4,
                      error_type = $5, error_message = $6, request_id = $7,
                      stop_reason = $8, input_tokens = $9, output_tokens = $10,
                      cache_creation_input_tokens = $11, cache_read_input_tokens = $12,
                      cache_creation_1h_tokens = $13, cost_usd = $14, latency_ms = $15,
                      thinking_tokens = $16, error_code = $17,
                      finished_at = clock_timestamp()
               where call_id = $1 and status = 'started'""",
            [(r.call_id, *r[3:]) for r in rows],
        )
        await conn.executemany(
            """update batch_requests set result_type = $3
               where run_id = $1 and custom_id = $2 and result_type is null""",
            [(run_id, r.custom_id, r.result_type) for r in rows],
        )


# ------------------------------------------------------------------ the prompt cache of batches


async def prefix_recently_cached(conn: asyncpg.Connection, run_id: str, within_s: float) -> bool:
    """Whether a call of the run wrote or read its prompt prefix in the last ``within_s``
    seconds: the prefix is taken as still cached. A sync call counts from its answer; a
    batch request, which may have run any time between its batch's submission and its
    end, from its submission (the earliest it can have touched the cache)."""
    return bool(
        await conn.fetchval(
            """select exists (select 1 from llm_calls where run_id = $1
                  and status = 'succeeded'
                  and cache_creation_input_tokens + cache_read_input_tokens > 0
                  and case when purpose = 'batch_request' then started_at else finished_at end
                      > now() - make_interval(secs => $2))""",
            run_id,
            float(within_s),
        )
    )


async def round_cache_plan(
    conn: asyncpg.Connection, run_id: str, round_: int, plan: CachePlan
) -> CachePlan:
    """Keep ``plan`` as round ``round_``'s cache plan unless it has one; return the kept one
    (so a round's pre-warm, its submission and their retries follow one decision)."""
    await conn.execute(
        """insert into batch_rounds (run_id, round, cache_plan) values ($1, $2, $3)
           on conflict (run_id, round) do nothing""",
        run_id,
        round_,
        plan,
    )
    kept = await conn.fetchval(
        "select cache_plan from batch_rounds where run_id = $1 and round = $2", run_id, round_
    )
    return cast(CachePlan, kept)


async def recorded_cache_plan(
    conn: asyncpg.Connection, run_id: str, round_: int
) -> CachePlan | None:
    """Round ``round_``'s kept cache plan (``None``: not decided yet)."""
    kept = await conn.fetchval(
        "select cache_plan from batch_rounds where run_id = $1 and round = $2", run_id, round_
    )
    return cast(CachePlan | None, kept)


async def mark_round_warm(conn: asyncpg.Connection, run_id: str, round_: int, warm: bool) -> None:
    """Record whether the prefix was cached as round ``round_`` was submitted (the first
    submission attempt's answer stands)."""
    await conn.execute(
        """update batch_rounds set warm_at_submit = $3
           where run_id = $1 and round = $2 and warm_at_submit is null""",
        run_id,
        round_,
        warm,
    )


async def count_cache_hits(
    conn: asyncpg.Connection, run_id: str, provider_batch_id: str, model: str
) -> None:
    """Add a collected provider batch's requests to the model's batch hit counts: those of
    a round submitted on a warm prefix with ``cache_control``, answered, on a prefix long
    enough to cache (they read or wrote it). Call once per batch, in the transaction that
    marks it collected."""
    await conn.execute(
        """insert into batch_cache_hits as h (model, requests, reads)
           select $3, count(*), count(*) filter (where c.cache_read_input_tokens > 0)
           from batch_requests r
           join batch_rounds b on b.run_id = r.run_id and b.round = r.round
           join llm_calls c on c.call_id = r.call_id
           where r.run_id = $1 and r.provider_batch_id = $2
             and b.warm_at_submit and b.cache_plan <> 'none'
             and c.status = 'succeeded'
             and c.cache_creation_input_tokens + c.cache_read_input_tokens > 0
           having count(*) > 0
           on conflict (model) do update
           set requests = h.requests + excluded.requests, reads = h.reads + excluded.reads""",
        run_id,
        provider_batch_id,
        model,
    )


async def batch_cache_hits(conn: asyncpg.Connection, model: str) -> tuple[int, int]:
    """Of the model's answered batch requests sent with ``cache_control`` on a prefix
    cached before their batch was submitted (a pre-warm, a lead request, an earlier
    round), how many read it: (reads, requests), the model's measured hit rate of a warm
    batch. Requests of rounds that wrote the prefix themselves are not in it."""
    row = await conn.fetchrow(
        "select reads, requests from batch_cache_hits where model = $1", model
    )
    return (int(row["reads"]), int(row["requests"])) if row else (0, 0)
