"""What a run's model costs, planned for: thinking per call, its tokenizer, its price tiers.

Pure rules (blockbatch/core/planning.py, blockbatch/core/context.py, blockbatch/core/quote.py, blockbatch/core/budget.py) on the
current lineup (contract §1 and §3): the planner, the quote and the budget count thinking
where the run's calls think, scale the planner's estimates for the new tokenizer, keep
Haiku 5.5's packs under its long-prompt price line, and price every call on its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from blockbatch.core.budget import INPUT_MARGIN, pack_worst_case, worst_case_usd
from blockbatch.core.context import RunContext
from blockbatch.core.planning import (
    BLOCK_WRAPPER_TOKENS,
    EXPECTED_THINKING_TOKENS,
    THINKING_HEADROOM,
    PlanLimits,
    describe_pack,
    plan_packs,
    thinking_allowance,
)
from blockbatch.core.quote import OutputHistory, quote
from blockbatch.core.quote_tokens import PromptTokens
from blockbatch.core.registry import Usage, cost_usd, get_model
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from tests.helpers import extract_schema

HAIKU = get_model("claude-haiku-5-5")
OPUS = get_model("claude-opus-5-5")
SONNET_46 = get_model("claude-sonnet-4-6")


def ctx(model: str, **options: Any) -> RunContext:
    options.setdefault("quality", {"probe_rate": 0.0})
    opts = RunOptions(model=model, **options)
    return RunContext("r", "d", "s", opts, load_schema(extract_schema(1500)), get_model(model))


# ------------------------------------------------------------------ thinking


def test_a_call_that_thinks_asks_for_its_thinking_on_top_of_its_answers() -> None:
    # Opus 5.5 always thinks (its default effort for a run is low, contract §3).
    opus = ctx(OPUS.id)
    assert opus.shape.thinks and opus.shape.effort == "low"
    allowance = thinking_allowance("low")
    assert allowance == EXPECTED_THINKING_TOKENS["low"] * THINKING_HEADROOM
    assert opus.plan_limits().thinking_tokens == allowance
    # Haiku 5.5 on its forced tool does not think: nothing held for it.
    haiku = ctx(HAIKU.id)
    assert not haiku.shape.thinks and haiku.plan_limits().thinking_tokens == 0
    # The same blocks: the thinking call's max_tokens is the answers' plus the allowance
    # (the answers' part is scaled alike: both models count with the new tokenizer).
    blocks = [300] * 4
    assert opus.pack(blocks).max_tokens == haiku.pack(blocks).max_tokens + allowance
    assert opus.pack(blocks).thinking_tokens == allowance


def test_effort_xhigh_makes_haiku_think_and_is_planned_for() -> None:
    # At xhigh thinking cannot be turned off; Haiku's forced tool still answers without it.
    haiku = ctx(HAIKU.id, effort="xhigh")
    sonnet = ctx("claude-sonnet-5-5", effort="xhigh")
    assert not haiku.shape.thinks
    assert sonnet.shape.thinks
    assert sonnet.plan_limits().thinking_tokens == thinking_allowance("xhigh")
    assert sonnet.thinking_per_call() == EXPECTED_THINKING_TOKENS["xhigh"]


def test_what_a_run_thought_replaces_the_assumption() -> None:
    opus = ctx(OPUS.id)
    assumed = opus.pack([300] * 4)
    learned = opus.pack([300] * 4, thinking=300.0)
    assert learned.thinking_tokens == 600  # 300 a call, with its headroom
    assert assumed.max_tokens - learned.max_tokens == assumed.thinking_tokens - 600
    assert opus.thinking_per_call(300.0) == 300


def test_thinking_never_asks_past_the_models_maximum_output() -> None:
    limits = PlanLimits(
        context_window=1_000_000,
        model_max_output=10_000,
        fixed_prompt_tokens=100,
        thinking_tokens=9_000,
    )
    pack = describe_pack(range(3), [100] * 3, [800] * 3, limits)
    assert pack.max_tokens == 10_000


def test_a_later_attempt_keeps_its_thinking_allowance() -> None:
    opus = ctx(OPUS.id)
    again = opus.pack([300] * 4, attempt=2)
    assert again.max_tokens == opus.plan_limits().budget + opus.plan_limits().thinking_tokens


# ------------------------------------------------------------------ tokenizer


def test_the_planners_estimates_are_scaled_for_a_new_tokenizer_model() -> None:
    new, old = ctx(HAIKU.id), ctx(SONNET_46.id)
    assert new.fixed_prompt_tokens == pytest.approx(old.fixed_prompt_tokens * 1.3, abs=1)
    blocks = [1_000, 2_000]
    wrapped = sum(t + BLOCK_WRAPPER_TOKENS for t in blocks)
    assert new.pack(blocks).est_input_tokens == new.fixed_prompt_tokens + round(wrapped * 1.3)
    assert old.pack(blocks).est_input_tokens == old.fixed_prompt_tokens + wrapped
    # The answers too: the same schema's estimate, in the tokens each model counts.
    assert new.output_estimate(500) == pytest.approx(old.output_estimate(500) * 1.3, abs=1)


def test_the_context_window_is_met_in_the_models_tokens() -> None:
    # 100 blocks of 1,000 old tokens: 104,000 with wrappers, 135,200 on the new tokenizer.
    limits = PlanLimits(
        context_window=200_000,
        model_max_output=64_000,
        fixed_prompt_tokens=0,
        output_budget=8_192,
        hard_cap=1_000,
        safety_margin=1.0,
    )
    outputs = [10] * 150
    old = plan_packs([1_000] * 150, outputs, limits)
    new = plan_packs([1_000] * 150, outputs, dataclasses.replace(limits, tokenizer_scale=1.3))
    assert len(new) > len(old)
    assert all(p.est_input_tokens <= 200_000 - 8_192 for p in new)


# ------------------------------------------------------------------ price tiers


def test_a_haiku_pack_never_crosses_the_long_prompt_line() -> None:
    haiku = ctx(HAIKU.id, hard_cap=500)
    limits = haiku.plan_limits()
    assert limits.max_prompt_tokens == 100_000
    packs = haiku.plan([900] * 400)
    assert len(packs) > 1
    # By estimate, with the safety margin: at most 80,000 prompt tokens a pack.
    assert all(p.est_input_tokens <= 100_000 * limits.safety_margin for p in packs)
    assert not any(p.over_price_line for p in packs)
    # Sonnet 4.6 has one price at any length: no such line, larger packs.
    sonnet = ctx(SONNET_46.id, hard_cap=500)
    assert sonnet.plan_limits().max_prompt_tokens is None
    assert len(sonnet.plan([900] * 400)) < len(packs)


def test_a_fixed_pack_size_gives_way_to_the_price_line() -> None:
    haiku = ctx(HAIKU.id, pack_size=200)
    packs = haiku.plan([900] * 400)
    assert max(len(p.positions) for p in packs) < 200
    assert all(p.est_input_tokens <= 80_000 for p in packs)


def test_a_lone_block_over_the_line_is_sent_and_said() -> None:
    haiku = ctx(HAIKU.id)
    (pack,) = haiku.plan([90_000])
    assert pack.over_price_line and not pack.oversized


def test_the_worst_case_of_a_long_prompt_pays_its_tier() -> None:
    below = worst_case_usd(HAIKU, input_tokens=70_000, max_tokens=1_000)
    above = worst_case_usd(HAIKU, input_tokens=90_000, max_tokens=1_000)  # x1.25 > 100K
    assert below == pytest.approx((INPUT_MARGIN * 70_000 * 0.10 + 1_000 * 0.50) / 1e6)
    assert above == pytest.approx(5 * (INPUT_MARGIN * 90_000 * 0.10 + 1_000 * 0.50) / 1e6)
    # The worst case holds what the API can bill, at whichever tier the call lands.
    for usage in (
        Usage(input_tokens=99_000, output_tokens=1_000),
        Usage(input_tokens=101_000, output_tokens=1_000),
    ):
        assert cost_usd(HAIKU, usage) <= worst_case_usd(
            HAIKU, input_tokens=usage.input_tokens, max_tokens=1_000
        )


def test_a_thinking_pack_reserves_its_thinking_in_the_budget() -> None:
    opus = ctx(OPUS.id)
    pack = opus.pack([300] * 4)
    answers_only = dataclasses.replace(pack, max_tokens=pack.max_tokens - pack.thinking_tokens)
    extra = pack_worst_case(opus, pack) - pack_worst_case(opus, answers_only)
    assert extra == pytest.approx(pack.thinking_tokens * OPUS.price_output / 1e6)


# ------------------------------------------------------------------ the quote


def tokens(prefix: int = 3_000, per_call: int = 60, blocks: int = 60_000) -> PromptTokens:
    return PromptTokens(
        source="count_tokens",
        prefix=prefix,
        per_call=per_call,
        blocks=blocks,
        warm_up=prefix + per_call + 30,
        requests=4,
    )


def test_the_quote_counts_thinking_per_call_and_shows_what_packing_saves() -> None:
    opus = ctx(OPUS.id, pack_size=10)
    q = quote(opus, [300] * 100, tokens(), document="d.md")
    per_call = EXPECTED_THINKING_TOKENS["low"]
    assert q.thinking_per_call == per_call and q.thinking_source == "planner"
    assert q.sync.thinking_tokens == per_call * (q.sync.calls - 1)  # the warm-up does not
    # batch mode makes no warm-up call (a lead request writes the prefix): every call thinks
    assert not q.batch.warm_up and q.batch.cache_plan == "lead"
    assert q.batch.thinking_tokens == per_call * q.batch.calls
    # One block per call would think a hundred times; ten packs think ten times.
    assert q.thinking_unpacked_tokens == per_call * 100
    assert q.sync.thinking_tokens * 10 == q.thinking_unpacked_tokens
    assert any("thinking is paid per call" in n for n in q.notes)
    # Thinking is in the output and priced as output.
    assert q.sync.output_tokens > q.sync.thinking_tokens > 0
    answers = q.sync.output_tokens - q.sync.thinking_tokens
    priced = (
        q.sync.input_tokens * OPUS.price_input
        + answers * OPUS.price_output
        + q.sync.cache_write_tokens * OPUS.price_cache_write_5m
        + q.sync.cache_read_tokens * OPUS.price_cache_read
    ) / 1e6
    assert q.sync.cost_usd == pytest.approx(
        priced + q.sync.thinking_tokens * OPUS.price_output / 1e6, rel=1e-3
    )


def test_the_quote_takes_thinking_from_earlier_runs_at_the_same_effort() -> None:
    opus = ctx(OPUS.id, pack_size=10)
    seen = OutputHistory(runs=1, calls=5, estimated=1_000, written=1_000, thinking_per_call=250.0)
    q = quote(opus, [300] * 100, tokens(), document="d.md", history=seen)
    assert (q.thinking_per_call, q.thinking_source) == (250, "ledger")


def test_a_run_that_does_not_think_is_quoted_without_thinking() -> None:
    q = quote(ctx(HAIKU.id, pack_size=10), [300] * 100, tokens(), document="d.md")
    assert q.thinking_per_call == 0 and q.sync.thinking_tokens == 0
    assert not any("thinks" in n for n in q.notes)


def test_every_call_of_a_quote_is_priced_at_its_own_tier() -> None:
    # 30 packs of ~3,400 prompt tokens each: together far above 100,000, each far below.
    haiku = ctx(HAIKU.id, pack_size=10)
    q = quote(haiku, [300] * 300, tokens(blocks=90_000), document="d.md")
    assert q.sync.input_tokens + q.sync.cache_read_tokens + q.sync.cache_write_tokens > 100_000
    base = (
        q.sync.input_tokens * HAIKU.price_input
        + q.sync.output_tokens * HAIKU.price_output
        + q.sync.cache_write_tokens * HAIKU.price_cache_write_5m
        + q.sync.cache_read_tokens * HAIKU.price_cache_read
    ) / 1e6
    assert q.sync.cost_usd == pytest.approx(base, rel=1e-3)  # 1x: no call crosses the line


def test_calls_that_think_unexpectedly_get_room_once_the_run_has_seen_it() -> None:
    haiku = ctx(HAIKU.id)
    assert not haiku.shape.thinks
    assert haiku.pack([300] * 4).thinking_tokens == 0
    assert haiku.pack([300] * 4, thinking=200.0).thinking_tokens == 400
    assert haiku.thinking_per_call(200.0) == 200 and haiku.thinking_per_call() == 0
