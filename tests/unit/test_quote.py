"""The quote before a run (blockbatch/core/quote.py): the run's own plan, its calls, tokens and cost."""

from __future__ import annotations

from typing import Any

import pytest

from blockbatch.core.batching import BATCH_CACHE_TTL, BATCH_WARM_HIT_RATE
from blockbatch.core.quality import probe_plan
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.quote import (
    PROBE_SEED,
    OutputHistory,
    expected_attempts,
    quote,
    quote_context,
)
from blockbatch.core.quote_tokens import PromptTokens, count_plan, counted_tokens, planner_tokens
from blockbatch.core.registry import Usage, cost_usd, get_model
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from tests.helpers import extract_schema, revise_schema

MODEL = get_model("claude-sonnet-4-6")


def ctx_for(definition: dict[str, Any] | None = None, **options: Any) -> Any:
    """The context of a quote; the quality probe off unless ``quality`` is given (the
    probe's own tests below), so the pack figures stand alone."""
    options.setdefault("quality", {"probe_rate": 0.0})
    spec = load_schema(definition or extract_schema(1500))
    return quote_context(RunOptions(model=MODEL.id, **options), spec, MODEL)


def counted(prefix: int = 5_000, per_call: int = 60, blocks: int = 20_000) -> PromptTokens:
    return PromptTokens(
        source="count_tokens",
        prefix=prefix,
        per_call=per_call,
        blocks=blocks,
        warm_up=prefix + per_call + 30,
        requests=4,
    )


def test_quote_plans_with_the_runs_own_plan_and_counts_the_warm_up() -> None:
    ctx = ctx_for(pack_size=10)
    tokens = [50] * 95
    q = quote(ctx, tokens, counted(), document="d.md")
    assert q.packs == len(ctx.plan(tokens)) == 10
    assert q.blocks_per_pack == (5, 10)
    assert q.sync.warm_up and q.sync.calls == 11
    # Batch: one request goes ahead alone and writes the prefix at the batch price (its
    # round first), the other nine follow and read it: no pre-warm call.
    assert not q.batch.warm_up and q.batch.calls == 10 and q.batch.cache_control
    assert q.batch.cache_plan == "lead"
    # Sync: the warm-up writes the prefix once, the ten packs read it.
    assert q.sync.cache_write_tokens == 5_000 and q.sync.cache_read_tokens == 10 * 5_000
    assert q.sync.input_tokens == 10 * 60 + 20_000 + 90
    # Batch: the nine read it best effort, so the expectation has BATCH_WARM_HIT_RATE of
    # them read it and the rest write it again.
    misses = 9 * (1 - BATCH_WARM_HIT_RATE)
    assert q.batch.cache_hit_rate == BATCH_WARM_HIT_RATE
    assert q.batch.cache_write_tokens == round(5_000 * (1 + misses))
    assert q.batch.cache_read_tokens == round(5_000 * 9 * BATCH_WARM_HIT_RATE)
    assert q.batch.cache_ttl == BATCH_CACHE_TTL


def test_the_batch_lead_writes_at_batch_prices_and_the_spread_is_all_hits_to_all_misses() -> None:
    ctx = ctx_for(pack_size=10)
    q = quote(ctx, [50] * 95, counted(), document="d.md")
    b = q.batch
    assert b.min_cost_usd < b.cost_usd < b.max_cost_usd
    read = cost_usd(MODEL, Usage(cache_read_input_tokens=5_000), batch=True)
    write = cost_usd(
        MODEL,
        Usage(cache_creation_input_tokens=5_000, cache_creation_1h_tokens=5_000),
        batch=True,
    )
    # Between all hits and the expectation: the nine followers' misses' extra write.
    assert b.cost_usd - b.min_cost_usd == pytest.approx(
        9 * (1 - BATCH_WARM_HIT_RATE) * (write - read), rel=1e-3
    )
    # Cheaper than the sync pre-warm it replaces: the pre-warm's 1-hour write at sync
    # prices is twice the lead's, and the lead is one of the requests.
    pre_warm = cost_usd(
        MODEL,
        Usage(input_tokens=90, cache_creation_input_tokens=5_000, cache_creation_1h_tokens=5_000),
    )
    assert b.min_cost_usd + pre_warm - write + read < b.min_cost_usd + pre_warm
    # A measured hit rate replaces the assumption.
    measured = quote(ctx, [50] * 95, counted(), document="d.md", batch_hits=(72, 80))
    assert measured.batch.cache_hit_rate == 0.9
    assert measured.batch_hit_source and "72 of 80" in measured.batch_hit_source
    assert measured.batch.cost_usd > b.cost_usd
    # Hits so rare that reading does not repay a write: no cache_control at all.
    rare = quote(ctx, [50] * 95, counted(), document="d.md", batch_hits=(40, 80))
    assert not rare.batch.cache_control and not rare.batch.warm_up
    assert rare.batch.input_tokens == 10 * (5_000 + 60) + 20_000
    # Too few measured requests: still the assumption.
    few = quote(ctx, [50] * 95, counted(), document="d.md", batch_hits=(1, 4))
    assert few.batch.cache_hit_rate == BATCH_WARM_HIT_RATE


def test_costs_are_the_registry_prices_and_batch_is_half_with_the_one_hour_write() -> None:
    ctx = ctx_for(pack_size=25)
    q = quote(ctx, [50] * 100, counted(), document="d.md")
    s = q.sync
    assert s.cost_usd == pytest.approx(
        cost_usd(
            MODEL,
            Usage(
                input_tokens=s.input_tokens,
                output_tokens=s.output_tokens,
                cache_creation_input_tokens=s.cache_write_tokens,
                cache_read_input_tokens=s.cache_read_tokens,
            ),
        ),
        abs=1e-6,
    )
    # Four requests: the lead writes the prefix at batch prices, the three others read
    # it best effort; everything at half price.
    b = q.batch
    assert not b.warm_up and b.cache_plan == "lead" and b.calls == 4
    assert b.cache_write_tokens == round(5_000 * (1 + 3 * (1 - BATCH_WARM_HIT_RATE)))
    assert b.input_tokens == 4 * 60 + 20_000
    assert b.cost_usd < s.cost_usd
    for m in (s, b):
        assert m.cost_usd < m.max_cost_usd and m.output_tokens < m.max_output_tokens
    # The most: every request writing the prefix, and all of its max_tokens.
    assert b.max_cost_usd == pytest.approx(
        cost_usd(
            MODEL,
            Usage(
                output_tokens=b.max_output_tokens,
                input_tokens=b.input_tokens,
                cache_creation_input_tokens=4 * 5_000,
                cache_creation_1h_tokens=4 * 5_000,
            ),
            batch=True,
        ),
        abs=1e-5,
    )


def test_a_prefix_below_the_models_minimum_is_priced_uncached_and_said() -> None:
    haiku = get_model("claude-haiku-4-5")  # minimum 4,096
    ctx = quote_context(
        RunOptions(model=haiku.id, pack_size=10), load_schema(extract_schema(100)), haiku
    )
    q = quote(ctx, [50] * 40, counted(prefix=1_500), document="d.md")
    assert not q.sync.cached and q.sync.cache_write_tokens == q.sync.cache_read_tokens == 0
    assert q.batch.cache_write_tokens == 0
    assert q.sync.input_tokens == 4 * (1_500 + 60) + 20_000 + (q.sync.calls - 4) * 1_590
    assert any(
        "below claude-haiku-4-5's minimum of 4,096" in n and "skips caching" in n for n in q.notes
    )


def test_the_warm_up_follows_the_runs_rule_not_the_count() -> None:
    haiku = get_model("claude-haiku-4-5")  # minimum 4,096
    ctx = quote_context(
        RunOptions(model=haiku.id, pack_size=10), load_schema(extract_schema(20)), haiku
    )
    assert ctx.cacheable_prefix_tokens == 0  # the run's estimate: below the minimum
    q = quote(ctx, [50] * 30, counted(prefix=5_000), document="d.md")
    assert not q.sync.warm_up and q.sync.calls == 3 and q.sync.cached
    assert any("first pack writes the cache" in n for n in q.notes)
    one_pack = quote(ctx_for(pack_size=10), [50] * 5, counted(), document="d.md")
    assert one_pack.packs == 1 and not one_pack.sync.warm_up and one_pack.sync.calls == 1
    assert one_pack.sync.cache_read_tokens == 0


def test_output_comes_from_the_planner_unless_earlier_runs_say_otherwise() -> None:
    ctx = ctx_for(pack_size=10)
    tokens = [60] * 50
    planned = quote(ctx, tokens, counted(), document="d.md")
    assert planned.output_source == "planner" and planned.output_history is None
    assert planned.sync.output_tokens == sum(p.est_output_tokens for p in ctx.plan(tokens)) + 1
    too_few = quote(
        ctx,
        tokens,
        counted(),
        document="d.md",
        history=OutputHistory(runs=1, calls=2, estimated=1000, written=500),
    )
    assert too_few.output_source == "planner"
    learned = quote(
        ctx,
        tokens,
        counted(),
        document="d.md",
        history=OutputHistory(runs=2, calls=40, estimated=10_000, written=5_000),
    )
    assert learned.output_source == "ledger" and learned.output_history == {
        "runs": 2,
        "calls": 40,
        "ratio": 0.5,
    }
    shape = sum(
        ctx.pack([tokens[i] for i in p.positions]).learn_output_tokens for p in ctx.plan(tokens)
    )
    assert learned.sync.output_tokens == pytest.approx(shape * 0.5 + 1, abs=len(ctx.plan(tokens)))


def test_a_pack_expected_to_overflow_is_quoted_truncated_then_halved() -> None:
    # The schema says 400 tokens a block; these long blocks' rewrites need ~3,300 each.
    definition = revise_schema(800)
    definition["prompt_config"]["max_tokens_per_block"] = 400
    ctx = ctx_for(definition)
    tokens = [30] * 4 + [3_000] * 4
    assert len(ctx.plan(tokens)) == 1
    history = OutputHistory(runs=1, calls=10, estimated=1_000, written=1_000)
    attempts = expected_attempts(ctx, tokens, history)
    first = attempts[0]
    assert first.truncated and first.output == first.max_tokens
    rest = attempts[1:]
    assert not any(a.truncated for a in rest)
    kept = set(range(8)) - {i for a in rest for i in a.positions}
    assert kept and kept == set(range(len(kept)))  # the results that fit, in order
    q = quote(ctx, tokens, counted(), document="d.md", history=history)
    assert q.truncations == 1 and q.sync.calls == len(attempts)  # one pack: no warm-up
    assert any("truncated answer" in n for n in q.notes)


def test_oversized_blocks_are_said() -> None:
    ctx = ctx_for()
    q = quote(ctx, [50, 1_500_000], counted(), document="d.md")
    assert q.oversized_blocks == 1 and any("context window" in n for n in q.notes)


def test_count_plan_is_a_few_requests_and_the_answers_split_into_parts() -> None:
    ctx = ctx_for()
    blocks = [
        {"block_uid": f"doc-x:{i}", "block_type": "paragraph", "block_content": "word " * 200}
        for i in range(2_000)
    ]
    tokens = [300] * 2_000  # 600k estimated: two chunks in half of a 1M window
    warm = {
        "system": [{"type": "text", "text": "s"}],
        "tools": [{"name": "t"}],
        "tool_choice": {"type": "tool", "name": "t"},
        "messages": [{"role": "user", "content": "w"}],
    }
    plan = count_plan(ctx, blocks, tokens, warm)
    assert plan.chunks == 2 and len(plan.requests) == 5
    assert "system" in plan.requests[0] and "tools" in plan.requests[0]
    assert all("system" not in r and "tools" not in r for r in plan.requests[1:])
    assert all("max_tokens" not in r for r in plan.requests)
    got = counted_tokens(plan, [5_300, 300, 80, 100_080, 90_080])
    assert (got.prefix, got.per_call, got.blocks, got.warm_up) == (5_000, 80, 190_000, 5_300)
    assert got.source == "count_tokens" and got.requests == 5
    with pytest.raises(ValueError, match="expected 5 counts"):
        counted_tokens(plan, [1, 2])


def test_planner_tokens_are_the_runs_own_estimates() -> None:
    ctx = ctx_for(pack_size=10)
    tokens = [50] * 20
    est = planner_tokens(ctx, tokens, "warm")
    assert est.source == "planner" and est.prefix == ctx.fixed_prompt_tokens
    q = quote(ctx, tokens, est, document="d.md")
    packs = ctx.plan(tokens)
    # Uncached input plus cache reads and writes: every planned call's estimated input.
    pack_input = sum(p.est_input_tokens for p in packs)
    total = q.batch.input_tokens + q.batch.cache_write_tokens + q.batch.cache_read_tokens
    assert total == pack_input


def test_an_empty_document_cannot_be_quoted() -> None:
    with pytest.raises(ValueError, match="at least one block"):
        quote(ctx_for(), [], counted(), document="d.md")


def test_a_schemas_first_sync_run_is_quoted_with_its_learning_pack() -> None:
    ctx = ctx_for()  # sync, packs sized by estimate: the run learns its output
    tokens = [50] * 300
    first = quote(ctx, tokens, counted(), document="d.md")
    assert first.sync.packs > 1 and not first.sync.warm_up
    assert first.sync.calls == first.sync.packs  # the learning pack writes the cache
    assert any("learning pack (5 blocks)" in n for n in first.notes)
    assert first.batch.packs == len(
        quote_context(ctx.options.model_copy(update={"mode": "batch"}), ctx.spec, MODEL).plan(
            tokens
        )
    )
    later = quote(
        ctx,
        tokens,
        counted(),
        document="d.md",
        history=OutputHistory(runs=1, calls=20, estimated=10_000, written=5_000),
    )
    assert later.sync.warm_up and later.sync.calls == later.sync.packs + 1
    assert not any("learning pack" in n for n in later.notes)


def test_the_sync_quote_counts_the_quality_probe_by_the_runs_own_rule() -> None:
    ctx = ctx_for(pack_size=10, quality={"probe_max_share": 1.0})
    tokens = [50] * 400
    q = quote(ctx, tokens, counted(), document="d.md")
    off = quote(ctx_for(pack_size=10), tokens, counted(), document="d.md")
    packs = ctx.plan(tokens)
    sample, sizing = probe_plan(
        ctx,
        [str(i) for i in range(400)],
        tokens,
        packs,
        QualityOptions(probe_max_share=1.0),
        PROBE_SEED,
    )
    assert q.sync.probe_calls == len(sample) == sizing.planned == 12  # 3% of 400
    assert q.sync.calls == off.sync.calls + 12
    # Each probe call reads the cached prefix and carries one block.
    assert q.sync.cache_read_tokens == off.sync.cache_read_tokens + 12 * 5_000
    assert q.sync.probe_cost_usd > 0
    assert q.sync.cost_usd == pytest.approx(off.sync.cost_usd + q.sync.probe_cost_usd)
    assert q.sync.max_cost_usd > off.sync.max_cost_usd + q.sync.probe_cost_usd
    assert any("quality probe asks 12 of the blocks" in n for n in q.notes)
    # Batch mode does not probe.
    assert q.batch.probe_calls == 0 and q.batch == off.batch


def test_the_probe_in_the_quote_is_capped_at_its_share_of_the_cost() -> None:
    tokens = [50] * 400
    full = quote(
        ctx_for(pack_size=10, quality={"probe_max_share": 1.0}), tokens, counted(), document="d.md"
    )
    q = quote(
        ctx_for(pack_size=10, quality={"probe_max_share": 0.01}), tokens, counted(), document="d.md"
    )
    assert 0 < q.sync.probe_calls < full.sync.probe_calls
    assert q.sync.probe_cost_usd <= 0.01 * (q.sync.cost_usd - q.sync.probe_cost_usd) * 1.1
    assert any(f"capped from {full.sync.probe_calls} at 1%" in n for n in q.notes)


def test_no_probe_in_the_quote_when_it_is_off_or_every_pack_is_one_block() -> None:
    tokens = [50] * 400
    for ctx in (
        ctx_for(pack_size=10),
        ctx_for(pack_size=1, quality={}),
        ctx_for(batching_enabled=False, quality={}),
    ):
        q = quote(ctx, tokens, counted(), document="d.md")
        assert q.sync.probe_calls == 0 and q.sync.probe_cost_usd == 0
        assert not any("quality probe" in n for n in q.notes)
    gated = quote(
        ctx_for(pack_size=10, quality={"min_agreement": 0.9}), tokens, counted(), document="d.md"
    )
    assert gated.sync.probe_calls > 0
    assert any("gate also probes at least 2 blocks of every pack" in n for n in gated.notes)


def test_an_uncached_prefix_keeps_the_quoted_probe_within_its_share() -> None:
    """Issue 28, bug 2: the ticket schema's prefix counts 779 tokens on claude-sonnet-4-6
    (minimum 1,024; the planner's estimate reaches it): the quote priced each probe call
    as a cache read and quoted a probe at 8% of the run, "capped at 5%"."""
    import json
    from pathlib import Path

    spec = load_schema(
        json.loads((Path(__file__).parents[1] / "fixtures" / "ticket.json").read_text())
    )
    ctx = quote_context(RunOptions(model=MODEL.id), spec, MODEL)
    tokens = PromptTokens(source="count_tokens", prefix=779, per_call=50, blocks=1_590, warm_up=900)
    q = quote(ctx, [50] * 30, tokens, document="tickets.csv")
    assert not q.sync.cached
    assert q.sync.probe_cost_usd <= 0.05 * (q.sync.cost_usd - q.sync.probe_cost_usd)


def test_a_first_run_is_quoted_with_what_answers_of_other_schemas_wrote() -> None:
    """Issue 28: the ticket schema's first quote was 2.1x the run's cost: with no earlier
    run of the schema, its output was the planner's shape estimate, which leans high (an
    underestimate costs a truncated call), and answers wrote 0.45 of it. What other
    schemas' answers wrote against their own shape estimate is the expectation; the run's
    plan (its learning pack) is unchanged, and the maximum still allows every max_tokens."""
    ctx = ctx_for()
    tokens = [60] * 200
    planner = quote(ctx, tokens, counted(), document="d.md")
    prior = OutputHistory(runs=2, calls=12, estimated=10_000, written=5_000, scope="model")
    q = quote(ctx, tokens, counted(), document="d.md", prior=prior)
    assert (q.packs, q.sync.calls, q.sync.packs) == (
        planner.packs,
        planner.sync.calls,
        planner.sync.packs,
    )
    assert any("learning pack" in n for n in q.notes)  # still the run's own plan
    assert q.output_source == "other_schemas" and q.output_history is not None
    assert q.output_history["ratio"] == 0.5
    assert (
        0.45 * planner.sync.output_tokens < q.sync.output_tokens < 0.6 * planner.sync.output_tokens
    )
    assert q.sync.cost_usd < planner.sync.cost_usd
    assert q.sync.max_cost_usd == pytest.approx(planner.sync.max_cost_usd, rel=0.05)
    # The schema's own answers, when there are enough, win over other schemas'.
    own = OutputHistory(runs=1, calls=5, estimated=10_000, written=8_000)
    mine = quote(ctx, tokens, counted(), document="d.md", history=own, prior=prior)
    assert mine.output_source == "ledger" and mine.output_history is not None
    assert mine.output_history["ratio"] == 0.8
    # Too few answers elsewhere: the planner's estimate.
    few = OutputHistory(runs=1, calls=2, estimated=1_000, written=500, scope="model")
    assert quote(ctx, tokens, counted(), document="d.md", prior=few).output_source == "planner"


def test_the_quote_module_exports_only_what_it_defines():
    """Names that live in quote_tokens.py / quote_pricing.py are imported from there."""
    import inspect

    import blockbatch.core.quote as quote_module

    for name in quote_module.__all__:
        value = getattr(quote_module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ == "blockbatch.core.quote", name


def test_the_batch_quote_says_how_many_misses_nine_runs_in_ten_stay_within() -> None:
    from blockbatch.core.quote_pricing import likely_misses

    # Five followers at 95%: no miss 77% of the time, at most one 98%.
    assert likely_misses(5, 0.05) == 1
    assert likely_misses(5, 0.0) == 0 and likely_misses(0, 0.5) == 0
    assert likely_misses(100, 0.05) == 8
    ctx = ctx_for(pack_size=10)
    b = quote(ctx, [50] * 95, counted(), document="d.md").batch
    read = cost_usd(MODEL, Usage(cache_read_input_tokens=5_000), batch=True)
    write = cost_usd(
        MODEL, Usage(cache_creation_input_tokens=5_000, cache_creation_1h_tokens=5_000), batch=True
    )
    # Nine followers at 95%: one miss covers 93% of runs.
    assert b.likely_misses == 1
    assert b.likely_max_usd == pytest.approx(b.min_cost_usd + (write - read), abs=2e-6)
    assert b.cost_usd < b.likely_max_usd < b.max_cost_usd
    assert any(
        "with 1 miss (9 runs in 10 miss no more)" in n
        for n in quote(ctx, [50] * 95, counted(), document="d.md").notes
    )
