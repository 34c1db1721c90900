"""A CSV input's rows come back from the CSV and Parquet exports with their own columns, in
their order and under their names, then the schema's fields: the export joins back to the
user's file (issue 33 point 12); review and the grid show which row each block is (point
13)."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import aiohttp
import pyarrow as pa
import pyarrow.parquet as pq

from blockbatch.core.run_types import RunOptions
from blockbatch.web.app import create_app
from tests.conftest import Stack
from tests.helpers import extract_schema
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`
from tests.web_helpers import serving

TICKETS = (
    b"ticket_id,subject,text,channel\n"
    b"T-0001,Login,I cannot sign in since this morning.,email\n"
    b"T-0002,Billing,The invoice shows the wrong amount.,phone\n"
    b"T-0003,Thermostat,The SmartThermo 3 keeps resetting.,chat\n"
)


async def test_csv_and_parquet_exports_give_the_rows_back_their_columns(
    bbstack: Stack, tmp_path: Path
) -> None:
    s = bbstack
    doc = await s.bb.ingest_bytes(TICKETS, name="tickets.csv", fmt="csv")
    schema = await s.bb.add_schema(extract_schema(instruction_words=200))
    async with s.worker():
        run_id = await s.bb.start_run(doc, schema, RunOptions())
        await s.bb.wait(run_id)
    await s.bb.confirm(run_id, ["0"], reviewer="ada")
    fields = list(extract_schema()["properties"])

    out = io.StringIO()
    await s.bb.export(run_id, out, staged=True, fmt="csv")
    table = list(csv.reader(io.StringIO(out.getvalue())))
    header = table[0]
    assert header[:4] == ["ticket_id", "subject", "text", "channel"]
    # the schema's fields next; its block_type field gives way to blockbatch's column
    assert header[4 : 4 + len(fields)] == [f"field_{f}" if f == "block_type" else f for f in fields]
    assert "block_content" not in header
    rows = [dict(zip(header, r, strict=True)) for r in table[1:]]
    assert [(r["ticket_id"], r["text"], r["channel"]) for r in rows] == [
        ("T-0001", "I cannot sign in since this morning.", "email"),
        ("T-0002", "The invoice shows the wrong amount.", "phone"),
        ("T-0003", "The SmartThermo 3 keeps resetting.", "chat"),
    ]

    path = tmp_path / "run.parquet"
    await s.bb.export(run_id, path, staged=True, fmt="parquet")
    parquet = pq.read_table(path)
    assert parquet.column_names == header
    assert parquet.schema.field("source_line").type == pa.int64()
    assert parquet.schema.field("last_reviewed_at").type == pa.timestamp("us", tz="UTC")
    records = parquet.to_pylist()
    assert [r["source_line"] for r in records] == [2, 3, 4]
    assert records[0]["last_reviewed_at"] is not None and records[1]["last_reviewed_at"] is None


async def test_review_and_the_grid_show_which_input_row_a_block_is(
    bbstack: Stack, cli: Cli
) -> None:
    s = bbstack
    doc = await s.bb.ingest_bytes(TICKETS, name="tickets.csv", fmt="csv")
    schema = await s.bb.add_schema(extract_schema(instruction_words=200))
    async with s.worker():
        run_id = await s.bb.start_run(doc, schema, RunOptions())
        await s.bb.wait(run_id)

    shown = await cli("review", run_id, "--limit", "2")
    assert shown.code == 0, shown.err
    assert re.search(r"^#0\s+ticket_id T-0001\s", shown.out, re.M), shown.out
    assert re.search(r"^#1\s+ticket_id T-0002\s", shown.out, re.M), shown.out
    chosen = await cli("review", run_id, "--limit", "1", "--id-column", "channel")
    assert re.search(r"^#0\s+channel email\s", chosen.out, re.M), chosen.out
    wrong = await cli("review", run_id, "--id-column", "ticket")
    assert wrong.code == 2 and "its columns are: ticket_id, subject, channel" in wrong.err

    app = create_app(s.bb, s.settings, reviewer="ada")
    async with serving(app) as base, aiohttp.ClientSession() as http:
        page = await http.get(f"{base}/runs/{run_id}")
        html = await page.text()
        assert re.search(
            r'id="row-2".*?class="rowid"[^>]*><span class="muted">ticket_id</span> T-0003',
            html,
            re.S,
        )
        by_subject = await (await http.get(f"{base}/runs/{run_id}?id=subject")).text()
        assert '<span class="muted">subject</span> Thermostat' in by_subject
