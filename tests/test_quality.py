"""The quality gate end to end, on the simulator's quality model (large packs go wrong)."""

from __future__ import annotations

from core.models import QualityOptions, RunOptions
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc


async def test_the_gate_halves_the_pack_size_when_large_packs_disagree(bbstack: Stack) -> None:
    # Packs of 16 answer most blocks wrongly (valid values, some from a neighbour), packs
    # of 8 or fewer answer right; single calls are always right.
    bbstack.sim.scenario(seed=3, quality={
        "enabled": True, "free_blocks": 8, "wrong_per_extra_block": 0.1,
        "skip_per_extra_block": 0, "bleed_per_extra_block": 0})
    doc = await bbstack.bb.ingest_bytes(markdown_doc(160), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema())
    run_id = await bbstack.bb.start_run(doc, schema_id, RunOptions(
        pack_size=16, max_concurrent_packs=2, reuse_answers=False,
        quality=QualityOptions(min_agreement=0.9)))
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 160
    change = await bbstack.pool.fetchrow(
        """select first_pack, pack_size, gate from plan_changes
           where run_id = $1 and kind = 'quality_gate'""", run_id)
    assert change is not None and change["pack_size"] == 8
    assert change["gate"]["high"] < 0.9 and change["gate"]["samples"] >= 10
    sizes = await bbstack.pool.fetch(
        """select pack_index, count(*) as n from overlays where run_id = $1
           group by pack_index order by pack_index""", run_id)
    assert all(r["n"] <= 8 for r in sizes if r["pack_index"] >= change["first_pack"])
    assert any(r["n"] == 16 for r in sizes if r["pack_index"] < change["first_pack"])
    # Packs of 8 agree with the single answers; the run says what it did and where it settled.
    small = await bbstack.pool.fetch(
        "select agrees from quality_samples where run_id = $1 and pack_size <= 8 "
        "and status = 'compared'", run_id)
    assert small and all(r["agrees"] for r in small)
    q = result.quality
    assert q is not None and q.pack_size == 8 and q.min_agreement == 0.9
    assert len(q.gate) == 1 and q.gate[0].startswith("quality gate: agreement ")
    assert "re-planned at 8 blocks (was 16)" in q.gate[0]
    assert q.gate[0] in result.plan_changes
    assert q.by_pack_size["6-10"].rate == 1.0 and q.by_pack_size["11-20"].rate < 0.5
