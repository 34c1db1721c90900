"""Streams in Postgres: a run whose document grows (migration 015).

A stream is a run over a document of kind ``stream``. :func:`append_rows` accepts rows:
under the stream row's lock it writes each as the document's next block and its
``pending`` overlay in no pack (``pack_index`` null), in one transaction, so a row is
either accepted whole or not at all, and once committed it survives any crash. A row put
again under its key (the producer restarted) is the row already accepted. The workflow
reads what is buffered (:func:`buffered`) and gives the oldest rows a pack
(:func:`form_pack`, idempotent per pack number); from there a row is an ordinary block of
an ordinary pack. :func:`close` ends acceptance under the same lock, so no row is accepted
after a close that the draining workflow could miss.

**The same row is asked once.** Rows are the same when their answer keys are
(``blockbatch.core.reuse``: the row's text, under the stream's prompt, model and call
shape; not its producer key, not its other fields, which are never sent). A row that repeats
one the stream holds (buffered, in a pack or answered; in the same put or an earlier one)
is stored as its own row, in no pack, and takes the first copy's outcome: at once when that
is answered (``overlays.take_answered``), else when it lands (``same_as``, as duplicates in
a run). It delivers its own result, whose usage says ``reused`` and costs nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from blockbatch.core.commands import PROG
from blockbatch.core.context import RunContext
from blockbatch.core.endpoint import Endpoint
from blockbatch.core.planning import OutputRatios, estimate_tokens
from blockbatch.core.reuse import answer_key, block_digest, prompt_digest
from blockbatch.core.run_types import ACTIVE_STATUSES, RunOptions
from blockbatch.core.streams import Buffered, StreamTriggers, stream_document_id
from blockbatch.store import overlays
from blockbatch.store.repo import NotFound, create_run
from blockbatch.store.runs import BlockSize

#: The block type of a stream row (a JSONL row's, as ingest names it).
ROW_TYPE = "record"


class StreamClosed(RuntimeError):
    """A put to a stream that no longer accepts rows (closed, cancelled or finished)."""


@dataclass(frozen=True)
class StreamInfo:
    run_id: str
    document_id: str
    triggers: StreamTriggers
    text_field: str
    rows: int
    closed: bool
    status: str


@dataclass(frozen=True)
class Row:
    """One row to accept: its text, the fields kept with it, and the producer's key."""

    text: str
    metadata: dict[str, Any]
    key: str | None = None


async def create_stream(
    conn: asyncpg.Connection,
    run_id: str,
    schema_id: str,
    options: RunOptions,
    triggers: StreamTriggers,
    *,
    text_field: str = "text",
    name: str | None = None,
) -> str:
    """The stream's empty document, its run (``running``) and its stream row, at once."""
    document_id = stream_document_id(run_id)
    async with conn.transaction():
        await conn.execute(
            """insert into documents (document_id, name, format, content_sha256, block_count,
                                      kind)
               values ($1, $2, 'jsonl', $3, 0, 'stream')""",
            document_id,
            name or f"stream {run_id}",
            hashlib.sha256(document_id.encode()).hexdigest(),
        )
        await create_run(conn, document_id, schema_id, options, run_id=run_id)
        await conn.execute(
            """update runs set status = 'running', started_at = now() where run_id = $1""", run_id
        )
        await conn.execute(
            """insert into streams (run_id, document_id, triggers, text_field)
               values ($1, $2, $3, $4)""",
            run_id,
            document_id,
            triggers.model_dump(mode="json"),
            text_field,
        )
    return document_id


async def delete_stream(conn: asyncpg.Connection, run_id: str) -> None:
    """Remove a stream whose workflow could not start (nothing was accepted yet)."""
    async with conn.transaction():
        await conn.execute("delete from runs where run_id = $1", run_id)
        await conn.execute(
            "delete from documents where document_id = $1", stream_document_id(run_id)
        )


async def info(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> StreamInfo:
    """The stream as stored.

    Raises:
        NotFound: no stream with this run id.
    """
    row = await conn.fetchrow(
        """select s.run_id, s.document_id, s.triggers, s.text_field, s.rows,
                  s.closed_at is not null as closed, r.status
           from streams s join runs r using (run_id) where s.run_id = $1""",
        run_id,
    )
    if row is None:
        raise NotFound(
            f"no stream {run_id!r}: `{PROG} list` shows runs; a "
            f"stream is a run started by `{PROG} stream`"
        )
    return StreamInfo(
        row["run_id"],
        row["document_id"],
        StreamTriggers.model_validate(row["triggers"]),
        row["text_field"],
        row["rows"],
        row["closed"],
        row["status"],
    )


async def append_rows(
    conn: asyncpg.Connection,
    ctx: RunContext,
    rows: Sequence[Row],
    endpoint: Endpoint | None = None,
) -> list[int]:
    """Accept ``rows`` in one transaction; their block indexes, in order.

    ``endpoint``: the endpoint that would answer them (``blockbatch.core.endpoint.answering``);
    only its earlier answers are reused (``None``: none is).

    A row whose key the stream already holds (or that repeats a key earlier in
    ``rows``) is not stored again: its index is the one accepted first. With
    ``reuse_answers`` a row whose answer an earlier run gave is born answered, as in
    ``plan_run``.

    Raises:
        StreamClosed: the stream is closed, or its run is no longer active.
    """
    run_id = ctx.run_id
    async with conn.transaction():
        stream = await conn.fetchrow(
            """select document_id, rows, closed_at from streams where run_id = $1
               for update""",
            run_id,
        )
        if stream is None:
            raise NotFound(f"no stream {run_id!r}")
        # A share lock on the run: cancelling (mark_cancelling) and finishing wait for it,
        # so a row accepted here is seen by the run's end (ended cancelled, not lost).
        status = await conn.fetchval("select status from runs where run_id = $1 for share", run_id)
        if stream["closed_at"] is not None or status not in ACTIVE_STATUSES:
            why = "closed" if stream["closed_at"] is not None else status
            raise StreamClosed(
                f"stream {run_id} is {why}: it accepts no more rows; open a "
                f"new stream (its results stay: `{PROG} export "
                f"{run_id}`)"
            )
        document_id, first = stream["document_id"], stream["rows"]
        keys = [r.key for r in rows if r.key is not None]
        known: dict[str, int] = {}
        if keys:
            known = {
                r["stream_key"]: r["block_index"]
                for r in await conn.fetch(
                    """select stream_key, block_index from blocks
                   where document_id = $1 and stream_key = any($2::text[])""",
                    document_id,
                    keys,
                )
            }
        indexes: list[int] = []
        new: list[tuple[int, Row]] = []
        for row in rows:
            if row.key is not None and row.key in known:
                indexes.append(known[row.key])
                continue
            index = first + len(new)
            new.append((index, row))
            if row.key is not None:
                known[row.key] = index
            indexes.append(index)
        if not new:
            return indexes
        digests = [block_digest(ROW_TYPE, r.text) for _, r in new]
        await conn.execute(
            """insert into blocks (block_uid, document_id, block_index, block_type,
                                   block_content, metadata, est_tokens, content_sha256,
                                   accepted_at, stream_key)
               select $1 || ':' || i, $1, i, $2, c, m, e, h, clock_timestamp(), k
               from unnest($3::int[], $4::text[], $5::jsonb[], $6::int[], $7::text[],
                           $8::text[]) as x(i, c, m, e, h, k)""",
            document_id,
            ROW_TYPE,
            [i for i, _ in new],
            [r.text for _, r in new],
            [r.metadata for _, r in new],
            [estimate_tokens(r.text) for _, r in new],
            digests,
            [r.key for _, r in new],
        )
        prompt = prompt_digest(ctx.spec, ctx.model.id, ctx.shape)
        answer_keys = [answer_key(prompt, d) for d in digests]
        found = (
            await overlays.reusable_answers(conn, answer_keys, endpoint)
            if ctx.options.reuse_answers
            else {}
        )
        sizes = [
            BlockSize(f"{document_id}:{i}", i, 0, d) for (i, _), d in zip(new, digests, strict=True)
        ]
        # The same row (its answer key) is asked once per stream, like duplicates in a run:
        # a repeat follows the stream's first copy still buffered, in a pack or answered.
        leaders = await _leaders(conn, run_id, [k for k in answer_keys if k not in found])
        same_as: list[str | None] = []
        for block, key in zip(sizes, answer_keys, strict=True):
            leader = None if key in found else leaders.get(key)
            same_as.append(leader)
            if leader is None and key not in found:
                leaders[key] = block.block_uid
        await overlays.insert_plan(
            conn,
            run_id,
            sizes,
            [None] * len(new),
            answer_keys,
            {b.block_uid: found[k] for b, k in zip(sizes, answer_keys, strict=True) if k in found},
            same_as,
        )
        followers = [b.block_uid for b, f in zip(sizes, same_as, strict=True) if f is not None]
        if followers:
            await overlays.take_answered(conn, run_id, followers)
        count = first + len(new)
        await conn.execute("update streams set rows = $2 where run_id = $1", run_id, count)
        await conn.execute(
            "update documents set block_count = $2 where document_id = $1", document_id, count
        )
        await conn.execute("update runs set blocks_total = $2 where run_id = $1", run_id, count)
    return indexes


#: The stream's rows a new row with one of these answer keys may duplicate: still to be
#: answered or answered by the model, not duplicates themselves, not failed (a repeat of
#: a failed row is asked again). Share-locked until the accepting transaction commits, so
#: an answer landing meanwhile waits and hands its outcome to the new duplicates (the
#: trigger of migration 031); a row an answer is landing on right now is skipped (its key's
#: next row leads, or the new row is asked itself): never a duplicate left waiting.
_LEADERS_SQL = """
select answer_key, block_uid, block_index from overlays
where run_id = $1 and answer_key = any($2::text[]) and same_as is null
  and status in ('pending', 'ai_complete', 'confirmed')
for share skip locked
"""


async def _leaders(conn: asyncpg.Connection, run_id: str, keys: list[str]) -> dict[str, str]:
    """Per answer key, the stream's first row a new row with it duplicates
    (:data:`_LEADERS_SQL`)."""
    if not keys:
        return {}
    first: dict[str, tuple[int, str]] = {}
    for r in await conn.fetch(_LEADERS_SQL, run_id, keys):
        key, at = r["answer_key"], (r["block_index"], r["block_uid"])
        if key not in first or at < first[key]:
            first[key] = at
    return {key: uid for key, (_, uid) in first.items()}


async def close(conn: asyncpg.Connection, run_id: str) -> bool:
    """Accept no more rows; True if this call closed it (False: it was closed already)."""
    closed = await conn.fetchval(
        """update streams set closed_at = clock_timestamp()
           where run_id = $1 and closed_at is null returning true""",
        run_id,
    )
    if closed is None:
        await info(conn, run_id)  # raises NotFound for an unknown stream
    return bool(closed)


async def in_flight(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> int:
    """Rows buffered or in a pack that has not finished them (backpressure's count)."""
    return await conn.fetchval(
        "select count(*) from overlays where run_id = $1 and status = 'pending'", run_id
    )


#: What is buffered, read in one statement (one snapshot): a close this read sees has
#: every row accepted before it in the same snapshot.
_BUFFERED_SQL = """
with u as (
    select o.block_index, b.est_tokens, b.accepted_at
    from overlays o join blocks b on b.block_uid = o.block_uid
    where o.run_id = $1 and o.pack_index is null and o.status = 'pending'
      and o.same_as is null)
select s.closed_at is not null as closed, s.rows as accepted,
       (select count(*) from u) as rows,
       (select coalesce(sum(est_tokens), 0) from u) as tokens,
       (select extract(epoch from clock_timestamp() - min(accepted_at)) from u)::float8
           as oldest_wait_s,
       (select array_agg(est_tokens order by block_index)
        from (select est_tokens, block_index from u order by block_index limit $2) h)
           as head
from streams s where s.run_id = $1
"""

#: How many of the oldest buffered rows a pack (or the full-pack check) looks at, at most.
_HEAD = 1001


def _head(ctx: RunContext) -> int:
    """Rows enough to fill one pack and see that it is full: no pack holds more than the
    hard cap (or a set ``pack_size``)."""
    return min(_HEAD, max(ctx.options.hard_cap, ctx.options.pack_size or 0) + 1)


async def buffered(
    conn: asyncpg.Connection, ctx: RunContext, ratios: OutputRatios | None = None
) -> Buffered:
    """What the stream holds in no pack yet; ``full_pack`` by the run's pack rules (with
    what its answers write, ``ratios``, once known)."""
    row = await conn.fetchrow(_BUFFERED_SQL, ctx.run_id, _head(ctx))
    if row is None:
        raise NotFound(f"no stream {ctx.run_id!r}")
    head = list(row["head"] or [])
    full = len(head) > 1 and len(ctx.plan(head, ratios)) > 1
    return Buffered(
        rows=row["rows"],
        tokens=row["tokens"],
        oldest_wait_s=max(row["oldest_wait_s"] or 0.0, 0.0),
        full_pack=full,
        closed=row["closed"],
        accepted=row["accepted"],
    )


async def form_pack(
    conn: asyncpg.Connection,
    ctx: RunContext,
    pack_index: int,
    *,
    max_rows: int | None,
    max_tokens: int | None,
    ratios: OutputRatios | None = None,
) -> tuple[int, int]:
    """Give the oldest buffered rows pack ``pack_index``; (rows in it, rows accepted).

    The rows are the first pack the run's rules (:meth:`RunContext.plan`, with ``ratios``:
    what the stream's answers, or earlier runs', write) make of the oldest buffered rows,
    cut to ``max_rows`` and ``max_tokens`` (one row at least).
    Idempotent: a pack number that has rows already returns them unchanged (a retried
    activity), so a row is never in two packs and a pack never takes rows twice.
    """
    async with conn.transaction():
        accepted = await conn.fetchval(
            "select rows from streams where run_id = $1 for update", ctx.run_id
        )
        if accepted is None:
            raise NotFound(f"no stream {ctx.run_id!r}")
        have = await conn.fetchval(
            "select count(*) from overlays where run_id = $1 and pack_index = $2",
            ctx.run_id,
            pack_index,
        )
        if have:
            return have, accepted
        head = await conn.fetch(
            """select o.block_uid, b.est_tokens
               from overlays o join blocks b on b.block_uid = o.block_uid
               where o.run_id = $1 and o.pack_index is null and o.status = 'pending'
                 and o.same_as is null
               order by o.block_index limit $2""",
            ctx.run_id,
            min(max_rows or _HEAD, _head(ctx)),
        )
        if not head:
            return 0, accepted
        tokens = [r["est_tokens"] for r in head]
        if max_tokens is not None:
            total, cut = 0, 0
            for t in tokens:
                if cut and total + t > max_tokens:
                    break
                total, cut = total + t, cut + 1
            tokens = tokens[:cut]
        first = ctx.plan(tokens, ratios)[0]
        uids = [head[p]["block_uid"] for p in first.positions]
        await conn.execute(
            """update overlays set pack_index = $2
               where run_id = $1 and block_uid = any($3::text[]) and pack_index is null
                 and status = 'pending'""",
            ctx.run_id,
            pack_index,
            uids,
        )
        await conn.execute(
            "update runs set pack_count = greatest(pack_count, $2) where run_id = $1",
            ctx.run_id,
            pack_index + 1,
        )
    return len(uids), accepted


@dataclass(frozen=True)
class RowResult:
    """One finished row: its index, key and fields, its answer or reason-coded error, and
    its share of the call that answered it."""

    block_index: int
    key: str | None
    metadata: dict[str, Any]
    status: str
    value: dict[str, Any] | None
    reason: str | None
    error: str | None
    usage: dict[str, float]


#: Finished rows from ``$2`` on, less those already delivered (``$3``), with their share
#: of their call's tokens and cost (the call's, divided by the blocks it carried); a row
#: answered by an earlier run, or the duplicate of one of the stream's, paid nothing.
_FINISHED_SQL = """
select o.block_index, b.stream_key, b.metadata, o.status, coalesce(o.staging, o.model_answer)
           as value, o.reason_code, o.last_error,
       greatest(cardinality(c.block_uids), 1) as shared_by,
       coalesce(c.input_tokens, 0) as input_tokens, coalesce(c.output_tokens, 0)
           as output_tokens,
       coalesce(c.cache_creation_input_tokens, 0) as cache_creation_input_tokens,
       coalesce(c.cache_read_input_tokens, 0) as cache_read_input_tokens,
       coalesce(c.cost_usd, 0)::float8 as cost_usd,
       o.reused_from_run_id is not null or o.same_as is not null as reused
from overlays o join blocks b on b.block_uid = o.block_uid
left join llm_calls c on c.call_id = o.call_id and o.reused_from_run_id is null
  and o.same_as is null
where o.run_id = $1 and o.block_index >= $2 and o.status <> 'pending'
  and not (o.block_index = any($3::int[]))
order by o.block_index limit $4
"""


async def finished_rows(
    conn: asyncpg.Connection | asyncpg.Pool,
    run_id: str,
    low: int,
    delivered: Sequence[int],
    limit: int = 2000,
) -> list[RowResult]:
    """Rows that finished (any status but pending) from block ``low`` on, in block order,
    less the ``delivered`` ones."""
    rows = await conn.fetch(_FINISHED_SQL, run_id, low, list(delivered), limit)
    out = []
    for r in rows:
        n = r["shared_by"]
        usage = {
            k: round(r[k] / n, 2)
            for k in (
                "input_tokens",
                "output_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
            )
        }
        usage["cost_usd"] = round(r["cost_usd"] / n, 8)
        if r["reused"]:
            usage["reused"] = True
        value = r["value"]
        if isinstance(value, str):
            value = json.loads(value)
        metadata = r["metadata"]
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        out.append(
            RowResult(
                r["block_index"],
                r["stream_key"],
                metadata or {},
                r["status"],
                value if r["status"] in ("ai_complete", "confirmed") else None,
                r["reason_code"],
                r["last_error"],
                usage,
            )
        )
    return out
