"""The fleet's rate limiter in Postgres (``rate_limiters``, ``rate_reservations``,
``rate_waiters``): every worker and run using one API key and rate-limit class
(``blockbatch.core.ratelimit.rate_class``, in the ``model`` column) shares one row.

The bucket arithmetic is ``blockbatch/core/ratelimit.py``; here it runs under a row lock (``for
update``) so concurrent reservations from any worker see each other, on the database clock.
Fair shares: while several runs wait, the one served least in the last minute (per its
weight) goes first; a run that is ahead waits a moment instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from blockbatch.core.ratelimit import (
    KINDS,
    Admission,
    Buckets,
    Kind,
    LastSecond,
    Need,
    Throttle,
    expected,
    fresh,
    learn_output,
    per_second,
)
from blockbatch.core.ratelimit import answered as aimd_answered
from blockbatch.core.ratelimit import learn as learn_limits
from blockbatch.core.ratelimit import reserve as reserve_buckets
from blockbatch.core.ratelimit import settle as settle_buckets
from blockbatch.core.ratelimit import throttled as aimd_throttled
from blockbatch.core.views import LimiterView

#: A run counts as waiting while it asked within this many seconds.
WAITING_S = 10.0
#: The window over which a run's share is counted (seconds).
SHARE_WINDOW_S = 60.0
#: A run ahead of the least-served waiting run by more than this many calls (per weight)
#: lets it go first.
FAIR_SLACK = 1.0


@dataclass(frozen=True)
class Attempt:
    """One try to reserve: ``reservation_id`` when admitted, else how long to wait."""

    reservation_id: int | None
    wait_s: float
    binding: Kind | None
    #: ``fair_share``: capacity may be there, but a less-served run waits and goes first.
    reason: str = ""


async def _now(conn: asyncpg.Connection | asyncpg.Pool) -> float:
    return float(await conn.fetchval("select extract(epoch from clock_timestamp())"))


async def _lock(
    conn: asyncpg.Connection,
    key_hash: str,
    model: str,
    defaults: Mapping[Kind, int] | None,
    now: float,
) -> Buckets:
    """The limiter row, locked until the transaction ends (created full if new)."""
    start = fresh(defaults, now)
    await conn.execute(
        """insert into rate_limiters (key_hash, model, requests_limit, input_limit,
               output_limit, tokens_limit, requests_level, input_level, output_level,
               tokens_level, at, ramp, last_admit_at)
           values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
           on conflict do nothing""",
        key_hash,
        model,
        start.limits["requests"],
        start.limits["input"],
        start.limits["output"],
        start.limits["tokens"],
        start.levels["requests"],
        start.levels["input"],
        start.levels["output"],
        start.levels["tokens"],
        now,
        start.ramp,
        start.last_admit_at,
    )
    row = await conn.fetchrow(
        "select * from rate_limiters where key_hash = $1 and model = $2 for update", key_hash, model
    )
    return _buckets(row)


def _buckets(row: asyncpg.Record) -> Buckets:
    """A ``rate_limiters`` row as the buckets it holds (levels as of its ``at``)."""
    return Buckets(
        limits={k: row[f"{k}_limit"] for k in KINDS},
        levels={k: row[f"{k}_level"] for k in KINDS},
        at=row["at"],
        factor=row["factor"],
        last_cut_at=row["last_cut_at"],
        ramp=row["ramp"],
        last_admit_at=row["last_admit_at"],
        output_share=row["output_share"],
    )


async def _save(
    conn: asyncpg.Connection,
    key_hash: str,
    model: str,
    b: Buckets,
    *,
    learned: bool = False,
    **counters: Any,
) -> None:
    """Write the buckets back; ``learned``: an answer's headers set the limits just now."""
    extra = "".join(f", {name} = {name} + {int(n)}" for name, n in counters.items())
    if learned:
        extra += ", learned_at = now()"
    await conn.execute(
        f"""update rate_limiters set requests_limit = $3, input_limit = $4, output_limit = $5,
                   tokens_limit = $6, requests_level = $7, input_level = $8,
                   output_level = $9, tokens_level = $10, at = $11, factor = $12,
                   last_cut_at = $13, ramp = $14, last_admit_at = $15,
                   output_share = $16{extra}
            where key_hash = $1 and model = $2""",
        key_hash,
        model,
        b.limits["requests"],
        b.limits["input"],
        b.limits["output"],
        b.limits["tokens"],
        b.levels["requests"],
        b.levels["input"],
        b.levels["output"],
        b.levels["tokens"],
        b.at,
        b.factor,
        b.last_cut_at,
        b.ramp,
        b.last_admit_at,
        b.output_share,
    )


#: A limiter transaction commits without waiting for its WAL to reach disk. Row locks are
#: held until the commit returns, so with the default (``on``) every caller of the key queued
#: behind each holder's disk flush as well as its statements (bench/limiter_locks.py: 25 ->
#: 41 reservations/s at 32 in flight, 13 -> 27 at 128, on a loaded 2-core machine). What a
#: Postgres crash can forget is the last fraction of a second of token accounting (up to
#: three times wal_writer_delay, 200 ms by default): the buckets then briefly admit more
#: than they should, as after any restart, and the API's own headers and 429s correct them
#: on the next answers. Ledger, budget and overlay writes keep the default.
_NO_FLUSH_WAIT = "set local synchronous_commit = off"


async def try_reserve(
    conn: asyncpg.Connection,
    *,
    key_hash: str,
    model: str,
    run_id: str,
    need: Need,
    weight: float = 1.0,
    defaults: Mapping[Kind, int] | None = None,
    expires_s: float = 600.0,
    waiter: str = "",
) -> Attempt:
    """Reserve ``need`` for one call of ``run_id`` now, or say how long to wait.

    ``model`` is the limiter's key: the rate-limit class. What is reserved is the call's
    expected output, not all of ``need.output`` (``blockbatch.core.ratelimit.expected``).

    ``waiter`` names the waiting call (the same on each try): its run counts as waiting
    while any of its calls does, for the fair turn.
    """
    async with conn.transaction():
        await conn.execute(_NO_FLUSH_WAIT)
        # Before the lock: this call's own waiter row (its run waits while any call does).
        await conn.execute(
            """insert into rate_waiters (key_hash, model, run_id, waiter, weight, seen_at)
               values ($1, $2, $3, $4, $5, now())
               on conflict (key_hash, model, run_id, waiter)
               do update set weight = excluded.weight, seen_at = now()""",
            key_hash,
            model,
            run_id,
            waiter,
            weight,
        )
        buckets = await _lock(conn, key_hash, model, defaults, await _now(conn))
        # Held from here to the commit: one read, one write. The read is its own statement,
        # after the lock: it sees what the previous holder committed.
        now, last_second, my_turn = await _after_lock(conn, key_hash, model, run_id)
        if not my_turn:
            await _save(conn, key_hash, model, buckets.refilled(now))
            return Attempt(None, 0.5, None, "fair_share")
        need = expected(buckets, need)
        admission: Admission | None = per_second(buckets.refilled(now), need, last_second)
        if admission is None:
            admission = reserve_buckets(buckets, need, now)
        if not admission.admitted:
            await _save(conn, key_hash, model, admission.buckets)
            return Attempt(None, admission.wait_s, admission.binding, "limit")
        reservation_id = await _admit(
            conn, key_hash, model, run_id, waiter, admission.buckets, need, expires_s
        )
        return Attempt(reservation_id, 0.0, admission.binding)


async def _admit(
    conn: asyncpg.Connection,
    key_hash: str,
    model: str,
    run_id: str,
    waiter: str,
    b: Buckets,
    need: Need,
    expires_s: float,
) -> int:
    """One statement, under the lock: the buckets written back (one more admitted), the
    call's waiter row gone, its reservation recorded; returns the reservation's id.

    Stamped with the instant of admission (after the lock, after the last second was
    counted), not the transaction's start: a caller that waited for the lock would
    otherwise leave the per-second window early and let the next second admit more."""
    return int(
        await conn.fetchval(
            """with saved as (
                   update rate_limiters set requests_limit = $19, input_limit = $20,
                          output_limit = $21, tokens_limit = $22, requests_level = $8, input_level = $9,
                          output_level = $10, tokens_level = $11, at = $12, factor = $13,
                          last_cut_at = $14, ramp = $15, last_admit_at = $16,
                          output_share = $17, admitted = admitted + 1
                   where key_hash = $1 and model = $2),
               gone as (
                   delete from rate_waiters
                   where key_hash = $1 and model = $2 and run_id = $3 and waiter = $18)
               insert into rate_reservations (key_hash, model, run_id, requests, input_tokens,
                   output_tokens, created_at, expires_at)
               values ($1, $2, $3, $4, $5, $6, clock_timestamp(),
                       now() + make_interval(secs => $7))
               returning reservation_id""",
            key_hash,
            model,
            run_id,
            need.requests,
            need.input,
            need.output,
            expires_s,
            b.levels["requests"],
            b.levels["input"],
            b.levels["output"],
            b.levels["tokens"],
            b.at,
            b.factor,
            b.last_cut_at,
            b.ramp,
            b.last_admit_at,
            b.output_share,
            waiter,
            b.limits["requests"],
            b.limits["input"],
            b.limits["output"],
            b.limits["tokens"],
        )
    )


async def _after_lock(
    conn: asyncpg.Connection, key_hash: str, model: str, run_id: str
) -> tuple[float, LastSecond, bool]:
    """In one round trip under the limiter's lock: the database clock, the limiter's last
    second (:func:`_last_second`) and whether it is ``run_id``'s turn (:func:`_my_turn`)."""
    row = await conn.fetchrow(
        f"""select extract(epoch from clock_timestamp())::float8 as now, s.*, w.*
            from ({_LAST_SECOND_SQL}) s,
                 (select coalesce(array_agg(t.run_id), '{{}}') as runs,
                         coalesce(array_agg(t.weight), '{{}}') as weights,
                         coalesce(array_agg(t.served), '{{}}') as served
                  from ({_TURN_SQL}) t) w""",
        key_hash,
        model,
        WAITING_S,
        SHARE_WINDOW_S,
        run_id,
    )
    turn = [
        {"run_id": r, "weight": w, "served": n}
        for r, w, n in zip(row["runs"], row["weights"], row["served"], strict=True)
    ]
    return (
        float(row["now"]),
        LastSecond(int(row["n"]), int(row["input"]), float(row["age"]), int(row["before"])),
        _turn_of(turn, run_id),
    )


#: The limiter's admissions of the last second and of the minute before it ($1 key, $2 model).
_LAST_SECOND_SQL = """with recent as (
               select created_at, input_tokens,
                      created_at > clock_timestamp() - interval '1 second' as last
               from rate_reservations
               where key_hash = $1 and model = $2
                 and created_at > clock_timestamp() - interval '61 seconds')
           select count(*) filter (where last) as n,
                  coalesce(sum(input_tokens) filter (where last), 0) as input,
                  coalesce(extract(epoch from clock_timestamp()
                                   - min(created_at) filter (where last)), 0)::float8 as age,
                  count(*) filter (where not last) as before
           from recent"""

#: The runs waiting now ($3 s) or asking ($5), with their weight and calls served in the
#: share window ($4 s).
_TURN_SQL = """select w.run_id, max(w.weight) as weight,
                  (select count(*) from rate_reservations r
                    where r.key_hash = $1 and r.model = $2 and r.run_id = w.run_id
                      and r.created_at > now() - make_interval(secs => $4)) as served
           from rate_waiters w
           where w.key_hash = $1 and w.model = $2
             and (w.seen_at > now() - make_interval(secs => $3) or w.run_id = $5)
           group by w.run_id order by w.run_id"""


def _turn_of(rows: list[dict[str, Any]], run_id: str) -> bool:
    """Whether ``run_id`` is among the least served (per weight) of the waiting ``rows``."""
    if len(rows) < 2:
        return True
    served = {r["run_id"]: r["served"] / max(r["weight"], 1e-6) for r in rows}
    slack = FAIR_SLACK / max(next(r["weight"] for r in rows if r["run_id"] == run_id), 1e-6)
    return served[run_id] <= min(served.values()) + slack


async def settle(
    conn: asyncpg.Connection,
    reservation_id: int,
    *,
    used: Need | None,
    headers: Mapping[str, str] | None,
    throttled_after_s: float | None = None,
    answered: bool = False,
    throttle: Throttle = "cut",
) -> None:
    """Close a reservation: give back what was not used, learn the limits, AIMD.

    Args:
        used: what the API counted (``None``: nothing, e.g. refused or never answered).
        headers: the answer's headers (``anthropic-ratelimit-*``), if any.
        throttled_after_s: set for a 429: its retry-after (``0`` when absent).
        answered: the API answered (not a 429): the fleet's rate recovers a little.
        throttle: for a 429, what it does to the fleet (``blockbatch.core.ratelimit.throttle_of``).
    """
    async with conn.transaction():
        await conn.execute(_NO_FLUSH_WAIT)
        res = await conn.fetchrow(
            """select key_hash, model, requests, input_tokens, output_tokens, settled_at
               from rate_reservations where reservation_id = $1 for update""",
            reservation_id,
        )
        if res is None or res["settled_at"] is not None:
            return  # settled already (a retried activity)
        now = await _now(conn)
        key_hash, model = res["key_hash"], res["model"]
        b = await _lock(conn, key_hash, model, None, now)
        reserved = Need(res["requests"], res["input_tokens"], res["output_tokens"])
        b = settle_buckets(b, reserved, used or Need(0, 0, 0), now)
        if answered and used is not None:
            b = learn_output(b, reserved, used)
        learned = False
        if headers and any(h.startswith("anthropic-ratelimit-") for h in headers):
            b, learned = learn_limits(b, headers, now), True
        counters = {}
        if throttled_after_s is not None:
            b = aimd_throttled(b, now, throttled_after_s, throttle)
            counters["throttled"] = 1
        elif answered:
            b = aimd_answered(b, now)
        await _save(conn, key_hash, model, b, learned=learned, **counters)
        await conn.execute(
            "update rate_reservations set settled_at = now() where reservation_id = $1",
            reservation_id,
        )


async def views(
    conn: asyncpg.Connection | asyncpg.Pool, key_hash: str | None = None
) -> list[LimiterView]:
    """Every limiter (or one key's), refilled to now, with calls in flight and shares."""
    now = await _now(conn)
    rows = await conn.fetch(
        """select * from rate_limiters where $1::text is null or key_hash = $1
           order by key_hash, model""",
        key_hash,
    )
    out = []
    for row in rows:
        b = _buckets(row).refilled(now)
        shares = {
            r["run_id"]: r["n"]
            for r in await conn.fetch(
                """select run_id, count(*) as n from rate_reservations
               where key_hash = $1 and model = $2
                 and created_at > now() - make_interval(secs => $3)
               group by run_id order by n desc""",
                row["key_hash"],
                row["model"],
                SHARE_WINDOW_S,
            )
        }
        in_flight = await conn.fetchval(
            """select count(*) from rate_reservations where key_hash = $1 and model = $2
               and settled_at is null and expires_at > now()""",
            row["key_hash"],
            row["model"],
        )
        waiting = [
            r["run_id"]
            for r in await conn.fetch(
                """select distinct run_id from rate_waiters where key_hash = $1 and model = $2
               and seen_at > now() - make_interval(secs => $3) order by run_id""",
                row["key_hash"],
                row["model"],
                WAITING_S,
            )
        ]
        out.append(
            LimiterView(
                key_hash=row["key_hash"],
                model=row["model"],
                limits=dict(b.limits.items()),
                levels={k: round(v, 1) for k, v in b.levels.items()},
                factor=round(b.factor, 3),
                ramp=round(b.ramp, 3),
                learned=row["learned_at"] is not None,
                admitted=row["admitted"],
                throttled=row["throttled"],
                in_flight=in_flight,
                shares=shares,
                waiting_runs=waiting,
            )
        )
    return out


async def run_note(
    conn: asyncpg.Connection, key_hash: str, model: str, run_id: str
) -> dict[str, Any] | None:
    """What a run's progress shows of the limiter: limits, rate, its share, its 429s."""
    row = await conn.fetchrow(
        """select requests_limit, input_limit, output_limit, factor, learned_at
           from rate_limiters where key_hash = $1 and model = $2""",
        key_hash,
        model,
    )
    if row is None:
        return None
    calls = await conn.fetchrow(
        """select count(*) filter (where run_id = $3) as mine, count(*) as all,
                  count(distinct run_id) as runs
           from rate_reservations
           where key_hash = $1 and model = $2
             and created_at > now() - make_interval(secs => $4)""",
        key_hash,
        model,
        run_id,
        SHARE_WINDOW_S,
    )
    throttled = await conn.fetchval(
        "select count(*) from llm_calls where run_id = $1 and http_status = 429", run_id
    )
    return {
        "limits": {
            "requests": row["requests_limit"],
            "input": row["input_limit"],
            "output": row["output_limit"],
        },
        "learned": row["learned_at"] is not None,
        "rate": round(row["factor"], 3),
        "run_share": round(calls["mine"] / calls["all"], 3) if calls["all"] else 0.0,
        "runs": max(int(calls["runs"]), 1),
        "run_throttled": int(throttled),
    }


async def prune(conn: asyncpg.Connection, older_than_s: float = 3600.0) -> int:
    """Drop settled or expired reservations older than ``older_than_s`` (housekeeping)."""
    done = await conn.execute(
        """delete from rate_reservations
           where created_at < now() - make_interval(secs => $1)
             and (settled_at is not null or expires_at < now())""",
        older_than_s,
    )
    return int(done.split()[-1])
