"""Rate limits as the API enforces them: token buckets, answered like the API's 429s.

The API limits requests, input tokens and output tokens per minute with the token bucket
algorithm (contract §6): each bucket holds at most its per-minute limit and is refilled
continuously at ``limit / 60`` per second (not reset at fixed intervals, not a sliding
window). A request is admitted only if every bucket holds what it costs at admission:

- 1 from the requests bucket;
- its uncached input (input after the last cache breakpoint plus cache writes; cache
  reads do not count on current models) from the input bucket;
- nothing from the output bucket, which need only not be below zero: OTPM
  counts the *actual* output and ``max_tokens`` is not reserved (contract §3, "Billing",
  from the current rate-limits page). Older official copies said OTPM is estimated from
  ``max_tokens`` at the start and adjusted at the end (api_findings.md §7); the contract
  is the newer source, so it is followed. The output is taken when the answer is done
  (:meth:`RateLimiter.settle`); the bucket may go below zero then, and refuses until it
  has refilled to zero.

A refused request takes nothing. Its 429 names the limit that binds (the bucket that needs
longest to hold enough) and carries ``retry-after``: the whole seconds until every bucket
holds enough; the binding limit's ``remaining`` header is 0. A request that needs more
input than the bucket can ever hold is refused the same way, with a message that says so.

Two more rules, each off unless the scenario's ``limits`` switch it on (so the per-minute
arithmetic above stays exact in tests):

- ``per_second``: every limit is also enforced per 1-second window (``floor(now)``) as
  ``limit / 60`` of it, at least 1 request ("60 RPM may be enforced as 1 request per
  second", contract §6). The first request of a window passes this check whatever its
  tokens (the minute buckets still apply); a refusal has ``retry-after: 1``.
- the acceleration (ramp) limit, ``ramp_floor_rps`` (contract §6, "Acceleration (ramp)
  limits"): a request is refused with 429 ``rate_limit_error``,
  ``error.details.error_code: "ramp_limit_exceeded"`` and ``retry-after: 1`` when the
  requests admitted in the last second number at least
  ``max(ramp_floor_rps, ramp_factor * baseline)``, where ``baseline`` is the mean number
  of requests per second admitted over the ``ramp_baseline_s`` seconds before that
  second. A sharp rise from idle (baseline 0) is allowed ``ramp_floor_rps`` per second;
  a client that ramps up gradually is never refused.

Headers: ``anthropic-ratelimit-{requests,input-tokens,output-tokens}-*`` give each bucket;
``anthropic-ratelimit-tokens-*`` gives the most restrictive of input and output (the one
with the smaller share of its limit remaining; contract §6, "tokens-* shows the most
restrictive active limit"). With ``round_token_remaining`` the token ``remaining`` values
are rounded down to a multiple of 1,000, as the API does.

The buckets survive a change of limits (:meth:`RateLimiter.configure`): their levels are
kept, clamped to the new capacity, so a benchmark can upgrade or halve the account mid-run.
``others_share`` models another client of the same account that steadily uses that share
of every limit: the buckets' capacity and refill rate shrink by it, while the headers
still give the account's limit (what is left is what ``remaining`` says).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from blockbatch.simulator.clock import Clock
from blockbatch.simulator.errors import ApiError
from blockbatch.simulator.scenario import Limits

Kind = Literal["requests", "input-tokens", "output-tokens"]
KINDS: tuple[Kind, ...] = ("requests", "input-tokens", "output-tokens")
REFILL_PERIOD_S = 60.0
#: Limits advertised in the headers of a 429 for kinds that have no configured limit.
NOMINAL: dict[Kind, int] = {
    "requests": 4000,
    "input-tokens": 2_000_000,
    "output-tokens": 400_000,
}
_UNIT: dict[Kind, str] = {
    "requests": "requests",
    "input-tokens": "input tokens",
    "output-tokens": "output tokens",
}
#: Float slack, in tokens: refill arithmetic must not refuse a request by a rounding error.
_EPS = 1e-6


def rfc3339(unix: float) -> str:
    """``2025-01-01T00:00:00Z`` style timestamps, as the API writes them."""
    moment = dt.datetime.fromtimestamp(unix, dt.UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def _configured(limits: Limits) -> dict[Kind, int | None]:
    return {
        "requests": limits.rpm,
        "input-tokens": limits.input_tpm,
        "output-tokens": limits.output_tpm,
    }


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

    @property
    def share_left(self) -> float:
        return max(0.0, self.level) / self.capacity if self.capacity else 0.0


@dataclass
class Reservation:
    """What an admitted request took from the buckets, until it is settled.

    Attributes:
        taken: the amount taken from each bucket that was configured at admission.
        open: ``False`` once settled or cancelled (settling twice is a no-op).
    """

    taken: dict[Kind, int] = field(default_factory=dict)
    open: bool = True
    #: When it was admitted (the ramp limit counts admissions).
    at: float | None = None


class RateLimiter:
    """The account's three token buckets, driven by the simulator's clock."""

    def __init__(self, clock: Clock, limits: Limits | None = None) -> None:
        self._clock = clock
        self._limits = limits or Limits()
        self._buckets: dict[Kind, _Bucket] = {}
        #: The current 1-second window (``per_second``) and what it has used.
        self._window = -1
        self._window_used: dict[Kind, int] = dict.fromkeys(KINDS, 0)
        #: When admitted requests arrived, for the ramp limit.
        self._admitted: deque[float] = deque()
        self.clear()

    @property
    def limits(self) -> Limits:
        return self._limits

    def clear(self) -> None:
        """Full buckets, as for a fresh account (the limits are kept)."""
        now = self._clock()
        share = self._limits.others_share
        self._buckets = {
            kind: _Bucket(limit, share, now)
            for kind, limit in _configured(self._limits).items()
            if limit is not None
        }
        self._window = -1
        self._admitted.clear()

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
        """Take what a request costs at admission from every bucket, or raise a 429 and
        take nothing.

        Args:
            input_tokens: the request's uncached input: tokens after the last cache
                breakpoint plus cache writes (cache reads are not counted).
            max_tokens: the request's ``max_tokens``; not reserved (OTPM counts actual
                output, contract §3): the output bucket need only hold more than zero.

        Raises:
            ApiError: a 429 ``rate_limit_error`` naming the binding limit (or with
                ``error_code: "ramp_limit_exceeded"``), with ``retry-after`` and the
                ``anthropic-ratelimit-*`` headers.
        """
        del max_tokens  # not reserved; see the module docstring
        now = self._clock()
        self._refill(now)
        cost: dict[Kind, int] = {"requests": 1, "input-tokens": input_tokens, "output-tokens": 0}
        for kind, bucket in self._buckets.items():
            if cost[kind] > bucket.capacity + _EPS:
                # Never admitted at these limits, however long the client waits.
                raise self._refusal(kind, REFILL_PERIOD_S, too_large=cost[kind])
        waits = {kind: bucket.wait_for(cost[kind]) for kind, bucket in self._buckets.items()}
        binding = max(waits, key=waits.__getitem__, default=None)
        if binding is not None and waits[binding] > 0:
            raise self._refusal(binding, waits[binding])
        self._check_window(now, input_tokens)
        self._check_ramp(now)
        taken: dict[Kind, int] = {"requests": 1, "input-tokens": input_tokens}
        for kind, amount in taken.items():
            if kind in self._buckets:
                self._buckets[kind].level -= amount
        self._window_used["requests"] += 1
        self._window_used["input-tokens"] += input_tokens
        self._admitted.append(now)
        return Reservation(taken={k: v for k, v in taken.items() if k in self._buckets}, at=now)

    def _roll_window(self, now: float) -> None:
        window = math.floor(now)
        if window != self._window:
            self._window = window
            self._window_used = dict.fromkeys(KINDS, 0)

    def _check_window(self, now: float, input_tokens: int) -> None:
        """``per_second``: each limit as ``limit / 60`` per 1-second window (module doc)."""
        if not self._limits.per_second:
            return
        self._roll_window(now)
        cost: dict[Kind, int] = {"requests": 1, "input-tokens": input_tokens, "output-tokens": 0}
        for kind, bucket in self._buckets.items():
            allowance = max(1.0, bucket.limit / REFILL_PERIOD_S)
            used = self._window_used[kind]
            if used > 0 and used + cost[kind] > allowance + _EPS:
                raise self._refusal(kind, 1.0, per_second=allowance)

    def _check_ramp(self, now: float) -> None:
        """The acceleration limit (module doc); off while ``ramp_floor_rps`` is None."""
        limits = self._limits
        admitted = self._admitted
        while admitted and admitted[0] <= now - limits.ramp_baseline_s - 1:
            admitted.popleft()
        if limits.ramp_floor_rps is None:
            return
        last_second = sum(1 for t in admitted if t > now - 1)
        baseline = (len(admitted) - last_second) / limits.ramp_baseline_s
        if last_second >= max(limits.ramp_floor_rps, limits.ramp_factor * baseline):
            raise self.ramp_refusal(1)

    def ramp_refusal(self, retry_after_s: float, *, fault: str | None = None) -> ApiError:
        """A 429 of the acceleration limit: ``ramp_limit_exceeded``, with ``retry-after``."""
        retry_after = max(1, math.ceil(retry_after_s))
        headers = self.headers()
        headers["retry-after"] = str(retry_after)
        message = (
            "Your usage is rising too fast: this request would exceed your "
            "organization's acceleration limit (simulated). Ramp up gradually; "
            "retry after the time in the retry-after header."
        )
        return ApiError(
            "rate_limit_error",
            message,
            headers=headers,
            fault=fault,
            error_code="ramp_limit_exceeded",
        )

    def settle(self, reservation: Reservation, output_tokens: int) -> None:
        """End of a request: take the output it produced from the output bucket."""
        if not reservation.open:
            return
        reservation.open = False
        bucket = self._buckets.get("output-tokens")
        now = self._clock()
        if self._limits.per_second:
            self._roll_window(now)
            self._window_used["output-tokens"] += output_tokens
        if bucket is None or output_tokens <= 0:
            return
        bucket.refill(now)
        bucket.level -= output_tokens

    def cancel(self, reservation: Reservation) -> None:
        """Give back everything a request took (it was answered with an injected 429)."""
        if not reservation.open:
            return
        reservation.open = False
        for kind, amount in reservation.taken.items():
            self._give_back(kind, amount)
        if reservation.at is not None and reservation.at in self._admitted:
            self._admitted.remove(reservation.at)

    def _give_back(self, kind: Kind, amount: int) -> None:
        bucket = self._buckets.get(kind)
        if bucket is None or amount <= 0:
            return
        bucket.refill(self._clock())
        bucket.level = min(bucket.capacity, bucket.level + amount)

    def headers(
        self, *, refusal_retry_after: float | None = None, binding: Kind | None = None
    ) -> dict[str, str]:
        """The ``anthropic-ratelimit-*`` headers: the buckets as they are now.

        ``limit`` is the account's per-minute limit, ``remaining`` the bucket's level
        (rounded down; with ``round_token_remaining``, token kinds to a multiple of
        1,000) and ``reset`` when the bucket will be full again. A kind without a
        configured limit is left out, except on a 429 (``refusal_retry_after`` given),
        where it gets a nominal limit, nothing remaining, and ``reset`` at the
        ``retry-after``; the ``binding`` limit of a 429 reports 0 remaining.
        ``anthropic-ratelimit-tokens-*`` repeats the most restrictive of input and
        output tokens: the one with the smaller share of its limit left (contract §6).
        """
        now = self._clock()
        self._refill(now)
        values: dict[Kind, tuple[int, int, float]] = {}
        shares: dict[Kind, float] = {}
        for kind in KINDS:
            bucket = self._buckets.get(kind)
            if bucket is not None:
                remaining = 0 if kind == binding else bucket.remaining()
                values[kind] = (bucket.limit, remaining, now + bucket.until_full())
                shares[kind] = 0.0 if kind == binding else bucket.share_left
            elif refusal_retry_after is not None:
                values[kind] = (NOMINAL[kind], 0, now + refusal_retry_after)
                shares[kind] = 1.0  # not a limit of this account: never the tighter one
        if self._limits.round_token_remaining:
            for kind in ("input-tokens", "output-tokens"):
                if kind in values:
                    limit, remaining, reset = values[kind]
                    values[kind] = (limit, remaining // 1000 * 1000, reset)
        named: list[tuple[str, tuple[int, int, float]]] = list(values.items())
        token_kinds: list[Kind] = [k for k in ("input-tokens", "output-tokens") if k in values]
        if token_kinds:
            tightest = min(token_kinds, key=lambda k: (shares[k], values[k][1]))
            named.append(("tokens", values[tightest]))
        headers: dict[str, str] = {}
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

    def _refusal(
        self,
        kind: Kind,
        wait: float,
        *,
        too_large: int | None = None,
        per_second: float | None = None,
    ) -> ApiError:
        retry_after = max(1, math.ceil(wait - _EPS))
        headers = self.headers(refusal_retry_after=retry_after, binding=kind)
        headers["retry-after"] = str(retry_after)
        limit = self._buckets[kind].limit
        message = (
            f"This request would exceed your organization's rate limit of {limit:,} "
            f"{_UNIT[kind]} per minute (simulated"
            + (f", enforced as {per_second:,.0f} per second). " if per_second else "). ")
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
