"""The quality probe after each pack, and the quality gate that makes unstarted packs smaller."""

from __future__ import annotations

from blockbatch.core.quality import GATE_SAMPLES_PER_PACK
from blockbatch.core.quality_types import QualityRunState
from tests.workflows.conftest import Harness
from tests.workflows.fakes import OUTAGE, FakeWorld


async def test_every_pack_is_probed_once_applied_and_the_run_counts_what_agreed(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [3, 3, 3])
    async with wf.worker(world):
        handle = await wf.start(world, quality=QualityRunState())
        result = await handle.result()
        progress = await handle.query("progress")
    assert result.status == "completed" and result.blocks_ai_complete == 9
    # After its answer was applied (its blocks are done), never for a halved part.
    assert sorted(p.pack_index for p in world.probes) == [0, 1, 2]
    assert all(p.at_least == 0 for p in world.probes)
    assert (progress["quality_sampled"], progress["quality_agreeing"]) == (3, 3)
    assert progress["quality_calls"] == 3 and progress["calls"] == world.paid_calls + 3


async def test_a_run_without_the_probe_probes_nothing(wf: Harness, run_id: str) -> None:
    world = FakeWorld(run_id, [2, 2])
    result = await wf.run(world)
    assert result.status == "completed" and world.probes == []


async def test_a_probe_that_keeps_failing_never_fails_the_run(wf: Harness, run_id: str) -> None:
    world = FakeWorld(run_id, [2, 2])
    world.probe_error = OUTAGE
    result = await wf.run(world, quality=QualityRunState())
    assert result.status == "completed" and result.blocks_ai_complete == 4
    assert len(world.probes) >= 2  # tried (and retried), then given up


async def test_the_gate_halves_the_unstarted_packs_when_agreement_is_below_its_target(
    wf: Harness, run_id: str
) -> None:
    # Packs of 8 disagree, packs of 4 agree: after the first packs' samples (two a pack,
    # at most five packs in flight until there are ten) the gate re-plans the rest at 4,
    # once, and counts only the packs of 4 from then on.
    world = FakeWorld(run_id, [8] * 12, agrees_up_to=4)
    async with wf.worker(world):
        handle = await wf.start(
            world, max_concurrent_packs=8, quality=QualityRunState(min_agreement=0.95)
        )
        result = await handle.result()
        progress = await handle.query("progress")
    gates = [r for r in world.replans if r.gate is not None]
    assert len(gates) == 1
    gate = gates[0]
    assert gate.gate is not None and gate.gate.agreeing == 0 and gate.gate.samples >= 10
    assert gate.gate.high < 0.95 and gate.gate.target == 0.95
    # Only the first packs ran at 8 (five in flight while the gate had too few samples).
    assert 5 <= gate.first_pack <= 10
    assert all(len(world.packs[i]) == 4 for i in world.packs if i >= gate.first_pack)
    assert all(p.at_least == GATE_SAMPLES_PER_PACK for p in world.probes)
    assert result.status == "completed" and result.blocks_ai_complete == 96
    assert any(c.startswith("quality gate: ") for c in result.plan_changes)
    assert progress["quality_gate"] == "quality gate: packs re-planned at 4 blocks (was 8)"


async def test_the_gate_re_asks_what_larger_packs_answered_once_its_packs_in_flight_end(
    wf: Harness, run_id: str
) -> None:
    # With re-asks (the default), the gate waits for the packs in flight, then the blocks
    # the packs of 8 answered go into the new packs of 4 and the run starts them all.
    world = FakeWorld(run_id, [8] * 12, agrees_up_to=4)
    result = await wf.run(
        world, max_concurrent_packs=8, quality=QualityRunState(min_agreement=0.95)
    )
    gate = next(r for r in world.replans if r.gate is not None)
    assert gate.reask and world.gate_saw_pending == [0]
    assert len(world.reasked) == 8 * gate.first_pack
    assert all(world.packs[i] == [] for i in range(gate.first_pack))
    assert all(len(world.packs[i]) == 4 for i in world.packs if i >= gate.first_pack)
    assert result.status == "completed" and result.blocks_ai_complete == 96
    assert result.pack_count == gate.first_pack + 96 // 4
    called = {
        u for c in world.calls if c.pack_index >= gate.first_pack for u in world.packs[c.pack_index]
    }
    assert set(world.reasked) <= called


async def test_without_re_asks_the_gate_re_plans_at_once_and_asks_nothing_again(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [8] * 12, agrees_up_to=4)
    result = await wf.run(
        world, max_concurrent_packs=8, quality=QualityRunState(min_agreement=0.95, reask=False)
    )
    gate = next(r for r in world.replans if r.gate is not None)
    assert not gate.reask and world.reasked == []
    assert all(len(world.packs[i]) == 8 for i in range(gate.first_pack))
    assert result.status == "completed" and result.blocks_ai_complete == 96
