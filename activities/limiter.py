"""The fleet limiter as a Claude call sees it: reserve before sending, settle after.

Every worker process has one :class:`FleetLimiter` (built in ``blockbatch/runtime/temporal.py``); all
of them share the buckets in Postgres (``blockbatch/store/ratelimits.py``), per API key hash and
rate-limit class (``blockbatch.core.ratelimit.rate_class``: limits belong to a model class, contract
§6, so runs on two models of one class share one limiter).
A call waits here, heartbeating, until the fleet may send it; so the number of calls in
flight follows what the account's limits admit, whatever ``max_concurrent_packs`` is.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Mapping
from typing import Any

import asyncpg

from activities.shared import PerRun
from blockbatch.core.ratelimit import Need, key_hash, rate_class, throttle_of
from blockbatch.store import ratelimits

#: A waiting call looks again after the wait the buckets said, within these bounds (s).
_MIN_POLL_S, _MAX_POLL_S = 0.2, 5.0
#: Every this many settled calls a worker drops reservations older than an hour.
_PRUNE_EVERY = 1000
#: A run's view of the limiter (its share, its 429s) is read at most this often per worker.
_NOTE_EVERY_S = 5.0


class FleetLimiter:
    """Reservations against the fleet's shared buckets for one API key."""

    def __init__(self, pool: asyncpg.Pool, api_key: str | None) -> None:
        self.pool = pool
        self.key_hash = key_hash(api_key)
        self._settled = 0
        self._notes: PerRun[dict[str, Any]] = PerRun()

    async def acquire(
        self, *, run_id: str, model: str, need: Need, weight: float, status: list[str]
    ) -> tuple[int, float, str | None]:
        """Wait until the fleet may send this call.

        Returns:
            The reservation id, the seconds waited and the limit waited for last
            (``fair_share`` when it waited for other runs; ``None``: not at all).

        ``status[0]`` is what the activity heartbeats meanwhile (see ``heartbeating``).
        """
        waited = 0.0
        first = status[0]
        waiter = uuid.uuid4().hex  # this call, among its run's waiting calls
        binding: str | None = None
        while True:
            async with self.pool.acquire() as conn:
                attempt = await ratelimits.try_reserve(
                    conn,
                    key_hash=self.key_hash,
                    model=rate_class(model),
                    run_id=run_id,
                    need=need,
                    weight=weight,
                    waiter=waiter,
                )
            if attempt.reservation_id is not None:
                status[0] = first
                return attempt.reservation_id, waited, binding
            delay = min(max(attempt.wait_s, _MIN_POLL_S), _MAX_POLL_S)
            delay *= 1 + 0.25 * random.random()  # callers told the same wait spread out
            binding = "fair_share" if attempt.reason == "fair_share" else attempt.binding
            why = (
                "other runs' fair share"
                if attempt.reason == "fair_share"
                else f"the {attempt.binding} per minute limit"
            )
            status[0] = f"waiting {waited:.0f} s for the rate limiter ({why})"
            await asyncio.sleep(delay)
            waited += delay

    async def settle(
        self,
        reservation_id: int,
        *,
        used: Need | None,
        headers: Mapping[str, str] | None = None,
        throttled_after_s: float | None = None,
        answered: bool = False,
        error_code: str | None = None,
    ) -> None:
        """Square the reservation with what the API counted, learn limits, AIMD.

        For a 429 (``throttled_after_s`` set), ``error_code`` (``error.details.error_code``)
        says what it does to the fleet (``blockbatch.core.ratelimit.throttle_of``): a ramp limit holds
        without a cut, a spend cap changes nothing. Without one, a 429 that names no
        ``retry-after`` is a spend cap's (contract §6) and cuts nothing either.
        """
        retry_after_sent = any(k.lower() == "retry-after" for k in headers or {})
        throttle = throttle_of(error_code, retry_after_sent)
        async with self.pool.acquire() as conn:
            await ratelimits.settle(
                conn,
                reservation_id,
                used=used,
                headers=headers,
                throttled_after_s=throttled_after_s,
                answered=answered,
                throttle=throttle,
            )
            self._settled += 1
            if self._settled % _PRUNE_EVERY == 0:
                await ratelimits.prune(conn)

    async def note(self, run_id: str, model: str) -> dict[str, Any] | None:
        """The limiter as ``run_id`` sees it (limits, rate, its share and 429s); read from
        Postgres at most every few seconds per run and worker."""

        async def read() -> dict[str, Any] | None:
            async with self.pool.acquire() as conn:
                return await ratelimits.run_note(conn, self.key_hash, rate_class(model), run_id)

        return await self._notes.get(run_id, _NOTE_EVERY_S, read)
