"""Pack planning: token estimates and the greedy, deterministic, consecutive plan."""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbatch.core.planning import (
    BLOCK_WRAPPER_TOKENS,
    PACK_OUTPUT_OVERHEAD_TOKENS,
    PlanLimits,
    describe_pack,
    estimate_output_tokens,
    estimate_tokens,
    learned_headroom,
    limits_for,
    max_tokens_for,
    plan_packs,
)
from blockbatch.core.registry import get_model
from blockbatch.core.schema import SchemaSpec, load_schema
from tests.helpers import examples


def spec_with(properties: dict[str, Any], **prompt_config: Any) -> SchemaSpec:
    return load_schema(
        {"properties": properties, "prompt_config": {"system_instructions": "x", **prompt_config}}
    )


def _context(**prompt_config: Any) -> Any:
    """A RunContext over a rewrite schema (revised text, count, short summary)."""
    from blockbatch.core.context import RunContext
    from blockbatch.core.run_types import RunOptions

    config = {k: v for k, v in prompt_config.items() if v is not None}
    spec = spec_with(
        {
            "revised_text": {"type": "string"},
            "word_count": {"type": "integer"},
            "change_summary": {"type": "string", "maxLength": 160},
        },
        **config,
    )
    return RunContext(
        run_id="r",
        document_id="d",
        schema_id="s",
        options=RunOptions(),
        spec=spec,
        model=get_model("claude-sonnet-4-6"),
    )


def limits(**overrides: Any) -> PlanLimits:
    base: dict[str, Any] = {
        "context_window": 200_000,
        "model_max_output": 64_000,
        "fixed_prompt_tokens": 2_000,
    }
    return PlanLimits(**{**base, **overrides})


# --- estimate_tokens -----------------------------------------------------------------


def test_empty_text_is_zero_tokens() -> None:
    assert estimate_tokens("") == 0


def test_english_estimate_is_conservative() -> None:
    text = "The committee reviewed the proposal and approved it after a short debate. " * 20
    words = len(text.split())
    # Real English runs ~1.3 tokens per word and ~4 characters per token.
    assert estimate_tokens(text) >= words * 1.3
    assert estimate_tokens(text) >= len(text) / 4


def test_code_and_punctuation_cost_more_per_character() -> None:
    prose = "a" * 10 + " " + "b" * 10 + " " + "c" * 9
    code = '{"a":[1,2],"b":{"c":3}};'
    assert len(prose) > len(code)
    assert estimate_tokens(code) > estimate_tokens(prose)


def test_cjk_costs_about_a_token_per_character_or_more() -> None:
    text = "今天天气很好我们去公园散步吧" * 10
    assert estimate_tokens(text) >= len(text)


@given(st.text(max_size=200), st.text(max_size=200))
def test_estimate_never_shrinks_when_text_grows(a: str, b: str) -> None:
    assert estimate_tokens(a + b) >= estimate_tokens(a)


@given(st.text(min_size=1, max_size=500))
def test_estimate_is_at_least_chars_over_three_and_a_half(text: str) -> None:
    assert estimate_tokens(text) >= math.ceil(len(text) / 3.5)


# --- estimate_output_tokens ----------------------------------------------------------


def test_max_tokens_per_block_overrides_the_estimate() -> None:
    spec = spec_with({"revised_text": {"type": "string"}}, max_tokens_per_block=777)
    assert estimate_output_tokens(spec, 5_000) == 777
    # ... but not the shape of the answers that a run learns its max_tokens against.
    assert estimate_output_tokens(spec, 5_000, setting=False) > 5_000
    assert estimate_output_tokens(spec, 10, setting=False) < 777


def test_learned_max_tokens_follow_each_blocks_length_not_a_flat_setting() -> None:
    # A rewrite schema says 800 a block; answers wrote 0.8 of the length-aware estimate.
    # A lone long paragraph then gets room for its rewrite, a heading far less than 800.
    lim = limits()  # budget 8,192
    short, long_ = [15], [1_200]
    shape_short = [
        estimate_output_tokens(spec_with({"revised_text": {"type": "string"}}), t) for t in short
    ]
    shape_long = [
        estimate_output_tokens(spec_with({"revised_text": {"type": "string"}}), t) for t in long_
    ]
    heading = describe_pack([0], short, [800], lim, observed=0.8, shape=shape_short)
    page = describe_pack([1], long_, [800], lim, observed=0.8, shape=shape_long)
    assert heading.max_tokens == 256  # the minimum: far below 2 x 800
    want = (PACK_OUTPUT_OVERHEAD_TOKENS + shape_long[0]) * 0.8 * learned_headroom(1)
    assert page.max_tokens == math.ceil(want) > 1_600
    assert page.learn_output_tokens == PACK_OUTPUT_OVERHEAD_TOKENS + shape_long[0]
    # Before any answers, both ask for twice the setting.
    assert describe_pack([0], short, [800], lim, shape=shape_short).max_tokens == 2 * (
        PACK_OUTPUT_OVERHEAD_TOKENS + 800
    )


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("revised_content", {"type": "string"}),
        ("text", {"type": "string"}),
        ("cleanText", {"type": "string"}),
        ("translation", {"type": ["string", "null"]}),
        ("output", {"type": "string", "description": "The block rewritten in plain English."}),
        ("body", {"type": "string", "x-blockbatch-revision": True}),
    ],
)
def test_revision_fields_grow_with_the_block(name: str, schema: dict[str, Any]) -> None:
    spec = spec_with({name: schema})
    small, large = estimate_output_tokens(spec, 100), estimate_output_tokens(spec, 2_000)
    assert large - small == math.ceil(2_000 * 1.1) - math.ceil(100 * 1.1)
    assert large >= 2_000 * 1.1


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("summary", {"type": "string"}),
        ("text_quality", {"type": "string", "enum": ["good", "bad"]}),
        ("is_edited", {"type": "boolean"}),
        ("notes", {"type": "string", "description": "Notes about the text."}),
        ("revised_text", {"type": "string", "x-blockbatch-revision": False}),
    ],
)
def test_other_fields_do_not_grow_with_the_block(name: str, schema: dict[str, Any]) -> None:
    spec = spec_with({name: schema})
    assert estimate_output_tokens(spec, 100) == estimate_output_tokens(spec, 5_000)


def test_field_costs_follow_their_kind() -> None:
    def cost(schema: dict[str, Any]) -> int:
        return estimate_output_tokens(spec_with({"f": schema}), 1_000)

    base = cost({"type": "boolean"})  # ~6 for the value
    assert cost({"type": "integer"}) == cost({"type": "number"}) == base
    assert cost({"type": "string", "enum": ["a", "b"]}) == base
    assert cost({"type": "string"}) == base - 6 + 40
    assert cost({"type": "string", "maxLength": 30}) == base - 6 + 10
    assert cost({"type": "string", "maxLength": 3000}) == base - 6 + 60
    assert cost({"type": "array", "items": {"type": "string"}}) == base - 6 + 44
    assert cost({"type": "object"}) == base - 6 + 40


def test_more_fields_cost_more() -> None:
    one = spec_with({"a": {"type": "string"}})
    two = spec_with({"a": {"type": "string"}, "b": {"type": "string"}})
    assert estimate_output_tokens(two, 10) > estimate_output_tokens(one, 10)


# --- PlanLimits ----------------------------------------------------------------------


def test_limits_for_reads_the_registry_and_the_schema_cap() -> None:
    spec = spec_with({"a": {"type": "string"}}, model="claude-haiku-4-5", max_batch_size=7)
    got = limits_for(spec, 1_234, pack_size=3)
    model = get_model("claude-haiku-4-5")
    assert got.context_window == model.context_window
    assert got.model_max_output == model.max_output_tokens
    assert (got.fixed_prompt_tokens, got.max_batch_size, got.pack_size) == (1_234, 7, 3)
    assert got.max_prompt_tokens is None  # one price at any length
    # A new-tokenizer model counts 1.3x the fixed prompt, and Haiku 5.5 has its price line.
    haiku = limits_for(spec, 1_000, model="claude-haiku-5-5")
    assert (haiku.fixed_prompt_tokens, haiku.tokenizer_scale) == (1_300, 1.3)
    assert haiku.max_prompt_tokens == 100_000


@pytest.mark.parametrize(
    "bad",
    [{"hard_cap": 0}, {"max_batch_size": 0}, {"pack_size": 0}, {"safety_margin": 0},
     {"safety_margin": 1.5}, {"fixed_prompt_tokens": -1}],
)  # fmt: skip
def test_nonsense_limits_are_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        limits(**bad)


def test_output_budget_is_capped_by_the_model() -> None:
    assert limits(output_budget=100_000).budget == 64_000


# --- plan_packs: examples ------------------------------------------------------------


def test_small_blocks_fill_packs_up_to_the_hard_cap() -> None:
    packs = plan_packs([50] * 120, [60] * 120, limits())
    assert [len(p.positions) for p in packs] == [50, 50, 20]
    assert [p.max_tokens for p in packs] == [6024, 6024, 2424]  # twice the estimate
    assert not any(p.oversized for p in packs)


def test_output_budget_limits_the_pack() -> None:
    # 0.8 * 8192 = 6553.6 of output: 12 overhead + 6 * 1000 fits, a 7th does not.
    packs = plan_packs([10] * 14, [1_000] * 14, limits())
    assert [len(p.positions) for p in packs] == [6, 6, 2]


def test_input_budget_limits_the_pack() -> None:
    small = limits(context_window=20_000, fixed_prompt_tokens=1_808)
    # (20_000 - 1_808 - 8_192) * 0.8 = 8_000 of input, 1_000 + 40 per block: 7 fit.
    packs = plan_packs([1_000] * 10, [10] * 10, small)
    assert [len(p.positions) for p in packs] == [7, 3]


def test_pack_never_exceeds_max_batch_size() -> None:
    packs = plan_packs([10] * 30, [10] * 30, limits(max_batch_size=4))
    assert max(len(p.positions) for p in packs) == 4


def test_max_batch_size_never_raises_the_cap() -> None:
    packs = plan_packs([10] * 30, [10] * 30, limits(hard_cap=5, max_batch_size=20))
    assert max(len(p.positions) for p in packs) == 5


def test_batching_disabled_gives_one_block_per_pack() -> None:
    packs = plan_packs([10] * 5, [10] * 5, limits(batching_enabled=False, pack_size=3))
    assert [p.positions for p in packs] == [(0,), (1,), (2,), (3,), (4,)]


def test_fixed_pack_size_overrides_budget_and_hard_cap_but_not_max_batch_size() -> None:
    packs = plan_packs([10] * 200, [500] * 200, limits(pack_size=60))
    assert [len(p.positions) for p in packs] == [60, 60, 60, 20]
    assert packs[0].max_tokens == math.ceil((60 * 500 + PACK_OUTPUT_OVERHEAD_TOKENS) / 0.8)
    capped = plan_packs([10] * 200, [500] * 200, limits(pack_size=60, max_batch_size=25))
    assert max(len(p.positions) for p in capped) == 25


def test_fixed_pack_size_still_respects_the_model_maximum_output() -> None:
    packs = plan_packs([10] * 10, [20_000] * 10, limits(pack_size=10))
    assert all(p.est_output_tokens <= 64_000 * 0.8 for p in packs)
    assert all(p.max_tokens <= 64_000 for p in packs)


def test_block_with_large_output_goes_alone_with_a_larger_max_tokens() -> None:
    packs = plan_packs([10, 10, 10], [100, 9_000, 100], limits())
    assert [p.positions for p in packs] == [(0,), (1,), (2,)]
    assert packs[1].max_tokens == math.ceil((9_000 + PACK_OUTPUT_OVERHEAD_TOKENS) / 0.8)
    assert packs[0].max_tokens == 256  # twice 112, raised to the minimum


def test_lone_block_max_tokens_is_capped_at_model_max_output() -> None:
    packs = plan_packs([10], [90_000], limits())
    assert packs[0].max_tokens == 64_000


def test_block_too_large_for_the_context_window_is_oversized() -> None:
    packs = plan_packs([100, 250_000, 100], [50, 50, 50], limits())
    assert [p.positions for p in packs] == [(0,), (1,), (2,)]
    assert [p.oversized for p in packs] == [False, True, False]


def test_large_block_that_fits_alone_is_not_oversized() -> None:
    packs = plan_packs([100, 170_000, 100], [50, 50, 50], limits())
    assert [p.positions for p in packs] == [(0,), (1,), (2,)]
    assert not any(p.oversized for p in packs)


def test_pack_estimates_include_fixed_prompt_and_wrappers() -> None:
    (pack,) = plan_packs([100, 200], [30, 40], limits())
    assert pack.est_input_tokens == 2_000 + 300 + 2 * BLOCK_WRAPPER_TOKENS
    assert pack.est_output_tokens == PACK_OUTPUT_OVERHEAD_TOKENS + 70


def test_no_blocks_no_packs() -> None:
    assert plan_packs([], [], limits()) == []


def test_mismatched_lengths_are_rejected() -> None:
    with pytest.raises(ValueError):
        plan_packs([1, 2], [1], limits())


def test_a_first_attempt_asks_for_twice_its_estimate_a_later_one_for_the_budget() -> None:
    lone = describe_pack([7], [100], [120], limits())
    assert lone.max_tokens == 2 * (120 + PACK_OUTPUT_OVERHEAD_TOKENS)
    assert describe_pack([7], [100], [120], limits(), generous=True).max_tokens == 8192
    assert describe_pack([7], [100], [20], limits()).max_tokens == 256
    # A later attempt never asks for more than the context window leaves.
    crowded = limits(context_window=20_000)
    big = describe_pack([7], [15_000], [120], crowded, generous=True)
    assert big.max_tokens == 20_000 - big.est_input_tokens
    assert not big.oversized


def test_max_tokens_for_a_half_matches_describe_pack() -> None:
    half = describe_pack([4, 5], [100, 100], [5_000, 5_000], limits())
    assert half.positions == (4, 5)
    assert half.max_tokens == max_tokens_for([5_000, 5_000], limits())
    assert half.max_tokens == math.ceil((10_000 + PACK_OUTPUT_OVERHEAD_TOKENS) / 0.8)


# --- plan_packs: properties ----------------------------------------------------------

_sizes = st.integers(min_value=0, max_value=60_000)


@st.composite
def _plans(draw: st.DrawFn) -> tuple[list[int], list[int], PlanLimits]:
    n = draw(st.integers(0, 80))
    block_tokens = draw(st.lists(st.one_of(st.integers(0, 500), _sizes), min_size=n, max_size=n))
    output_tokens = draw(st.lists(st.one_of(st.integers(1, 400), _sizes), min_size=n, max_size=n))
    got = PlanLimits(
        context_window=draw(st.sampled_from([32_000, 100_000, 200_000])),
        model_max_output=draw(st.sampled_from([4_096, 32_000, 64_000])),
        fixed_prompt_tokens=draw(st.integers(0, 30_000)),
        output_budget=draw(st.sampled_from([1_024, 8_192, 16_384])),
        safety_margin=draw(st.sampled_from([0.5, 0.8, 1.0])),
        hard_cap=draw(st.integers(1, 60)),
        max_batch_size=draw(st.none() | st.integers(1, 60)),
        pack_size=draw(st.none() | st.integers(1, 80)),
        batching_enabled=draw(st.booleans()),
    )
    return block_tokens, output_tokens, got


@settings(max_examples=examples(300), deadline=None)
@given(_plans())
def test_every_position_is_in_exactly_one_pack_in_order(plan: Any) -> None:
    block_tokens, output_tokens, lim = plan
    packs = plan_packs(block_tokens, output_tokens, lim)
    flat = [pos for p in packs for pos in p.positions]
    assert flat == list(range(len(block_tokens)))
    for pack in packs:
        assert pack.positions, "no empty pack"
        assert list(pack.positions) == list(range(pack.positions[0], pack.positions[-1] + 1))


@settings(max_examples=examples(300), deadline=None)
@given(_plans())
def test_pack_size_never_exceeds_the_caps(plan: Any) -> None:
    block_tokens, output_tokens, lim = plan
    for pack in plan_packs(block_tokens, output_tokens, lim):
        assert len(pack.positions) <= lim.size_cap
        if lim.max_batch_size is not None:
            assert len(pack.positions) <= lim.max_batch_size
        if not lim.batching_enabled:
            assert len(pack.positions) == 1
        if lim.pack_size is None:
            assert len(pack.positions) <= lim.hard_cap


@settings(max_examples=examples(300), deadline=None)
@given(_plans())
def test_shared_packs_stay_within_budgets(plan: Any) -> None:
    block_tokens, output_tokens, lim = plan
    for pack in plan_packs(block_tokens, output_tokens, lim):
        blocks_input = pack.est_input_tokens - lim.fixed_prompt_tokens
        assert pack.max_tokens <= lim.model_max_output
        # Room for the estimate: twice it, or the budget when that is less.
        assert pack.max_tokens >= min(lim.budget, 2 * pack.est_output_tokens)
        if len(pack.positions) == 1:
            continue
        assert not pack.oversized
        if lim.pack_size is None:
            assert pack.est_output_tokens <= lim.budget * lim.safety_margin
            assert pack.max_tokens <= lim.budget
            room = lim.context_window - lim.fixed_prompt_tokens - lim.budget
            assert blocks_input <= room * lim.safety_margin
        else:
            assert pack.est_output_tokens <= lim.model_max_output * lim.safety_margin
            room = lim.context_window - lim.fixed_prompt_tokens - pack.max_tokens
            assert blocks_input <= room * lim.safety_margin


@settings(max_examples=examples(300), deadline=None)
@given(_plans())
def test_packs_are_greedy(plan: Any) -> None:
    """A pack ends only where the next block would break a cap or a budget."""
    block_tokens, output_tokens, lim = plan
    packs = plan_packs(block_tokens, output_tokens, lim)
    for pack, following in pairwise(packs):
        grown = [*pack.positions, following.positions[0]]
        if len(grown) > lim.size_cap:
            continue
        bigger = describe_pack(
            grown, [block_tokens[i] for i in grown], [output_tokens[i] for i in grown], lim
        )
        blocks_input = bigger.est_input_tokens - lim.fixed_prompt_tokens
        if lim.pack_size is None:
            over_output = bigger.est_output_tokens > lim.budget * lim.safety_margin
            room = lim.context_window - lim.fixed_prompt_tokens - lim.budget
        else:
            over_output = bigger.est_output_tokens > lim.model_max_output * lim.safety_margin
            room = lim.context_window - lim.fixed_prompt_tokens - bigger.max_tokens
        assert over_output or blocks_input > room * lim.safety_margin


@settings(max_examples=examples(200), deadline=None)
@given(_plans())
def test_same_input_same_plan(plan: Any) -> None:
    block_tokens, output_tokens, lim = plan
    assert plan_packs(block_tokens, output_tokens, lim) == plan_packs(
        list(block_tokens), tuple(output_tokens), lim
    )


@settings(max_examples=examples(200), deadline=None)
@given(_plans())
def test_max_tokens_and_oversized_follow_the_rule(plan: Any) -> None:
    block_tokens, output_tokens, lim = plan
    for pack in plan_packs(block_tokens, output_tokens, lim):
        outputs = [output_tokens[i] for i in pack.positions]
        assert pack.max_tokens == max_tokens_for(outputs, lim)
        estimate = pack.est_output_tokens
        if estimate > lim.budget * lim.safety_margin:
            expected = min(lim.model_max_output, math.ceil(estimate / lim.safety_margin))
            assert pack.max_tokens == expected
            assert max_tokens_for(outputs, lim, generous=True) == expected
        else:
            # Twice the estimate (at least 256) up to the budget; a later attempt: the budget.
            assert pack.max_tokens == min(lim.budget, max(256, math.ceil(2 * estimate)))
            assert pack.max_tokens >= min(lim.budget, estimate)
            assert max_tokens_for(outputs, lim, generous=True) == lim.budget
        assert pack.oversized == (pack.est_input_tokens > lim.context_window - pack.max_tokens)


@settings(max_examples=examples(200), deadline=None)
@given(_plans(), st.integers(1, 60))
def test_max_batch_size_only_lowers(plan: Any, cap: int) -> None:
    block_tokens, output_tokens, lim = plan
    uncapped = plan_packs(block_tokens, output_tokens, lim)
    capped_limits = PlanLimits(**{**lim.__dict__, "max_batch_size": cap})
    capped = plan_packs(block_tokens, output_tokens, capped_limits)
    if lim.max_batch_size is None or cap <= lim.max_batch_size:
        assert max((len(p.positions) for p in capped), default=0) <= max(
            (len(p.positions) for p in uncapped), default=0
        )
        assert len(capped) >= len(uncapped)


def test_once_a_run_has_answers_a_first_attempt_asks_for_what_they_say() -> None:
    outputs = [250] * 26
    estimate = PACK_OUTPUT_OVERHEAD_TOKENS + 250 * 26
    # Answers wrote 46% of what was estimated: 1.25 + 0.75/sqrt(26) headroom over that.
    assert max_tokens_for(outputs, limits(), observed=0.46) == math.ceil(
        estimate * 0.46 * (1.25 + 0.75 / math.sqrt(26))
    )
    assert max_tokens_for([120], limits(), observed=1.0) == 264  # one block: twice
    assert max_tokens_for([20], limits(), observed=0.5) == 256  # never below the minimum
    # Estimates too low: the answers ask for more, up to the budget.
    assert max_tokens_for(outputs, limits(), observed=3.0) == 8192
    # A later attempt still asks for the whole budget.
    assert max_tokens_for(outputs, limits(), observed=0.46, generous=True) == 8192


def test_a_retiring_model_is_named_with_its_date_and_the_model_to_move_to():
    from datetime import date

    from blockbatch.core.registry import (
        DEFAULT_MODEL,
        RetiredModelError,
        check_not_retired,
        get_model,
        retirement_warning,
    )

    old = get_model("claude-sonnet-4-5")
    assert retirement_warning(old, date(2026, 6, 1)) is None  # more than 90 days ahead
    soon = retirement_warning(old, date(2026, 11, 23))
    assert soon is not None and "2026-11-30 (in 7 days)" in soon
    assert "claude-sonnet-5-5" in soon
    # Past its end-of-life it is refused, not warned about, with its replacement named.
    assert retirement_warning(old, date(2026, 12, 1)) is None
    with pytest.raises(RetiredModelError, match="claude-sonnet-5-5"):
        check_not_retired(old, date(2026, 12, 1))
    assert retirement_warning(get_model(DEFAULT_MODEL), date(2026, 12, 1)) is None


# ------------------------------------------------------------------ packs that learn


def test_learned_ratios_spread_the_counted_output_over_blocks_by_their_answers():
    from blockbatch.core.planning import learn_ratios

    # Paragraphs answer at half the schema's estimate, headings at twice: with five of each
    # both differ from the run's ratio by more than a quarter and keep their own.
    samples = [("paragraph", 200, 100)] * 5 + [("heading", 50, 100)] * 5
    ratios = learn_ratios(samples, written_tokens=1000)
    assert ratios is not None and ratios.blocks == 10
    assert ratios.overall == pytest.approx(1000 / 1250)
    assert ratios.by_type == {"paragraph": pytest.approx(0.5), "heading": pytest.approx(2.0)}
    assert ratios.of("heading") == pytest.approx(2.0) and ratios.of("table") == ratios.overall
    # Fewer than five of a type: the run's ratio serves it.
    few = learn_ratios(samples[:4] + samples[5:9], 800)
    assert few is not None and few.by_type == {}
    assert learn_ratios([], 100) is None and learn_ratios(samples, 0) is None


def test_the_schema_setting_bounds_a_blocks_estimate_but_is_no_longer_the_estimate():
    from blockbatch.core.planning import OutputRatios

    ctx = _context(max_tokens_per_block=800)
    shape = estimate_output_tokens(ctx.spec, 100, setting=False)
    assert ctx.output_estimate(100) == shape < 800
    half = OutputRatios(overall=0.5, by_type={"heading": 3.0}, blocks=5)
    assert ctx.output_estimate(100, half) == math.ceil(shape * 0.5)
    assert ctx.output_estimate(5000, OutputRatios(overall=9.0, by_type={}, blocks=5)) == 800
    assert ctx.output_estimate(100, half, "heading") == min(800, math.ceil(shape * 3.0))


def test_a_learning_plan_sends_a_few_blocks_first_and_covers_every_block_once():
    from blockbatch.core.planning import LEARNING_PACK_BLOCKS

    ctx = _context(max_tokens_per_block=None)
    tokens = [90] * 200
    plain = ctx.plan(tokens)
    learning = ctx.plan(tokens, learning=True)
    assert len(plain[0].positions) > LEARNING_PACK_BLOCKS
    assert learning[0].positions == tuple(range(LEARNING_PACK_BLOCKS))
    covered = [p for pack in learning for p in pack.positions]
    assert covered == list(range(200))
    # Too few blocks for a pack of their own: the plan as it is.
    assert ctx.plan([90] * 3, learning=True) == ctx.plan([90] * 3)


def test_a_runs_answer_shape_is_the_schemas_estimate_worked_out_once_per_block_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A million-block run asks the shape of every block it plans and of every block of every
    # pack it sends: the schema is walked once per distinct size, not once per block.
    import blockbatch.core.context as context

    ctx = _context()
    sizes = [1, 7, 7, 300, 1, 4_000, 300]
    want = [estimate_output_tokens(ctx.spec, t, setting=False) for t in sizes]
    walked: list[int] = []
    real = context.estimate_output_tokens

    def counting(spec: SchemaSpec, block_tokens: int, *, setting: bool = True) -> int:
        walked.append(block_tokens)
        return real(spec, block_tokens, setting=setting)

    monkeypatch.setattr(context, "estimate_output_tokens", counting)
    assert [ctx.answer_shape(t) for t in sizes] == want
    assert ctx.pack(sizes).max_tokens == ctx.pack(sizes).max_tokens
    assert [ctx.output_estimate(t) for t in sizes] == [
        ctx.output_estimate(t) for t in reversed(sizes)
    ][::-1]
    assert sorted(walked) == [1, 7, 300, 4_000]


def test_ratios_within_a_tenth_of_the_planned_ones_keep_the_plan() -> None:
    from blockbatch.core.planning import OutputRatios, ratios_close

    planned = OutputRatios(overall=0.5, by_type={"heading": 1.4}, blocks=5)
    assert ratios_close(OutputRatios(overall=0.54, by_type={"heading": 1.3}, blocks=90), planned)
    # A tenth off overall, or for one type, or a type newly seen to differ: plan again.
    assert not ratios_close(OutputRatios(overall=0.56, by_type={"heading": 1.4}, blocks=9), planned)
    assert not ratios_close(OutputRatios(overall=0.5, by_type={"heading": 1.2}, blocks=9), planned)
    assert not ratios_close(
        OutputRatios(overall=0.5, by_type={"heading": 1.4, "list_item": 0.9}, blocks=9), planned
    )
    # A plan from the schema's estimate alone is never close to what answers say.
    assert not ratios_close(planned, None)
