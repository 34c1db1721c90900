"""`status` of a running run whose worker is gone (issue 39): the stored counts, and why the
live figures did not come (the busy worker's deadline: tests/unit/test_status_live.py)."""

from __future__ import annotations

from datetime import timedelta

from blockbatch.core.run_types import RunOptions
from tests.conftest import SimulatorProcess, Stack
from tests.helpers import extract_schema, markdown_doc
from tests.starter_fixtures import Cli, Result, cli_fixture  # noqa: F401 - provides `cli`
from tests.waiting import until

NO_POLLER = "progress     no worker is polling the run's task queue; the blocks above are as stored"


async def test_status_without_its_worker_shows_the_stored_counts_and_says_why(
    bbstack: Stack, cli: Cli, sim: SimulatorProcess
) -> None:
    doc = await bbstack.bb.ingest_bytes(markdown_doc(6), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(200))
    # The stopped worker's held call moves on after the heartbeat timeout (5 s, not 20).
    options = RunOptions(pack_size=2, call_heartbeat_s=5)
    run_id = await bbstack.bb.start_run(doc, schema_id, options)
    sim.hold()
    try:
        # The run plans and asks Claude; its answer is held. Then its worker stops at once
        # (by default a stopping worker gives a call under way 30 s).
        async with bbstack.worker(graceful_shutdown=timedelta(0)):
            await until(sim.held, "a pack call in flight")
        # Temporal says no worker polls once it has gone a while without a poll (5 s on the
        # session's dev server, tests/conftest.py `TEST_TEMPORAL_OPTIONS`; 20 s by default);
        # until then the query waits for one, and `status` says the worker did not answer.
        out = await until(lambda: _saying(cli, run_id, NO_POLLER), "status: no worker polls")
        assert f"run {run_id}: running" in out.out
        assert "0 ok (0 confirmed) · 0 failed · 0 cancelled · 6 pending · 6 total" in out.out
        data = (await cli("status", run_id, "--json", timeout=60)).json()
        assert data["progress"] is None and data["run"]["status"] == "running"
    finally:
        sim.release()
    # With a worker back (its next answer held, so the run is still running), the same
    # command shows the live figures.
    async with bbstack.worker():
        async with sim.holding():
            # On a loaded machine one look may miss the short deadline: look again.
            live = await until(lambda: _live_line(cli, run_id), "status with live progress")
            assert "/6 blocks" in live
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed"


async def _live_line(cli: Cli, run_id: str) -> str | None:
    """`status`'s progress line when it has the live figures, else ``None``."""
    out = await cli("status", run_id, timeout=60)
    assert out.code == 0, out.err
    lines = [x for x in out.out.splitlines() if x.strip().startswith("progress")]
    assert len(lines) == 1, out.out
    return None if "as stored" in lines[0] else lines[0]


async def _saying(cli: Cli, run_id: str, line: str) -> Result | None:
    """`status`'s output when it has ``line``, else ``None``."""
    out = await cli("status", run_id, timeout=60)
    assert out.code == 0, out.err
    return out if line in out.out else None
