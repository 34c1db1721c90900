"""The quote's pricing of one mode (:func:`mode_quote`): each planned call's tokens and
cost, sync or batch, as the run will make them (the warm-up or the batch round's pre-warm,
cache writes, reads and best-effort batch hits). Pure; ``blockbatch/core/quote.py`` plans
the calls and assembles the :class:`~blockbatch.core.quote.Quote`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from blockbatch.core.batching import (
    BATCH_CACHE_HIT_RATE,
    BATCH_CACHE_TTL,
    BATCH_WARM_HIT_RATE,
    CachePlan,
    round_cache,
)
from blockbatch.core.context import RunContext
from blockbatch.core.planning import BLOCK_WRAPPER_TOKENS
from blockbatch.core.quote_tokens import PromptTokens
from blockbatch.core.registry import Usage, cost_usd

Mode = Literal["sync", "batch"]


@dataclass(frozen=True)
class Attempt:
    """One call the run is expected to make: a planned pack, or a half of a truncated one.

    Attributes:
        positions: the blocks it carries.
        output: the output tokens it is expected to write, thinking included (a truncated
            answer: all of ``max_tokens``, paid for all the same).
        max_tokens: what it asks for.
        truncated: expected to stop at ``max_tokens``; the run then halves its blocks.
        thinking: of ``output``, thinking.
    """

    positions: tuple[int, ...]
    output: int
    max_tokens: int
    truncated: bool = False
    thinking: int = 0


class ModeQuote(BaseModel):
    """One mode's calls, tokens and cost."""

    mode: Mode
    #: Packs as planned (``calls`` adds the warm-up, the halves of expected truncations
    #: and the quality probe's calls).
    packs: int
    calls: int
    warm_up: bool
    cache_ttl: str
    #: Whether the prompt prefix is cached at all (the API skips a prefix below its minimum).
    cached: bool
    input_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    output_tokens: int
    #: Output if every call wrote its whole ``max_tokens``.
    max_output_tokens: int
    #: Of ``output_tokens``, the expected thinking (0: the calls do not think).
    thinking_tokens: int = 0
    cost_usd: float
    #: The most the planned calls can cost (no retries, no halving counted); in batch mode
    #: every request missing the cache and writing the prefix at the 1-hour price.
    max_cost_usd: float
    #: The least: in batch mode every request reading the cache (hits are best effort);
    #: in sync mode the expected output (0: not computed, an old quote).
    min_cost_usd: float = 0.0
    #: Whether the calls carry ``cache_control`` (batch: not when too few requests share
    #: a cold prefix to repay a write, or the prefix is under the model's minimum).
    cache_control: bool = True
    #: Batch: the share of requests expected to read the pre-warmed prefix (``None``: sync,
    #: or no cache).
    cache_hit_rate: float | None = None
    #: Batch: the misses (requests writing the prefix instead of reading it) nine runs in
    #: ten stay within, each drawn on its own at the hit rate, and the cost with that many
    #: (``likely_max_usd``; 0: not computed). Hits are best effort: the spread is luck.
    likely_misses: int = 0
    likely_max_usd: float = 0.0
    #: Batch: how the run's first round uses the cache
    #: (:class:`~blockbatch.core.batching.RoundCache`; ``None``: sync).
    cache_plan: CachePlan | None = None
    #: The quality probe (sync only; in ``calls``, the tokens and both costs): its blocks
    #: asked alone, one a call, and their expected cost.
    probe_calls: int = 0
    probe_cost_usd: float = 0.0


#: The share of runs whose batch misses :func:`likely_misses` covers.
LIKELY_SHARE = 0.9


def likely_misses(requests: int, miss_rate: float, share: float = LIKELY_SHARE) -> int:
    """The fewest misses that ``share`` of runs stay within, when each of ``requests``
    misses on its own with ``miss_rate`` (a binomial count)."""
    if requests <= 0 or miss_rate <= 0:
        return 0
    below, k = 0.0, 0
    while k < requests:
        below += math.comb(requests, k) * miss_rate**k * (1 - miss_rate) ** (requests - k)
        if below >= share:
            return k
        k += 1
    return requests


class BlockShare:
    """A call's share of the blocks' (counted) input: the total spread by the estimates."""

    def __init__(self, block_tokens: Sequence[int], total: int) -> None:
        self._est = [t + BLOCK_WRAPPER_TOKENS for t in block_tokens]
        self._scale = total / sum(self._est)

    def __call__(self, positions: Sequence[int]) -> float:
        return sum(self._est[i] for i in positions) * self._scale


def usd(value: float) -> str:
    """Dollars in a note: four decimals below $10, cents above."""
    return f"${value:.4f}" if value < 10 else f"${value:,.2f}"


def mode_quote(
    mode: Mode,
    ctx: RunContext,
    attempts: Sequence[Attempt],
    tokens: PromptTokens,
    share: BlockShare,
    *,
    cached: bool,
    warm_up: bool,
    packs: int,
    hit_rate: float = BATCH_WARM_HIT_RATE,
) -> ModeQuote:
    """One mode's figures, each call priced on its own (``cost_usd`` prices one request at
    its tier: a sum of calls priced at once would cross a long-prompt line no call does).

    Sync: the warm-up (or else the first call) writes the prefix, the others read it.
    Batch: the run's rule for its first round (``blockbatch.core.batching.round_cache``):
    a lead request writes the prefix at the batch price and the others then read it best
    effort (``hit_rate`` of them; the rest write it again at the 1-hour price); or a sync
    pre-warm (priced at sync prices, 1-hour write) before them all; or the first request
    writes and the others read at the cold rate (``BATCH_CACHE_HIT_RATE``); else no
    ``cache_control``, each request paying its prefix as input. ``min_cost_usd`` has
    every request read, ``max_cost_usd`` every request write and write its whole
    ``max_tokens``.
    """
    model, batch = ctx.model, mode == "batch"
    ttl = BATCH_CACHE_TTL if batch else ctx.options.cache_ttl
    plan: CachePlan | None = None
    if batch:
        plan = round_cache(
            model,
            ctx.cacheable_prefix_tokens,
            len(attempts),
            warm=False,
            hit_rate=hit_rate,
            lead=True,
        ).plan
        warm_up = plan == "pre-warm"
        uses_cache = cached and plan != "none"
    else:
        uses_cache = cached
    calls = len(attempts) + (1 if warm_up else 0)
    # Every call: its uncached prompt, how it uses the prefix (write, read, best effort or
    # none), its output, its ceiling, whether it is priced at batch prices, and for best
    # effort the share expected to read.
    planned: list[tuple[int, str, int, int, bool, float]] = []
    if warm_up:
        own = tokens.warm_up - tokens.prefix if cached else tokens.warm_up
        # The batch pre-warm is max_tokens: 0 (json channel: one result; too small to count).
        planned.append((own, "write" if cached else "none", 0 if batch else 1, 1, False, 1.0))
    # A lead request (or the first of a batch writing its own prefix) writes it; the
    # others read it best effort: at the warm rate after a pre-warm or a lead, at the cold
    # rate in a batch that writes it itself.
    rate = min(BATCH_CACHE_HIT_RATE, hit_rate) if plan == "write" else hit_rate
    # Blocks' shares rounded as a running total, so the calls add up to the whole count.
    running, rounded = 0.0, 0
    for a in attempts:
        running += tokens.per_call + share(a.positions)
        own, rounded = round(running) - rounded, round(running)
        if not uses_cache:
            use = "none"
        elif batch and planned:
            use = "best_effort"
        else:
            use = "write" if not planned else "read"
        planned.append(
            (own + (0 if uses_cache else tokens.prefix), use, a.output, a.max_tokens, batch, rate)
        )

    def usage(own: int, write: bool, read: bool, out: int) -> Usage:
        writes = tokens.prefix if write else 0
        return Usage(
            input_tokens=own,
            output_tokens=out,
            cache_creation_input_tokens=writes,
            cache_read_input_tokens=tokens.prefix if read else 0,
            cache_creation_1h_tokens=writes if ttl == "1h" else 0,
        )

    def cases(own: int, use: str, out: int, rate: float) -> list[tuple[float, Usage]]:
        """The call's expected usage as weighted cases."""
        if use == "best_effort":
            return [
                (rate, usage(own, False, True, out)),
                (1 - rate, usage(own, True, False, out)),
            ]
        return [(1.0, usage(own, use == "write", use == "read", out))]

    expected = [
        (w, u, at_batch)
        for own, use, out, _, at_batch, rate in planned
        for w, u in cases(own, use, out, rate)
        if w > 0
    ]
    worst = [
        (usage(own, use in ("write", "best_effort"), use == "read", ceiling), at_batch)
        for own, use, _, ceiling, at_batch, _ in planned
    ]
    best = [
        (usage(own, use == "write", use in ("read", "best_effort"), out), at_batch)
        for own, use, out, _, at_batch, _ in planned
    ]
    best_usd = sum(cost_usd(model, u, batch=b) for u, b in best)
    # Best-effort reads: how many misses 9 runs in 10 stay within, and what one costs (the
    # prefix written at the 1-hour batch price instead of read).
    trials = [rate for _, use, _, _, _, rate in planned if use == "best_effort"]
    likely = likely_misses(len(trials), 1 - trials[0]) if trials else 0
    miss_usd = cost_usd(model, usage(0, True, False, 0), batch=True) - cost_usd(
        model, usage(0, False, True, 0), batch=True
    )
    return ModeQuote(
        mode=mode,
        packs=packs,
        calls=calls,
        warm_up=warm_up,
        cache_ttl=ttl,
        cached=cached,
        cache_control=uses_cache,
        cache_hit_rate=rate if batch and uses_cache else None,
        cache_plan=plan,
        input_tokens=round(sum(w * u.input_tokens for w, u, _ in expected)),
        cache_write_tokens=round(sum(w * u.cache_creation_input_tokens for w, u, _ in expected)),
        cache_read_tokens=round(sum(w * u.cache_read_input_tokens for w, u, _ in expected)),
        output_tokens=round(sum(w * u.output_tokens for w, u, _ in expected)),
        max_output_tokens=sum(u.output_tokens for u, _ in worst),
        thinking_tokens=sum(a.thinking for a in attempts),
        cost_usd=round(sum(w * cost_usd(model, u, batch=b) for w, u, b in expected), 6),
        min_cost_usd=round(best_usd, 6),
        max_cost_usd=round(sum(cost_usd(model, u, batch=b) for u, b in worst), 6),
        likely_misses=likely,
        likely_max_usd=round(best_usd + likely * miss_usd, 6),
    )
