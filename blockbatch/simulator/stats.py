"""Counters and the request log behind ``/_sim/stats`` and ``/_sim/requests``."""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from typing import Any

from blockbatch.core.agreement import position_bucket

REQUEST_LOG_SIZE = 10_000


class Stats:
    """Everything the simulator counts; never holds an API key."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Zero every counter and empty the log."""
        self.requests: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.tokens: Counter[str] = Counter()
        self.batch_tokens: Counter[str] = Counter()
        self.cache: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.stop_reasons: Counter[str] = Counter()
        self.batch_results: Counter[str] = Counter()
        #: The true disagreement: blocks answered and blocks whose answer differs from
        #: the truth (the block's computed answer), per pack size, position bucket and model.
        self.quality: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.quality_positions: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.quality_models: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.log: deque[dict[str, Any]] = deque(maxlen=REQUEST_LOG_SIZE)

    def count_request(self, endpoint: str, status: int) -> None:
        """One HTTP request answered with ``status``."""
        self.requests[endpoint][str(status)] += 1

    def count_usage(self, usage: dict[str, Any], *, batch: bool = False) -> None:
        """Tokens of one answered Message, by kind."""
        tokens = self.batch_tokens if batch else self.tokens
        creation = usage.get("cache_creation") or {}
        tokens["input"] += usage["input_tokens"]
        tokens["output"] += usage["output_tokens"]
        tokens["cache_creation"] += usage["cache_creation_input_tokens"]
        tokens["cache_creation_5m"] += creation.get("ephemeral_5m_input_tokens", 0)
        tokens["cache_creation_1h"] += creation.get("ephemeral_1h_input_tokens", 0)
        tokens["cache_read"] += usage["cache_read_input_tokens"]
        tokens["thinking"] += (usage.get("output_tokens_details") or {}).get("thinking_tokens", 0)

    def count_cache(self, *, eligible: bool, read: int) -> None:
        """A hit when anything was read from the cache; a miss when it could have been."""
        if read:
            self.cache["hits"] += 1
        elif eligible:
            self.cache["misses"] += 1

    def count_faults(self, faults: list[str]) -> None:
        """Injected faults, by kind."""
        self.faults.update(faults)

    def count_quality(
        self, pack_size: int, checked: list[tuple[int, bool]], model: str = ""
    ) -> None:
        """The blocks of one delivered answer by ``model``: (position, differs from the
        truth) each."""
        if not checked:
            return
        by_size = self.quality[str(pack_size)]
        by_model = self.quality_models[model]
        for position, altered in checked:
            by_size["answered"] += 1
            by_size["altered"] += int(altered)
            by_model["answered"] += 1
            by_model["altered"] += int(altered)
            by_position = self.quality_positions[position_bucket(position)]
            by_position["answered"] += 1
            by_position["altered"] += int(altered)

    def quality_snapshot(self) -> dict[str, Any]:
        """``quality`` of ``GET /_sim/stats``: answered and altered blocks, overall, per
        pack size (sizes as strings, ascending), per position bucket and per model."""
        sizes = sorted(self.quality, key=int)
        return {
            "answered": sum(self.quality[s]["answered"] for s in sizes),
            "altered": sum(self.quality[s]["altered"] for s in sizes),
            "by_pack_size": {s: _answered(self.quality[s]) for s in sizes},
            "by_position": {p: _answered(c) for p, c in self.quality_positions.items()},
            "by_model": {m: _answered(c) for m, c in sorted(self.quality_models.items())},
        }

    def snapshot(self) -> dict[str, Any]:
        """The JSON of ``GET /_sim/stats``."""
        return {
            "requests": {
                endpoint: dict(by_status) for endpoint, by_status in self.requests.items()
            },
            "tokens": _tokens(self.tokens),
            "batch_tokens": _tokens(self.batch_tokens),
            "cache": {"hits": self.cache["hits"], "misses": self.cache["misses"]},
            "faults": dict(self.faults),
            "stop_reasons": dict(self.stop_reasons),
            "batch_results": dict(self.batch_results),
            "quality": self.quality_snapshot(),
        }


def _answered(counter: Counter[str]) -> dict[str, int]:
    return {"answered": counter["answered"], "altered": counter["altered"]}


def _tokens(counter: Counter[str]) -> dict[str, int]:
    kinds = (
        "input",
        "output",
        "cache_creation",
        "cache_creation_5m",
        "cache_creation_1h",
        "cache_read",
        "thinking",
    )
    return {kind: counter[kind] for kind in kinds}
