"""An outage of Claude in the middle of a 200-block run (every call 503): the run pauses, probes, resumes, and every
block ends done; no block fails and no block is charged an attempt for it.

Time-compressed: probes every 0.5-1 s instead of 5-30 s; the packs' own four tries before
the run pauses back off from the run's ``call_retry_s``, 0.2 s here instead of 2 s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from blockbatch.core.outage_types import OutageOptions
from blockbatch.core.run_types import RunOptions, RunProgress
from tests.conftest import Stack
from tests.helpers import extract_schema, marked_document
from tests.waiting import until

SLOW = {"speed_factor": 1.0, "latency": {"ttft_ms": 300, "per_output_token_ms": 0}}


async def _until(
    what: str,
    check: Callable[[], Awaitable[RunProgress]],
    ok: Callable[[RunProgress], bool],
    timeout_s: float = 120,
) -> RunProgress:

    async def seen() -> RunProgress | None:
        progress = await check()
        return progress if ok(progress) else None

    return await until(seen, f"saw {what}", timeout=timeout_s, interval=0.2)


async def test_an_outage_mid_run_pauses_it_and_every_block_ends_done(bbstack: Stack) -> None:
    bbstack.sim.scenario(**SLOW)
    doc = await bbstack.bb.ingest_bytes(marked_document(200, set()), name="o.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=200))
    options = RunOptions(
        pack_size=10,
        max_concurrent_packs=4,
        outage=OutageOptions(probe_initial_s=0.5, probe_max_s=1.0),
        # The four failed tries before the pause back off from 0.2 s, not 2 s.
        call_retry_s=0.2,
    )
    run_id = await bbstack.bb.start_run(doc, schema_id, options)
    async with bbstack.worker():

        def progress() -> Awaitable[RunProgress]:
            return bbstack.bb.progress(run_id)

        # A quarter of the 20 packs done: 15 are left when Claude goes down, so the four
        # packs in flight fail their four tries each (200 blocks are enough for that; the
        # 500 this ran on only made the run longer after the outage).
        await _until("a quarter of the packs done", progress, lambda p: p.packs_done >= 5)
        bbstack.sim.scenario(**SLOW, errors={"outage_status": 503})
        paused = await _until("the run paused", progress, lambda p: p.status == "waiting_for_api")
        await _until(
            "two probes", progress, lambda p: p.outage is not None and p.outage.probes >= 2
        )
        # The run paused before its first probe: no pack may have made its first call since.
        started_while_paused = await bbstack.pool.fetchval(
            """select count(*) from (select min(started_at) as first from llm_calls
                                     where run_id = $1 and purpose = 'pack'
                                     group by pack_path) as packs
               where first > (select min(started_at) from llm_calls
                              where run_id = $1 and purpose = 'probe')""",
            run_id,
        )
        bbstack.sim.scenario(**SLOW)  # Claude is back
        result = await bbstack.bb.wait(run_id)

    assert paused.outage is not None and paused.outage.failures >= 4
    assert "503" in paused.outage.last_error
    assert paused.blocks_failed == 0
    assert started_while_paused == 0  # no pack started while Claude was down
    assert (result.status, result.blocks_ai_complete, result.blocks_failed) == ("completed", 200, 0)
    assert result.outages == 1 and result.paused_s > 0
    # Probes are in the ledger as such: the unanswered ones with the 503, the last answered.
    probes = await bbstack.pool.fetch(
        """select status, http_status from llm_calls where run_id = $1 and purpose = 'probe'
           order by pack_attempt""",
        run_id,
    )
    assert len(probes) >= 3
    assert [p["status"] for p in probes[:-1]] == ["failed"] * (len(probes) - 1)
    assert {p["http_status"] for p in probes[:-1]} == {503}
    assert probes[-1]["status"] == "succeeded"
    # No pack call failed more often than the outage forced: at most the four tries of each
    # pack in flight when Claude went down (the same attempt made again after the pause
    # succeeds); a pack that started late may have had fewer when Claude came back.
    failed = await bbstack.pool.fetch(
        """select pack_path, pack_attempt, count(*) as n from llm_calls
           where run_id = $1 and purpose = 'pack' and status = 'failed'
           group by 1, 2""",
        run_id,
    )
    assert failed and all(1 <= r["n"] <= 4 and r["pack_attempt"] == 1 for r in failed), failed
    assert any(r["n"] == 4 for r in failed), failed  # the packs that paused the run
    assert len(failed) <= options.max_concurrent_packs
    # Each block is charged the one attempt that answered it, as in a run without outage.
    charged = await bbstack.pool.fetchval(
        "select count(*) from overlays where run_id = $1 and attempt_count <> 1", run_id
    )
    assert charged == 0
