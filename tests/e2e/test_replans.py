"""Re-planning at continue-as-new reads the unstarted blocks only when the answers say the
plan would change (a million-block run continued as new 50 times, each a minute of reading)."""

from __future__ import annotations

from typing import Any

import pytest

from blockbatch.core.run_types import RunOptions
from blockbatch.store import replans
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc


async def test_a_learning_run_reads_its_unstarted_blocks_once_however_often_it_continues(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    real = replans.unstarted_blocks

    async def counted(conn: Any, run_id: str, first_pack: int) -> list[replans.UnstartedBlock]:
        blocks = await real(conn, run_id, first_pack)
        reads.append(len(blocks))
        return blocks

    # The worker runs in this process: its activities find the counting function.
    monkeypatch.setattr(replans, "unstarted_blocks", counted)
    doc = await bbstack.bb.ingest_bytes(markdown_doc(120), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=200))
    # A schema's first run learns: a learning pack alone, then the rest planned from its
    # answer; four packs a history, so it continues as new several times, asking each time.
    run_id = await bbstack.bb.start_run(
        doc, schema_id, RunOptions(max_concurrent_packs=2, output_budget=1024), packs_per_history=4
    )
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 120
    executions = 1
    history = await bbstack.bb.handle(run_id).fetch_history()
    while continued := history.events[
        0
    ].workflow_execution_started_event_attributes.continued_execution_run_id:
        executions += 1
        history = await bbstack.bb.client.get_workflow_handle(
            f"run-{run_id}", run_id=continued
        ).fetch_history()
    assert executions >= 3, "the test needs the run to continue as new more than once"
    learned = await bbstack.pool.fetch(
        "select first_pack from plan_changes where run_id = $1 and kind = 'learned'", run_id
    )
    # One re-plan from the learning pack's answer; every later continuation found its
    # answers writing what the plan assumed and kept it without reading the blocks.
    assert len(learned) == 1
    assert len(reads) == 1, reads
