"""The quality gate end to end, on the simulator's quality model (large packs go wrong)."""

from __future__ import annotations

from blockbatch.store.reads import blocks_paid_twice
from tests.conftest import Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`


async def test_the_gate_halves_the_pack_size_when_large_packs_disagree(
    cli: Cli, bbstack: Stack
) -> None:
    # Packs of 16 answer most blocks wrongly (valid values, some from a neighbour), packs
    # of 8 or fewer answer right; single calls are always right.
    bbstack.sim.scenario(
        seed=3,
        quality={
            "enabled": True,
            "free_blocks": 8,
            "wrong_per_extra_block": 0.1,
            "skip_per_extra_block": 0,
            "bleed_per_extra_block": 0,
        },
    )
    async with bbstack.worker():
        run = await cli(
            "run",
            cli.doc(160),
            "--schema",
            cli.schema(),
            "--pack-size",
            "16",
            "--set",
            "max_concurrent_packs=2",
            "--set",
            "quality.min_agreement=0.9",
        )
    assert run.code == 0, run.err
    run_id = run.run_id
    result = await bbstack.bb.result(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 160
    change = await bbstack.pool.fetchrow(
        """select first_pack, pack_size, gate from plan_changes
           where run_id = $1 and kind = 'quality_gate'""",
        run_id,
    )
    assert change is not None and change["pack_size"] == 8
    assert change["gate"]["high"] < 0.9 and change["gate"]["samples"] >= 10
    sizes = await bbstack.pool.fetch(
        """select pack_index, count(*) as n from overlays where run_id = $1
           group by pack_index order by pack_index""",
        run_id,
    )
    assert all(r["n"] <= 8 for r in sizes if r["pack_index"] >= change["first_pack"])
    # The blocks packs of 16 answered before the gate tripped were re-asked in packs of 8
    # (after the packs in flight ended): every block's answer now comes from a call of at
    # most 8 blocks, and none counts as a block paid twice.
    early = await bbstack.pool.fetchval(
        """select count(distinct u) from llm_calls, unnest(block_uids) as u
           where run_id = $1 and purpose = 'pack' and cardinality(block_uids) = 16""",
        run_id,
    )
    assert early and early % 16 == 0
    answered = await bbstack.pool.fetch(
        """select o.pack_index, cardinality(c.block_uids) as n from overlays o
           join llm_calls c on c.call_id = o.call_id where o.run_id = $1""",
        run_id,
    )
    assert len(answered) == 160 and all(r["n"] <= 8 for r in answered)
    assert all(r["pack_index"] >= change["first_pack"] for r in answered)
    assert await blocks_paid_twice(bbstack.pool, run_id) == 0
    reasks = await bbstack.pool.fetchval(
        """select count(*) from overlay_changes where run_id = $1
           and old_status = 'ai_complete' and new_status = 'pending'""",
        run_id,
    )
    assert reasks == early
    # Packs of 8 agree with the single answers; the run says what it did and where it settled.
    small = await bbstack.pool.fetch(
        "select agrees from quality_samples where run_id = $1 and pack_size <= 8 "
        "and status = 'compared'",
        run_id,
    )
    assert small and all(r["agrees"] for r in small)
    q = result.quality
    assert q is not None and q.pack_size == 8 and q.min_agreement == 0.9
    assert len(q.gate) == 1 and q.gate[0].startswith("quality gate: agreement ")
    assert (
        f"re-planned at 8 blocks (was 16); {early} blocks answered in packs of 16 re-asked"
    ) in q.gate[0] and q.blocks_reasked == early
    assert q.gate[0] in result.plan_changes
    # Packs of 16 answer a block wrongly 8 times in 10 (0.1 a block past 8), and a wrong
    # value may still match the single answer. How many of them were compared depends on the
    # packs in flight when the gate tripped, so their rate is held to the bar the gate judges
    # by, not a tighter one: "below 0.5" failed once in the stress report (the gate tripped
    # at 60% on 10 samples; 0.5 in the end; docs/testing.md).
    large = q.by_pack_size["11-20"].rate
    assert q.by_pack_size["6-10"].rate == 1.0 and large is not None and large < q.min_agreement
    # The summary, status and review say it.
    assert "quality gate agreement " in run.out and "pack size    settled on 8 blocks" in run.out
    assert "quality      agreement " in run.out and "probe        " in run.out
    status = await cli("status", run_id)
    assert status.code == 0 and "re-planned at 8 blocks (was 16)" in status.out
    total, page = await bbstack.bb.disagreeing(run_id)
    assert total == q.sampled - q.agreement.agreeing > 0 and all(d.pack_size == 16 for d in page)
    grid = await bbstack.bb.review(run_id, disagreeing=True)
    assert grid.total == total and {r.block_uid for r in grid.rows} == {d.block_uid for d in page}
    review = await cli("review", run_id, "--disagreeing")
    assert (
        review.code == 0
        and f"showing disagreeing blocks 1-{min(total, 20)} of {total}" in review.out
    )
    assert "packed: " in review.out and "alone:  " in review.out and "✗ " in review.out
