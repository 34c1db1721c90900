"""Every exit of a pack's policy, run through RunWorkflow with scripted fake activities."""

from __future__ import annotations

import itertools

import pytest

from blockbatch.core.claude_errors import SET_A_VALID_KEY, ClaudeError, fatal_code_of
from tests.workflows.conftest import Harness
from tests.workflows.fakes import (
    BILLING,
    KEY_REJECTED,
    OVERLOADED,
    RATE_LIMITED,
    SPEND_CAP,
    TRUNCATED,
    Answer,
    FakeWorld,
    Hold,
    Outcome,
    Raise,
    Split,
    Step,
)

TOO_LONG = "prompt too long: 210000 tokens > 200000 maximum"


async def test_answered_pack_is_done_in_one_call(wf: Harness, run_id: str) -> None:
    world = FakeWorld(run_id, [4, 3])
    result = await wf.run(world)
    assert result.status == "completed"
    assert (result.blocks_ai_complete, result.blocks_failed, result.calls) == (7, 0, 2)
    # Both packs start in one workflow task: their calls may reach the fakes in either order.
    assert world.splits == [] and sorted(world.called_paths()) == ["0", "1"]


async def test_answer_with_remaining_blocks_is_halved_into_children(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [5], {"0": [Answer(ok=1)], "0.1": [Outcome("overflow", TOO_LONG)]})
    result = await wf.run(world)
    assert result.status == "completed" and result.blocks_ai_complete == 5
    assert world.splits == [
        Split("0", ["0.0", "0.1"], TRUNCATED, 4),
        Split("0.1", ["0.1.0", "0.1.1"], TOO_LONG, 2),
    ]
    halves = {c.pack_path: c.block_uids for c in world.calls if c.pack_path != "0"}
    assert halves == {
        "0.0": ["b0-1", "b0-2"],
        "0.1": ["b0-3", "b0-4"],
        "0.1.0": ["b0-3"],
        "0.1.1": ["b0-4"],
    }
    assert result.split_events == 2 and result.calls == 4  # the overflow was not paid


async def test_a_runs_call_heartbeat_is_every_pack_calls_heartbeat_timeout(
    wf: Harness, run_id: str
) -> None:
    """``RunOptions.call_heartbeat_s`` is how soon Temporal gives a lost worker's call to
    another worker: every call of the run takes it, a halved pack's too; unset, 20 s."""

    def halved() -> dict[str, list[Step]]:  # one answered block: the rest in two halves
        return {"0": [Answer(ok=1)]}

    world = FakeWorld(run_id, [5], halved())
    result = await wf.run(world, call_heartbeat_s=5)
    assert result.status == "completed" and result.blocks_ai_complete == 5
    assert world.heartbeat_timeouts == {"0": 5, "0.0": 5, "0.1": 5}
    default = FakeWorld(f"{run_id}-d", [5], halved())
    await wf.run(default)
    assert default.heartbeat_timeouts == {"0": 20, "0.0": 20, "0.1": 20}


async def test_a_runs_db_step_timeout_is_every_packs_apply_results_timeout(
    wf: Harness, run_id: str
) -> None:
    """``RunOptions.db_step_s`` is how soon Temporal gives a lost worker's database step to
    another worker: every pack's apply_results takes it, a halved pack's too; unset, 60 s."""

    def halved() -> dict[str, list[Step]]:  # one answered block: the rest in two halves
        return {"0": [Answer(ok=1)]}

    world = FakeWorld(run_id, [5], halved())
    result = await wf.run(world, db_step_s=7)
    assert result.status == "completed" and result.blocks_ai_complete == 5
    assert world.db_timeouts == {"0": 7, "0.0": 7, "0.1": 7}
    default = FakeWorld(f"{run_id}-d", [5], halved())
    await wf.run(default)
    assert default.db_timeouts == {"0": 60, "0.0": 60, "0.1": 60}


async def test_single_block_is_retried_in_place_then_done(wf: Harness, run_id: str) -> None:
    world = FakeWorld(
        run_id,
        [1],
        {"0": [Answer(ok=0, reason="block_uid missing"), Answer(ok=0, reason="block_uid missing")]},
    )
    result = await wf.run(world)
    assert result.status == "completed" and result.blocks_ai_complete == 1
    assert [(c.pack_path, c.pack_attempt) for c in world.calls] == [("0", 1), ("0", 2), ("0", 3)]
    assert world.splits == []


async def test_overflowing_pack_is_split(wf: Harness, run_id: str) -> None:
    world = FakeWorld(run_id, [2], {"0": [Outcome("overflow", TOO_LONG)]})
    result = await wf.run(world)
    assert result.status == "completed" and result.blocks_ai_complete == 2
    assert world.splits == [Split("0", ["0.0", "0.1"], TOO_LONG, 2)]


async def test_overflowing_single_block_fails_with_the_message(wf: Harness, run_id: str) -> None:
    world = FakeWorld(run_id, [1, 1], {"1": [Outcome("overflow", TOO_LONG)]})
    result = await wf.run(world)
    assert result.status == "completed"
    assert (result.blocks_ai_complete, result.blocks_failed) == (1, 1)
    assert world.failed == {"b1-0": TOO_LONG} and world.splits == []


async def test_rejected_request_is_halved_until_only_the_guilty_block_fails(
    wf: Harness, run_id: str
) -> None:
    message = "Claude rejected the request (400 invalid_request_error: content of a block)"
    # Any request that holds b0-2 is refused; the others are answered once alone.
    world = FakeWorld(
        run_id,
        [4],
        {
            "0": [Outcome("request_error", message)],
            "0.1": [Outcome("request_error", message)],
            "0.1.0": [Outcome("request_error", message)],
        },
    )
    result = await wf.run(world)
    assert (result.status, result.blocks_ai_complete, result.blocks_failed) == ("completed", 3, 1)
    assert world.failed == {"b0-2": message}
    assert [s.pack_path for s in world.splits] == ["0", "0.1"]


async def test_oversized_block_fails_with_what_to_do(wf: Harness, run_id: str) -> None:
    message = "block is too large for claude: split the block in the source document"
    world = FakeWorld(run_id, [1], {"0": [Outcome("oversized", message)]})
    result = await wf.run(world)
    assert (result.status, result.blocks_failed, result.calls) == ("completed", 1, 0)
    assert world.failed == {"b0-0": message}


async def test_pack_with_nothing_pending_is_done_without_a_call(wf: Harness, run_id: str) -> None:
    world = FakeWorld(run_id, [2, 2])
    world.done.update(world.packs[0])  # e.g. finished before a worker restart
    result = await wf.run(world)
    assert (result.status, result.blocks_ai_complete, result.calls) == ("completed", 4, 1)


async def test_claude_busy_past_retries_fails_blocks_not_the_run(wf: Harness, run_id: str) -> None:
    # Rate limited past every retry (Claude answers, it is not down: nothing pauses).
    world = FakeWorld(run_id, [2, 1], {"0": [Raise(RATE_LIMITED)]})
    result = await wf.run(world)
    assert result.status == "completed"
    assert (result.blocks_ai_complete, result.blocks_failed) == (1, 2)
    assert len([c for c in world.calls if c.pack_path == "0"]) > 1  # retried with backoff
    reasons = set(world.failed.values())
    assert len(reasons) == 1
    reason = reasons.pop()
    assert reason.startswith("Claude call failed after retries") and "429" in reason, reason


async def test_a_runs_call_retry_is_the_first_backoff_of_its_failed_calls(
    wf: Harness, run_id: str
) -> None:
    """``RunOptions.call_retry_s``: a call Claude failed without a retry-after is tried
    again that long after (the server's clock), then twice as long; unset, 2 s and 4 s."""

    def backoffs(world: FakeWorld) -> list[float]:
        at = world.attempts_at["0"]
        return [(b - a).total_seconds() for a, b in itertools.pairwise(at)]

    quick = FakeWorld(run_id, [2], {"0": [Raise(OVERLOADED, times=2)]})
    result = await wf.run(quick, call_retry_s=0.5)
    assert result.status == "completed" and result.blocks_ai_complete == 2
    first, second = backoffs(quick)
    assert 0.5 <= first < 1.5 and 1.0 <= second < 2.0, (first, second)
    default = FakeWorld(f"{run_id}-d", [2], {"0": [Raise(OVERLOADED, times=2)]})
    await wf.run(default)
    first, second = backoffs(default)
    assert 2.0 <= first < 3.0 and 4.0 <= second < 5.0, (first, second)


async def test_rejected_api_key_fails_the_run_and_stops_the_other_packs(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [2, 2, 2, 2], {"1": [Raise(KEY_REJECTED)], "2": [Hold("cancelling")]})
    result = await wf.run(world, max_concurrent_packs=2)
    assert result.status == "failed"
    assert result.error is not None and "API key was rejected" in result.error
    assert SET_A_VALID_KEY in result.error
    assert [c.pack_path for c in world.calls if c.pack_path == "1"] == ["1"]  # not retried
    assert "3" not in world.called_paths()
    assert (result.blocks_ai_complete, result.blocks_failed, result.blocks_cancelled) == (2, 0, 6)
    assert world.cancelling == result.error


async def test_a_spend_cap_ends_the_runs_calls_at_once_without_retries_or_halving(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [4, 4, 4, 4], {"0": [Raise(SPEND_CAP)], "1": [Hold("cancelling")]})
    result = await wf.run(world, max_concurrent_packs=2)
    assert result.status == "failed" and result.error is not None
    assert fatal_code_of(result.error) == "spend_limit"  # what its blocks end with
    assert "raise the limit in the Claude Console" in result.error
    assert "`blockbatch retry RUN_ID --cancelled`" in result.error
    # Within one round: the capped call once, the pack in flight stopped, no pack started.
    assert sorted(c.pack_path for c in world.calls) == ["0", "1"]
    assert world.splits == [] and world.failed == {}
    assert (result.blocks_ai_complete, result.blocks_cancelled) == (0, 16)
    assert world.cancelling == result.error


@pytest.mark.parametrize(("error", "code"), [(BILLING, "billing"), (SPEND_CAP, "spend_limit")])
async def test_an_account_error_answered_to_a_pack_is_not_halved_into_single_blocks(
    wf: Harness, run_id: str, error: ClaudeError, code: str
) -> None:
    # The real call_model hands a fatal error back as the attempt's outcome.
    world = FakeWorld(run_id, [4, 2], {"0": [Outcome("request_error", error.describe(), error)]})
    result = await wf.run(world, max_concurrent_packs=1)
    assert result.status == "failed" and fatal_code_of(result.error) == code
    assert world.splits == [] and world.called_paths() == ["0"]
    assert world.failed == {} and result.blocks_cancelled == 6


async def test_a_refused_lone_block_fails_with_refused_and_is_not_asked_again(
    wf: Harness, run_id: str
) -> None:
    world = FakeWorld(run_id, [1, 2], {"0": [Answer(refused="cyber")]})
    result = await wf.run(world)
    assert result.status == "completed"
    assert (result.blocks_ai_complete, result.blocks_failed) == (2, 1)
    assert [c.pack_path for c in world.calls if c.pack_path == "0"] == ["0"]  # once
    assert world.refused == {"b0-0"}
    assert world.failed == {"b0-0": "the model refused the request (cyber)"}


async def test_a_refused_pack_is_halved_until_the_refused_block_fails_alone(
    wf: Harness, run_id: str
) -> None:
    refused = Answer(refused="bio")
    world = FakeWorld(run_id, [4], {"0": [refused], "0.0": [refused], "0.0.1": [refused]})
    result = await wf.run(world)
    assert (result.status, result.blocks_ai_complete, result.blocks_failed) == ("completed", 3, 1)
    assert [s.pack_path for s in world.splits] == ["0", "0.0"]
    assert world.refused == {"b0-1"}
    assert [c.pack_path for c in world.calls].count("0.0.1") == 1
