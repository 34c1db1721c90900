"""Rate limits as the API enforces them: three token buckets, answered like the API's 429s.

The API limits requests, input tokens and output tokens per minute with the token bucket
algorithm: each bucket holds at most its per-minute limit and is refilled continuously at
``limit / 60`` per second (not reset at fixed intervals, not a sliding window). A request
is admitted only if every bucket holds what it will cost, and then takes it at once:

- 1 from the requests bucket;
- its uncached input (input after the last cache breakpoint plus cache writes; cache
  reads do not count on current models) from the input bucket;
- its whole ``max_tokens`` from the output bucket, since output is estimated from
  ``max_tokens`` at the start. At the end of the request the unused part is given back
  (:meth:`RateLimiter.settle`), so a generous ``max_tokens`` costs capacity only while
  the request runs.

A refused request takes nothing. Its 429 names the limit that binds (the bucket that needs
longest to hold enough) and carries ``retry-after``: the whole seconds until every bucket
holds enough. A request that needs more than a bucket can ever hold is refused the same
way, with a message that says so.

The buckets survive a change of limits (:meth:`RateLimiter.configure`): their levels are
kept, clamped to the new capacity, so a benchmark can upgrade or halve the account mid-run.
``others_share`` models another client of the same account that steadily uses that share
of every limit: the buckets' capacity and refill rate shrink by it, while the headers
still give the account's limit (what is left is what ``remaining`` says).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Literal

from simulator.clock import Clock
from simulator.errors import ApiError
from simulator.scenario import Limits

Kind = Literal["requests", "input-tokens", "output-tokens"]
KINDS: tuple[Kind, ...] = ("requests", "input-tokens", "output-tokens")
REFILL_PERIOD_S = 60.0
#: Limits advertised in the headers of a 429 for kinds that have no configured limit.
NOMINAL: dict[Kind, int] = {
    "requests": 4000, "input-tokens": 2_000_000, "output-tokens": 400_000,
}
_UNIT: dict[Kind, str] = {
    "requests": "requests", "input-tokens": "input tokens", "output-tokens": "output tokens",
}
#: Float slack, in tokens: refill arithmetic must not refuse a request by a rounding error.
_EPS = 1e-6


def rfc3339(unix: float) -> str:
    """``2025-01-01T00:00:00Z`` style timestamps, as the API writes them."""
    moment = dt.datetime.fromtimestamp(unix, dt.UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def _configured(limits: Limits) -> dict[Kind, int | None]:
    return {"requests": limits.rpm, "input-tokens": limits.input_tpm,
            "output-tokens": limits.output_tpm}


class _Bucket:
    """One token bucket: ``level`` refills at ``capacity / 60`` per second, up to ``capacity``."""

    def __init__(self, limit: int, share: float, now: float) -> None:
        self.limit = limit
        self.capacity = limit * (1 - share)
        self.level = self.capacity
        self.updated = now

    @property
    def rate(self) -> float:
        """Tokens per second."""
        return self.capacity / REFILL_PERIOD_S

    def refill(self, now: float) -> None:
        if now > self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
            self.updated = now

    def resize(self, limit: int, share: float) -> None:
        """New limit or share; the level is kept, clamped to the new capacity."""
        self.limit = limit
        self.capacity = limit * (1 - share)
        self.level = min(self.level, self.capacity)

    def holds(self, amount: float) -> bool:
        return self.level + _EPS >= amount

    def wait_for(self, amount: float) -> float:
        """Seconds until the bucket holds ``amount`` (it must fit the capacity)."""
        return 0.0 if self.holds(amount) else (amount - self.level) / self.rate

    def until_full(self) -> float:
        return max(0.0, (self.capacity - self.level) / self.rate)

    def remaining(self) -> int:
        return max(0, math.floor(self.level + _EPS))


@dataclass
class Reservation:
    """What an admitted request took from the buckets, until it is settled.

    Attributes:
        taken: the amount taken from each bucket that was configured at admission.
        open: ``False`` once settled or cancelled (settling twice is a no-op).
    """

    taken: dict[Kind, int] = field(default_factory=dict)
    open: bool = True


class RateLimiter:
    """The account's three token buckets, driven by the simulator's clock."""

    def __init__(self, clock: Clock, limits: Limits | None = None) -> None:
        self._clock = clock
        self._limits = limits or Limits()
        self._buckets: dict[Kind, _Bucket] = {}
        self.clear()

    @property
    def limits(self) -> Limits:
        return self._limits

    def clear(self) -> None:
        """Full buckets, as for a fresh account (the limits are kept)."""
        now = self._clock()
        share = self._limits.others_share
        self._buckets = {kind: _Bucket(limit, share, now)
                         for kind, limit in _configured(self._limits).items()
                         if limit is not None}

    def configure(self, limits: Limits) -> None:
        """Apply new limits, keeping each bucket's level (clamped to its new capacity).

        A limit that appears starts with a full bucket; one that is removed (``None``)
        drops its bucket.
        """
        now = self._clock()
        self._refill(now)
        buckets: dict[Kind, _Bucket] = {}
        for kind, limit in _configured(limits).items():
            if limit is None:
                continue
            bucket = self._buckets.get(kind)
            if bucket is None:
                bucket = _Bucket(limit, limits.others_share, now)
            else:
                bucket.resize(limit, limits.others_share)
            buckets[kind] = bucket
        self._buckets = buckets
        self._limits = limits

    def _refill(self, now: float) -> None:
        for bucket in self._buckets.values():
            bucket.refill(now)

    def admit(self, input_tokens: int, max_tokens: int) -> Reservation:
        """Take what a request costs from every bucket, or raise a 429 and take nothing.

        Args:
            input_tokens: the request's uncached input: tokens after the last cache
                breakpoint plus cache writes (cache reads are not counted).
            max_tokens: the request's ``max_tokens``, reserved from the output bucket
                until :meth:`settle`.

        Raises:
            ApiError: a 429 ``rate_limit_error`` naming the binding limit, with
                ``retry-after`` and the ``anthropic-ratelimit-*`` headers.
        """
        now = self._clock()
        self._refill(now)
        cost: dict[Kind, int] = {"requests": 1, "input-tokens": input_tokens,
                                 "output-tokens": max_tokens}
        for kind, bucket in self._buckets.items():
            if cost[kind] > bucket.capacity + _EPS:
                # Never admitted at these limits, however long the client waits.
                raise self._refusal(kind, REFILL_PERIOD_S, too_large=cost[kind])
        waits = {kind: bucket.wait_for(cost[kind]) for kind, bucket in self._buckets.items()}
        binding = max(waits, key=waits.__getitem__, default=None)
        if binding is not None and waits[binding] > 0:
            raise self._refusal(binding, waits[binding])
        taken: dict[Kind, int] = {}
        for kind, bucket in self._buckets.items():
            bucket.level -= cost[kind]
            taken[kind] = cost[kind]
        return Reservation(taken=taken)

    def settle(self, reservation: Reservation, output_tokens: int) -> None:
        """End of a request: give back the part of ``max_tokens`` it did not produce."""
        if not reservation.open:
            return
        reservation.open = False
        unused = reservation.taken.get("output-tokens", 0) - output_tokens
        self._give_back("output-tokens", unused)

    def cancel(self, reservation: Reservation) -> None:
        """Give back everything a request took (it was answered with an injected 429)."""
        if not reservation.open:
            return
        reservation.open = False
        for kind, amount in reservation.taken.items():
            self._give_back(kind, amount)

    def _give_back(self, kind: Kind, amount: int) -> None:
        bucket = self._buckets.get(kind)
        if bucket is None or amount <= 0:
            return
        bucket.refill(self._clock())
        bucket.level = min(bucket.capacity, bucket.level + amount)

    def headers(self, *, refusal_retry_after: float | None = None) -> dict[str, str]:
        """The ``anthropic-ratelimit-*`` headers: the buckets as they are now.

        ``limit`` is the account's per-minute limit, ``remaining`` the bucket's level
        (rounded down) and ``reset`` when the bucket will be full again. A kind without
        a configured limit is left out, except on a 429 (``refusal_retry_after`` given),
        where it gets a nominal limit, nothing remaining, and ``reset`` at the
        ``retry-after``. ``anthropic-ratelimit-tokens-*`` combines input and output
        tokens (limits and remainings added, the later reset), as the API's answers do.
        """
        now = self._clock()
        self._refill(now)
        values: dict[Kind, tuple[int, int, float]] = {}
        for kind in KINDS:
            bucket = self._buckets.get(kind)
            if bucket is not None:
                values[kind] = (bucket.limit, bucket.remaining(), now + bucket.until_full())
            elif refusal_retry_after is not None:
                values[kind] = (NOMINAL[kind], 0, now + refusal_retry_after)
        token_kinds = [values[k] for k in ("input-tokens", "output-tokens") if k in values]
        headers: dict[str, str] = {}
        named: list[tuple[str, tuple[int, int, float]]] = list(values.items())
        if token_kinds:
            named.append(("tokens", (sum(v[0] for v in token_kinds),
                                     sum(v[1] for v in token_kinds),
                                     max(v[2] for v in token_kinds))))
        for name, (limit, remaining, reset) in named:
            headers[f"anthropic-ratelimit-{name}-limit"] = str(limit)
            headers[f"anthropic-ratelimit-{name}-remaining"] = str(remaining)
            # Whole seconds, rounded up: by ``reset`` the bucket is full.
            headers[f"anthropic-ratelimit-{name}-reset"] = rfc3339(math.ceil(reset - _EPS))
        return headers

    def injected(self, retry_after_s: float) -> ApiError:
        """A 429 that the scenario injected (no limit was really reached)."""
        retry_after = max(1, math.ceil(retry_after_s))
        headers = self.headers(refusal_retry_after=retry_after)
        headers["retry-after"] = str(retry_after)
        message = "This request would exceed your organization's rate limit (simulated, injected)."
        return ApiError("rate_limit_error", message, headers=headers, fault="rate_429")

    def _refusal(self, kind: Kind, wait: float, *, too_large: int | None = None) -> ApiError:
        retry_after = max(1, math.ceil(wait - _EPS))
        headers = self.headers(refusal_retry_after=retry_after)
        headers["retry-after"] = str(retry_after)
        limit = self._buckets[kind].limit
        message = (
            f"This request would exceed your organization's rate limit of {limit:,} "
            f"{_UNIT[kind]} per minute (simulated). "
        )
        if too_large is not None:
            share = self._limits.others_share
            message += (
                f"It alone needs {too_large:,} {_UNIT[kind]}, more than the limit can ever "
                + (f"hold ({share:.0%} of it is used by other clients)" if share else "hold")
                + ", so it will not be admitted at the current limits. "
            )
        message += (
            "You can see the response headers for current usage. Please reduce the prompt "
            "length or the maximum tokens requested, or try again later. For details, refer "
            "to: https://docs.claude.com/en/api/rate-limits."
        )
        return ApiError("rate_limit_error", message, headers=headers)
