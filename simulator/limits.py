"""Rate limits over a sliding 60-second window, answered like the API's 429s."""

from __future__ import annotations

import datetime as dt
import math
from collections import deque
from dataclasses import dataclass

from simulator.clock import Clock
from simulator.errors import ApiError
from simulator.scenario import Limits

WINDOW_S = 60.0
#: Limits advertised in the headers of an injected 429 when none are configured.
NOMINAL = {"requests": 4000, "input-tokens": 2_000_000, "output-tokens": 400_000}


@dataclass
class _Event:
    time: float
    input_tokens: int
    output_tokens: int


def rfc3339(unix: float) -> str:
    """``2025-01-01T00:00:00Z`` style timestamps, as the API writes them."""
    moment = dt.datetime.fromtimestamp(unix, dt.UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


class RateLimiter:
    """Counts admitted requests and their tokens; refuses what would exceed a limit."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._events: deque[_Event] = deque()

    def clear(self) -> None:
        """Forget the window."""
        self._events.clear()

    def _prune(self, now: float) -> None:
        while self._events and self._events[0].time <= now - WINDOW_S:
            self._events.popleft()

    def _wait_until_below(self, now: float, amounts: list[int], must_free: int) -> float:
        """Seconds until events totalling at least ``must_free`` have left the window."""
        freed = 0
        for event, amount in zip(self._events, amounts, strict=True):
            freed += amount
            if freed >= must_free:
                return max(0.0, event.time + WINDOW_S - now)
        return WINDOW_S

    def admit(self, limits: Limits, input_tokens: int) -> None:
        """Admit a request costing ``input_tokens`` or raise a 429 with ``retry-after``."""
        now = self._clock()
        self._prune(now)
        if limits.rpm is not None and len(self._events) + 1 > limits.rpm:
            wait = self._wait_until_below(
                now, [1] * len(self._events), len(self._events) + 1 - limits.rpm
            )
            raise self._refusal(limits, now, wait, f"{limits.rpm} requests per minute")
        if limits.input_tpm is not None:
            used = sum(e.input_tokens for e in self._events)
            if used + input_tokens > limits.input_tpm:
                amounts = [e.input_tokens for e in self._events]
                wait = (
                    WINDOW_S
                    if input_tokens > limits.input_tpm
                    else self._wait_until_below(
                        now, amounts, used + input_tokens - limits.input_tpm
                    )
                )
                raise self._refusal(
                    limits, now, wait, f"{limits.input_tpm} input tokens per minute"
                )
        if limits.output_tpm is not None:
            used = sum(e.output_tokens for e in self._events)
            if used >= limits.output_tpm:
                amounts = [e.output_tokens for e in self._events]
                wait = self._wait_until_below(now, amounts, used - limits.output_tpm + 1)
                raise self._refusal(
                    limits, now, wait, f"{limits.output_tpm} output tokens per minute"
                )

    def record(self, input_tokens: int, output_tokens: int) -> None:
        """Count an answered request in the window."""
        self._events.append(_Event(self._clock(), input_tokens, output_tokens))

    def headers(
        self, limits: Limits, *, exhausted: bool = False, retry_after: float = 0
    ) -> dict[str, str]:
        """The ``anthropic-ratelimit-*`` headers for the current window."""
        now = self._clock()
        self._prune(now)
        reset = rfc3339(
            now + retry_after
            if exhausted
            else (self._events[0].time + WINDOW_S if self._events else now)
        )
        used = {
            "requests": len(self._events),
            "input-tokens": sum(e.input_tokens for e in self._events),
            "output-tokens": sum(e.output_tokens for e in self._events),
        }
        configured = {
            "requests": limits.rpm,
            "input-tokens": limits.input_tpm,
            "output-tokens": limits.output_tpm,
        }
        headers: dict[str, str] = {}
        for kind, limit in configured.items():
            if limit is None and not exhausted:
                continue
            value = limit if limit is not None else NOMINAL[kind]
            remaining = 0 if exhausted and limit is None else max(0, value - used[kind])
            headers[f"anthropic-ratelimit-{kind}-limit"] = str(value)
            headers[f"anthropic-ratelimit-{kind}-remaining"] = str(remaining)
            headers[f"anthropic-ratelimit-{kind}-reset"] = reset
        return headers

    def injected(self, limits: Limits, retry_after_s: int) -> ApiError:
        """A 429 that the scenario injected (no limit was really reached)."""
        return self._refusal(
            limits, self._clock(), retry_after_s, "requests per minute", fault="rate_429"
        )

    def _refusal(
        self, limits: Limits, now: float, wait: float, what: str, *, fault: str | None = None
    ) -> ApiError:
        retry_after = max(1, math.ceil(wait))
        headers = self.headers(limits, exhausted=True, retry_after=retry_after)
        headers["retry-after"] = str(retry_after)
        message = (
            f"This request would exceed your organization's rate limit of {what} (simulated). "
            "For details, refer to: https://docs.claude.com/en/api/rate-limits."
        )
        if fault == "rate_429":
            message = (
                "This request would exceed your organization's rate limit (simulated, injected)."
            )
        return ApiError("rate_limit_error", message, headers=headers, fault=fault)
