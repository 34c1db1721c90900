"""RunWorkflow when the run's budget cannot hold its next call: no pack starts, the run
ends budget_exhausted, every block not done ends failed so that a retry can take it."""

from __future__ import annotations

from tests.workflows.conftest import Harness
from tests.workflows.fakes import Answer, BatchRound, FakeWorld, Outcome

REFUSED = "the run's budget of $0.0100 is spent up to $0.0090"


async def test_a_call_over_budget_stops_the_run_and_no_later_pack_starts(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(
        run_id,
        [2, 4, 2, 2],
        {
            "1": [Answer(ok=0)],  # a split: its halves meet the budget
            "1.0": [Outcome("over_budget", REFUSED)],
            "1.1": [Outcome("over_budget", REFUSED)],
        },
    )
    result = await wf.run(world, max_concurrent_packs=1)
    assert result.status == "budget_exhausted"
    assert world.finished is not None and world.finished.status == "budget_exhausted"
    # Packs 2 and 3 never started; pack 1's halves made no call (the fake counts calls
    # that reached call_model: the refused ones returned without one). The halves run at
    # once, so either may ask first (the suite under stress saw 1.1 first once).
    paths = world.called_paths()
    assert paths[:2] == ["0", "1"] and sorted(paths[2:]) == ["1.0", "1.1"]
    assert world.paid_calls == 2
    assert world.done == {"b0-0", "b0-1"}
    assert set(world.failed) == set(world.uids) - world.done
    assert world.failed["b1-0"] == REFUSED
    assert (result.blocks_ai_complete, result.blocks_failed, result.blocks_cancelled) == (2, 8, 0)


async def test_a_warm_up_over_budget_starts_no_pack(wf: Harness, run_id: str) -> None:
    world = FakeWorld(run_id, [2, 2, 2])
    world.warm_over_budget = True
    result = await wf.run(world)
    assert result.status == "budget_exhausted"
    assert world.calls == [] and world.warm_ups == 1
    assert len(world.failed) == 6


async def test_a_batch_round_cut_to_the_budget_ends_the_run_after_it(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [2, 3, 1], mode="batch", rounds={1: BatchRound(errored=["0"])})
    world.budget_cut = {1: ["2"]}
    result = await wf.run(world)
    assert result.status == "budget_exhausted"
    # The errored request was planned into round 2, which was never submitted: its blocks
    # end with the run.
    assert list(world.polls) == [1]
    assert world.done == {"b1-0", "b1-1", "b1-2"}
    assert set(world.failed) == {"b0-0", "b0-1", "b2-0"}


async def test_a_pack_the_budget_cannot_hold_is_halved_while_one_block_of_it_fits(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(
        run_id,
        [2, 4],
        {
            # The whole pack does not fit what is left, one block would: its halves go on.
            "1": [Outcome("over_budget_split", REFUSED)],
            "1.1": [Outcome("over_budget_split", REFUSED)],
            "1.1.1": [Outcome("over_budget", REFUSED)],
        },
    )
    result = await wf.run(world, max_concurrent_packs=1)
    assert result.status == "budget_exhausted"
    # Three of pack 1's four blocks were answered in smaller calls before the budget ended.
    assert sorted(world.called_paths()) == ["0", "1", "1.0", "1.1", "1.1.0", "1.1.1"]
    assert world.done == {"b0-0", "b0-1", "b1-0", "b1-1", "b1-2"}
    assert world.failed == {"b1-3": REFUSED}
