"""A new user's first hour on the real stack (issue 28): the starter schema runs as shipped,
and a CSV's own columns come back in the CSV export."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from tests.conftest import Stack

ROOT = Path(__file__).resolve().parents[2]
STARTER = ROOT / "samples" / "starter.json"
TICKETS = (
    b"id,customer,text\n"
    b"T-1,acme,The export button does nothing since this morning.\n"
    b'T-2,globex,"How do I add a second reviewer, please?"\n'
    b"T-3,acme,Please close my account at the end of the month.\n"
)


async def _run(s: Stack, data: bytes, name: str, fmt: str) -> str:
    doc = await s.bb.ingest_bytes(data, name=name, fmt=fmt)
    schema = await s.bb.add_schema(STARTER)
    async with s.worker():
        run_id = await s.bb.start_run(doc, schema, RunOptions())
        await s.bb.wait(run_id)
    return run_id


async def test_the_starter_schema_runs_as_shipped(bbstack: Stack) -> None:
    spec = load_schema(STARTER.read_bytes())
    assert set(spec.required) == {"summary", "category", "urgent"}
    run_id = await _run(bbstack, TICKETS, "tickets.csv", "csv")
    info = await bbstack.bb.run(run_id)
    assert info.status == "completed", info
    rows = await bbstack.pool.fetch(
        "select staging from overlays where run_id = $1 order by block_index", run_id
    )
    assert len(rows) == 3
    for row in rows:
        overlay = row["staging"]
        assert set(overlay) == {"summary", "category", "urgent"}
        assert overlay["category"] in ("question", "problem", "request", "other")
        assert isinstance(overlay["urgent"], bool) and len(overlay["summary"]) <= 200


async def test_the_csv_export_keeps_the_inputs_own_columns(bbstack: Stack) -> None:
    run_id = await _run(bbstack, TICKETS, "tickets.csv", "csv")
    out = io.StringIO()
    await bbstack.bb.export(run_id, out, staged=True, fmt="csv")
    reader = csv.DictReader(io.StringIO(out.getvalue()))
    table = list(reader)
    # The file's columns first, in its order and under its names, the text column too.
    assert list(reader.fieldnames or [])[:6] == [
        "id",
        "customer",
        "text",
        "summary",
        "category",
        "urgent",
    ]
    assert [(r["id"], r["customer"]) for r in table] == [
        ("T-1", "acme"),
        ("T-2", "globex"),
        ("T-3", "acme"),
    ]
    assert [r["source_line"] for r in table] == ["2", "3", "4"]
    assert all(r["category"] and r["text"] for r in table)
    # The JSONL export has had them all along, in each line's "immutable".
    out = io.StringIO()
    await bbstack.bb.export(run_id, out, staged=True)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [ln["immutable"]["id"] for ln in lines] == ["T-1", "T-2", "T-3"]


async def test_an_input_column_named_like_an_export_column_keeps_its_name_and_ours_gives_way(
    bbstack: Stack,
) -> None:
    data = b"status,summary,text\nopen,a note,The export button does nothing.\n"
    run_id = await _run(bbstack, data, "clash.csv", "csv")
    out = io.StringIO()
    await bbstack.bb.export(run_id, out, staged=True, fmt="csv")
    header, row = list(csv.reader(io.StringIO(out.getvalue())))
    record = dict(zip(header, row, strict=True))
    assert len(set(header)) == len(header)
    assert header[:3] == ["status", "summary", "text"]
    assert record["status"] == "open" and record["summary"] == "a note"
    assert record["blockbatch_status"] == "ai_complete" and record["field_summary"] != "a note"


async def test_the_temporal_ui_names_no_pack_total_a_re_plan_made_wrong(bbstack: Stack) -> None:
    # Pack 0 starts before the re-plan from its answers: "pack 0 of 6" beside "pack 1 of 4".
    doc = await bbstack.bb.ingest_file(ROOT / "samples" / "handbook.md")
    schema = await bbstack.bb.add_schema(ROOT / "samples" / "extract.json")
    async with bbstack.worker():
        run_id = await bbstack.bb.start_run(doc, schema, RunOptions())
        result = await bbstack.bb.wait(run_id)
    assert result.plan_changes, "the run did not re-plan: the test needs one"
    summaries: dict[int, tuple[str, str]] = {}
    for index in range(result.pack_count):
        handle = bbstack.client.get_workflow_handle(f"run-{run_id}/pack-{index}")
        described = await handle.describe()
        summaries[index] = (
            await described.static_summary() or "",
            await described.static_details() or "",
        )
    assert all(summary == f"pack {i} of run {run_id}" for i, (summary, _) in summaries.items()), (
        summaries
    )
    assert "planned as pack 0 of " in summaries[0][1]
    assert "re-plan" in summaries[0][1]
