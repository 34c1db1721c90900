"""Evidence on the real stack (Postgres, Temporal, the simulator over HTTP): a run of the sample
documents with a schema that asks for evidence grounds at least 99% of its values, stores
each span with the overlay and reports grounding beside agreement; every quote the
simulator's ``bad_quote`` fault invents is caught and flagged ``ungrounded`` (a review flag,
not a failure); a reused answer keeps its evidence; the exports (JSONL, CSV, Parquet) carry
spans that point at the quoted words."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from blockbatch.report import quality_rows
from tests.conftest import ROOT, Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

SAMPLES = ROOT / "samples"


def evidence_schema(name: str) -> dict[str, Any]:
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    data["prompt_config"]["evidence"] = True
    return data


async def sample_document(s: Stack) -> str:
    """One document of both sample documents' blocks (handbook and adversarial)."""
    text = b"\n\n".join((SAMPLES / n).read_bytes() for n in ("handbook.md", "adversarial.md"))
    return await s.bb.ingest_bytes(text, name="samples.md", fmt="markdown")


async def overlays_of(s: Stack, run_id: str) -> list[dict[str, Any]]:
    rows = await s.pool.fetch(
        """select o.block_uid, o.status, o.reason_code, o.staging, o.evidence, b.block_content
           from overlays o join blocks b using (block_uid) where o.run_id = $1
           order by o.block_index""",
        run_id,
    )
    return [dict(r) for r in rows]


def check_spans(content: str, evidence: dict[str, Any]) -> None:
    for e in evidence.values():
        if e["match"] == "exact":
            assert content[e["start"] : e["end"]] == e["quote"]
        elif e["match"] == "normalised":
            covered = " ".join(content[e["start"] : e["end"]].split()).lower()
            assert covered == " ".join(e["quote"].split()).lower()
        else:
            assert "start" not in e and e["reason"] in ("quote_not_found", "no_quote")


async def test_values_from_the_sample_documents_are_grounded(bbstack: Stack) -> None:
    doc = await sample_document(bbstack)
    schema = await bbstack.bb.add_schema(evidence_schema("extract"))
    async with bbstack.worker():
        run_id = await bbstack.bb.start_run(doc, schema, RunOptions(pack_size=8))
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed", result
    rows = await overlays_of(bbstack, run_id)
    values = grounded = 0
    for row in rows:
        assert row["status"] == "ai_complete" and row["evidence"] is not None
        assert set(row["evidence"]) == {k for k, v in row["staging"].items() if v is not None}
        check_spans(row["block_content"], row["evidence"])
        values += len(row["evidence"])
        grounded += sum(e["match"] != "missing" for e in row["evidence"].values())
    assert values >= 8 * len(rows)
    assert grounded / values >= 0.99, (grounded, values)

    # The summary says it beside agreement (the probe ran at its default rate).
    assert result.quality is not None and result.quality.grounding is not None
    g = result.quality.grounding
    assert (g.rate.samples, g.rate.agreeing) == (values, grounded)
    assert set(g.by_field) == set(json.loads((SAMPLES / "extract.json").read_text())["properties"])
    keys = [k for k, _ in quality_rows(result)]
    assert keys[:2] == ["quality", "grounding"], keys
    # The probe's blocks: grounded packed and alone, side by side.
    assert result.quality.sampled >= 1
    assert g.sampled_packed is not None and g.sampled_alone is not None
    assert g.sampled_alone.samples >= 8 * result.quality.sampled
    assert g.sampled_alone.rate is not None and g.sampled_alone.rate >= 0.99
    assert "sampled blocks: packed" in g.text

    # A second run of the same blocks reuses the answers, and their evidence with them.
    async with bbstack.worker():
        again = await bbstack.bb.start_run(doc, schema, RunOptions(pack_size=8))
        second = await bbstack.bb.wait(again)
    assert second.blocks_reused == len(rows)
    reused = await overlays_of(bbstack, again)
    assert [r["evidence"] for r in reused] == [r["evidence"] for r in rows]
    assert second.quality is not None and second.quality.grounding is not None
    assert second.quality.grounding.rate == g.rate


async def test_every_invented_quote_is_caught_and_flagged_for_review(
    bbstack: Stack, tmp_path: Path
) -> None:
    doc = await sample_document(bbstack)
    schema = await bbstack.bb.add_schema(evidence_schema("starter"))
    bbstack.sim.scenario(faults={"bad_quote": 0.15})
    # No probe: every answer the simulator gives is one the run keeps.
    options = RunOptions(pack_size=6, quality=QualityOptions(probe_rate=0))
    async with bbstack.worker():
        run_id = await bbstack.bb.start_run(doc, schema, options)
        result = await bbstack.bb.wait(run_id)
    injected = bbstack.sim.stats()["faults"].get("bad_quote", 0)
    assert injected >= 10
    # Each block answered once (no pack cut off and asked again): each invented quote kept.
    assert result.split_events == 0 and result.calls == result.pack_count + 1  # + warm-up

    # Every block is answered: an ungrounded value is a review flag, never a failure.
    assert result.status == "completed" and result.blocks_failed == 0
    rows = await overlays_of(bbstack, run_id)
    missing = {
        (r["block_uid"], name)
        for r in rows
        for name, e in r["evidence"].items()
        if e["match"] == "missing"
    }
    assert len(missing) == injected
    flagged = {r["block_uid"] for r in rows if r["reason_code"] == "ungrounded"}
    assert flagged == {uid for uid, _ in missing}
    assert all(r["status"] == "ai_complete" for r in rows)
    for r in rows:
        check_spans(r["block_content"], r["evidence"])

    # The summary says so, the CLI's review and the grid's reason filter list them.
    assert result.quality is not None and not result.quality.probed
    grounding = result.quality.grounding
    assert grounding is not None and grounding.missing == injected
    assert grounding.blocks_ungrounded == len(flagged)
    assert quality_rows(result)[0][1].endswith(f"review {run_id} --reason ungrounded`")
    page = await bbstack.bb.review(run_id, reason=["ungrounded"], limit=500)
    assert {i.block_uid for i in page.rows} == flagged
    grid = await bbstack.bb.review(run_id, reason="ungrounded", limit=500)
    assert {r.block_uid for r in grid.rows} == flagged

    await _exports_carry_spans(bbstack, run_id, rows, tmp_path)


async def _exports_carry_spans(
    s: Stack, run_id: str, rows: list[dict[str, Any]], tmp: Path
) -> None:
    by_uid = {r["block_uid"]: r for r in rows}
    fields = ["summary", "category", "urgent"]

    out = io.StringIO()
    await s.bb.export(run_id, out, staged=True)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == len(rows)
    for line in lines:
        uid = line["immutable"]["block_uid"]
        assert line["evidence"] == by_uid[uid]["evidence"]

    out = io.StringIO()
    await s.bb.export(run_id, out, staged=True, fmt="csv")
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    for field in fields:
        for part in ("quote", "match", "start", "end"):
            assert f"evidence_{field}_{part}" in table[0]
    for record in table:
        content = by_uid[record["block_uid"]]["block_content"]
        for field in fields:
            if record[f"evidence_{field}_match"] == "exact":
                start, end = (
                    int(record[f"evidence_{field}_start"]),
                    int(record[f"evidence_{field}_end"]),
                )
                assert content[start:end] == record[f"evidence_{field}_quote"]
            elif record[f"evidence_{field}_match"] == "missing":
                assert record[f"evidence_{field}_start"] == ""

    path = tmp / "run.parquet"
    summary = await s.bb.export(run_id, path, staged=True, fmt="parquet")
    assert summary.lines == len(rows) and Path(f"{path}.meta.json").exists()
    parquet = pq.read_table(path)
    assert str(parquet.schema.field("urgent").type) == "bool"
    assert str(parquet.schema.field("evidence_summary_start").type) == "int64"
    for record in parquet.to_pylist():
        content = by_uid[record["block_uid"]]["block_content"]
        assert record["summary"] == by_uid[record["block_uid"]]["staging"]["summary"]
        if record["evidence_summary_match"] == "exact":
            start, end = record["evidence_summary_start"], record["evidence_summary_end"]
            assert content[start:end] == record["evidence_summary_quote"]


async def test_the_cli_says_grounding_lists_ungrounded_blocks_and_exports_parquet(
    cli: Cli, bbstack: Stack, tmp_path: Path
) -> None:
    bbstack.sim.scenario(faults={"bad_quote": 0.1})
    schema = cli.schema(data=evidence_schema("starter"))
    async with bbstack.worker():
        run = await cli("run", str(SAMPLES / "handbook.md"), "--schema", schema)
    assert run.code == 0, run.out + run.err
    assert "grounding " in run.out and "ungrounded in" in run.out, run.out
    assert f"review {run.run_id} --reason ungrounded" in run.out

    flagged = await cli("review", run.run_id, "--reason", "ungrounded", "--limit", "3")
    assert flagged.code == 0, flagged.err
    assert "? ungrounded: the quote of" in flagged.out and "is not in the block" in flagged.out

    out = tmp_path / "run.parquet"
    exported = await cli("export", run.run_id, "--format", "parquet", "--out", str(out))
    assert exported.code == 0, exported.err
    assert pq.read_table(out).num_rows == 144
    to_stdout = await cli("export", run.run_id, "--format", "parquet", "--out", "-")
    assert to_stdout.code == 2 and "give a path" in to_stdout.err
