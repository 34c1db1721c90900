"""Killing the worker process mid-run: the run completes on a new worker, nothing twice,
and the limiter reservations it held cost the fleet one refill at most."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from blockbatch.core.models import RunOptions
from blockbatch.store import ratelimits
from tests.conftest import ROOT, Stack
from tests.helpers import extract_schema, markdown_doc


async def start_worker_process(s: Stack, log: Path) -> asyncio.subprocess.Process:
    out = log.open("ab")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "worker.py"),
        env=s.worker_env("sim-test-key", log),
        stdout=out,
        stderr=out,
        cwd=ROOT,
    )


async def count(s: Stack, sql: str, *args: object) -> int:
    return int(await s.pool.fetchval(sql, *args))


async def test_killed_worker_run_completes_without_double_writes_or_payments(
    bbstack: Stack, tmp_path: Path
) -> None:
    s = bbstack
    s.sim.scenario(speed_factor=1.0, latency={"ttft_ms": 400, "per_output_token_ms": 0})
    doc = await s.bb.ingest_bytes(markdown_doc(120), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(instruction_words=200))
    run_id = await s.bb.start_run(doc, schema_id, RunOptions(pack_size=5, max_concurrent_packs=4))

    first = await start_worker_process(s, tmp_path / "worker1.log")
    for _ in range(600):
        done = await count(
            s, "select count(*) from overlays where run_id = $1 and status = 'ai_complete'", run_id
        )
        in_flight = await count(
            s, "select count(*) from llm_calls where run_id = $1 and status = 'started'", run_id
        )
        reserved = await count(
            s,
            "select count(*) from rate_reservations where run_id = $1 and settled_at is null",
            run_id,
        )
        if done >= 30 and in_flight > 0 and reserved > 0:
            break
        await asyncio.sleep(0.05)
    limiter = await s.pool.fetchrow(
        """select l.key_hash, l.model, l.factor from rate_limiters l join rate_reservations r
           using (key_hash, model) where r.run_id = $1 limit 1""",
        run_id,
    )
    first.send_signal(signal.SIGKILL)
    await first.wait()
    killed_at_done = done

    second = await start_worker_process(s, tmp_path / "worker2.log")
    try:
        result = await asyncio.wait_for(s.bb.wait(run_id), timeout=150)
    finally:
        second.send_signal(signal.SIGTERM)
        await second.wait()

    assert killed_at_done < 120, "the worker was killed before the run finished"
    # The killed worker held limiter reservations it never settled. They cost the fleet one
    # refill at most: a minute on (the database clock moved back), every bucket is full
    # again, and the fleet's rate (its AIMD factor) was not cut for them.
    assert (
        await count(
            s,
            "select count(*) from rate_reservations where run_id = $1 and settled_at is null",
            run_id,
        )
        >= 1
    )
    await s.pool.execute(
        "update rate_limiters set at = at - 60 where key_hash = $1 and model = $2",
        limiter["key_hash"],
        limiter["model"],
    )
    (view,) = [
        v
        for v in await ratelimits.views(s.pool, limiter["key_hash"])
        if v.model == limiter["model"]
    ]
    assert view.factor >= limiter["factor"]
    # Full to what is open now: an idle limiter ramps up again (blockbatch/core/ratelimit.py).
    assert all(
        view.levels[k] >= view.limits[k] * view.factor * view.ramp - 1 for k in view.limits
    ), view
    assert result.status == "completed"
    assert result.blocks_ai_complete == 120
    # Pay once: never two answered calls for one pack attempt.
    assert (
        await count(
            s,
            """select count(*) from (select 1 from llm_calls
                             where run_id = $1 and status = 'succeeded'
                             group by pack_path, pack_attempt having count(*) > 1) d""",
            run_id,
        )
        == 0
    )
    # Each overlay was written by exactly one answered call that contained its block.
    assert (
        await count(
            s,
            """select count(*) from overlays o join llm_calls c using (call_id)
                             where o.run_id = $1 and o.status = 'ai_complete'
                               and (c.status <> 'succeeded'
                                    or not (o.block_uid = any(c.block_uids)))""",
            run_id,
        )
        == 0
    )
    # No block was applied by two different answers.
    assert (
        await count(
            s,
            """select count(*) from (
                               select u from llm_calls c, unnest(c.block_uids) u
                               where c.run_id = $1 and c.status = 'succeeded'
                                 and c.apply_outcome is not null
                               group by u having count(*) > 1) d""",
            run_id,
        )
        == 0
    )
