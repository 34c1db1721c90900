"""Pure rules of batch mode (Message Batches): names, sizes, and the ledger row of a result.

No I/O here: the activities in ``activities/batches/`` read and write Postgres and talk
to the provider; this module decides how requests are named and cut into batches and
what the ledger records of each result line. What happens next to each pack attempt is
the one pack policy, ``blockbatch.core.policy.decide``, shared with sync mode.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from blockbatch.core.batch_types import BatchOptions
from blockbatch.core.claude_errors import HTTP_STATUS
from blockbatch.core.policy import NOT_PROCESSED
from blockbatch.core.registry import ModelInfo, Usage, cost_usd

#: The system prompt is cached for an hour: a batch may take long to start processing.
BATCH_CACHE_TTL: Literal["1h"] = "1h"
#: The share of a batch's requests expected to read a prefix the batch writes itself (no
#: pre-warm); the rest write it again. Batches read the cache best effort: "Users
#: typically experience cache hit rates ranging from 30% to 98%" (contract §5, §7), and
#: their requests run concurrently, many before the first write is readable. Our
#: assumption, inside that range.
BATCH_CACHE_HIT_RATE = 0.7
#: The same share for a prefix already cached when the batch starts (a pre-warm): near the
#: top of the documented range, the cold start being what a pre-warm removes (the
#: prompt-caching FAQ's advice; conformance audit row 5). Our assumption until the ledger
#: has measured the model's batch hits (``blockbatch.store.batches.batch_cache_hits``).
BATCH_WARM_HIT_RATE = 0.95
#: Batch requests measured before the quote and the rounds use the ledger's hit rate.
MIN_MEASURED_REQUESTS = 8
#: A prefix the run wrote or read this recently is taken as still cached: the batch TTL is
#: an hour and every hit refreshes it (contract §5), less a margin for a batch's queueing.
WARM_FOR_S = 45 * 60


def custom_id_for(run_id: str, pack_path: str, attempt: int) -> str:
    """``p3_0_1_a1-<run tag>`` for pack 3.0.1 attempt 1; matches ``^[a-zA-Z0-9_-]{1,64}$``.

    The tag (8 hex digits of the run id's hash) makes a result line of another run's
    batch unmistakable.
    """
    tag = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    custom_id = f"p{pack_path.replace('.', '_')}_a{attempt}-{tag}"
    if len(custom_id) > 64:
        raise ValueError(f"pack path {pack_path!r} is too deep for a custom_id")
    return custom_id


def batch_params(request: dict[str, Any]) -> dict[str, Any]:
    """``build_request`` keyword arguments as a batch request's ``params``: the same body
    a sync call sends (no sampling parameter: the API removed them, contract §4), never
    streamed and never a ``max_tokens: 0`` warm-up (batches take neither, contract §5).

    Raises:
        ValueError: ``request`` asks for streaming or for ``max_tokens`` below 1.
    """
    if request.get("stream") or request.get("max_tokens", 0) < 1:
        raise ValueError("a batch request is never streamed and asks for at least one token")
    return dict(request)


# ------------------------------------------------------------------ the prompt cache of a round


#: How a round uses the prompt cache (:class:`RoundCache`).
CachePlan = Literal["lead", "pre-warm", "read", "write", "none"]


@dataclass(frozen=True)
class RoundCache:
    """How one round uses the prompt cache, and what its prefix is expected to cost.

    ``plan``:

    * ``lead``: the run's first round on a cold cache is one request alone, with
      ``cache_control``: it writes the prefix with the 1-hour TTL at the batch price (half
      a sync pre-warm's), and the other requests follow in the next round, reading it;
    * ``pre-warm``: one sync ``max_tokens: 0`` call writes the prefix with the 1-hour TTL,
      then every request carries ``cache_control`` and reads it, best effort;
    * ``read``: the prefix is still cached: the requests carry ``cache_control``;
    * ``write``: the requests carry ``cache_control`` on a cold cache: the first to run
      writes the prefix, the others read it at the cold rate (:data:`BATCH_CACHE_HIT_RATE`);
    * ``none``: no ``cache_control``: each request pays its prefix as plain input, at half
      price, and no write premium.
    """

    plan: CachePlan
    #: The expected cost of the round's prefixes (and the pre-warm; for ``lead``, of the
    #: lead and the requests that follow it), and at the worst case (every request missing
    #: the cache, writing the prefix at the 1-hour price).
    expected_usd: float
    worst_usd: float

    @property
    def cache_control(self) -> bool:
        return self.plan != "none"


def prefix_costs(model: ModelInfo, prefix_tokens: int) -> dict[str, float]:
    """One request's prefix at batch prices (``read``, ``write``: 1-hour, ``plain``: no
    ``cache_control``) and the sync ``max_tokens: 0`` pre-warm's 1-hour write (``warm``)."""
    p = prefix_tokens
    write = Usage(cache_creation_input_tokens=p, cache_creation_1h_tokens=p)
    return {
        "read": cost_usd(model, Usage(cache_read_input_tokens=p), batch=True),
        "write": cost_usd(model, write, batch=True),
        "plain": cost_usd(model, Usage(input_tokens=p), batch=True),
        "warm": cost_usd(model, write),
    }


def round_cache(
    model: ModelInfo,
    prefix_tokens: int,
    requests: int,
    *,
    warm: bool,
    hit_rate: float,
    lead: bool = False,
) -> RoundCache:
    """The cheapest way for a round of ``requests`` sharing a prefix of ``prefix_tokens``
    (0: under the model's minimum, never cached) to use the cache.

    ``warm``: the prefix is still cached (:data:`WARM_FOR_S`). ``hit_rate``: the share of
    requests expected to read a warm prefix (:data:`BATCH_WARM_HIT_RATE`, or the ledger's
    measurement). ``lead``: the round may send one request ahead, alone (the run's first
    round). A request that misses writes the prefix at the 1-hour price (twice the input
    price, at half). On a cold cache the ways are weighed by their expected cost: a lead
    request (half a sync write, one more round of waiting), a sync pre-warm, the batch
    writing the prefix itself (reads at the cold rate), or no ``cache_control``; a lone
    request on a cold cache, or a prefix under the minimum, sends no ``cache_control``
    and pays no write premium.
    """
    if prefix_tokens <= 0 or requests <= 0:
        return RoundCache("none", 0.0, 0.0)
    c = prefix_costs(model, prefix_tokens)
    n = requests
    plain = RoundCache("none", n * c["plain"], n * c["plain"])
    warm_request = hit_rate * c["read"] + (1 - hit_rate) * c["write"]
    if warm:
        return min(plain, RoundCache("read", n * warm_request, n * c["write"]), key=_by_cost)
    # A batch writing its own prefix reads it no better than one that finds it cached.
    cold_rate = min(BATCH_CACHE_HIT_RATE, hit_rate)
    cold_request = cold_rate * c["read"] + (1 - cold_rate) * c["write"]
    ways = [plain]
    if n > 1:
        ways.append(RoundCache("write", c["write"] + (n - 1) * cold_request, n * c["write"]))
        ways.append(
            RoundCache("pre-warm", c["warm"] + n * warm_request, c["warm"] + n * c["write"])
        )
        if lead:
            ways.append(RoundCache("lead", c["write"] + (n - 1) * warm_request, n * c["write"]))
    return min(ways, key=_by_cost)


def _by_cost(way: RoundCache) -> float:
    return way.expected_usd


def without_cache_control(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` with no ``cache_control`` on its system blocks (a copy)."""
    out = dict(request)
    if isinstance(out.get("system"), list):
        out["system"] = [
            {k: v for k, v in block.items() if k != "cache_control"} for block in out["system"]
        ]
    return out


# ------------------------------------------------------------------ rounds and parts


@dataclass
class PackAttempt:
    """One pack attempt to put into a round (a ``batch_requests`` row)."""

    path: str
    index: int
    attempt: int
    resubmits: int
    uids: list[str]


def request_size(request: dict[str, Any]) -> int:
    """Bytes one request adds to a batch's body: its JSON line."""
    return len(json.dumps(request, ensure_ascii=False).encode()) + 1


@dataclass
class Part:
    """One provider batch's worth of requests, and what the ledger keeps of each: the
    request as stored, and its short ids (alias -> block_uid, ``None`` without)."""

    index: int
    requests: list[dict[str, Any]] = field(default_factory=list)
    stored: list[dict[str, Any]] = field(default_factory=list)
    aliases: list[dict[str, str] | None] = field(default_factory=list)
    nbytes: int = 0


class PartCutter:
    """Cuts a round's requests, in their fixed order, into parts within the batch limits.

    The same requests in the same order always give the same parts, so a retried
    submission finds the parts it already created.
    """

    def __init__(self, options: BatchOptions) -> None:
        self.options = options
        self.part = Part(0)

    def add(
        self,
        request: dict[str, Any],
        stored: dict[str, Any],
        aliases: dict[str, str] | None = None,
    ) -> Part | None:
        """Add one request; returns the part it closed when it did not fit there."""
        size = request_size(request)
        closed = None
        if self.part.requests and (
            len(self.part.requests) >= self.options.max_requests_per_batch
            or self.part.nbytes + size > self.options.max_batch_bytes
        ):
            closed, self.part = self.part, Part(self.part.index + 1)
        self.part.requests.append(request)
        self.part.stored.append(stored)
        self.part.aliases.append(aliases)
        self.part.nbytes += size
        return closed

    def last(self) -> Part | None:
        """The part still open at the end, unless it is empty."""
        return self.part if self.part.requests else None


# ------------------------------------------------------------------ results


class ResultRow(NamedTuple):
    """One result line as recorded in ``llm_calls`` and ``batch_requests``."""

    call_id: int
    custom_id: str
    result_type: str
    status: str
    response: dict[str, Any] | None
    http_status: int | None
    error_type: str | None
    error_message: str | None
    request_id: str | None
    stop_reason: str | None
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cache_creation_1h_tokens: int
    cost_usd: float
    latency_ms: int | None
    #: Of output_tokens, thinking (``usage.output_tokens_details.thinking_tokens``).
    thinking_tokens: int = 0
    #: An errored line's ``error.details.error_code`` (a spend cap, ...).
    error_code: str | None = None


#: What the ledger records of a request the provider never processed: (status, why).
_NOT_PROCESSED = {
    kind: ("abandoned" if kind == "canceled" else "failed", text)
    for kind, text in NOT_PROCESSED.items()
}


def result_row(
    call_id: int,
    custom_id: str,
    result: dict[str, Any],
    model: ModelInfo,
    latency_ms: int | None,
    *,
    batch: bool = True,
) -> ResultRow:
    """The ledger row of one result line (``{"type": "missing"}`` when there was none),
    at batch prices unless ``batch`` is false (a Bedrock part run sync, under the minimum
    records of a job: ``blockbatch/core/bedrock_batch.py``)."""
    kind = result.get("type", "missing")
    if kind == "succeeded":
        message = result["message"]
        usage = Usage.from_message(message)
        return ResultRow(
            call_id,
            custom_id,
            kind,
            "succeeded",
            message,
            200,
            None,
            None,
            None,
            message.get("stop_reason"),
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            usage.cache_creation_1h_tokens,
            cost_usd(model, usage, batch=batch),
            latency_ms,
            usage.thinking_tokens,
        )
    if kind == "errored":
        body = result.get("error") or {}
        error = body.get("error") or {}
        error_type = str(error.get("type") or "api_error")
        details = error.get("details")
        code = details.get("error_code") if isinstance(details, dict) else None
        return ResultRow(
            call_id,
            custom_id,
            kind,
            "failed",
            None,
            HTTP_STATUS.get(error_type),
            error_type,
            str(error.get("message") or "")[:4000],
            body.get("request_id"),
            None,
            0,
            0,
            0,
            0,
            0,
            0.0,
            latency_ms,
            error_code=str(code) if code else None,
        )
    ledger_status, text = _NOT_PROCESSED.get(kind, _NOT_PROCESSED["missing"])
    return ResultRow(
        call_id,
        custom_id,
        kind if kind in _NOT_PROCESSED else "missing",
        ledger_status,
        None,
        None,
        kind,
        text,
        None,
        None,
        0,
        0,
        0,
        0,
        0,
        0.0,
        latency_ms,
    )
