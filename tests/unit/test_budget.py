"""A budget that holds: the worst case of a call, whether the next one fits, what is left."""

from __future__ import annotations

import pytest

from blockbatch.core.budget import (
    CACHE_SLACK_S,
    FIRST_SPREAD,
    INPUT_MARGIN,
    MIN_MARGIN,
    MIN_OUTPUT_HEADROOM,
    SPREAD_Z,
    SUGGEST_MARGIN,
    BudgetError,
    Spread,
    check_minimum,
    expected_output_tokens,
    expected_usd,
    first_call,
    learned_costs,
    left_text,
    left_to_do,
    pack_worst_case,
    parse_budget,
    prefix_warm,
    reservation,
    suggested_budget,
    verdict,
    warm_up_worst_case,
    worst_case_usd,
)
from blockbatch.core.context import RunContext
from blockbatch.core.planning import Pack
from blockbatch.core.policy import decide
from blockbatch.core.reasons import REASONS
from blockbatch.core.registry import get_model
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema

SONNET = get_model("claude-sonnet-4-5")


def test_worst_case_bills_the_prefix_as_a_cache_write_the_rest_as_input_and_all_of_max_tokens():
    # 10,000 input tokens of which 8,000 a cacheable prefix; 1,000 max_tokens.
    cost = worst_case_usd(SONNET, input_tokens=10_000, prefix_tokens=8_000, max_tokens=1_000)
    expected = (INPUT_MARGIN * (8_000 * 3.75 + 2_000 * 3.0) + 1_000 * 15.0) / 1e6
    assert cost == pytest.approx(expected)
    # A 1-hour cache write is dearer; no prefix: all plain input; batch: half of it all.
    assert (
        worst_case_usd(
            SONNET, input_tokens=10_000, prefix_tokens=8_000, max_tokens=1_000, cache_ttl="1h"
        )
        > cost
    )
    plain = worst_case_usd(SONNET, input_tokens=10_000, max_tokens=1_000)
    assert plain == pytest.approx((INPUT_MARGIN * 30_000 + 15_000) / 1e6)
    assert worst_case_usd(
        SONNET, input_tokens=10_000, prefix_tokens=8_000, max_tokens=1_000, batch=True
    ) == pytest.approx(cost / 2)
    # A prefix can never be more than the input.
    assert worst_case_usd(
        SONNET, input_tokens=100, prefix_tokens=5_000, max_tokens=0
    ) == pytest.approx(INPUT_MARGIN * 100 * 3.75 / 1e6)


def test_worst_case_is_never_below_what_the_api_can_bill_for_the_same_call():
    from blockbatch.core.registry import Usage, cost_usd

    for usage in (
        Usage(input_tokens=2_000, cache_creation_input_tokens=8_000, output_tokens=1_000),
        Usage(input_tokens=2_000, cache_read_input_tokens=8_000, output_tokens=1_000),
        Usage(input_tokens=10_000, output_tokens=1_000),
    ):
        assert cost_usd(SONNET, usage) <= worst_case_usd(
            SONNET, input_tokens=10_000, prefix_tokens=8_000, max_tokens=1_000
        )


def test_a_call_fits_waits_for_open_calls_or_finds_the_budget_exhausted():
    assert verdict(1.0, recorded=0.5, open_reserved=0.2, need=0.3) == "fits"
    # It would fit once the open calls are answered (they usually cost less).
    assert verdict(1.0, recorded=0.5, open_reserved=0.3, need=0.3) == "wait"
    # Not even the recorded cost leaves room: exhausted, whatever is open.
    assert verdict(1.0, recorded=0.8, open_reserved=0.0, need=0.3) == "exhausted"
    assert verdict(1.0, recorded=0.8, open_reserved=0.5, need=0.3) == "exhausted"


@pytest.mark.parametrize("bad", ["abc", "", "-1", "0", "nan", "inf", "-0.01", None, True])
def test_a_budget_must_be_a_positive_number_of_dollars(bad: object):
    with pytest.raises(BudgetError, match="--max-cost"):
        parse_budget(bad)


def test_a_budget_below_the_first_call_names_the_minimum():
    assert parse_budget("2.5") == 2.5
    check_minimum(0.10, 0.10, "pack 0")
    with pytest.raises(BudgetError, match=r"smallest budget is that, --max-cost 0\.1235"):
        check_minimum(0.05, 0.12345, "pack 0 of 3 blocks")
    with pytest.raises(BudgetError, match=r"\$0\.5000 already spent plus that, --max-cost 0\.6"):
        check_minimum(0.55, 0.1, "the warm-up call", spent=0.5)


def _ctx(**options: object) -> RunContext:
    spec = load_schema(
        {
            "properties": {"summary": {"type": "string"}},
            "prompt_config": {
                "system_instructions": "Summarise. " * 800,
                "per_block_prompt": "One sentence.",
            },
        }
    )
    opts = RunOptions.model_validate(options)
    return RunContext("r", "d", "s", opts, spec, get_model(opts.model))


def test_the_first_calls_are_the_warm_up_and_pack_0_when_the_prompt_is_cached():
    ctx = _ctx(pack_size=2)
    what, cost = first_call(ctx, [100] * 6)
    one_pack_what, one_pack = first_call(ctx, [100] * 2)  # one pack: no warm-up
    assert one_pack_what == "pack 0 of 2 blocks"
    assert what == "the warm-up call that writes the prompt cache, then pack 0 of 2 blocks"
    # After the warm-up, pack 0 reads the prefix it wrote.
    assert one_pack == pytest.approx(pack_worst_case(ctx, ctx.pack([100, 100])))
    assert cost == pytest.approx(
        warm_up_worst_case(ctx) + pack_worst_case(ctx, ctx.pack([100, 100]), prefix_read=True)
    )
    assert cost < warm_up_worst_case(ctx) + one_pack
    batch_ctx = _ctx(pack_size=2, mode="batch")
    what, batch_cost = first_call(batch_ctx, [100] * 6)
    assert what == "batch request 0 of 2 blocks"
    # Half price, its prefix written with the batch requests' 1-hour TTL.
    pack = batch_ctx.pack([100, 100])
    assert batch_cost == pytest.approx(
        worst_case_usd(
            batch_ctx.model,
            input_tokens=pack.est_input_tokens,
            max_tokens=pack.max_tokens,
            prefix_tokens=batch_ctx.cacheable_prefix_tokens,
            cache_ttl="1h",
        )
        / 2
    )


def test_the_suggestion_holds_room_for_a_learned_call_not_a_first_calls_worst_case():
    """A run that learned its calls' cost suggests what its blocks left are expected to cost
    with a margin and one learned reservation: not the first call's worst case on top."""
    costs = {
        "largest_expected": 0.0008,
        "expected_calls": 10,
        "ratio_sum": 9.0,  # a mean of 0.9 of the expected cost
        "ratio_sq": 8.19,  # a standard deviation of 0.1
    }
    spread = Spread.of(10, 9.0, 8.19)
    assert spread.factor() == pytest.approx(1.2)
    # Never less than INPUT_MARGIN times the expected cost: what a reservation holds at least.
    assert learned_costs(costs) == pytest.approx(0.0008 * INPUT_MARGIN)
    wide = {**costs, "ratio_sq": 8.46}  # a standard deviation of 0.2: 0.9 + 3 * 0.2
    assert learned_costs(wide) == pytest.approx(0.0008 * 1.5)
    assert learned_costs({"largest_call": 0.012}) is None  # nothing learned
    left = left_to_do(
        0.011,
        spent=0.0042,
        work_spent=0.0036,
        restart_usd=0.0006,
        blocks_done=30,
        blocks_left=70,
        largest_call_usd=0.012,  # the first pack's worst case: all of max_tokens
        next_call_usd=learned_costs(costs),
    )
    assert left.to_finish_usd == pytest.approx(0.009)
    # 0.0042 + 0.009 * 1.15 + 0.001 = 0.01555, up to whole cents.
    assert suggested_budget(left) == pytest.approx(0.02)
    # Before the run learned anything, the largest reservation is the room: 0.0265.
    unlearned = left.model_copy(update={"next_call_usd": None})
    assert suggested_budget(unlearned) == pytest.approx(0.03)


def test_what_is_left_is_estimated_from_the_runs_own_cost_per_block():
    left = left_to_do(1.0, spent=0.96, blocks_done=48, blocks_left=52)
    assert (left.cost_per_block_usd, left.to_finish_usd) == (0.02, 1.04)
    assert "52 blocks left, about $1.0400 to finish" in left_text(left)
    # What was spent, the estimate with its margin, and room for the largest reservation,
    # rounded up to whole cents.
    assert SUGGEST_MARGIN == 0.15
    assert suggested_budget(left) == pytest.approx(2.16)  # 0.96 + 1.04 * 1.15 = 2.156
    roomy = left_to_do(1.0, spent=0.96, blocks_done=48, blocks_left=52, largest_call_usd=0.2)
    assert suggested_budget(roomy) == pytest.approx(2.36)
    # One-off calls (the warm-up's cache write) do not count per block; continuing pays one.
    left = left_to_do(
        1.0, spent=0.96, work_spent=0.48, restart_usd=0.1, blocks_done=48, blocks_left=52
    )
    assert (left.cost_per_block_usd, left.to_finish_usd) == (0.01, 0.62)
    none_done = left_to_do(0.01, spent=0.0, blocks_done=0, blocks_left=3)
    assert none_done.to_finish_usd is None and "no block done yet" in left_text(none_done)


def test_policy_a_call_the_budget_cannot_hold_fails_its_blocks_as_budget_exhausted():
    decision = decide("over_budget", blocks=5, reason="budget $1 spent")
    assert (decision.step, decision.code, decision.reason) == (
        "fail",
        "budget_exhausted",
        "budget $1 spent",
    )
    assert "budget_exhausted" in REASONS


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("-1", "must be more than $0"),
        ("abc", "must be a number of US dollars"),
        ("0", "must be more than $0"),
        ("nan", "must be more than $0"),
    ],
)
def test_the_cli_refuses_a_bad_budget_before_anything_runs(
    bad: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from blockbatch.cli.commands import build_parser
    from blockbatch.cli.parser import EXIT_USAGE

    for command in (["run", "doc.md", "--schema", "s.json"], ["retry", "RUN"]):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args([*command, "--max-cost", bad])
        assert exit_.value.code == EXIT_USAGE
        assert says in capsys.readouterr().err


def test_a_run_that_learns_its_output_starts_with_the_learning_pack_not_a_warm_up():
    ctx = _ctx()  # sized by estimate: the first run of a schema sends a learning pack
    assert ctx.learns_output()
    what, cost = first_call(ctx, [100] * 200)
    assert what.startswith("pack 0 of") and "warm-up" not in what
    assert cost < warm_up_worst_case(ctx) + cost


def _learned_ctx() -> tuple[RunContext, Pack]:
    ctx = _ctx(model="claude-haiku-5-5", pack_size=10)
    return ctx, ctx.pack([300] * 10)


def test_the_first_calls_reserve_their_worst_case_the_prefix_read_once_the_cache_is_warm():
    ctx, pack = _learned_ctx()
    cold = reservation(ctx, pack)
    assert cold.usd == pytest.approx(pack_worst_case(ctx, pack))
    assert (cold.max_tokens, cold.worst_usd) == (pack.max_tokens, cold.usd)
    # An answer of the run wrote the prefix a minute ago: it is read, not written again.
    warm = reservation(ctx, pack, cached_s=60)
    assert warm.max_tokens == pack.max_tokens and warm.worst_usd == cold.worst_usd
    saved = ctx.cacheable_prefix_tokens * (
        ctx.model.price_cache_write_5m - ctx.model.price_cache_read
    )
    assert warm.usd == pytest.approx(cold.usd - INPUT_MARGIN * saved / 1e6)
    # Past the TTL less the slack, the cache may have gone: a write again.
    assert reservation(ctx, pack, cached_s=300 - CACHE_SLACK_S).usd == pytest.approx(cold.usd)
    assert prefix_warm(ctx, 10) and not prefix_warm(ctx, None)


def test_a_learned_reservation_is_the_expected_cost_with_a_margin_from_the_spread():
    ctx, pack = _learned_ctx()
    steady = Spread.of(10, 10 * 0.9, 10 * 0.81 + 9 * 0.02**2)  # mean 0.9, sd 0.02
    assert steady.sd == pytest.approx(0.02)
    assert steady.factor() == pytest.approx(1 + MIN_MARGIN)  # 0.96 < the floor
    wild = Spread.of(10, 10 * 1.0, 10 * 1.0 + 9 * 0.2**2)  # mean 1, sd 0.2
    assert wild.factor() == pytest.approx(1 + SPREAD_Z * 0.2)
    assert Spread.of(1, 0.8, 0.64).factor() == pytest.approx(0.8 * (1 + SPREAD_Z * FIRST_SPREAD))

    ratio = 0.5  # the run's answers write half of what the planner estimates
    expected = expected_usd(ctx, pack, ratio=ratio, warm=True)
    tight = reservation(ctx, pack, ratio=ratio, spread=steady, cached_s=5)
    loose = reservation(ctx, pack, ratio=ratio, spread=wild, cached_s=5)
    assert tight.expected_usd == pytest.approx(expected)
    assert expected < tight.usd < loose.usd < tight.worst_usd
    assert loose.usd == pytest.approx(expected * wild.factor(), rel=0.01)
    # Its max_tokens is what the reservation pays for: a call that writes all of it costs
    # no more than it reserved (input within INPUT_MARGIN of the estimate).
    for r in (tight, loose):
        assert r.max_tokens < pack.max_tokens
        billed = (
            INPUT_MARGIN
            * (
                ctx.cacheable_prefix_tokens * ctx.model.price_cache_read
                + (pack.est_input_tokens - ctx.cacheable_prefix_tokens) * ctx.model.price_input
            )
            + r.max_tokens * ctx.model.price_output
        ) / 1e6
        assert billed <= r.usd + 1e-12
    # Never below MIN_OUTPUT_HEADROOM times the expected output: the reservation grows.
    out = expected_output_tokens(ctx, pack, ratio, None)
    assert tight.max_tokens >= out * MIN_OUTPUT_HEADROOM
