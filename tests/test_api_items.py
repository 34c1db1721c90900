"""The Python API for programs and notebooks: llm_batch / allm_batch, and UI findability."""

from __future__ import annotations

import asyncio
from typing import Any

from blockbatch.api import Blockbatch, allm_batch, llm_batch
from blockbatch.api.items import items_to_blocks
from blockbatch.cli import amain
from core.models import RunOptions
from tests.conftest import Stack
from tests.helpers import block_content, extract_schema, markdown_doc

ITEMS: list[Any] = [
    "Page the primary on call when the queue backs up.",
    {"text": "Rotate certificates before they expire.", "id": 7, "team": "ledger"},
    "   ",
    {"text": "Escalate severity one incidents to the incident commander.", "block_type": "rule"},
    "Write the postmortem within five working days.",
    {"text": "Hand the pager over on Tuesday morning."},
]


async def test_allm_batch_returns_one_result_per_item_in_order(bbstack: Stack) -> None:
    data, blocks, _ = items_to_blocks(ITEMS)
    doc = await bbstack.bb.ingest_blocks(data, blocks, name="items", fmt="items")
    # The 5th item: block 3.
    bbstack.sim.scenario(always_skip_contents=[await block_content(bbstack.pool, f"{doc}:3")])
    out = await allm_batch(ITEMS, extract_schema(instruction_words=200), bb=bbstack.bb,
                           with_worker=True, pack_size=2, max_block_attempts=1)
    assert out.run.status == "completed_with_failures"  # block 3 failed
    assert len(out) == len(ITEMS) == len(out.values)
    assert [r.index for r in out] == list(range(len(ITEMS)))
    assert [r.ok for r in out] == [True, True, False, True, False, True]
    assert out[2].status == "skipped" and "empty" in (out[2].error or "")
    assert out[2].block_uid is None
    assert out[4].status == "failed" and "missing" in (out[4].error or "")
    assert out[4].block_uid == f"{doc}:3" and out[4].value is None
    for item, result in zip(ITEMS, out):
        if result.ok:
            text = item if isinstance(item, str) else item["text"]
            assert result.value is not None and result.error is None
            assert result.value["word_count"] == len(text.split())
            assert result.value["first_40_chars"] == text[:40]
    assert [e.index for e in out.errors] == [2, 4]
    meta = await bbstack.pool.fetchval(
        "select metadata from blocks where block_uid = $1", f"{doc}:1")
    assert meta == {"id": 7, "team": "ledger", "item_index": 1}


async def test_llm_batch_blocking_form_with_in_process_worker(bbstack: Stack) -> None:
    # The blocking form makes its own connections from settings, as a script would.
    out = await asyncio.to_thread(
        llm_batch, ["One two three.", "Four five."], extract_schema(instruction_words=100),
        settings=bbstack.settings, with_worker=True,
    )
    assert [r.ok for r in out] == [True, True]
    assert [v["word_count"] for v in out.values if v] == [3, 2]
    assert out.run.calls == 1 and out.run_id


async def test_packs_and_halves_are_findable_in_the_ui_by_run_id(bbstack: Stack) -> None:
    bbstack.sim.scenario(faults={"truncate": 0.5}, seed=2)
    bb: Blockbatch = bbstack.bb
    doc = await bb.ingest_bytes(markdown_doc(24), name="ui.md", fmt="markdown")
    schema_id = await bb.add_schema(extract_schema(instruction_words=200))
    run_id = await bb.start_run(doc, schema_id, RunOptions(pack_size=8))
    async with bbstack.worker():
        result = await bb.wait(run_id)
    assert result.split_events > 0
    expected = {f"run-{run_id}"} | {f"run-{run_id}/pack-{p}" for p in
                                    await _pack_paths(bbstack, run_id)}
    found: dict[str, Any] = {}
    for _ in range(100):  # visibility is eventually consistent
        found = {w.id: w async for w in bbstack.client.list_workflows(
            f'BlockbatchRunId = "{run_id}"')}
        if set(found) >= expected:
            break
        await asyncio.sleep(0.1)
    assert set(found) == expected
    assert any("." in wid.rsplit("pack-", 1)[-1] for wid in found)  # halves are listed too
    for wid, w in found.items():
        attrs = {k.name: v for k, v in ((p.key, p.value) for p in w.typed_search_attributes)}
        assert attrs["BlockbatchDocument"] == doc and attrs["BlockbatchSchema"] == schema_id
        if "/pack-" in wid:
            assert attrs["BlockbatchPack"] == wid.rsplit("pack-", 1)[1]
    run = await bbstack.client.get_workflow_handle(f"run-{run_id}").describe()
    assert "ui.md" in (await run.static_summary() or "")
    assert f'BlockbatchRunId = "{run_id}"' in (await run.static_details() or "")


async def _pack_paths(s: Stack, run_id: str) -> set[str]:
    rows = await s.pool.fetch(
        """select pack_path from llm_calls where run_id = $1 and purpose = 'pack'
           union select pack_path from split_events where run_id = $1""", run_id)
    return {r["pack_path"] for r in rows}


async def test_cli_runs_in_process_with_a_given_client(bbstack: Stack, capsys: Any) -> None:
    code = await amain(["list", "--json"], client=bbstack.client, settings=bbstack.settings)
    assert code == 0 and capsys.readouterr().out.strip() == "[]"
