"""The fleet limiter in Postgres: shared by concurrent callers, fair between runs, not
shrunk for good by a worker that died holding a reservation, learning from answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from blockbatch.core.ratelimit import RAMP_START, Kind, Need
from blockbatch.core.run_types import RunOptions
from blockbatch.store import ratelimits
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

KEY, MODEL = "k-test", "sonnet-4"
#: Ten calls a minute, counted by their input (requests are far from their limit, so the
#: one-second request bucket never binds here).
LIMITS: dict[Kind, int] = {"requests": 6_000, "input": 1_000, "output": 1_000_000}
ONE_CALL = Need(1, 100, 100)


def freeze_limiter_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop the limiter's clock at the database's time of its first reading: buckets refill
    only when a test moves a limiter's ``at`` back, never by how long this machine took
    between two attempts (at load 20 nine attempts took more than the 6 s of a refill)."""
    real = ratelimits._now
    frozen: list[float] = []

    async def now(conn: asyncpg.Connection | asyncpg.Pool) -> float:
        if not frozen:
            frozen.append(await real(conn))
        return frozen[0]

    monkeypatch.setattr(ratelimits, "_now", now)


@pytest_asyncio.fixture
async def full_limiter(pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch) -> None:
    """This key's limiter, past its ramp and full, and its minute buckets alone deciding
    (these tests take many calls within a second; the per-second rule has its own test),
    on a stopped clock (:func:`freeze_limiter_clock`)."""
    monkeypatch.setattr(ratelimits, "per_second", lambda *_: None)
    freeze_limiter_clock(monkeypatch)
    await _try(pool, "setup", Need(0, 0, 0))
    await pool.execute(
        """update rate_limiters set ramp = 1, requests_level = requests_limit,
                  input_level = input_limit, output_level = output_limit,
                  tokens_level = tokens_limit, admitted = 0 where key_hash = $1""",
        KEY,
    )
    await pool.execute("delete from rate_reservations where run_id = 'setup'")


def _id(attempt: ratelimits.Attempt) -> int:
    """The reservation of an attempt that was admitted."""
    assert attempt.reservation_id is not None, attempt
    return attempt.reservation_id


async def _try(
    pool: asyncpg.Pool, run_id: str, need: Need = ONE_CALL, weight: float = 1.0, waiter: str = ""
) -> ratelimits.Attempt:
    async with pool.acquire() as conn:
        return await ratelimits.try_reserve(
            conn,
            key_hash=KEY,
            model=MODEL,
            run_id=run_id,
            need=need,
            weight=weight,
            defaults=LIMITS,
            waiter=waiter,
        )


@pytest.mark.usefixtures("full_limiter")
async def test_concurrent_callers_never_get_more_than_the_limit(pool: asyncpg.Pool) -> None:
    clock = "select extract(epoch from clock_timestamp())"
    began = float(await pool.fetchval(clock))
    attempts = await asyncio.gather(*(_try(pool, "r1") for _ in range(30)))
    took = float(await pool.fetchval(clock)) - began
    admitted = [a for a in attempts if a.reservation_id is not None]
    # The tenth waits until the bucket also holds a second of refill to spare; the input
    # bucket refills a call's worth every 6 s of however long the thirty tries took.
    assert 9 <= len(admitted) <= 10 + int(took / 6)
    refused = [a for a in attempts if a.reservation_id is None]
    assert all(a.binding == "input" and 0 < a.wait_s <= 7.1 for a in refused)


async def test_a_new_limiter_ramps_up_and_paces_requests_per_second(pool: asyncpg.Pool) -> None:
    # Judged from the instants the limiter recorded, not from how many attempts this
    # machine fits in a second (at load 20, twelve attempts spanned more than a second),
    # at a rate a loaded machine still outpaces: three attempts a second.
    clock = "select extract(epoch from clock_timestamp())"
    async with pool.acquire() as conn:

        def attempt() -> Any:
            return ratelimits.try_reserve(
                conn,
                key_hash=KEY,
                model="fresh",
                run_id="r1",
                need=Need(1, 0, 0),
                defaults={"requests": 600, "input": 10**6, "output": 10**6},
            )

        began = float(await conn.fetchval(clock))
        # 600 a minute is 10 a second; a new limiter opens a quarter of it: 2.5, so two.
        # Attempts until the first refusal (each noting the database clock before it).
        for _ in range(60):
            before = float(await conn.fetchval(clock))
            last = await attempt()
            if last.reservation_id is None:
                break
        admitted = sorted(
            float(t)
            for t in await conn.fetchval(
                """select array_agg(extract(epoch from created_at)) from rate_reservations
                   where key_hash = $1 and model = 'fresh'""",
                KEY,
            )
        )
        [view] = [v for v in await ratelimits.views(conn, KEY) if v.model == "fresh"]
        took = float(await conn.fetchval(clock)) - began
    assert last.reservation_id is None, "sixty attempts and none refused"
    assert last.binding == "requests" and 0 < last.wait_s <= 1.0
    # Refused with two admitted in the second before it ...
    assert sum(t > before - 1 for t in admitted) >= 2
    # ... and never a third in any second (each admission's stamp follows its check).
    for i, t in enumerate(admitted):
        assert sum(u > t - 1 for u in admitted[:i]) <= 1, (i, admitted)
    assert view.ramp == RAMP_START
    # The admissions came out of the quarter-full bucket, which refilled at a quarter of 10
    # a second for as long as the attempts took (database clock); the view rounds levels to
    # a tenth.
    refill = 600 * RAMP_START / 60 * took
    assert view.levels["requests"] <= 600 * RAMP_START - len(admitted) + refill + 0.05


@pytest.mark.usefixtures("full_limiter")
async def test_a_dead_workers_reservation_costs_one_refill_at_most(pool: asyncpg.Pool) -> None:
    # A worker reserves the whole minute (less the admission margin) and dies: never settles.
    # (The limiter's ten calls a minute are its input: 1,000 tokens, 100 a call.)
    for _ in range(9):
        assert (await _try(pool, "r1")).reservation_id is not None
    assert (await _try(pool, "r1")).reservation_id is None
    # A minute later (moved back on the database clock) the fleet has its full rate again.
    await pool.execute("update rate_limiters set at = at - 60")
    admitted = [await _try(pool, "r2") for _ in range(9)]
    assert all(a.reservation_id is not None for a in admitted)


@pytest.mark.usefixtures("full_limiter")
async def test_waiting_runs_are_served_least_served_first(pool: asyncpg.Pool) -> None:
    big = [await _try(pool, "big") for _ in range(9)]
    assert all(a.reservation_id is not None for a in big)
    # The minute's requests are gone (one is left, less than one with the admission
    # margin): the small run waits too.
    assert (await _try(pool, "small")).reason == "limit"
    await pool.execute("update rate_limiters set at = at - 12")  # two requests back
    # The small run had nothing this minute: the big one lets it go first.
    turn = await _try(pool, "big")
    assert turn.reservation_id is None and turn.reason == "fair_share"
    assert (await _try(pool, "small")).reservation_id is not None
    # The small run is served and no longer waiting: the big run may take the next one.
    assert (await _try(pool, "big")).reservation_id is not None
    # A run's weight scales its share: at weight 20, 10 calls count as half of one.
    assert (await _try(pool, "small")).reason == "limit"
    await pool.execute("update rate_limiters set at = at - 6")
    assert (await _try(pool, "big", weight=20.0)).reservation_id is not None


@pytest.mark.usefixtures("full_limiter")
async def test_a_run_keeps_waiting_while_any_of_its_calls_waits(pool: asyncpg.Pool) -> None:
    for _ in range(9):
        assert (await _try(pool, "big")).reservation_id is not None
    # Two calls of the small run wait; so does the big run.
    assert (await _try(pool, "small", waiter="s1")).reason == "limit"
    assert (await _try(pool, "small", waiter="s2")).reason == "limit"
    await pool.execute("update rate_limiters set at = at - 18")  # three requests back
    assert (await _try(pool, "big")).reason == "fair_share"
    assert (await _try(pool, "small", waiter="s1")).reservation_id is not None
    # s2 still waits: the small run is still in the turn (it was dropped with one row a run).
    async with pool.acquire() as conn:
        (view,) = await ratelimits.views(conn, KEY)
    assert "small" in view.waiting_runs
    assert (await _try(pool, "big")).reason == "fair_share"
    assert (await _try(pool, "small", waiter="s2")).reservation_id is not None
    assert (await _try(pool, "big")).reservation_id is not None


@pytest.mark.usefixtures("full_limiter")
async def test_settling_learns_the_accounts_limits_and_a_429_cuts_the_rate(
    pool: asyncpg.Pool,
) -> None:
    first = await _try(pool, "r1", Need(1, 100, 5_000))
    async with pool.acquire() as conn:
        await ratelimits.settle(
            conn,
            _id(first),
            used=Need(1, 120, 700),
            answered=True,
            headers={
                "anthropic-ratelimit-requests-limit": "50",
                "anthropic-ratelimit-input-tokens-limit": "30000",
                "anthropic-ratelimit-output-tokens-limit": "8000",
                "anthropic-ratelimit-tokens-limit": "38000",
                "anthropic-ratelimit-requests-remaining": "49",
            },
        )
        # Settling twice (a retried activity) changes nothing.
        await ratelimits.settle(
            conn, _id(first), used=Need(1, 120, 700), headers=None, answered=True
        )
        [view] = await ratelimits.views(conn, KEY)
    assert view.limits == {"requests": 50, "input": 30_000, "output": 8_000, "tokens": 38_000}
    assert view.learned and view.admitted == 1 and view.in_flight == 0
    assert view.levels["requests"] <= 49.1
    second = await _try(pool, "r1")
    async with pool.acquire() as conn:
        await ratelimits.settle(conn, _id(second), used=None, headers=None, throttled_after_s=3.0)
        [view] = await ratelimits.views(conn, KEY)
    assert view.throttled == 1 and view.factor == 0.5
    assert (await _try(pool, "r1")).reservation_id is None  # nothing before retry-after


@pytest.mark.usefixtures("full_limiter")
async def test_a_spend_cap_429_cuts_nothing_and_a_ramp_limit_holds_without_a_cut(
    pool: asyncpg.Pool,
) -> None:
    first = await _try(pool, "r1")
    async with pool.acquire() as conn:
        await ratelimits.settle(
            conn,
            _id(first),
            used=None,
            headers=None,
            throttled_after_s=0.0,
            throttle="none",
        )
        [view] = await ratelimits.views(conn, KEY)
    assert view.throttled == 1 and view.factor == 1.0
    assert (await _try(pool, "r1")).reservation_id is not None
    held = await _try(pool, "r1")
    async with pool.acquire() as conn:
        await ratelimits.settle(
            conn,
            _id(held),
            used=None,
            headers=None,
            throttled_after_s=5.0,
            throttle="hold",
        )
        [view] = await ratelimits.views(conn, KEY)
    assert view.throttled == 2 and view.factor == 1.0
    assert (await _try(pool, "r1")).reservation_id is None  # nothing before retry-after


@pytest.mark.usefixtures("full_limiter")
async def test_answers_teach_the_output_to_reserve(pool: asyncpg.Pool) -> None:
    for _ in range(5):
        attempt = await _try(pool, "r1", Need(1, 1, 10_000))
        async with pool.acquire() as conn:
            await ratelimits.settle(
                conn, _id(attempt), used=Need(1, 1, 1_000), headers=None, answered=True
            )
    later = await _try(pool, "r1", Need(1, 1, 10_000))
    reserved = await pool.fetchval(
        "select output_tokens from rate_reservations where reservation_id = $1",
        later.reservation_id,
    )
    # 10,000 at first; answers wrote a tenth, so the reservation shrinks towards it.
    assert 1_000 < reserved < 7_000


async def test_limits_shows_what_the_fleet_learned_from_claudes_answers(
    bbstack: Stack, cli: Cli
) -> None:
    empty = await cli("limits")
    assert empty.code == 0 and "no rate limiter yet" in empty.out
    bbstack.sim.scenario(limits={"rpm": 500, "input_tpm": 400_000, "output_tpm": 80_000})
    async with bbstack.worker():
        run = await cli("run", cli.doc(6), "--schema", cli.schema(), "--pack-size", "2")
    assert run.code == 0, run.out + run.err
    shown = await cli("limits")
    assert shown.code == 0, shown.err
    assert "learned" in shown.out and "500 / 400k / 80k" in shown.out
    as_json = await cli("limits", "--json")
    [view] = json.loads(as_json.out)
    assert view["limits"] == {
        "requests": 500,
        "input": 400_000,
        "output": 80_000,
        "tokens": 480_000,
    }
    assert view["learned"] and view["admitted"] >= 3 and view["throttled"] == 0
    assert view["shares"] == {run.run_id: view["admitted"]}
    assert "sim-test-key" not in shown.out + as_json.out  # only a hash of the key
    status = await cli("status", run.run_id)
    assert (
        status.code == 0
        and f"{view['admitted']} of {view['admitted']} calls in the last minute" in status.out
    ), status.out


@pytest.mark.usefixtures("full_limiter")
async def test_old_reservations_are_pruned_recent_and_open_ones_kept(pool: asyncpg.Pool) -> None:
    ids = [_id(await _try(pool, "r1")) for _ in range(3)]
    async with pool.acquire() as conn:
        await ratelimits.settle(conn, ids[0], used=ONE_CALL, headers=None, answered=True)
        await conn.execute(
            "update rate_reservations set created_at = now() - interval '2 hours'"
            " where reservation_id = any($1::bigint[])",
            ids[:2],
        )
        dropped = await ratelimits.prune(conn)
    left = {
        r["reservation_id"]
        for r in await pool.fetch("select reservation_id from rate_reservations")
    }
    # Settled and old: dropped. Old but open and not expired: kept. Recent: kept.
    assert dropped == 1 and left == {ids[1], ids[2]}


async def test_a_runs_progress_and_ui_details_show_the_limiter(bbstack: Stack) -> None:
    bbstack.sim.scenario(limits={"rpm": 500, "input_tpm": 400_000, "output_tpm": 80_000})
    doc = await bbstack.bb.ingest_bytes(markdown_doc(8), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema())
    run_id = await bbstack.bb.start_run(doc, schema_id, RunOptions(pack_size=2))
    async with bbstack.worker():
        await bbstack.bb.wait(run_id)
        progress = await bbstack.bb.progress(run_id)
        metadata = await bbstack.bb.handle(run_id).query("__temporal_workflow_metadata")
    note = progress.limiter
    assert note is not None and note.learned
    assert note.limits == {"requests": 500, "input": 400_000, "output": 80_000}
    assert (note.runs, note.run_share, note.run_throttled) == (1, 1.0, 0)
    # The limiter learned the limits from the warm-up and then ramped up: the first packs
    # were paced a few seconds (a quarter of a second's share at first), none refused.
    assert progress.limiter_wait_s < 15
    # The run's details in the Temporal UI say it too.
    assert (
        "limiter 500 rpm · 400k in · 80k out /min (learned) · admitting 100% · "
        f"waited {progress.limiter_wait_s:,.0f} s"
    ) in metadata.current_details
    assert "· 0 429s" in metadata.current_details


async def _admissions(pool: asyncpg.Pool, run_id: str) -> list[float]:
    """When the fleet's limiter admitted each of the run's calls (database clock, seconds).

    The simulator judges a call by when it arrives, a moment after its admission; on a
    loaded machine those moments vary, so whether it answers 429 depends on the machine's
    speed (that is measured in bench/ratelimits.py). What the fleet decided does not: each
    reservation is stamped with the instant it was admitted, under the limiter's lock.
    """
    rows = await pool.fetch(
        """select extract(epoch from created_at) as at from rate_reservations
           where run_id = $1 and requests > 0 order by created_at""",
        run_id,
    )
    return [float(r["at"]) for r in rows]


def _busiest_second(times: list[float], allowance: Callable[[float], float]) -> float:
    """The largest share of its allowance any 1-second window of ``times`` used: each window
    ends at an admission and holds the admissions of the second up to it (a sliding window
    contains every window the API may align to, ``floor(now)`` or any other)."""
    worst = 0.0
    for i, t in enumerate(times):
        in_second = sum(1 for u in times[: i + 1] if u > t - 1.0)
        worst = max(worst, in_second / allowance(t))
    return worst


async def test_a_run_against_per_second_windows_is_paced_per_second(bbstack: Stack) -> None:
    # 120 requests a minute enforced as 2 a second (contract §6): the fleet paces its
    # calls by the last second's admissions instead of opening its minute at once.
    bbstack.sim.scenario(
        limits={"rpm": 120, "input_tpm": 2_000_000, "output_tpm": 400_000, "per_second": True}
    )
    # Six blocks of one call each, all ready at once: seven admissions (the warm-up and a
    # call a block) that a new limiter spreads over six seconds or more (its ramp opens a
    # quarter of the minute: one a second), which is the wait this test pays.
    doc = await bbstack.bb.ingest_bytes(markdown_doc(6), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema())
    run_id = await bbstack.bb.start_run(doc, schema_id, RunOptions(pack_size=1))
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed"
    admitted = await _admissions(bbstack.pool, run_id)
    assert len(admitted) >= 7  # the warm-up and a call a block
    assert _busiest_second(admitted, lambda _: 2.0) <= 1.0


async def test_a_run_from_idle_meets_the_acceleration_limit_with_a_ramp(bbstack: Stack) -> None:
    # The simulator refuses a second with more than 3 requests, or twice the minute
    # before's mean (contract §6, acceleration limits): the fleet starts at a quarter of
    # its 10 a second and rises with its own past minute, so it never asks for more.
    bbstack.sim.scenario(
        limits={
            "rpm": 600,
            "input_tpm": 2_000_000,
            "output_tpm": 400_000,
            "per_second": True,
            "ramp_floor_rps": 3,
        }
    )
    # Ten blocks of one call each, all ready at once: eleven admissions against a floor of
    # 3 a second, which the fleet's start (2.5 a second: two) spreads over five seconds or
    # more. A longer run adds seconds, not a path: its minute before stays under the floor's
    # 90 calls, so the floor is the limit it meets either way.
    doc = await bbstack.bb.ingest_bytes(markdown_doc(10), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema())
    run_id = await bbstack.bb.start_run(doc, schema_id, RunOptions(pack_size=1))
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed"
    admitted = await _admissions(bbstack.pool, run_id)
    assert len(admitted) >= 11  # the warm-up and a call a block

    def acceleration_limit(t: float) -> float:
        """The simulator's rule (blockbatch/simulator/limits.py) at ``t``: the floor, or
        twice the mean per second of the minute before the last second."""
        before = sum(1 for u in admitted if t - 61.0 < u <= t - 1.0)
        return max(3.0, 2.0 * before / 60.0)

    assert _busiest_second(admitted, acceleration_limit) <= 1.0


async def _statements_under_the_lock(pool: asyncpg.Pool, run_id: str) -> list[str]:
    """The statements a reservation runs from the limiter row's lock to its commit."""
    ran: list[str] = []

    def log(query: Any) -> None:
        ran.append(" ".join(query.query.split()).lower())

    async with pool.acquire() as conn:
        conn.add_query_logger(log)
        try:
            _id(
                await ratelimits.try_reserve(
                    conn, key_hash=KEY, model=MODEL, run_id=run_id, need=ONE_CALL, defaults=LIMITS
                )
            )
        finally:
            conn.remove_query_logger(log)
    locked = next(i for i, q in enumerate(ran) if "from rate_limiters" in q and "for update" in q)
    return ran[locked + 1 :]


@pytest.mark.usefixtures("full_limiter")
async def test_a_reservation_holds_the_fleets_lock_for_one_read_and_one_write(
    pool: asyncpg.Pool,
) -> None:
    # Every caller of the key queues on one row: what it does while holding it is what the
    # fleet waits for. Past the lock: the clock, the last second and the fair turn read in
    # one statement, the buckets, waiter and reservation written in one, then the commit.
    held = await _statements_under_the_lock(pool, "run-a")
    assert len(held) == 3, held
    assert held[-1].rstrip(";") == "commit"
    # And with another run waiting, the fair turn is still read in that one statement.
    await _try(pool, "run-b", waiter="b")
    assert len(await _statements_under_the_lock(pool, "run-a")) == 3


@pytest.mark.usefixtures("full_limiter")
async def test_the_fleets_lock_is_not_held_across_a_disk_flush(pool: asyncpg.Pool) -> None:
    # Row locks last until the commit returns: a reservation and a settlement commit
    # without waiting for the WAL flush, decided before the lock is taken.
    ran: list[str] = []

    def log(query: Any) -> None:
        ran.append(" ".join(query.query.split()).lower())

    async with pool.acquire() as conn:
        before = await conn.fetchval("show synchronous_commit")
        conn.add_query_logger(log)
        try:
            reservation = _id(
                await ratelimits.try_reserve(
                    conn, key_hash=KEY, model=MODEL, run_id="run-a", need=ONE_CALL, defaults=LIMITS
                )
            )
            await ratelimits.settle(conn, reservation, used=ONE_CALL, headers=None, answered=True)
        finally:
            conn.remove_query_logger(log)
        # The setting lasts only for their transactions: the session's is untouched.
        assert await conn.fetchval("show synchronous_commit") == before
    locks = [i for i, q in enumerate(ran) if "from rate_limiters" in q and "for update" in q]
    no_wait = [i for i, q in enumerate(ran) if q == "set local synchronous_commit = off"]
    assert len(locks) == 2 and len(no_wait) == 2, ran
    assert no_wait[0] < locks[0] < no_wait[1] < locks[1]
