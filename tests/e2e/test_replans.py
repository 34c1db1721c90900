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


@pytest.mark.parametrize("by", ["ranges", "block ids"])
async def test_a_replan_moves_every_unstarted_block_a_few_packs_per_statement(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    # A million-block run's first re-plan moved every unstarted block in one statement,
    # which overran the pool's command timeout; here two packs a statement, by the packs'
    # block ranges (what planning makes) and by block ids (packs that interleave).
    monkeypatch.setattr(replans, "REPACK_PACKS_PER_STATEMENT", 2)
    found: list[bool] = []
    real = replans.pack_ranges

    def ranges(indexes: Any, packs: Any) -> Any:
        out = real(indexes, packs) if by == "ranges" else None
        found.append(out is not None)
        return out

    monkeypatch.setattr(replans, "pack_ranges", ranges)
    doc = await bbstack.bb.ingest_bytes(markdown_doc(90), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=200))
    run_id = await bbstack.bb.start_run(
        doc, schema_id, RunOptions(max_concurrent_packs=2, output_budget=1024)
    )
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 90
    change = await bbstack.pool.fetchrow(
        """select first_pack, packs_before, packs_after from plan_changes
           where run_id = $1 and kind = 'learned'""",
        run_id,
    )
    assert change is not None and change["packs_after"] - change["first_pack"] > 4
    assert change["packs_after"] != change["packs_before"]
    assert found == [by == "ranges"]
    rows = await bbstack.pool.fetch(
        """select pack_index from overlays where run_id = $1 and pack_index >= $2
           order by block_index""",
        run_id,
        change["first_pack"],
    )
    packs = [r["pack_index"] for r in rows]
    # Every block from the re-plan on is in one of its packs, each pack one run of
    # consecutive blocks, the packs in order and none empty.
    assert packs == sorted(packs)
    assert sorted(set(packs)) == list(range(change["first_pack"], change["packs_after"]))


def test_pack_ranges_are_runs_of_consecutive_blocks_or_none() -> None:
    assert replans.pack_ranges([3, 4, 7, 9, 10], [5, 5, 6, 7, 7]) == [
        (5, 3, 4),
        (6, 7, 7),
        (7, 9, 10),
    ]
    assert replans.pack_ranges([], []) == []
    # A pack whose blocks interleave another's has no range.
    assert replans.pack_ranges([1, 2, 3], [5, 6, 5]) is None
    assert replans.pack_ranges([1, 2, 3], [6, 5, 5]) is None
