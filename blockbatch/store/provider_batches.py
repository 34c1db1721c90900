"""Provider batches (``provider_batches``): one row per part of a round, the provider
batch that carries it, and its state.

Creating a batch exactly once is held here and in ``activities/batches/create.py`` (see
its docstring): :func:`lock_part` serialises the attempts on one part, :func:`mark_sent`
is committed before the create call, :func:`record_created` writes the batch id, the
request mapping and the ledger rows in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import asyncpg

from blockbatch.core.batch_types import BatchCounts, PollRoundOutput, ProviderBatchRef
from blockbatch.core.endpoint import Endpoint
from blockbatch.store import batches, ledger

#: A part of a round: (run_id, round, part).
PartKey = tuple[str, int, int]


class Part(NamedTuple):
    """A part of a round that has a provider batch."""

    part: int
    provider_batch_id: str
    status: str


async def submitted_parts(conn: asyncpg.Connection, run_id: str, round_: int) -> list[Part]:
    """The round's parts that have a provider batch, in order."""
    rows = await conn.fetch(
        """select part, provider_batch_id, status from provider_batches
           where run_id = $1 and round = $2 and provider_batch_id is not null
           order by part""",
        run_id,
        round_,
    )
    return [Part(*r) for r in rows]


async def submitted_refs(
    conn: asyncpg.Connection, run_id: str, round_: int
) -> dict[int, ProviderBatchRef]:
    """The round's provider batches already created, by part."""
    rows = await conn.fetch(
        """select part, provider_batch_id as id, request_count
           from provider_batches where run_id = $1 and round = $2
             and provider_batch_id is not null order by part""",
        run_id,
        round_,
    )
    return {
        r["part"]: ProviderBatchRef(
            part=r["part"], provider_batch_id=r["id"], requests=r["request_count"]
        )
        for r in rows
    }


async def parts_to_cancel(conn: asyncpg.Connection, run_id: str, round_: int) -> list[Part]:
    """The round's provider batches still running and not asked to cancel yet."""
    rows = await conn.fetch(
        """select part, provider_batch_id, status from provider_batches
           where run_id = $1 and round = $2 and provider_batch_id is not null
             and status not in ('ended', 'canceling')""",
        run_id,
        round_,
    )
    return [Part(*r) for r in rows]


async def mark_cancel_requested(conn: asyncpg.Connection, key: PartKey) -> None:
    """Record when a part's cancel was first asked for."""
    await conn.execute(
        """update provider_batches set cancel_requested_at = coalesce(
               cancel_requested_at, clock_timestamp())
           where run_id = $1 and round = $2 and part = $3""",
        *key,
    )


@dataclass(frozen=True)
class BatchState:
    """A provider batch as the API reports it."""

    status: str
    counts: BatchCounts
    ended_at: datetime | None


async def save_state(conn: asyncpg.Connection, key: PartKey, state: BatchState) -> None:
    """Record a part's provider batch state and request counts."""
    c = state.counts
    await conn.execute(
        """update provider_batches set status = $4, processing = $5, succeeded = $6,
                  errored = $7, canceled = $8, expired = $9, ended_at = $10
           where run_id = $1 and round = $2 and part = $3""",
        *key,
        state.status,
        c.processing,
        c.succeeded,
        c.errored,
        c.canceled,
        c.expired,
        state.ended_at,
    )


async def round_state(conn: asyncpg.Connection, run_id: str, round_: int) -> PollRoundOutput:
    """The summed request counts of a round's provider batches, and their states."""
    rows = await conn.fetch(
        """select status, processing, succeeded, errored, canceled, expired
           from provider_batches
           where run_id = $1 and round = $2 and provider_batch_id is not null
           order by part""",
        run_id,
        round_,
    )
    counts = BatchCounts(**{k: sum(r[k] for r in rows) for k in BatchCounts.model_fields})
    statuses = [r["status"] for r in rows]
    return PollRoundOutput(
        counts=counts, statuses=statuses, ended=all(s == "ended" for s in statuses)
    )


class EndedPart(NamedTuple):
    """An ended provider batch whose results are still to be read."""

    part: int
    provider_batch_id: str
    submitted_at: datetime | None
    ended_at: datetime | None


async def parts_to_collect(conn: asyncpg.Connection, run_id: str, round_: int) -> list[EndedPart]:
    """The round's ended provider batches whose results were not read yet."""
    rows = await conn.fetch(
        """select part, provider_batch_id, submitted_at, ended_at
           from provider_batches
           where run_id = $1 and round = $2 and status = 'ended'
             and collected_at is null order by part""",
        run_id,
        round_,
    )
    return [EndedPart(*r) for r in rows]


async def mark_collected(conn: asyncpg.Connection, run_id: str, provider_batch_id: str) -> bool:
    """Every result of a provider batch is recorded: it is not read again. Returns whether
    this call marked it (``False``: it already was)."""
    marked = await conn.fetchval(
        """update provider_batches set collected_at = clock_timestamp()
           where run_id = $1 and provider_batch_id = $2 and collected_at is null
           returning true""",
        run_id,
        provider_batch_id,
    )
    return bool(marked)


# ------------------------------------------------------------------ creating exactly once


async def lock_part(conn: asyncpg.Connection, key: PartKey) -> None:
    """Serialise attempts on one part: a transaction-scoped advisory lock.

    Held until the caller's transaction ends, i.e. until the batch id is recorded, so a
    zombie attempt and its retry never submit the same part at the same time.
    """
    run_id, round_, part = key
    await conn.execute(
        "select pg_advisory_xact_lock(hashtextextended($1, 0))",
        f"blockbatch-batch:{run_id}:{round_}:{part}",
    )


class PartRecord(NamedTuple):
    """What an earlier attempt recorded of a part."""

    provider_batch_id: str | None
    #: Set (committed) right before a create call; cleared when the API refused it.
    submitted_at: datetime | None


async def part_record(conn: asyncpg.Connection, key: PartKey) -> PartRecord | None:
    """The part's row, if an earlier attempt wrote one."""
    row = await conn.fetchrow(
        """select provider_batch_id, submitted_at from provider_batches
           where run_id = $1 and round = $2 and part = $3""",
        *key,
    )
    return None if row is None else PartRecord(*row)


async def start_part(
    conn: asyncpg.Connection, key: PartKey, status: str, request_count: int, nbytes: int
) -> None:
    """Write the part's row as ``submitting`` (or ``not_submitted``), counting attempts."""
    await conn.execute(
        """insert into provider_batches (run_id, round, part, status,
               request_count, request_bytes)
           values ($1, $2, $3, $4, $5, $6)
           on conflict (run_id, round, part) do update set status = $4,
               submit_attempts = provider_batches.submit_attempts + 1""",
        *key,
        status,
        request_count,
        nbytes,
    )


async def mark_sent(conn: asyncpg.Connection, key: PartKey) -> None:
    """Committed before the create call: a retry then knows a batch may exist."""
    await conn.execute(
        """update provider_batches set submitted_at = clock_timestamp()
           where run_id = $1 and round = $2 and part = $3""",
        *key,
    )


async def mark_refused(conn: asyncpg.Connection, key: PartKey, note: str) -> None:
    """The API answered the create call with an error: no batch exists to look for."""
    await conn.execute(
        """update provider_batches set submitted_at = null, note = $4
           where run_id = $1 and round = $2 and part = $3""",
        *key,
        note[:1000],
    )


async def claimed_ids(conn: asyncpg.Connection, batch_ids: list[str]) -> set[str]:
    """Those of ``batch_ids`` that some part already recorded."""
    return {
        r["provider_batch_id"]
        for r in await conn.fetch(
            "select provider_batch_id from provider_batches where provider_batch_id = any($1)",
            batch_ids,
        )
    }


@dataclass(frozen=True)
class CreatedBatch:
    """A provider batch as the create call (or the list of batches) returned it."""

    provider_batch_id: str
    status: str
    expires_at: datetime | None
    processing: int


async def record_created(
    conn: asyncpg.Connection,
    key: PartKey,
    batch: CreatedBatch,
    note: str | None,
    *,
    prefix: tuple[str, Any, Any],
    model: str,
    origin: ledger.Origin,
    custom_ids: Sequence[str],
    stored: Sequence[dict[str, Any]],
    aliases: Sequence[dict[str, str] | None] | None = None,
    endpoint: Endpoint | None = None,
) -> None:
    """Batch id, request mapping and ledger rows, in one transaction (``endpoint``: who
    answers, blockbatch/core/endpoint.py).

    ``aliases``: each request's short ids (alias -> block_uid, ``None``: none), kept on
    its ledger row; ``None`` when no request uses them.
    """
    async with conn.transaction():
        await conn.execute(
            """update provider_batches set provider_batch_id = $4, status = $5,
                      expires_at = $6, processing = $7, note = coalesce($8, note),
                      submitted_at = coalesce(submitted_at, clock_timestamp())
               where run_id = $1 and round = $2 and part = $3""",
            *key,
            batch.provider_batch_id,
            batch.status,
            batch.expires_at,
            batch.processing,
            note,
        )
        await ledger.save_prefix(conn, *prefix)
        for start in range(0, len(custom_ids), 500):
            chunk = slice(start, start + 500)
            await batches.open_batch_calls(
                conn,
                run_id=key[0],
                custom_ids=list(custom_ids[chunk]),
                stored=list(stored[chunk]),
                model=model,
                prefix_sha=prefix[0],
                origin=origin,
                provider_batch_id=batch.provider_batch_id,
                part=key[2],
                aliases=None if aliases is None else list(aliases[chunk]),
                endpoint=endpoint,
            )
