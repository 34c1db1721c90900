"""starter.py review / confirm / export on a finished run with one failed block."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import Stack
from tests.helpers import block_content, markdown_doc
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _run_with_one_failure(cli: Cli, bbstack: Stack) -> tuple[str, str]:
    doc = await bbstack.bb.ingest_bytes(markdown_doc(30), name="doc.md", fmt="markdown")
    bbstack.sim.scenario(always_skip_contents=[await block_content(bbstack.pool, f"{doc}:7")])
    async with bbstack.worker():
        run = await cli("run", cli.doc(30), "--schema", cli.schema(), "--pack-size", "10")
    assert run.code == 5, run.err  # done with failures
    assert "29 ok · 1 failed" in run.out
    return run.run_id, doc


async def test_review_confirm_export(cli: Cli, bbstack: Stack, tmp_path: Path) -> None:
    run_id, doc = await _run_with_one_failure(cli, bbstack)

    page = await cli("review", run_id, "--limit", "5")
    assert page.code == 0, page.err
    assert f"#0  {doc}:0" in page.out and f"{doc}:5" not in page.out
    assert "→ word_count" in page.out and "Section 1" in page.out
    assert "showing blocks #0-#4 (5 of 30)" in page.out
    assert f"next page: python starter.py review {run_id} --limit 5 --after 4" in page.out
    # The next page is the one the footer names (keyset: after block #4).
    following = await cli("review", run_id, "--limit", "5", "--after", "4")
    assert following.code == 0, following.err
    assert f"#5  {doc}:5" in following.out and f"{doc}:4 " not in following.out
    assert "showing blocks #5-#9 (5 of 30)" in following.out
    last = await cli("review", run_id, "--limit", "5", "--after", "24")
    assert "showing blocks #25-#29 (5 of 30)" in last.out and "next page" not in last.out
    failed = await cli("review", run_id, "--failed")
    assert failed.code == 0 and f"{doc}:7" in failed.out and "missing" in failed.out
    assert "showing blocks #7-#7 (1 of 1)" in failed.out
    as_json = (await cli("review", run_id, "--json", "--block", "7")).json()
    assert as_json["rows"][0]["status"] == "failed" and as_json["total"] == 1

    # Refusals change nothing.
    unknown = await cli("confirm", run_id, "--block", "1", f"{doc}:999")
    assert unknown.code == 3 and f"{doc}:999" in unknown.err
    not_ready = await cli("confirm", run_id, "--block", "2", "7")
    assert not_ready.code == 2 and "failed" in not_ready.err
    assert await _confirmed(bbstack, run_id) == 0

    some = await cli("confirm", run_id, "--block", f"{doc}:3", "4")
    assert some.code == 0 and "confirmed 2 blocks" in some.out, some.err
    assert await _confirmed(bbstack, run_id) == 2

    out = tmp_path / "out.jsonl"
    exported = await cli("export", run_id, "--out", str(out))
    assert exported.code == 0, exported.err
    confirmed = read_jsonl(out)
    staged_out = tmp_path / "staged.jsonl"
    assert (await cli("export", run_id, "--out", str(staged_out), "--staged")).code == 0
    staged = read_jsonl(staged_out)

    assert [ln["immutable"]["block_index"] for ln in confirmed] == list(range(30))
    assert [ln["immutable"]["block_uid"] for ln in staged] == [f"{doc}:{i}" for i in range(30)]
    assert confirmed[0]["immutable"]["block_content"].startswith("Section 1")
    assert "source_line" in confirmed[0]["immutable"]  # block metadata travels along
    for i, (c, s) in enumerate(zip(confirmed, staged, strict=True)):
        if i in (3, 4):
            assert c["user_defined"] == s["user_defined"] is not None
            assert "status" not in c
        elif i == 7:
            assert c["user_defined"] is None and s["user_defined"] is None
            assert s["status"]["status"] == "failed" and "missing" in s["status"]["last_error"]
        else:
            assert c["user_defined"] is None and c["status"]["status"] == "ai_complete"
            assert s["user_defined"]["word_count"] == len(s["immutable"]["block_content"].split())
    meta = json.loads(Path(f"{out}.meta.json").read_text())
    assert meta["run_id"] == run_id and meta["status"] == "completed_with_failures"
    assert meta["document"]["document_id"] == doc and meta["overlays"] == "confirmed"
    assert meta["schema"]["name"] == "test-extract" and meta["model"] and meta["exported_at"]
    assert meta["lines"] == 30 and meta["with_overlay"] == 2 and meta["cost_usd"] > 0
    assert meta["counters"]["blocks"]["failed"] == 1

    rest = await cli("confirm", run_id, "--json")
    assert rest.code == 0 and len(rest.json()["confirmed"]) == 27
    assert rest.json()["total_confirmed"] == 29
    to_stdout = await cli("export", run_id, "--out", "-")
    lines = [json.loads(x) for x in to_stdout.out.splitlines()]
    assert len(lines) == 30 and sum(ln["user_defined"] is not None for ln in lines) == 29
    assert [ln["user_defined"] for ln in lines] == [ln["user_defined"] for ln in staged]


async def _confirmed(s: Stack, run_id: str) -> int:
    return await s.pool.fetchval(
        """select count(*) from overlays where run_id = $1 and status = 'confirmed'
           and confirmed is not null and confirmed_at is not null""",
        run_id,
    )
