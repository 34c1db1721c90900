"""A budget that holds and is spent (``RunOptions.max_cost_usd``): what a call reserves, and
whether the next one fits. Pure rules; ``blockbatch/store/ledger.py`` decides atomically with them.

Before every Claude call of a budgeted run (a pack's call, the warm-up, an outage probe) the
call **reserves** against the budget: what the ledger has recorded for the run, plus the
reservations of its calls still open (sent, not yet answered), plus this call's must stay
within the budget. The answer's real cost replaces the reservation when it is recorded.

What a pack call reserves (:func:`reservation`):

- **Its expected cost, from what the run has learned** (:func:`expected_usd`): the prompt
  prefix read from the cache while an answer of the run read or wrote it within the cache's
  lifetime (a write otherwise), the rest of its input as the planner estimates it, and the
  output the run's answers write per estimated token plus the thinking its calls write.
- **A margin sized from the spread seen so far** (:class:`Spread`): what the run's answered
  pack calls cost against what they were expected to cost, their mean plus
  :data:`SPREAD_Z` standard deviations, never less than :data:`MIN_MARGIN`.
- **And it can pay no more than that**: the call's ``max_tokens`` is lowered to what the
  reservation pays for after its input at :data:`INPUT_MARGIN` over the estimate (never
  below :data:`MIN_OUTPUT_HEADROOM` times the expected output: the reservation grows
  instead). Output is billed up to ``max_tokens``, so a call that writes more than expected
  is cut there (and halved by the pack policy) instead of spending past the budget.
- **The first calls** (no pack call of the run answered yet, so no spread) reserve their
  worst case (:func:`worst_case_usd`): all of the planned ``max_tokens``, input at
  :data:`INPUT_MARGIN`, the prefix at the write price unless the cache is known warm. A
  later attempt of a pack (after a truncated answer: its block may write more than
  the run's answers do): it may write :data:`AGAIN_OUTPUT_HEADROOM` times its expected
  output, up to its planned ``max_tokens``, and reserves all of it.

The bound holds for every call whose input stays within :data:`INPUT_MARGIN` of the estimate
and whose prefix is read while an answer of the run read or wrote it within the cache's TTL
less :data:`CACHE_SLACK_S` (a hit refreshes the TTL: contract §5). A call lost with its worker
counts at its cold worst case. The ledger total therefore stays within the budget however
many packs and workers run at once.

A call that does not fit (:func:`verdict`) waits while calls still open hold the room it
needs (they usually cost less than they reserve), and is refused when even the recorded
cost alone leaves no room: then a pack of several blocks is halved when one block could
still fit (:func:`smaller_fits`), and a lone block ends ``budget_exhausted``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from blockbatch.core.batching import BATCH_CACHE_TTL
from blockbatch.core.commands import PROG, for_any_reader
from blockbatch.core.context import RunContext
from blockbatch.core.planning import Pack
from blockbatch.core.registry import BATCH_DISCOUNT, ModelInfo, price_multiplier
from blockbatch.core.run_types import BudgetLeft

#: Real input counts may exceed the planner's estimate a little (it leans high, but it is
#: not Claude's tokenizer): a worst case takes this much more input than estimated.
INPUT_MARGIN = 1.25

Verdict = Literal["fits", "wait", "exhausted"]

#: A reservation is at least this much over the call's expected cost.
MIN_MARGIN = 0.15
#: Standard deviations of the run's cost spread (actual / expected) a reservation holds.
SPREAD_Z = 3.0
#: The spread assumed from a single answered call (a share of its ratio).
FIRST_SPREAD = 0.25
#: A budgeted call's ``max_tokens`` is at least this many times its expected output.
MIN_OUTPUT_HEADROOM = 1.25
#: A later attempt of a pack (after a truncated answer) may write this many times its
#: expected output.
AGAIN_OUTPUT_HEADROOM = 4.0
#: The prefix counts as cached while the run's last cache hit or write is younger than the
#: cache's TTL by this much.
CACHE_SLACK_S = 60.0
_TTL_S = {"5m": 300.0, "1h": 3600.0}


class BudgetError(ValueError):
    """A budget a run cannot use (not a number, not positive, or below one call)."""


def worst_case_usd(
    model: ModelInfo,
    *,
    input_tokens: int,
    max_tokens: int,
    prefix_tokens: int = 0,
    cache_ttl: str = "5m",
    batch: bool = False,
    prefix_read: bool = False,
) -> float:
    """The most one call can cost.

    Args:
        model: the model (its prices).
        input_tokens: the request's estimated input (prefix included).
        max_tokens: the request's ``max_tokens``: output (thinking included) is billed up
            to it.
        prefix_tokens: the cacheable prompt prefix (0: too short to be cached): billed at
            the cache-write price, the dearer of the ways it can be billed.
        cache_ttl: ``5m`` or ``1h``: the write price.
        batch: Message Batches prices (half).
        prefix_read: the prefix is known to be in the cache (:func:`prefix_warm`): priced
            as a read.
    """
    prefix = min(max(prefix_tokens, 0), max(input_tokens, 0))
    write = model.price_cache_write_1h if cache_ttl == "1h" else model.price_cache_write_5m
    prefix_price = (
        (model.price_cache_read if prefix_read else max(write, model.price_input))
        if prefix
        else 0.0
    )
    rest = max(input_tokens, 0) - prefix
    total = (
        INPUT_MARGIN * (prefix * prefix_price + rest * model.price_input)
        + max(max_tokens, 0) * model.price_output
    ) / 1_000_000
    tier = price_multiplier(model, math.ceil(INPUT_MARGIN * max(input_tokens, 0)))
    return total * tier * (BATCH_DISCOUNT if batch else 1.0)


def verdict(budget: float, *, recorded: float, open_reserved: float, need: float) -> Verdict:
    """Whether a call of worst case ``need`` may start now.

    ``fits`` when recorded + open + need is within the budget; ``wait`` when it would fit
    once the open calls are answered (at no more than the recorded cost alone);
    ``exhausted`` when not even that.
    """
    if recorded + open_reserved + need <= budget + 1e-12:
        return "fits"
    if recorded + need <= budget + 1e-12 and open_reserved > 0:
        return "wait"
    return "exhausted"


def refusal_text(budget: float, *, recorded: float, need: float) -> str:
    """The readable reason a block ends ``budget_exhausted`` with (stored: read later, by
    any front door or in an export, so its command is the console script's)."""
    return for_any_reader(
        f"the run's budget of ${budget:.4f} is spent up to ${recorded:.4f}: the next call "
        f"could cost up to ${need:.4f}, so it was not made; raise the budget with "
        f"`{PROG} retry RUN_ID --max-cost USD`"
    )


def parse_budget(value: object) -> float:
    """A budget as given (text or number): a positive, finite number of US dollars.

    Raises:
        BudgetError: not a number, not finite, zero or negative.
    """
    if isinstance(value, bool):
        raise BudgetError(f"--max-cost must be a number of US dollars, got {value!r}")
    try:
        usd = float(value)  # type: ignore[arg-type]  # any object: float() refuses what it cannot read
    except (TypeError, ValueError):
        raise BudgetError(
            f"--max-cost must be a number of US dollars (e.g. 2.50), got {value!r}"
        ) from None
    if not math.isfinite(usd) or usd <= 0:
        raise BudgetError(f"--max-cost must be more than $0, got {value!r}")
    return usd


def check_minimum(budget: float, minimum: float, first_call: str, *, spent: float = 0.0) -> None:
    """Refuse a budget that cannot pay for the run's first calls (after ``spent``).

    Raises:
        BudgetError: naming the smallest budget that can.
    """
    if spent + minimum <= budget:
        return
    floor = math.ceil(round((spent + minimum) * 10_000, 6)) / 10_000
    already = f"${spent:.4f} already spent plus " if spent else ""
    raise BudgetError(
        f"--max-cost ${budget:.4f} cannot pay for the run's first call ({first_call}), which "
        f"could cost up to ${minimum:.4f} (worst case): the smallest budget is {already}that, "
        f"--max-cost {floor:.4f}; nothing was started"
    )


def left_to_do(
    budget: float,
    *,
    spent: float,
    blocks_done: int,
    blocks_left: int,
    work_spent: float | None = None,
    restart_usd: float = 0.0,
    largest_call_usd: float = 0.0,
    next_call_usd: float | None = None,
    reused: int = 0,
) -> BudgetLeft:
    """What is left of a run stopped by its budget: blocks, and an estimate from its own
    cost per block so far.

    Args:
        budget, spent: the budget and the run's whole cost so far.
        blocks_done, blocks_left: blocks answered, and not.
        work_spent: the cost of the calls that answered blocks (packs, batch requests);
            ``None``: all of ``spent``. One-off calls (the warm-up's cache write, probes)
            would otherwise inflate the cost per block.
        restart_usd: what continuing pays once before its first block (a new warm-up:
            the run's own warm-up cost).
        largest_call_usd: the largest worst case a call of the run reserved.
        next_call_usd: what a pack call of the run reserves from what it learned
            (:func:`learned_call_usd`; ``None``: nothing learned).
        reused: of ``blocks_done``, blocks answered by an earlier run's answer (no call):
            not counted in the cost per block.
    """
    work = spent if work_spent is None else work_spent
    paid = blocks_done - reused
    per_block = work / paid if paid > 0 else None
    to_finish = per_block * blocks_left + restart_usd if per_block is not None else None
    return BudgetLeft(
        max_cost_usd=budget,
        spent_usd=round(spent, 6),
        blocks_done=blocks_done,
        blocks_left=blocks_left,
        cost_per_block_usd=round(per_block, 6) if per_block is not None else None,
        to_finish_usd=round(to_finish, 6) if to_finish is not None else None,
        largest_call_usd=round(largest_call_usd, 6),
        next_call_usd=round(next_call_usd, 6) if next_call_usd is not None else None,
    )


def left_text(left: BudgetLeft) -> str:
    """``budget $0.50 ran out at $0.4870: 96 blocks left, about $0.4675 to finish``."""
    head = (
        f"budget ${left.max_cost_usd:.4f} ran out at ${left.spent_usd:.4f}: "
        f"{left.blocks_left} block{'s' if left.blocks_left != 1 else ''} left"
    )
    if left.to_finish_usd is None:
        return head + " (no block done yet to estimate the rest from)"
    return (
        head + f", about ${left.to_finish_usd:.4f} to finish "
        f"(${left.cost_per_block_usd:.5f} a block so far)"
    )


#: A suggested budget holds this much more than the estimate to finish: the estimate's own
#: error (the blocks left are not the blocks done).
SUGGEST_MARGIN = 0.15


def learned_call_usd(largest_expected_usd: float, spread: Spread | None) -> float | None:
    """What a pack call of the run reserves now that it has answers: the largest expected
    cost of its answered pack calls times the spread's :meth:`Spread.factor`, and at least
    :data:`INPUT_MARGIN` times it (a reservation never lowers ``max_tokens`` below
    :data:`MIN_OUTPUT_HEADROOM` times the expected output, with its input at
    :data:`INPUT_MARGIN`). ``None`` before the run has an answered pack call."""
    if spread is None or largest_expected_usd <= 0:
        return None
    return largest_expected_usd * max(spread.factor(), INPUT_MARGIN)


def learned_costs(costs: Mapping[str, Any]) -> float | None:
    """:func:`learned_call_usd` from a run's budget costs as the store reads them:
    ``largest_expected`` and the spread's ``expected_calls``, ``ratio_sum``, ``ratio_sq``
    (missing or ``None``: nothing learned)."""
    n = int(costs.get("expected_calls") or 0)
    if not n:
        return None
    spread = Spread.of(n, float(costs.get("ratio_sum") or 0.0), float(costs.get("ratio_sq") or 0.0))
    return learned_call_usd(float(costs.get("largest_expected") or 0.0), spread)


def suggested_budget(left: BudgetLeft) -> float:
    """A budget that should finish the run, in whole cents: what was spent, what the blocks
    left are expected to cost at the run's own cost per block (without a block done, the old
    budget again) with :data:`SUGGEST_MARGIN`, and room for the reservation of the last call
    (every call reserves before it is made): what a call reserves from what the run learned
    (:func:`learned_call_usd`), or, before it learned anything, the largest reservation a
    call of it made (a first call's worst case)."""
    more = left.to_finish_usd if left.to_finish_usd is not None else left.max_cost_usd
    room = left.next_call_usd if left.next_call_usd is not None else left.largest_call_usd
    total = left.spent_usd + more * (1 + SUGGEST_MARGIN) + room
    return math.ceil(round(total * 100, 6)) / 100


#: Input tokens of the warm-up's one stand-in block with its JSON wrapper (a few words).
WARM_UP_BLOCK_TOKENS = 64


def warm_up_worst_case(
    ctx: RunContext, max_tokens: int = 1, cache_ttl: Literal["5m", "1h"] | None = None
) -> float:
    """The warm-up call's worst case: the prompt prefix written (with the run's TTL, or the
    one given: a batch round's pre-warm writes with the batch TTL), one stand-in block, its
    ``max_tokens`` (0 where it only writes the cache; one result's on the json channel)."""
    return worst_case_usd(
        ctx.model,
        input_tokens=ctx.fixed_prompt_tokens + WARM_UP_BLOCK_TOKENS,
        max_tokens=max_tokens,
        prefix_tokens=ctx.cacheable_prefix_tokens,
        cache_ttl=cache_ttl or ctx.options.cache_ttl,
    )


def pack_worst_case(
    ctx: RunContext, pack: Pack, *, batch: bool = False, prefix_read: bool = False
) -> float:
    """A pack call's worst case, from its input estimate and ``max_tokens`` (its thinking
    allowance included); a batch request writes with the batch TTL (``BATCH_CACHE_TTL``).
    ``prefix_read``: the prefix is known to be in the cache (after the warm-up wrote it)."""
    return worst_case_usd(
        ctx.model,
        input_tokens=pack.est_input_tokens,
        max_tokens=pack.max_tokens,
        prefix_tokens=ctx.cacheable_prefix_tokens,
        cache_ttl=BATCH_CACHE_TTL if batch else ctx.options.cache_ttl,
        batch=batch,
        prefix_read=prefix_read,
    )


def prefix_warm(ctx: RunContext, cached_s: float | None) -> bool:
    """Whether the run's prompt prefix is in the cache: an answer of the run read or wrote
    it ``cached_s`` seconds ago, within the TTL less :data:`CACHE_SLACK_S`."""
    if not ctx.cacheable_prefix_tokens or cached_s is None:
        return False
    return cached_s < _TTL_S.get(ctx.options.cache_ttl, 300.0) - CACHE_SLACK_S


@dataclass(frozen=True)
class Spread:
    """What a run's answered pack calls cost against what they were expected to cost.

    Attributes:
        calls: calls answered that were reserved at an expected cost.
        mean: their mean cost / expected.
        sd: its sample standard deviation (``None`` from one call).
    """

    calls: int
    mean: float
    sd: float | None

    @classmethod
    def of(cls, calls: int, total: float, squares: float) -> Spread:
        """From running sums: the count, the sum of the ratios and of their squares."""
        mean = total / calls
        if calls < 2:
            return cls(calls, mean, None)
        variance = max(squares - calls * mean * mean, 0.0) / (calls - 1)
        return cls(calls, mean, math.sqrt(variance))

    def factor(self) -> float:
        """What a reservation is, times the expected cost: the mean plus :data:`SPREAD_Z`
        deviations (one call: :data:`FIRST_SPREAD` of its ratio), at least
        1 + :data:`MIN_MARGIN`."""
        sd = self.sd if self.sd is not None else FIRST_SPREAD * self.mean
        return max(1.0 + MIN_MARGIN, self.mean + SPREAD_Z * sd)


@dataclass(frozen=True)
class Reserved:
    """What a pack call reserves against its run's budget, and what it may write.

    Attributes:
        usd: the reservation.
        expected_usd: what the call is expected to cost.
        worst_usd: the most it can cost whatever the cache holds (what a call lost with its
            worker counts).
        max_tokens: the call's ``max_tokens`` (the planned one, or lower: what ``usd`` pays).
    """

    usd: float
    expected_usd: float
    worst_usd: float
    max_tokens: int


def _input_usd(ctx: RunContext, input_tokens: int, warm: bool, batch: bool) -> float:
    """A call's input at the prices it is expected to pay (prefix read when warm, written
    otherwise), without the long-prompt tier or the batch discount."""
    model = ctx.model
    prefix = min(ctx.cacheable_prefix_tokens, max(input_tokens, 0))
    ttl = BATCH_CACHE_TTL if batch else ctx.options.cache_ttl
    write = model.price_cache_write_1h if ttl == "1h" else model.price_cache_write_5m
    prefix_price = model.price_cache_read if warm else max(write, model.price_input)
    return (prefix * prefix_price + (max(input_tokens, 0) - prefix) * model.price_input) / 1e6


def expected_output_tokens(
    ctx: RunContext, pack: Pack, ratio: float | None, thinking: float | None
) -> int:
    """The output a pack call is expected to write: its answers (the planner's estimate, or
    the run's answers per estimated token times the pack's estimate) and the thinking its
    calls write (:meth:`RunContext.thinking_per_call`), within ``max_tokens``."""
    answers = (
        pack.learn_output_tokens * ratio
        if ratio is not None and pack.learn_output_tokens
        else pack.est_output_tokens
    )
    return min(pack.max_tokens, math.ceil(answers + ctx.thinking_per_call(thinking)))


def expected_usd(
    ctx: RunContext,
    pack: Pack,
    *,
    ratio: float | None = None,
    thinking: float | None = None,
    warm: bool = False,
    batch: bool = False,
) -> float:
    """What a pack call is expected to cost (see the module docstring)."""
    out = expected_output_tokens(ctx, pack, ratio, thinking)
    total = _input_usd(ctx, pack.est_input_tokens, warm, batch) + out * ctx.model.price_output / 1e6
    tier = price_multiplier(ctx.model, math.ceil(INPUT_MARGIN * max(pack.est_input_tokens, 0)))
    return total * tier * (BATCH_DISCOUNT if batch else 1.0)


def reservation(
    ctx: RunContext,
    pack: Pack,
    *,
    ratio: float | None = None,
    thinking: float | None = None,
    spread: Spread | None = None,
    cached_s: float | None = None,
    again: bool = False,
) -> Reserved:
    """What a budgeted pack call reserves, and the ``max_tokens`` that keeps it within that.

    Args:
        ctx: the run.
        pack: the call's pack as planned.
        ratio, thinking: what the run's answers wrote per estimated token and its calls
            thought per call (``blockbatch.store.ledger.Observed``; ``None``: not learned).
        spread: the run's cost spread (``None``: no pack call answered yet: the worst case
            is reserved).
        cached_s: seconds since an answer of the run read or wrote its prefix.
        again: a later attempt of the pack (after a truncated answer): it may write
            :data:`AGAIN_OUTPUT_HEADROOM` times its expected output, up to its planned
            ``max_tokens``, whatever the spread (its block may write more than the run's
            answers do), and reserves all of it.
    """
    model = ctx.model
    warm = prefix_warm(ctx, cached_s)
    expected = expected_usd(ctx, pack, ratio=ratio, thinking=thinking, warm=warm)
    cold = pack_worst_case(ctx, pack)
    tier = price_multiplier(model, math.ceil(INPUT_MARGIN * max(pack.est_input_tokens, 0)))
    per_output = model.price_output / 1e6 * tier
    input_high = INPUT_MARGIN * _input_usd(ctx, pack.est_input_tokens, warm, False) * tier
    out = expected_output_tokens(ctx, pack, ratio, thinking)
    if again:
        max_tokens = min(pack.max_tokens, max(math.ceil(out * AGAIN_OUTPUT_HEADROOM), 1))
        return Reserved(input_high + max_tokens * per_output, expected, cold, max_tokens)
    if spread is None:
        worst = input_high + pack.max_tokens * per_output
        return Reserved(worst, expected, cold, pack.max_tokens)
    target = expected * spread.factor()
    floor = math.ceil(out * MIN_OUTPUT_HEADROOM)
    max_tokens = min(pack.max_tokens, max(floor, int((target - input_high) / per_output), 1))
    return Reserved(input_high + max_tokens * per_output, expected, cold, max_tokens)


def smaller_fits(budget: float, recorded: float, one_block_usd: float) -> bool:
    """Whether a pack the budget refused is worth halving: one block of it would fit in
    what the recorded cost leaves."""
    return recorded + one_block_usd <= budget + 1e-12


#: A probe of the API (an outage): "Reply with OK." and one output token.
PROBE_INPUT_TOKENS = 16


def probe_worst_case(ctx: RunContext) -> float:
    return worst_case_usd(ctx.model, input_tokens=PROBE_INPUT_TOKENS, max_tokens=1)


def first_call(ctx: RunContext, block_tokens: Sequence[int]) -> tuple[str, float]:
    """The calls a run over these blocks makes before its first block can be answered, and
    their worst case: the smallest budget that can do any work.

    Its first pack (batch mode: its first request, at batch prices; a run that learns its
    output: the learning pack, which writes the prompt cache itself), after the warm-up
    call when a run of more than one pack has a prompt long enough to be cached (a budget
    that paid for the warm-up alone would buy nothing; pack 0 then reads the prefix the
    warm-up wrote). A schema that earlier runs taught
    is planned from their answers instead of a learning pack: its first calls may then be
    the warm-up and a larger pack 0, which the run's budget still holds.
    """
    learning = ctx.learns_output()
    packs = ctx.plan(block_tokens, learning=learning)
    if not packs:
        return "no call", 0.0
    batch = ctx.options.mode == "batch"
    first = packs[0]
    pack = ctx.pack([block_tokens[p] for p in first.positions])
    what = (
        f"{'batch request' if batch else 'pack'} 0 of {len(first.positions)} "
        f"block{'s' if len(first.positions) != 1 else ''}"
    )
    warm_up = not batch and len(packs) > 1 and ctx.cacheable_prefix_tokens > 0 and not learning
    if warm_up:
        # Pack 0 reads the prefix the warm-up's answer shows written (``reservation``).
        return (
            f"the warm-up call that writes the prompt cache, then {what}",
            warm_up_worst_case(ctx) + pack_worst_case(ctx, pack, prefix_read=True),
        )
    return what, pack_worst_case(ctx, pack, batch=batch)
