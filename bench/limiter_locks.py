"""Fleet limiter: how long reservations wait for the key's lock with many calls in flight.

Every call of an API key reserves from one row per key and model (blockbatch/store/
ratelimits.py ``try_reserve``, under ``select ... for update``): what a reservation does
while holding it is what the fleet queues on. Here ``--in-flight`` tasks (32 and 128 by
default, as packs in flight) reserve and settle one call after another on one key, with
limits far above what they ask (no call waits for tokens: only for the lock), on a
Postgres of its own. Reported per level: reservations a second, the time each spent
getting the lock (``_lock``: the statement's round trip and the wait) as median, p95 and
max, and the backends Postgres saw waiting on a lock (``pg_stat_activity``, sampled every
100 ms). Nothing here is a test: timings depend on the machine and its load.

    .venv/bin/python bench/limiter_locks.py                       # 32 and 128, 15 s each
    .venv/bin/python bench/limiter_locks.py --in-flight 32 --seconds 5 --out /tmp/l.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from bench.common import RESULTS_DIR, Recorder, run_main
from blockbatch.core.ratelimit import Kind, Need
from blockbatch.devtools import stack
from blockbatch.store import ratelimits
from blockbatch.store.db import create_pool

KEY, MODEL = "bench-key", "bench-model"
#: Far above what the tasks ask in a run of seconds: only the lock makes a call wait.
LIMITS: dict[Kind, int] = {"requests": 10**8, "input": 2 * 10**9, "output": 2 * 10**9}
ONE_CALL = Need(1, 1_000, 200)


async def level(pool: asyncpg.Pool, in_flight: int, seconds: float) -> dict[str, Any]:
    """``in_flight`` tasks reserving and settling for ``seconds``; the figures."""
    waits: list[float] = []
    lock = ratelimits._lock

    async def timed_lock(*args: Any, **kwargs: Any) -> Any:
        t = time.monotonic()
        try:
            return await lock(*args, **kwargs)
        finally:
            waits.append(time.monotonic() - t)

    ratelimits._lock = timed_lock  # timing the one statement
    admitted = 0
    stop = time.monotonic() + seconds

    async def caller(n: int) -> None:
        nonlocal admitted
        while time.monotonic() < stop:
            async with pool.acquire() as conn:
                attempt = await ratelimits.try_reserve(
                    conn,
                    key_hash=KEY,
                    model=MODEL,
                    run_id=f"run-{n % 4}",
                    need=ONE_CALL,
                    defaults=LIMITS,
                    waiter=f"w{n}",
                )
                if attempt.reservation_id is None:
                    await asyncio.sleep(min(attempt.wait_s, 0.05))
                    continue
                admitted += 1
                await ratelimits.settle(
                    conn, attempt.reservation_id, used=ONE_CALL, headers=None, answered=True
                )

    waiting: list[int] = []

    async def sample() -> None:
        async with pool.acquire() as conn:
            while time.monotonic() < stop:
                waiting.append(
                    await conn.fetchval(
                        """select count(*) from pg_stat_activity
                           where wait_event_type = 'Lock' and datname = current_database()"""
                    )
                )
                await asyncio.sleep(0.1)

    t0 = time.monotonic()
    try:
        await asyncio.gather(sample(), *(caller(n) for n in range(in_flight)))
    finally:
        ratelimits._lock = lock
    wall = time.monotonic() - t0
    waits.sort()
    return {
        "in_flight": in_flight,
        "reservations": admitted,
        "reservations_per_s": round(admitted / wall, 1),
        "lock_wait_ms": {
            "median": round(statistics.median(waits) * 1000, 1),
            "p95": round(waits[int(0.95 * (len(waits) - 1))] * 1000, 1),
            "max": round(waits[-1] * 1000, 1),
        },
        "backends_waiting_on_a_lock": {
            "mean": round(statistics.mean(waiting), 1) if waiting else 0,
            "max": max(waiting, default=0),
        },
    }


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("limiter_locks", args)
    root = Path(tempfile.mkdtemp(prefix="bb-bench-limiter-"))
    os.chmod(root, 0o755)  # Postgres may run as its own system user
    pg_dir = root / "pg"
    try:
        pg = await asyncio.to_thread(
            stack.start_postgres, pg_dir, stack.free_port(), root / "postgres.log"
        )
        await asyncio.to_thread(stack.ensure_database, pg, "bench")
        levels = []
        for in_flight in args.in_flight:
            pool = await create_pool(pg.url("bench"), max_size=in_flight + 1)
            try:
                await pool.execute("truncate rate_limiters, rate_reservations, rate_waiters")
                figures = await level(pool, in_flight, args.seconds)
            finally:
                await pool.close()
            print(
                f"{in_flight} in flight: {figures['reservations_per_s']} reservations/s; lock "
                f"wait median {figures['lock_wait_ms']['median']} ms, p95 "
                f"{figures['lock_wait_ms']['p95']} ms, max {figures['lock_wait_ms']['max']} ms; "
                f"backends waiting on a lock: mean {figures['backends_waiting_on_a_lock']['mean']}",
                flush=True,
            )
            levels.append(figures)
        rec.data.update(levels=levels, load_average=os.getloadavg(), cpus=os.cpu_count())
        rec.write()
    finally:
        if (pg_dir / "PG_VERSION").exists():
            await asyncio.to_thread(stack.stop_postgres, pg_dir)
        shutil.rmtree(root, ignore_errors=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-flight", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "limiter_locks.json")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run_main(main, parse_args()))
