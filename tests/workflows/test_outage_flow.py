"""Riding out an outage: the run pauses, probes, resumes; no block fails for it."""

from __future__ import annotations

from blockbatch.core.claude_errors import fatal_code_of
from blockbatch.core.outage_types import OutageOptions
from blockbatch.core.run_types import RunProgress
from tests.workflows.conftest import Harness
from tests.workflows.fakes import Answer, FakeWorld, Outage


async def test_outage_pauses_the_run_and_every_block_ends_done(wf: Harness, run_id: str) -> None:
    outage = Outage(after_calls=1, probes_down=3)
    world = FakeWorld(run_id, [2] * 6, outage=outage)
    result = await wf.run(world, max_concurrent_packs=2)
    assert result.status == "completed"
    assert (result.blocks_ai_complete, result.blocks_failed) == (12, 0)
    assert world.failed == {}
    assert outage.probes == 4 and not outage.down
    # Only the two packs in flight when Claude went down called during the outage, each
    # the four times its activity tries before handing back; then only probes.
    assert outage.failed_calls == 2 * 4
    assert outage.started_while_paused == []
    assert result.outages == 1 and result.paused_s > 0


async def test_paused_run_says_why_in_progress_and_resumes(wf: Harness, run_id: str) -> None:
    outage = Outage(after_calls=1, probes_down=0, hold_probe=True)
    world = FakeWorld(run_id, [2] * 4, outage=outage)
    async with wf.worker(world):
        handle = await wf.start(world, max_concurrent_packs=2)
        # The first probe is out: the run is paused.
        await wf.skipping_until(world.in_flight, "the first probe out")
        progress = await handle.query("progress", result_type=RunProgress)
        meta = await handle.query("__temporal_workflow_metadata")
        world.release.set()
        result = await handle.result()
    assert progress.status == "waiting_for_api"
    assert progress.outage is not None and progress.outage.failures >= 4
    assert "503" in progress.outage.last_error
    # The Temporal UI shows the same under the run's current details.
    assert meta.current_details.startswith("**waiting for the API: ")
    assert "consecutive failures since" in meta.current_details
    assert result.status == "completed" and result.blocks_failed == 0


async def test_cancel_while_paused_cancels_blocks_and_fails_none(wf: Harness, run_id: str) -> None:
    outage = Outage(after_calls=1, probes_down=10**6, hold_probe=True)
    world = FakeWorld(run_id, [2] * 4, outage=outage)
    async with wf.worker(world):
        handle = await wf.start(world, max_concurrent_packs=2)
        await wf.skipping_until(world.in_flight, "the first probe out")
        await handle.execute_update("cancel")
        await world.cancel_marked.wait()
        world.release.set()
        result = await handle.result()
    assert result.status == "cancelled"
    assert world.failed == {}
    assert (result.blocks_ai_complete, result.blocks_cancelled) == (2, 6)


async def test_a_pack_split_in_halves_rides_out_the_outage_too(wf: Harness, run_id: str) -> None:
    outage = Outage(after_calls=1, probes_down=2)
    world = FakeWorld(run_id, [4], {"0": [Answer(ok=0)]}, outage=outage)
    result = await wf.run(world)
    assert result.status == "completed" and result.blocks_failed == 0
    assert {s.pack_path for s in world.splits} == {"0"}
    assert outage.probes == 3


async def _run_seconds(wf: Harness, run_id: str) -> float:
    """How long the run's workflow lasted, in the test server's (skipped) time."""
    info = await wf.env.client.get_workflow_handle(f"run-{run_id}").describe()
    assert info.close_time is not None
    return (info.close_time - info.start_time).total_seconds()


async def test_an_endpoint_no_connection_reaches_ends_the_run_within_two_minutes(
    wf: Harness, run_id: str
) -> None:
    where = "127.0.0.1:9: connection refused ([Errno 111])"
    outage = Outage(down=True, probes_down=10**6, unreachable=where)
    world = FakeWorld(run_id, [2] * 4, outage=outage)
    result = await wf.run(world, max_concurrent_packs=2)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith(f"could not connect to Claude's endpoint {where}")
    assert "HTTPS_PROXY" in result.error and "ANTHROPIC_BASE_URL" in result.error
    assert fatal_code_of(result.error) == "unreachable"
    assert world.failed == {}  # no block failed for it: they end cancelled, unreachable
    assert result.blocks_cancelled == 8
    assert await _run_seconds(wf, run_id) < 120


async def test_an_outage_after_answers_came_pauses_until_its_limit(
    wf: Harness, run_id: str
) -> None:
    outage = Outage(after_calls=1, probes_down=10**6)
    world = FakeWorld(run_id, [2] * 4, outage=outage)
    options = OutageOptions(max_pause_s=1800)
    result = await wf.run(world, max_concurrent_packs=2, outage=options)
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("Claude did not answer for 30 min")
    assert fatal_code_of(result.error) == "api_unavailable"
    assert result.blocks_ai_complete == 2 and world.failed == {}
    # It waited out the pause (probing every 30 s at most), then ended on time.
    assert outage.probes > 50
    assert 1800 <= await _run_seconds(wf, run_id) < 1800 + 120
