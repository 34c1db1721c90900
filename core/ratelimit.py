"""The fleet's rate limiter, its pure half: token buckets, AIMD, limits learned from headers.

One limiter per API key (by hash) and model, shared by every worker and run through
Postgres (``store/ratelimits.py``). It models the API's own token buckets: requests, input
tokens and output tokens per minute, each refilled continuously at ``limit / 60`` per second
up to ``limit``. A call reserves what the API will count before it is sent (1 request, its
uncached input — cache reads do not count on current models — and ``max_tokens`` of output)
and settles after: the output it did not use goes back. Because a bucket refills on its
own, a reservation held by a worker that died costs the fleet at most one refill, never a
permanent share.

Limits are learned, not typed: every answer's ``anthropic-ratelimit-*-limit`` sets the
bucket's size and ``-remaining`` caps its level (another client of the same account shows
there). On a 429 the fleet's rate is cut multiplicatively (once per ``CUT_COOLDOWN_S``, so a
burst of 429s from one moment is one cut, not a collapse) and it recovers additively with
every answer: AIMD.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

Kind = Literal["requests", "input", "output"]
KINDS: tuple[Kind, ...] = ("requests", "input", "output")
#: Header names of each kind (``anthropic-ratelimit-<name>-limit`` / ``-remaining``).
HEADER = {"requests": "requests", "input": "input-tokens", "output": "output-tokens"}
#: AIMD: a 429 halves the rate; every answer gives back this share of the limit.
CUT = 0.5
RECOVER = 0.02
MIN_FACTOR = 0.05
#: 429s closer together than this are one event (they come from one burst).
CUT_COOLDOWN_S = 5.0
#: A call is admitted only while every bucket would keep this many seconds of its refill
#: after taking the call's need. The API counts a request when it arrives, a moment after
#: the fleet's reckoning (tens to hundreds of ms when many calls start at once), so after a
#: burst from a full bucket the API's bucket starts refilling later than the fleet's and is
#: that much lower. Admitting the instant the fleet's bucket holds the need drew a 429 by a
#: hair, and its AIMD cut halved the fleet's rate for dozens of answers. It costs a second of
#: refill once, from a full bucket; the steady rate is the refill rate either way.
ADMIT_MARGIN_S = 1.0
#: Limits assumed until an answer's headers tell the real ones (per minute): far above any
#: tier, so nothing is held back on a guess. The first answer (a run's warm-up call) teaches
#: the account's limits, and a 429 before that cuts the rate (AIMD). An endpoint that sends
#: no rate-limit headers at all is paced by its 429s alone.
DEFAULT_LIMITS = {"requests": 400_000, "input": 200_000_000, "output": 40_000_000}


@dataclass(frozen=True)
class Need:
    """What one call will count against the limits."""

    requests: int = 1
    input: int = 0
    output: int = 0

    def of(self, kind: Kind) -> int:
        return {"requests": self.requests, "input": self.input, "output": self.output}[kind]


@dataclass(frozen=True)
class Buckets:
    """The state of one limiter (one key and model) at ``at`` (epoch seconds)."""

    limits: Mapping[Kind, int]
    levels: Mapping[Kind, float]
    at: float
    #: AIMD factor in [MIN_FACTOR, 1]: the share of the learned limits the fleet uses now.
    factor: float = 1.0
    last_cut_at: float = 0.0

    def capacity(self, kind: Kind) -> float:
        return self.limits[kind] * self.factor

    def refilled(self, now: float) -> Buckets:
        """The buckets at ``now``: each refilled at its (factored) rate up to capacity."""
        elapsed = max(now - self.at, 0.0)
        levels = {k: min(self.capacity(k), self.levels[k] + self.capacity(k) * elapsed / 60.0)
                  for k in KINDS}
        return replace(self, levels=levels, at=max(now, self.at))


@dataclass(frozen=True)
class Admission:
    """The answer to a reservation: admitted (the new state), or wait this long."""

    admitted: bool
    buckets: Buckets
    wait_s: float = 0.0
    #: The limit that decided (the first short one, or the tightest when admitted).
    binding: Kind | None = None


def reserve(buckets: Buckets, need: Need, now: float) -> Admission:
    """Take ``need`` from the buckets if all three hold enough; else how long to wait.

    Every bucket must also keep :data:`ADMIT_MARGIN_S` of its refill after the take. A need
    larger than a whole bucket (with that margin) can never fit: it waits for a full bucket
    and is then admitted alone (the API answers such a request too when nothing else runs).
    """
    b = buckets.refilled(now)
    waits: dict[Kind, float] = {}
    for kind in KINDS:
        margin = b.capacity(kind) * ADMIT_MARGIN_S / 60.0 if need.of(kind) else 0.0
        want = min(need.of(kind) + margin, b.capacity(kind))
        short = want - b.levels[kind]
        if short > 1e-9:
            waits[kind] = short / (b.capacity(kind) / 60.0) if b.capacity(kind) else math.inf
    if waits:
        binding = max(waits, key=lambda k: waits[k])
        return Admission(False, b, waits[binding], binding)
    levels = {k: b.levels[k] - need.of(k) for k in KINDS}
    tightest = min(KINDS, key=lambda k: levels[k] / b.capacity(k) if b.capacity(k) else 0)
    return Admission(True, replace(b, levels=levels), 0.0, tightest)


def settle(buckets: Buckets, reserved: Need, used: Need, now: float) -> Buckets:
    """Square a call's reservation with what the API counted once it ended.

    Unused output goes back; input beyond the estimate (a cache write where a read was
    expected) is taken too, so the buckets follow the API's own count.
    """
    b = buckets.refilled(now)
    levels = {k: min(b.capacity(k), b.levels[k] + reserved.of(k) - used.of(k)) for k in KINDS}
    return replace(b, levels=levels)


def learn(buckets: Buckets, headers: Mapping[str, str], now: float) -> Buckets:
    """Adopt the limits an answer's ``anthropic-ratelimit-*`` headers state.

    ``-limit`` is the account's size of the bucket; ``-remaining`` caps the level (what the
    API has left is all the fleet may use, whoever else used the rest).
    """
    b = buckets.refilled(now)
    limits, levels = dict(b.limits), dict(b.levels)
    for kind in KINDS:
        limit = _int(headers.get(f"anthropic-ratelimit-{HEADER[kind]}-limit"))
        remaining = _int(headers.get(f"anthropic-ratelimit-{HEADER[kind]}-remaining"))
        if limit is not None and limit > 0:
            limits[kind] = limit
        if remaining is not None:
            levels[kind] = min(levels[kind], float(remaining))
    learned = replace(b, limits=limits)
    levels = {k: min(levels[k], learned.capacity(k)) for k in KINDS}
    return replace(learned, levels=levels)


def throttled(buckets: Buckets, now: float, retry_after_s: float | None) -> Buckets:
    """A 429: cut the fleet's rate (once per burst) and empty the bucket until retry-after."""
    b = buckets.refilled(now)
    if now - b.last_cut_at >= CUT_COOLDOWN_S:
        b = replace(b, factor=max(MIN_FACTOR, b.factor * CUT), last_cut_at=now)
    # Nothing more goes out before retry-after: levels that refill to zero at that time.
    wait = max(retry_after_s or 0.0, 0.0)
    levels = {k: min(b.levels[k], -b.capacity(k) * wait / 60.0) for k in KINDS}
    return replace(b, levels=levels)


def answered(buckets: Buckets, now: float) -> Buckets:
    """An answer (not a 429): additive recovery of the fleet's rate."""
    b = buckets.refilled(now)
    return replace(b, factor=min(1.0, b.factor + RECOVER))


def fresh(limits: Mapping[Kind, int] | None, now: float) -> Buckets:
    """New buckets, full, at the given (or default) limits."""
    chosen = {k: int((limits or DEFAULT_LIMITS)[k]) for k in KINDS}
    return Buckets(limits=chosen, levels={k: float(v) for k, v in chosen.items()}, at=now)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _short(n: int) -> str:
    return f"{n / 1_000_000:g}M" if n >= 1_000_000 else (f"{n / 1000:g}k" if n >= 1000
                                                         else str(n))


def limiter_text(limits: Mapping[str, int], *, learned: bool, rate: float,
                 run_share: float, runs: int, run_throttled: int, wait_s: float,
                 binding: str | None) -> str:
    """One line on the fleet's limiter for a run's progress and its Temporal UI details.

    ``limiter 500 rpm · 450k in · 90k out /min (learned) · admitting 100% · this run 47%
    of calls (3 runs) · waited 12 s (last: output) · 0 429s``
    """
    where = "learned" if learned else "assumed until an answer says"
    text = (f"limiter {limits['requests']:,} rpm · {_short(limits['input'])} in · "
            f"{_short(limits['output'])} out /min ({where}) · admitting {rate:.0%}")
    if runs > 1:
        text += f" · this run {run_share:.0%} of calls ({runs} runs)"
    text += f" · waited {wait_s:,.0f} s"
    if binding:
        text += f" (last: {'fair share' if binding == 'fair_share' else binding})"
    return text + f" · {run_throttled} 429s"
