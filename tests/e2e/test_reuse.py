"""Incremental re-runs end to end: a re-ingested, edited document calls Claude only for the
blocks whose answer no earlier run has (real Postgres, Temporal dev server, simulator)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import aiohttp
import pytest

from blockbatch.api.errors import NothingToRetry
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.report import summary_lines
from blockbatch.runtime.claude import anthropic_client
from blockbatch.runtime.temporal import build_worker
from blockbatch.store import overlays as store_overlays
from blockbatch.web.app import create_app
from tests.conftest import Stack
from tests.helpers import block_content, extract_schema, markdown_doc
from tests.web_helpers import serving

EDITED = (4, 17, 25)
#: In run 1 a reviewer edits one block (its model answer is still reusable) and rejects
#: another (its answer is not: run 2 calls for it again).
EDITED_BY_REVIEWER, REJECTED = 8, 12


def documents() -> tuple[bytes, bytes]:
    """A 31-block document (one with non-ASCII text) and the same with EDITED changed."""
    blocks = markdown_doc(30).decode().strip().split("\n\n")
    blocks.append("Überweisung prüfen: ✓ 漢字 — the runbook's last paragraph.")
    edited = [b + " Edited in review." if i in EDITED else b for i, b in enumerate(blocks)]
    return ("\n\n".join(blocks) + "\n").encode(), ("\n\n".join(edited) + "\n").encode()


async def run(s: Stack, doc: str, schema_id: str, **options: Any) -> tuple[str, RunResult]:
    # No quality probe: the calls counted here are the ones reuse saves or makes.
    run_id = await s.bb.start_run(
        doc, schema_id, RunOptions(**{"quality": QualityOptions(probe_rate=0), **options})
    )
    return run_id, await s.bb.wait(run_id)


async def sent_blocks(s: Stack, run_id: str) -> list[int]:
    """Block indexes of the blocks the run's calls carried (the ledger)."""
    return sorted(
        await s.pool.fetchval(
            """select coalesce(array_agg(split_part(u, ':', 2)::int), '{}')
           from llm_calls, unnest(block_uids) as u
           where run_id = $1 and purpose <> 'warm_up' and status = 'succeeded'""",
            run_id,
        )
    )


async def overlays(s: Stack, run_id: str) -> dict[int, dict[str, Any]]:
    rows = await s.pool.fetch(
        """select block_index, status, staging, attempt_count, pack_index, reused_from_run_id,
                  reused_from_call_id, answer_key from overlays where run_id = $1""",
        run_id,
    )
    return {r["block_index"]: dict(r) for r in rows}


async def test_a_re_run_of_an_edited_document_calls_only_for_changed_blocks(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = bbstack
    # A plan inserts its overlays and looks its answers up a bounded number a statement
    # (a million in one overran the pool's command timeout): here 4, so the 31 blocks
    # take several statements each, and every figure below still holds.
    monkeypatch.setattr(store_overlays, "PLAN_ROWS_PER_STATEMENT", 4)
    original, edited = documents()
    schema_id = await s.bb.add_schema(extract_schema(instruction_words=200))
    doc1 = await s.bb.ingest_bytes(original, name="handbook.md", fmt="markdown")
    async with s.worker():
        run1, first = await run(s, doc1, schema_id, pack_size=8)
        assert (first.status, first.blocks_reused, first.reuse_saved_usd) == ("completed", 0, 0)
        before = await overlays(s, run1)
        await s.bb.edit(
            run1, str(EDITED_BY_REVIEWER), "summary", "a reviewer's summary", reviewer="ann"
        )
        await s.bb.reject(run1, [str(REJECTED)], reviewer="ann")

        # The quote of the edited document prices only what would be sent: the three
        # edited blocks and the rejected one.
        quoted = await s.bb.estimate(
            edited,
            extract_schema(instruction_words=200),
            RunOptions(pack_size=8),
            fmt="markdown",
            count=False,
        )
        assert (
            "27 of 31 blocks have an earlier run's answer and are reused, not sent: "
            "the figures are for the other 4"
        ) in quoted.notes, quoted.notes
        # The edited document is a new document: new id, new block uids.
        doc2 = await s.bb.ingest_bytes(edited, name="handbook.md", fmt="markdown")
        assert doc2 != doc1
        run2, second = await run(s, doc2, schema_id, pack_size=8)
        # A third run of the same (batch mode): every block is answered already, no pack,
        # no request, no call.
        run3, third = await run(s, doc2, schema_id, pack_size=8, mode="batch")
        # Reuse off: every block is sent.
        run4, fourth = await run(s, doc2, schema_id, pack_size=8, reuse_answers=False)

    # Ingest stored each block's digest as migration 010 computes it for older blocks.
    assert (
        await s.pool.fetchval(
            """select count(*) from blocks where content_sha256 <> encode(sha256(convert_to(
               length(block_type)::text || ':' || block_type || block_content, 'UTF8')),
               'hex')"""
        )
        == 0
    )

    # Run 2 called Claude for the edited blocks and the rejected one only.
    assert await sent_blocks(s, run2) == sorted([*EDITED, REJECTED])
    assert second.status == "completed" and second.blocks_ai_complete == 31
    assert second.blocks_reused == 31 - len(EDITED) - 1
    after = await overlays(s, run2)
    calls1 = {
        r["call_id"]: r
        for r in await s.pool.fetch(
            """select call_id, cost_usd::float8 as cost, block_uids from llm_calls
           where run_id = $1""",
            run1,
        )
    }
    saved = 0.0
    for i, o in after.items():
        if i in EDITED or i == REJECTED:
            assert o["reused_from_run_id"] is None and o["attempt_count"] == 1
            assert o["answer_key"] != before[i]["answer_key"] or i == REJECTED
            continue
        # Unchanged blocks: the identical model answer (for the edited one, the model's,
        # not the reviewer's), marked with the run and the call that paid for it.
        assert o["staging"] == before[i]["staging"], i
        assert o["answer_key"] == before[i]["answer_key"]
        assert (o["status"], o["attempt_count"], o["pack_index"]) == ("ai_complete", 0, None)
        assert o["reused_from_run_id"] == run1
        call = calls1[o["reused_from_call_id"]]
        assert f"{doc1}:{i}" in call["block_uids"]
        saved += call["cost"] / len(call["block_uids"])
    assert second.reuse_saved_usd == pytest.approx(saved, abs=1e-5)
    assert second.calls == 1 and second.cost_usd < first.cost_usd / 3
    assert any(
        line.split()[0] == "reused" and f"{second.blocks_reused} blocks" in line
        for line in summary_lines(second, baseline=None, links={"run": "", "packs": ""})
    )

    # Run 3: all reused, from the runs that paid (run 1, or run 2 for the blocks it sent).
    assert (third.status, third.blocks_reused, third.calls, third.pack_count) == (
        "completed",
        31,
        0,
        0,
    )
    assert third.blocks_ai_complete == 31
    sources = {o["reused_from_run_id"] for o in (await overlays(s, run3)).values()}
    assert sources == {run1, run2}
    # Run 4: reuse off, every block sent, nothing reused.
    assert await sent_blocks(s, run4) == list(range(31))
    assert (fourth.blocks_reused, fourth.reuse_saved_usd) == (0, 0)

    # A reused block is reviewed like any other, and never retried: nothing failed.
    await s.bb.confirm(run2, ["0"], reviewer="bob")
    with pytest.raises(NothingToRetry):
        await s.bb.check_retry(run2)

    # The export says which overlays were reused, and from which run and call.
    out = io.StringIO()
    await s.bb.export(run2, out, staged=True)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    reused = {ln["immutable"]["block_index"]: ln["reused"] for ln in lines if "reused" in ln}
    assert sorted(reused) == sorted(set(range(31)) - {*EDITED, REJECTED})
    assert all(r["run_id"] == run1 and r["call_id"] in calls1 for r in reused.values())
    assert lines[0]["user_defined"] == before[0]["staging"]
    out = io.StringIO()
    await s.bb.export(run2, out, fmt="csv", staged=True)
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [row["reused_from_run_id"] for row in table] == [
        "" if i in (*EDITED, REJECTED) else run1 for i in range(31)
    ]
    # The review grid and `review` show it too.
    expected = [None if i in (*EDITED, REJECTED) else run1 for i in range(31)]
    grid = await s.bb.review(run2, limit=31)
    assert [r.reused_from_run_id for r in grid.rows] == expected
    info = await s.bb.run(run2)
    assert (info.blocks_reused, info.reuse_saved_usd) == pytest.approx(
        (30 - len(EDITED), saved), abs=1e-5
    )


async def test_reused_simulated_answers_stay_simulated_and_another_endpoint_asks_again(
    bbstack: Stack, tmp_path: Any
) -> None:
    """A reused answer keeps its origin (the summary, status, list and export of a fully
    reused simulated run say SIMULATED), and a worker calling another endpoint (here the
    simulator under another host name) never takes these answers: it asks again."""
    s = bbstack
    schema_id = await s.bb.add_schema(extract_schema())
    doc = await s.bb.ingest_bytes(markdown_doc(6), name="origin.md", fmt="markdown")
    async with s.worker():
        _, first = await run(s, doc, schema_id)
        run2, second = await run(s, doc, schema_id)
    assert first.status == "completed" and first.simulated
    # Every answer reused, no call made: still the simulator's answers.
    assert (second.status, second.blocks_reused, second.calls) == ("completed", 6, 0)
    host = s.sim.base_url.removeprefix("http://")
    assert second.endpoints == [f"simulator {host}"] and second.simulated
    lines = summary_lines(second, baseline=None, links={"run": "", "packs": ""})
    assert any("SIMULATED" in line for line in lines), lines
    assert (await s.bb.run(run2)).simulated  # status
    assert next(r for r in await s.bb.runs() if r.run_id == run2).simulated  # list
    assert (await s.bb.result(run2)).simulated  # RunResult read back
    exported = await s.bb.export(run2, tmp_path / "run2.jsonl")
    assert exported.simulated
    meta = json.loads((tmp_path / "run2.jsonl.meta.json").read_text())
    assert meta["simulated"] is True and meta["endpoints"] == [f"simulator {host}"]
    app = create_app(s.bb, s.settings, reviewer="ada")
    async with serving(app) as base, aiohttp.ClientSession() as http:
        page = await (await http.get(f"{base}/runs/{run2}")).text()
        assert 'id="simulated"' in page[page.index("<h1>") : page.index("</h1>")]  # the badge

    # Another base URL (the same simulator as `localhost`) is another endpoint: nothing
    # reused, every block asked.
    other = anthropic_client(s.settings).with_options(
        base_url=s.sim.base_url.replace("127.0.0.1", "localhost")
    )
    async with build_worker(s.client, s.task_queue, s.pool, other):
        run3, third = await run(s, doc, schema_id)
    assert (third.status, third.blocks_reused) == ("completed", 0)
    assert sorted(await sent_blocks(s, run3)) == list(range(6))
    assert third.endpoints == [f"simulator {host.replace('127.0.0.1', 'localhost')}"]


async def test_duplicate_content_in_one_run_is_asked_once_and_its_outcome_given_to_each_copy(
    bbstack: Stack,
) -> None:
    """Blocks 8 and 9 repeat blocks 1 and 3: one model call carries each content once, and
    each copy ends as its first did, answered (block 1's copy) or failed with the same
    reason (block 3, which the model always leaves out)."""
    s = bbstack
    paragraphs = markdown_doc(8).decode().strip().split("\n\n")
    assert len(paragraphs) == 8
    doc = await s.bb.ingest_bytes(
        ("\n\n".join([*paragraphs, paragraphs[1], paragraphs[3]]) + "\n").encode(),
        name="duplicates.md",
        fmt="markdown",
    )
    schema_id = await s.bb.add_schema(extract_schema())
    s.sim.scenario(always_skip_contents=[await block_content(s.pool, f"{doc}:3")])
    async with s.worker():
        run_id, result = await run(s, doc, schema_id, pack_size=3, max_block_attempts=1)
    # Every block is carried once at most: the copies never are.
    sent = await sent_blocks(s, run_id)
    assert 8 not in sent and 9 not in sent
    assert sent.count(1) == 1
    rows = await overlays(s, run_id)
    assert rows[8]["status"] == rows[1]["status"] == "ai_complete"
    assert rows[8]["staging"] == rows[1]["staging"] and rows[8]["pack_index"] is None
    assert rows[9]["status"] == rows[3]["status"] == "failed"
    reasons = await s.pool.fetch(
        "select block_index, reason_code from overlays where run_id = $1 and block_index in (3, 9)",
        run_id,
    )
    assert len({r["reason_code"] for r in reasons}) == 1
    # Exactly one terminal state each, and the counters say so.
    assert result.status == "completed_with_failures"
    assert (result.blocks_total, result.blocks_ai_complete, result.blocks_failed) == (10, 8, 2)
