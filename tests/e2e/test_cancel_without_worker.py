"""``cancel`` with no worker running (issue 33 point 4): the request is recorded in the run's
workflow, the command says a worker must run to carry it out and returns at once, and the
next worker does carry it out."""

from __future__ import annotations

import pytest

from blockbatch.api import Blockbatch, runs
from blockbatch.core.run_types import RunOptions
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`
from tests.waiting import until


async def test_cancel_without_a_worker_is_recorded_and_carried_out_by_the_next_one(
    bbstack: Stack, cli: Cli
) -> None:
    doc = await bbstack.bb.ingest_bytes(markdown_doc(6), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(200))
    run_id = await bbstack.bb.start_run(doc, schema_id, RunOptions(pack_size=2))
    assert not await bbstack.bb.workers_polling()

    # Before: the Update waited for a worker and the command hung until killed.
    out = await cli("cancel", run_id, timeout=60)
    assert out.code == 0, out.err
    assert f"cancel recorded for run {run_id}" in out.out
    assert f"no worker is running on task queue {bbstack.task_queue!r}" in out.out
    as_json = await cli("cancel", run_id, "--json", timeout=60)
    data = as_json.json()
    assert data["waits_for_worker"] is True and data["cancel_sent"] is True

    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "cancelled"
    calls = await bbstack.pool.fetchval(
        "select count(*) from llm_calls where run_id = $1 and purpose = 'pack'", run_id
    )
    assert calls == 0  # cancelled before any pack asked Claude


async def test_cancel_a_busy_worker_does_not_take_in_time_says_so_and_is_carried_out(
    bbstack: Stack, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker polls but does not take the cancel within the wait (here a millisecond, so
    no worker can): the command must not say no worker runs; the worker carries it out."""
    monkeypatch.setattr(runs, "CANCEL_UPDATE_WAIT_S", 0.001)
    doc = await bbstack.bb.ingest_bytes(markdown_doc(6), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(200))
    # The Update given up after a millisecond leaves the run a workflow task that times out
    # (seen in its history: WORKFLOW_TASK_TIMED_OUT, then the Update accepted and the cancel
    # carried out): this run's task timeout is 2 s, not 10, so the test does not wait 10 s.
    bb = Blockbatch(
        bbstack.pool,
        bbstack.client,
        bbstack.settings.model_copy(update={"workflow_task_timeout_s": 2}),
    )
    # Two runs, one cancelled in words and one in JSON, so each cancel is its run's first.
    # A second cancel of the same run raced the first, whose Update and signal the worker
    # may have handled by then: once (a stress run, 2026-11-29) its JSON came back without
    # `waits_for_worker`. No run can end before its cancel: every answer is held from
    # before the runs start.
    bbstack.sim.hold()
    try:
        in_words = await bb.start_run(doc, schema_id, RunOptions(pack_size=2))
        in_json = await bb.start_run(doc, schema_id, RunOptions(pack_size=2))
        async with bbstack.worker():
            await until(lambda: bbstack.sim.held() >= 2, "calls in flight")
            out = await cli("cancel", in_words, timeout=60)
            assert out.code == 0, out.err
            assert f"cancel recorded for run {in_words}; the worker on task queue" in out.out
            assert "did not take it within 0.001 s" in out.out
            assert "no worker is running" not in out.out
            as_json = await cli("cancel", in_json, "--json", timeout=60)
            assert as_json.code == 0, as_json.err
            data = as_json.json()
            assert data["cancel_sent"] is True, data
            assert data["waits_for_worker"] is True and data["worker_polling"] is True
            bbstack.sim.release()
            results = [await bbstack.bb.wait(run_id) for run_id in (in_words, in_json)]
    finally:
        bbstack.sim.release()
    assert [r.status for r in results] == ["cancelled", "cancelled"]
