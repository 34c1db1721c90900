"""Prompt caching, accounted exactly like the API.

Entries are keyed by (model id, hash of the prefix up to a ``cache_control`` breakpoint).
A prefix shorter than the model's ``min_cacheable_tokens`` is never cached. A read
refreshes the entry's TTL (5 minutes, or 1 hour with ``ttl: "1h"``).
"""

from __future__ import annotations

from dataclasses import dataclass

from blockbatch.simulator.clock import Clock
from blockbatch.simulator.prompt import Breakpoint

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
_PURGE_ABOVE = 10_000


@dataclass(frozen=True)
class CacheUsage:
    """How a request's prompt splits into cache reads, cache writes and plain input."""

    read: int = 0
    creation_5m: int = 0
    creation_1h: int = 0
    #: Tokens up to the last cacheable breakpoint; everything after is plain input.
    cached_upto: int = 0
    #: Whether any breakpoint was long enough to be cached at all.
    eligible: bool = False

    @property
    def creation(self) -> int:
        return self.creation_5m + self.creation_1h


class PromptCache:
    """The simulator's prompt cache, on an injectable clock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._entries: dict[tuple[str, str], tuple[float, str]] = {}

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()

    def copy(self) -> PromptCache:
        """A snapshot of the entries as they are now (later writes do not reach it)."""
        snapshot = PromptCache(self._clock)
        snapshot._entries = dict(self._entries)
        return snapshot

    def _alive(self, key: tuple[str, str], now: float) -> bool:
        entry = self._entries.get(key)
        if entry is None:
            return False
        if entry[0] <= now:
            del self._entries[key]
            return False
        return True

    def lookup(
        self, model_id: str, breakpoints: list[Breakpoint], min_tokens: int, *, commit: bool
    ) -> CacheUsage:
        """Work out reads and writes for a prompt; with ``commit`` also store and refresh.

        Args:
            model_id: the canonical model id (aliases share a cache).
            breakpoints: the prompt's breakpoints, in prefix order.
            min_tokens: the model's minimum cacheable prefix length.
            commit: False to only peek (e.g. for rate-limit accounting).
        """
        eligible = [bp for bp in breakpoints if bp.tokens >= min_tokens]
        if not eligible:
            return CacheUsage()
        now = self._clock()
        hit = -1
        for index in range(len(eligible) - 1, -1, -1):
            if self._alive((model_id, eligible[index].prefix_hash), now):
                hit = index
                break
        read = eligible[hit].tokens if hit >= 0 else 0
        creation = {"5m": 0, "1h": 0}
        previous = read
        for bp in eligible[hit + 1 :]:
            creation[bp.ttl] += max(0, bp.tokens - previous)
            previous = max(previous, bp.tokens)
        if commit:
            if len(self._entries) > _PURGE_ABOVE:
                self._purge(now)
            if hit >= 0:
                key = (model_id, eligible[hit].prefix_hash)
                ttl = self._entries[key][1]
                self._entries[key] = (now + TTL_SECONDS[ttl], ttl)
            for bp in eligible[hit + 1 :]:
                self._entries[(model_id, bp.prefix_hash)] = (now + TTL_SECONDS[bp.ttl], bp.ttl)
        return CacheUsage(
            read=read,
            creation_5m=creation["5m"],
            creation_1h=creation["1h"],
            cached_upto=max(read, previous),
            eligible=True,
        )

    def _purge(self, now: float) -> None:
        for key in [k for k, (expires, _) in self._entries.items() if expires <= now]:
            del self._entries[key]
