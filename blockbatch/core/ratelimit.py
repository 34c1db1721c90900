"""The fleet's rate limiter, its pure half: token buckets, AIMD, a ramp, limits learned
from headers.

One limiter per API key (by hash) and **rate-limit class** (:func:`rate_class`), shared by
every worker and run through Postgres (``blockbatch/store/ratelimits.py``). It models the API's own
token buckets: requests, input tokens, output tokens and tokens (input plus output) per
minute, each refilled continuously at ``limit / 60`` per second up to ``limit``. A call
reserves what the API will count before it is sent (1 request, its uncached input — cache
reads do not count on current models — and the output it is expected to write) and settles
after with what the API counted. Because a bucket refills on its own, a reservation held by
a worker that died costs the fleet at most one refill, never a permanent share.

The rules, by the contract page (claude-api-2026-11.md):

- **Classes** (§6): limits belong to a model class, not to a model id. No response header
  names the class, so it comes from :data:`RATE_CLASSES` (the §6 buckets: Fable 5.x
  combined, Opus 4.x combined, Opus 5 alone, Sonnet 4.x combined, Sonnet 5 alone, Haiku 4.5
  alone; each 5.5 model its own bucket, per a third party's copy of the rate-limits page,
  api_findings §7); a model not listed is its own class.
- **``tokens-*``** (§6): ``anthropic-ratelimit-tokens-*`` shows the most restrictive token
  limit in force (a workspace's, for example). It is learned as a fourth bucket that every
  call's input plus output counts against, so a limit below the input and output limits
  binds. Answers have shown it as the sum of the two limits, and the page's wording reads as
  the tighter of them; either way it repeats what the input and output buckets hold, so a
  ``tokens-limit`` equal to either limit, or at least their sum, is learned as their sum
  (it never binds more than they do).
- **Per second** (§6, audit #7): a rate of 60 RPM may be enforced as 1 request per second.
  Besides the minute buckets, the admissions of the last second (a sliding window, so no
  1-second window of the API's, however aligned, sees more) hold at most ``limit / 60`` of
  the requests (at least one) and of the input tokens, at the ramp's share (:func:`per_second`);
  the first admission of a second passes whatever its tokens, so a full minute bucket never
  opens as one burst.
- **Ramp** (§6, acceleration limits: "a sharp rise in usage can get 429s, so ramp up
  gradually"): a limiter that admitted nothing for :data:`RAMP_IDLE_S` (or a new one) starts
  at :data:`RAMP_START` of its minute capacity and grows by :data:`RAMP_GROWTH` with every
  answered call, so full capacity comes after about eight answers; and no second admits more
  than :data:`RAMP_ACCELERATION` times the mean per second of the minute before it, or the
  start share of the per-second allowance, whichever is more (:func:`per_second`). A
  ``ramp_limit_exceeded`` 429 holds the fleet until its retry-after and does not cut the
  rate: the ramp is what answers it.
- **OTPM** (§3, §6, newest copy): output-tokens-per-minute counts actual output and
  ``max_tokens`` is not reserved. Older official copies said OTPM is estimated from
  ``max_tokens`` and adjusted (api_findings §7); the contract's newer copy wins. The fleet
  reserves the call's expected output: ``Need.output`` times the share of it answers
  actually wrote, learned per limiter (:func:`expected`; 1 until answers teach it, with
  :data:`OUTPUT_HEADROOM`), and settles with the actual output.
- **AIMD**: on a plain 429 the fleet's rate is cut multiplicatively (once per
  ``CUT_COOLDOWN_S``, so a burst of 429s from one moment is one cut, not a collapse) and it
  recovers additively with every answer. A spend-cap 429 cuts nothing (it says nothing about
  the rate; the run stops on it, blockbatch/core/claude_errors.py).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

Kind = Literal["requests", "input", "output", "tokens"]
KINDS: tuple[Kind, ...] = ("requests", "input", "output", "tokens")
#: Header names of each kind (``anthropic-ratelimit-<name>-limit`` / ``-remaining``).
HEADER = {
    "requests": "requests",
    "input": "input-tokens",
    "output": "output-tokens",
    "tokens": "tokens",
}
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
#: The ramp: a limiter idle this long (seconds) starts again at ``RAMP_START`` of its
#: capacity and grows by ``RAMP_GROWTH`` per answered call (0.25 -> 1 in 8 answers).
RAMP_START = 0.25
RAMP_GROWTH = 1.2
RAMP_IDLE_S = 60.0
#: A second admits at most this many times the mean per second of the minute before it.
RAMP_ACCELERATION = 2.0
#: Expected output: reservations are ``Need.output`` times the learned share of it answers
#: wrote, times this headroom, never more than ``Need.output``; the share is an average
#: over answers (weight ``OUTPUT_LEARN_RATE`` each) of at least ``OUTPUT_LEARN_MIN``
#: reserved output tokens, and never below ``MIN_OUTPUT_SHARE``.
OUTPUT_HEADROOM = 1.25
OUTPUT_LEARN_RATE = 0.2
OUTPUT_LEARN_MIN = 64
MIN_OUTPUT_SHARE = 0.05
#: Limits assumed until an answer's headers tell the real ones (per minute): far above any
#: tier, so nothing is held back on a guess. The first answer (a run's warm-up call) teaches
#: the account's limits, and a 429 before that cuts the rate (AIMD). An endpoint that sends
#: no rate-limit headers at all is paced by its 429s alone.
DEFAULT_LIMITS = {
    "requests": 400_000,
    "input": 200_000_000,
    "output": 40_000_000,
    "tokens": 240_000_000,
}
#: What a 429 does to the fleet: ``cut`` the rate (a plain rate limit), ``hold`` until
#: retry-after without a cut (a ramp limit), or ``none`` (a spend cap: not about the rate).
Throttle = Literal["cut", "hold", "none"]

#: Rate-limit classes (contract §6): model id prefix -> the class whose buckets it shares.
#: Longer prefixes first; a model not listed is its own class.
RATE_CLASSES: tuple[tuple[str, str], ...] = (
    ("claude-haiku-5-5", "haiku-5-5"),
    ("claude-sonnet-5-5", "sonnet-5-5"),
    ("claude-opus-5-5", "opus-5-5"),
    ("claude-fable-5", "fable-5"),
    ("claude-opus-5", "opus-5"),
    ("claude-sonnet-5", "sonnet-5"),
    ("claude-opus-4", "opus-4"),
    ("claude-sonnet-4", "sonnet-4"),
    ("claude-haiku-4-5", "haiku-4-5"),
)


def rate_class(model: str) -> str:
    """The rate-limit class of ``model`` (the limiter's key with the API key's hash)."""
    for prefix, name in RATE_CLASSES:
        if model.startswith(prefix):
            return name
    return model


def throttle_of(error_code: str | None, retry_after_sent: bool) -> Throttle:
    """What a 429 does to the fleet's limiter, by its ``error.details.error_code``.

    A spend cap comes without ``retry-after`` (contract §6); a 429 whose code is not known
    here and that names no retry-after is taken as one too, so a caller that only has the
    headers cuts nothing for it.
    """
    if error_code in ("enforced_spend_limit_reached", "contract_spend_limit_reached"):
        return "none"
    if error_code == "ramp_limit_exceeded":
        return "hold"
    return "cut" if retry_after_sent else "none"


@dataclass(frozen=True)
class Need:
    """What one call will count against the limits.

    ``output`` is the most the call may write (``max_tokens``); :func:`expected` turns it
    into what the fleet reserves.
    """

    requests: int = 1
    input: int = 0
    output: int = 0

    def of(self, kind: Kind) -> int:
        if kind == "tokens":
            return self.input + self.output
        return {"requests": self.requests, "input": self.input, "output": self.output}[kind]


@dataclass(frozen=True)
class Buckets:
    """The state of one limiter (one key and class) at ``at`` (epoch seconds)."""

    limits: Mapping[Kind, int]
    levels: Mapping[Kind, float]
    at: float
    #: AIMD factor in [MIN_FACTOR, 1]: the share of the learned limits the fleet uses now.
    factor: float = 1.0
    last_cut_at: float = 0.0
    #: The ramp in [RAMP_START, 1]: the share of the minute capacity open now.
    ramp: float = 1.0
    #: When a call was last admitted (0: never): idle past RAMP_IDLE_S restarts the ramp.
    last_admit_at: float = 0.0
    #: The share of ``Need.output`` answers write (learned; 1 until answers teach it).
    output_share: float = 1.0

    def capacity(self, kind: Kind) -> float:
        return self.limits[kind] * self.factor * self.ramp

    def refilled(self, now: float) -> Buckets:
        """The buckets at ``now``: each refilled at its (factored) rate up to capacity; an
        idle limiter's ramp starts again."""
        b = self
        if now - b.last_admit_at > RAMP_IDLE_S and b.ramp > RAMP_START:
            b = replace(b, ramp=RAMP_START)
        elapsed = max(now - b.at, 0.0)
        levels = {
            k: min(b.capacity(k), b.levels[k] + b.capacity(k) * elapsed / 60.0) for k in KINDS
        }
        return replace(b, levels=levels, at=max(now, b.at))


@dataclass(frozen=True)
class Admission:
    """The answer to a reservation: admitted (the new state), or wait this long."""

    admitted: bool
    buckets: Buckets
    wait_s: float = 0.0
    #: The limit that decided (the first short one, or the tightest when admitted).
    binding: Kind | None = None


def expected(buckets: Buckets, need: Need) -> Need:
    """What the fleet reserves for ``need``: its output scaled to what answers write
    (OTPM counts actual output, contract §3 and §6)."""
    share = min(1.0, buckets.output_share * OUTPUT_HEADROOM)
    return replace(need, output=max(math.ceil(need.output * share), min(need.output, 1)))


def reserve(buckets: Buckets, need: Need, now: float) -> Admission:
    """Take ``need`` from the buckets if all of them hold enough; else how long to wait.

    ``need`` is what is reserved (see :func:`expected`). Every minute bucket must also keep
    :data:`ADMIT_MARGIN_S` of its refill after the take (the last second's admissions are
    :func:`per_second`'s). A need larger than a whole bucket (with that margin) can never
    fit: it waits for a full bucket and is then admitted alone (the API answers such a
    request too when nothing else runs).
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
    return Admission(True, replace(b, levels=levels, last_admit_at=now), 0.0, tightest)


@dataclass(frozen=True)
class LastSecond:
    """The admissions of the last second (how many, their input, the oldest's age in
    seconds) and of the minute before it."""

    requests: int = 0
    input: int = 0
    oldest_age_s: float = 0.0
    minute_before: int = 0


def per_second(buckets: Buckets, need: Need, last: LastSecond) -> Admission | None:
    """``None`` when the last second's admissions leave room for ``need``; else the wait.

    Each of the requests and input limits allows ``limit / 60`` per second (requests at
    least one) at the fleet's rate and ramp share; requests also no more than
    :data:`RAMP_ACCELERATION` times the minute before's mean per second, or the start
    share of their allowance, whichever is more. The first admission of a second passes.
    """
    if last.requests == 0:
        return None
    checks: tuple[tuple[Kind, int], ...] = (("requests", last.requests), ("input", last.input))
    for kind, used in checks:
        allowance = buckets.capacity(kind) / 60.0
        if kind == "requests":
            floor = buckets.limits[kind] * buckets.factor * RAMP_START / 60.0
            rising = max(floor, RAMP_ACCELERATION * last.minute_before / 60.0)
            allowance = max(min(allowance, rising), 1.0)
        if used + need.of(kind) > allowance + 1e-9:
            # Room comes when the oldest admission leaves the window.
            return Admission(False, buckets, max(1.0 - last.oldest_age_s, 0.05), kind)
    return None


def settle(buckets: Buckets, reserved: Need, used: Need, now: float) -> Buckets:
    """Square a call's reservation with what the API counted once it ended.

    Unused output goes back; input or output beyond the reservation (a cache write where a
    read was expected, a longer answer than expected) is taken too, so the buckets follow
    the API's own count.
    """
    b = buckets.refilled(now)
    levels = {k: min(b.capacity(k), b.levels[k] + reserved.of(k) - used.of(k)) for k in KINDS}
    return replace(b, levels=levels)


def learn_output(buckets: Buckets, reserved: Need, used: Need) -> Buckets:
    """Learn the share of ``Need.output`` an answer wrote (``reserved`` was
    :func:`expected` of it at the share held now)."""
    if reserved.output < OUTPUT_LEARN_MIN:
        return buckets
    reserved_share = min(1.0, buckets.output_share * OUTPUT_HEADROOM)
    seen = min(1.0, used.output / reserved.output * reserved_share)
    share = (1 - OUTPUT_LEARN_RATE) * buckets.output_share + OUTPUT_LEARN_RATE * seen
    return replace(buckets, output_share=min(1.0, max(MIN_OUTPUT_SHARE, share)))


def learn(buckets: Buckets, headers: Mapping[str, str], now: float) -> Buckets:
    """Adopt the limits an answer's ``anthropic-ratelimit-*`` headers state.

    ``-limit`` is the account's size of the bucket; ``-remaining`` caps the level (what the
    API has left is all the fleet may use, whoever else used the rest). ``tokens-*`` is the
    most restrictive token limit in force (contract §6).
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
    if (
        limits["tokens"] in (limits["input"], limits["output"])
        or limits["tokens"] >= limits["input"] + limits["output"]
    ):
        # The input or output limit again, or both: no limit of its own (module docstring).
        limits["tokens"] = limits["input"] + limits["output"]
        levels["tokens"] = levels["input"] + levels["output"]
    learned = replace(b, limits=limits)
    levels = {k: min(levels[k], learned.capacity(k)) for k in KINDS}
    return replace(learned, levels=levels)


def throttled(
    buckets: Buckets, now: float, retry_after_s: float | None, throttle: Throttle = "cut"
) -> Buckets:
    """A 429: cut the fleet's rate (once per burst; not for ``hold``) and empty the buckets
    until retry-after; ``none`` (a spend cap) changes nothing."""
    b = buckets.refilled(now)
    if throttle == "none":
        return b
    if throttle == "cut" and now - b.last_cut_at >= CUT_COOLDOWN_S:
        b = replace(b, factor=max(MIN_FACTOR, b.factor * CUT), last_cut_at=now)
    # Nothing more goes out before retry-after: levels that refill to zero at that time.
    wait = max(retry_after_s or 0.0, 0.0)
    levels = {k: min(b.levels[k], -b.capacity(k) * wait / 60.0) for k in KINDS}
    return replace(b, levels=levels)


def answered(buckets: Buckets, now: float) -> Buckets:
    """An answer (not a 429): additive recovery of the rate, and the ramp grows."""
    b = buckets.refilled(now)
    return replace(b, factor=min(1.0, b.factor + RECOVER), ramp=min(1.0, b.ramp * RAMP_GROWTH))


def fresh(limits: Mapping[Kind, int] | None, now: float, *, ramp: float = RAMP_START) -> Buckets:
    """New buckets at the given (or default) limits, full to the ramp's start share."""
    given = dict(limits or DEFAULT_LIMITS)
    given.setdefault("tokens", DEFAULT_LIMITS["tokens"])
    chosen = {k: int(given[k]) for k in KINDS}
    b = Buckets(
        limits=chosen,
        levels={k: float(v) for k, v in chosen.items()},
        at=now,
        ramp=ramp,
        last_admit_at=now,
    )
    return replace(b, levels={k: b.capacity(k) for k in KINDS})


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _short(n: int) -> str:
    return f"{n / 1_000_000:g}M" if n >= 1_000_000 else (f"{n / 1000:g}k" if n >= 1000 else str(n))


def limiter_text(
    limits: Mapping[str, int],
    *,
    learned: bool,
    rate: float,
    run_share: float,
    runs: int,
    run_throttled: int,
    wait_s: float,
    binding: str | None,
) -> str:
    """One line on the fleet's limiter for a run's progress and its Temporal UI details.

    ``limiter 500 rpm · 450k in · 90k out /min (learned) · admitting 100% · this run 47%
    of calls (3 runs) · waited 12 s (last: output) · 0 429s``
    """
    where = "learned" if learned else "assumed until an answer says"
    text = (
        f"limiter {limits['requests']:,} rpm · {_short(limits['input'])} in · "
        f"{_short(limits['output'])} out /min ({where}) · admitting {rate:.0%}"
    )
    if runs > 1:
        text += f" · this run {run_share:.0%} of calls ({runs} runs)"
    text += f" · waited {wait_s:,.0f} s"
    if binding:
        text += f" (last: {'fair share' if binding == 'fair_share' else binding})"
    return text + f" · {run_throttled} 429s"


def key_hash(api_key: str | None) -> str:
    """What identifies an account's limits: a hash prefix of its API key, never the key."""
    if not api_key:
        return "no-key"
    return hashlib.sha256(api_key.encode()).hexdigest()[:16]
