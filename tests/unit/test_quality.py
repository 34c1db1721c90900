"""The quality probe's and the quality gate's rules (blockbatch/core/quality.py), and how a run says them."""

from __future__ import annotations

from typing import Any

import pytest

from blockbatch.core.agreement import FieldAgreement, Sample, summarize
from blockbatch.core.context import RunContext
from blockbatch.core.planning import Pack
from blockbatch.core.quality import (
    GATE_MIN_SAMPLES,
    gate_reading,
    gate_text,
    halved,
    on_probation,
    pack_sample,
    planned_sample,
    probe_cost_text,
    probe_size,
    quality_result,
)
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import GateReading, RunResult
from blockbatch.report import change_rows, quality_rows, summary_lines

UIDS = [f"d:{i}" for i in range(400)]


Q3 = QualityOptions(probe_rate=0.03, probe_minimum=5)


def test_the_planned_sample_is_deterministic_and_off_at_rate_zero() -> None:
    sample = planned_sample(UIDS, Q3, "run-a")
    assert len(sample) == 12 and sample == planned_sample(UIDS, Q3, "run-a")
    assert sample != planned_sample(UIDS, Q3, "run-b")
    assert len(planned_sample(UIDS[:50], Q3, "run-a")) == 5  # the minimum
    assert len(planned_sample(UIDS[:3], Q3, "run-a")) == 3  # capped at the blocks
    assert (
        planned_sample(UIDS, QualityOptions(probe_rate=0.0, probe_minimum=5), "run-a") == []
    )  # probe off


def test_a_large_documents_sample_stops_at_the_maximum() -> None:
    # 3% of a million blocks would be 30,000 more calls; the default asks 2,000 (an
    # agreement near 95% measured within about a point).
    assert probe_size(1_000_000, QualityOptions()) == 2000
    assert probe_size(10_000, QualityOptions()) == 300  # 3% under the maximum
    assert probe_size(1_000_000, QualityOptions(probe_maximum=0, probe_minimum=5)) == 5
    assert probe_size(1_000_000, QualityOptions(probe_maximum=50_000)) == 30_000
    assert probe_size(1_000_000, QualityOptions(probe_rate=0)) == 0
    uids = [f"doc:{i}" for i in range(100_000)]
    capped = planned_sample(uids, QualityOptions(probe_maximum=500), "run-a")
    # The capped sample is the uncapped one's lowest ranks: part of it, in block order.
    assert len(capped) == 500 and set(capped) <= set(
        planned_sample(uids, QualityOptions(), "run-a")
    )
    assert capped == sorted(capped, key=lambda u: int(u.split(":")[1]))
    assert pack_sample(UIDS[:8], 2, "run-a/3") == pack_sample(UIDS[:8], 2, "run-a/3")
    assert len(pack_sample(UIDS[:8], 2, "run-a/3")) == 2 and pack_sample(UIDS[:1], 2, "s") == [
        "d:0"
    ]


def test_the_gate_trips_only_with_enough_samples_clearly_below_its_target() -> None:
    # Too few samples to say so, however bad.
    assert gate_reading(0, GATE_MIN_SAMPLES - 1, 0.95) is None
    reading = gate_reading(2, 10, 0.95)
    assert reading is not None and reading.high < 0.95 and reading.low < 0.2 < reading.high
    # 9 of 10 agree: 90% could well be 95% or more (the interval reaches past it).
    assert gate_reading(9, 10, 0.95) is None
    # The same 90% on 200 samples is clearly below 95%.
    assert gate_reading(180, 200, 0.95) is not None
    assert gate_reading(40, 40, 1.0) is None
    # Few packs in flight until the samples at this size say the target is met.
    assert on_probation(GATE_MIN_SAMPLES - 1, GATE_MIN_SAMPLES - 1, 0.95)
    assert not on_probation(GATE_MIN_SAMPLES, GATE_MIN_SAMPLES, 0.95)
    assert on_probation(9, 10, 0.95) and not on_probation(19, 20, 0.95)
    assert [halved(n) for n in (40, 3, 2, 1)] == [20, 1, 1, 1]


def test_the_gate_and_the_probe_say_what_they_did() -> None:
    reading = GateReading(samples=25, agreeing=22, low=0.70, high=0.96, target=0.95)
    assert gate_text(reading, 12, 31, 10, 40) == (
        "quality gate: agreement 88% (CI 70-96%) < 95% on 25 samples: packs 12-30 "
        "re-planned at 10 blocks (was 40)"
    )
    assert gate_text(reading, 12, 13, 1, 2).endswith("pack 12 re-planned at 1 block (was 2)")
    assert (
        probe_cost_text(12, 0.0123, 0.5857)
        == "quality probe: 12 calls, $0.0123 (2.1% of the run's cost)"
    )


def _result() -> RunResult:
    samples = [
        Sample(
            f"d:{i}",
            20,
            i % 20 + 1,
            [
                FieldAgreement("label", "exact", True),
                FieldAgreement("summary", "text", i % 10 != 0, 0.4 if i % 10 == 0 else 0.9),
            ],
        )
        for i in range(40)
    ]
    quality = quality_result(
        summarize(samples),
        failed=1,
        probe_calls=41,
        probe_cost_usd=0.0123,
        run_cost_usd=0.5857,
        pack_size=10,
        min_agreement=0.95,
        gate=["quality gate: agreement 88% ..."],
    )
    return RunResult(
        run_id="r1",
        status="completed",
        blocks_total=1000,
        blocks_ai_complete=1000,
        calls=141,
        pack_count=100,
        cost_usd=0.5857,
        quality=quality,
        plan_changes=["quality gate: agreement 88% ..."],
    )


def test_the_summary_shows_the_agreement_the_probe_cost_and_the_settled_pack_size() -> None:
    result = _result()
    q = result.quality
    assert q is not None and q.sampled == 40 and q.agreement.agreeing == 36
    assert q.lowest_field == "summary" and q.by_field["label"].rate == 1.0
    assert q.agreement.low is not None and q.agreement.high is not None
    assert q.agreement.low < 0.9 < q.agreement.high
    assert list(q.by_pack_size) == ["11-20"]
    rows = dict(quality_rows(result))
    assert rows["quality"].startswith("agreement 90.0% on 40 sampled blocks (95% CI ")
    assert "lowest: summary 90%" in rows["quality"] and "1 probe failed" in rows["quality"]
    assert "review r1 --disagreeing" in rows["quality"]
    assert rows["probe"] == "41 calls, $0.0123 (2.1% of the run's cost)"
    assert rows["pack size"] == "settled on 10 blocks (quality gate, target 95%)"
    assert change_rows(result.plan_changes) == [("quality gate", "agreement 88% ...")]
    lines = "\n".join(summary_lines(result, baseline=None, links={"run": "u", "packs": "p"}))
    # Blocks per call over the packs' calls, not the probe's, and the row says so.
    assert "141 calls: 100 calls for 1000 blocks (10.0 blocks per call" in lines
    assert "), 41 quality probe calls" in lines
    assert "quality gate" in lines and "probe" in lines


def test_a_run_without_the_probe_shows_no_quality_rows() -> None:
    assert quality_rows(RunResult(run_id="r", status="completed")) == []


@pytest.mark.parametrize(
    ("key", "bad", "says"),
    [
        ("min_agreement", "0", "greater than 0"),
        ("min_agreement", "1.5", "less than or equal to 1"),
        ("min_agreement", "nan", "less than or equal to 1"),
        ("min_agreement", "high", "valid number"),
        ("probe_rate", "-0.1", "greater than or equal to 0"),
        ("probe_rate", "2", "less than or equal to 1"),
        ("probe_max_share", "0", "greater than 0"),
        ("probe_max_share", "1.01", "less than or equal to 1"),
    ],
)
def test_the_cli_refuses_a_bad_quality_setting_before_anything_runs(
    key: str, bad: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from blockbatch.cli.commands import build_parser
    from blockbatch.cli.parser import EXIT_USAGE

    run = ["run", "doc.md", "--schema", "s.json"]
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*run, "--set", f"quality.{key}={bad}"])
    assert exit_.value.code == EXIT_USAGE
    assert f"quality.{key}: input should be" in (err := capsys.readouterr().err) and says in err
    from blockbatch.cli.run import _options

    opts = _options(
        build_parser().parse_args(
            [
                *run,
                "--set",
                "quality.min_agreement=0.9",
                "--set",
                "quality.probe_max_share=0.02",
                "--set",
                "quality.reask=false",
            ]
        )
    )
    assert opts.quality is not None and (
        opts.quality.probe_max_share,
        opts.quality.reask,
        opts.quality.min_agreement,
    ) == (0.02, False, 0.9)


# ---------------------------------------------------------------- the probe's cost cap


def _plan_ctx(prefix_tokens: int, **options: Any) -> RunContext:
    from blockbatch.core.quote import quote_context
    from blockbatch.core.registry import get_model
    from blockbatch.core.run_types import RunOptions
    from blockbatch.core.schema import load_schema
    from tests.helpers import extract_schema

    model = get_model("claude-sonnet-4-6")
    return quote_context(
        RunOptions(model=model.id, **options),
        load_schema(extract_schema(prefix_tokens)),
        model,
    )


def test_the_probe_sample_is_capped_at_its_share_of_the_runs_cost() -> None:
    from blockbatch.core.quality import expected_call_usd, probe_plan
    from blockbatch.core.quality_types import QualityOptions

    ctx = _plan_ctx(25_000, pack_size=40)
    uids, tokens = UIDS[:200], [120] * 200
    packs = ctx.plan(tokens)
    q = QualityOptions()  # 3%, at least 5, at most 5% of the run's cost
    sample, plan = probe_plan(ctx, uids, tokens, packs, q, "run-a")
    run_usd = sum(expected_call_usd(ctx, ctx.pack(tokens[:40])) for _ in packs)
    assert plan.est_run_usd == pytest.approx(run_usd, abs=1e-6)
    # A probe call reads the whole cached prefix: 6 of them cost more than 5% of 5 packs.
    assert (
        plan.wanted == 6
        and plan.capped
        and 0 < plan.planned < 6 == len(planned_sample(uids, Q3, "run-a"))
    )
    assert len(sample) == plan.planned and plan.est_probe_usd <= 0.05 * plan.est_run_usd
    # One more block would not have fitted: the cap is the largest sample within the share.
    one_call = expected_call_usd(ctx, ctx.pack([120]))
    assert plan.est_probe_usd + one_call > 0.05 * plan.est_run_usd
    # The capped sample is part of the uncapped one (the same ranking), in block order.
    assert set(sample) <= set(planned_sample(uids, Q3, "run-a"))
    assert sample == sorted(sample, key=uids.index)
    assert plan.rate == pytest.approx(plan.planned / 200)
    # At a share of 1 the rate and minimum decide again; a larger share never samples less.
    wide, uncapped = probe_plan(
        ctx, uids, tokens, packs, QualityOptions(probe_max_share=1), "run-a"
    )
    assert not uncapped.capped and wide == planned_sample(uids, Q3, "run-a")
    tight, tiny = probe_plan(
        ctx, uids, tokens, packs, QualityOptions(probe_max_share=0.001), "run-a"
    )
    assert tight == [] and tiny.planned == 0 and tiny.wanted == 6


def test_a_cheap_probe_is_not_capped_and_rate_zero_samples_nothing() -> None:
    from blockbatch.core.quality import probe_plan
    from blockbatch.core.quality_types import QualityOptions

    ctx = _plan_ctx(1500, pack_size=10)
    uids, tokens = UIDS, [400] * len(UIDS)
    sample, plan = probe_plan(ctx, uids, tokens, ctx.plan(tokens), QualityOptions(), "r")
    assert not plan.capped and plan.planned == plan.wanted == 12 == len(sample)
    none, off = probe_plan(ctx, uids, tokens, ctx.plan(tokens), QualityOptions(probe_rate=0), "r")
    assert none == [] and off.wanted == off.planned == 0
    with pytest.raises(ValueError):
        QualityOptions(probe_max_share=0)
    with pytest.raises(ValueError):
        QualityOptions(probe_max_share=1.5)


def test_the_summary_says_when_the_sample_was_capped_or_the_gate_went_over() -> None:
    assert probe_cost_text(3, 0.012, 0.2927, max_share=0.05, capped=True) == (
        "quality probe: 3 calls, $0.0120 (4.1% of the run's cost; sample capped at 5% of the "
        "run's expected cost)"
    )
    # Capped on the expected cost, a little over at the actual cost is no breach, and the
    # line says why instead of reading "5.1% ...; capped at 5%".
    assert probe_cost_text(4, 0.0159, 0.3111, max_share=0.05, capped=True) == (
        "quality probe: 4 calls, $0.0159 (5.1% of the run's cost; the sample was sized to 5% "
        "of what the run was expected to cost, and the run cost less)"
    )
    assert probe_cost_text(9, 0.0216, 0.3, max_share=0.05, gated=True) == (
        "quality probe: 9 calls, $0.0216 (7.2% of the run's cost; above its 5% share: the "
        "quality gate samples every pack)"
    )
    assert probe_cost_text(3, 0.012, 0.5, max_share=0.05) == (
        "quality probe: 3 calls, $0.0120 (2.4% of the run's cost)"
    )


def test_the_gate_text_says_how_many_blocks_it_re_asked() -> None:
    reading = GateReading(samples=25, agreeing=22, low=0.7, high=0.93, target=0.95)
    assert gate_text(reading, 8, 22, 20, 40, 320, (40, 40)).endswith(
        "packs 8-21 re-planned at 20 blocks (was 40); 320 blocks answered in packs of 40 re-asked"
    )
    assert gate_text(reading, 8, 9, 10, 20, 1, (12, 20)).endswith(
        "; 1 block answered in packs of 12-20 re-asked"
    )


# ---------------------------------------------------------------- an uncached prompt


def _ticket_ctx() -> RunContext:
    """The first hour's ticket schema (tests/fixtures/ticket.json) on claude-sonnet-4-6:
    the planner's estimate of its prefix (which leans high) reaches the model's minimum
    of 1,024; the API counts 779 tokens and does not cache it."""
    import json
    from pathlib import Path

    from blockbatch.core.quote import quote_context
    from blockbatch.core.registry import get_model
    from blockbatch.core.run_types import RunOptions
    from blockbatch.core.schema import load_schema

    model = get_model("claude-sonnet-4-6")
    spec = load_schema(
        json.loads((Path(__file__).parents[1] / "fixtures" / "ticket.json").read_text())
    )
    return quote_context(RunOptions(model=model.id), spec, model)


def _uncached_usd(ctx: RunContext, pack: Pack) -> float:
    """A call with no cache at all: its whole input at the input price."""
    from blockbatch.core.registry import Usage, cost_usd

    return cost_usd(
        ctx.model,
        Usage(
            input_tokens=pack.est_input_tokens,
            output_tokens=pack.est_output_tokens,
        ),
    )


def test_an_uncached_prefix_is_priced_as_input_and_the_probe_keeps_its_share() -> None:
    from blockbatch.core.quality import expected_call_usd, probe_plan
    from blockbatch.core.quality_types import QualityOptions

    ctx = _ticket_ctx()
    assert ctx.fixed_prompt_tokens >= ctx.model.min_cacheable_tokens
    tokens = [50] * 30
    uids = UIDS[:30]
    packs = ctx.plan(tokens)
    one = ctx.plan([50])[0]
    # Told the prefix is not cached, a call pays all of it as input.
    assert expected_call_usd(ctx, one, cached=False) == pytest.approx(_uncached_usd(ctx, one))
    assert expected_call_usd(ctx, one, cached=True) < _uncached_usd(ctx, one)
    # Not told, the run does not take a prefix so close to the minimum as cached: the
    # sample it plans costs at most 5% of the run, priced with no cache at all.
    sample, plan = probe_plan(ctx, uids, tokens, packs, QualityOptions(), "run-a")
    run_usd = sum(_uncached_usd(ctx, p) for p in packs)
    assert len(sample) * _uncached_usd(ctx, one) <= 0.05 * run_usd
    assert plan.est_run_usd == pytest.approx(run_usd, abs=1e-6)
    # A prefix the ledger saw cached is priced as a read, and the sample grows.
    _, cached = probe_plan(ctx, uids, tokens, packs, QualityOptions(), "run-a", cached=True)
    assert cached.est_run_usd < plan.est_run_usd
