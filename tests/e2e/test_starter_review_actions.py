"""starter.py edit / reject / confirm --reviewer / export --format csv on a finished run,
and the same acts through the Python API: refused edits change nothing, every act is
recorded with who, when, before and after, and exported."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from blockbatch.api import BadRequest, EditError, NotFound
from tests.conftest import Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`
from tests.web_helpers import FAILED_BLOCK, finished_run


async def test_edit_reject_confirm_from_the_command_line(
    cli: Cli, bbstack: Stack, tmp_path: Path
) -> None:
    run_id, doc = await finished_run(bbstack)
    before = await bbstack.pool.fetchval(
        "select staging from overlays where run_id = $1 and block_index = 5", run_id
    )

    bad = await cli("edit", run_id, "5", "word_count", "-2", "--reviewer", "grace")
    assert bad.code == 2 and "word_count: -2 is less than the minimum of 0" in bad.err
    assert (
        await bbstack.pool.fetchval(
            "select staging from overlays where run_id = $1 and block_index = 5", run_id
        )
        == before
    )
    assert (
        await bbstack.pool.fetchval("select count(*) from review_actions where run_id = $1", run_id)
        == 0
    )

    ok = await cli("edit", run_id, "5", "word_count", "41", "--reviewer", "grace")
    assert ok.code == 0, ok.err
    assert f"{doc}:5 word_count: {before['word_count']} → 41 (staged, by grace)" in ok.out
    text = await cli("edit", run_id, "5", "summary", "plain words, no quotes")
    assert text.code == 0, text.err

    rejected = await cli("reject", run_id, "--block", "4", "--reviewer", "grace")
    assert rejected.code == 0 and "rejected 1 block" in rejected.out
    by_env = await cli("confirm", run_id, "--block", "5", "6", BLOCKBATCH_REVIEWER="linus")
    assert by_env.code == 0 and "confirmed 2 blocks" in by_env.out and "as linus" in by_env.out

    rows = await bbstack.pool.fetch(
        """select block_uid, action, reviewer, field, before, after from review_actions
           where run_id = $1 order by id""",
        run_id,
    )
    assert [(r["block_uid"], r["action"], r["reviewer"], r["field"]) for r in rows] == [
        (f"{doc}:5", "edit", "grace", "word_count"),
        (f"{doc}:5", "edit", rows[1]["reviewer"], "summary"),
        (f"{doc}:4", "reject", "grace", None),
        (f"{doc}:5", "confirm", "linus", None),
        (f"{doc}:6", "confirm", "linus", None),
    ]
    assert rows[1]["reviewer"]  # the OS user when neither --reviewer nor the env says
    assert (rows[0]["before"], rows[0]["after"]) == (before["word_count"], 41)

    out = tmp_path / "run.csv"
    exported = await cli("export", run_id, "--out", str(out), "--format", "csv", "--staged")
    assert exported.code == 0, exported.err
    table = list(csv.DictReader(out.open(newline="")))
    assert [r["block_index"] for r in table] == [str(i) for i in range(10)]
    assert table[5]["word_count"] == "41" and table[5]["summary"] == "plain words, no quotes"
    assert table[5]["review_actions"] == "3" and table[5]["last_reviewer"] == "linus"
    assert table[4]["status"] == "rejected" and table[4]["word_count"] == ""
    assert table[FAILED_BLOCK]["reason_code"] == "missing_from_answer"
    meta = json.loads(Path(f"{out}.meta.json").read_text())
    assert meta["lines"] == 10 and meta["overlays"] == "staging"
    status = await cli("status", run_id)
    assert "2 confirmed, 1 rejected" in status.out


async def test_review_acts_through_the_api(bbstack: Stack) -> None:
    run_id, doc = await finished_run(bbstack)
    bb = bbstack.bb
    with pytest.raises(EditError, match="is not of type 'integer'"):
        await bb.edit(run_id, "1", "word_count", "7", reviewer="api")
    with pytest.raises(EditError, match="is not a JSON value"):
        await bb.edit(run_id, "1", "word_count", "lots", reviewer="api", as_text=True)
    with pytest.raises(EditError, match="is failed: only a staged result"):
        await bb.edit(run_id, str(FAILED_BLOCK), "word_count", 3, reviewer="api")
    assert await bb.review_actions(run_id) == []
    done = await bb.edit(run_id, "1", "word_count", 7, reviewer="api")
    assert done.changed and done.after == 7 and done.block_uid == f"{doc}:1"
    again = await bb.edit(run_id, "1", "word_count", 7, reviewer="api")
    assert not again.changed  # the same value again: nothing written, nothing recorded
    with pytest.raises(NotFound):
        await bb.reject(run_id, [f"{doc}:404"], reviewer="api")
    with pytest.raises(NotFound):
        await bb.edit(run_id, "99", "word_count", 3, reviewer="api")
    with pytest.raises(BadRequest, match=r"\(failed\); nothing was rejected"):
        await bb.reject(run_id, ["2", str(FAILED_BLOCK)], reviewer="api")
    with pytest.raises(BadRequest, match="empty"):
        await bb.confirm(run_id, ["1"], reviewer="  ")
    assert (await bb.reject(run_id, ["2"], reviewer="api")).rejected == [f"{doc}:2"]
    confirmed = await bb.confirm(run_id, reviewer="api")  # every ai_complete block
    assert f"{doc}:1" in confirmed.confirmed and f"{doc}:2" not in confirmed.confirmed
    assert confirmed.total_confirmed == 8  # 10 blocks: 1 failed, 1 rejected
    with pytest.raises(EditError, match="is confirmed: only a staged result"):
        await bb.edit(run_id, "3", "word_count", 1, reviewer="api")
    with pytest.raises(BadRequest, match=r"\(rejected\); nothing was confirmed"):
        await bb.confirm(run_id, ["2"], reviewer="api")
    acts = await bb.review_actions(run_id, f"{doc}:1")
    assert [a.action for a in acts] == ["confirm", "edit"]  # newest first
    run = await bb.run(run_id)
    assert run.blocks["rejected"] == 1 and run.result().blocks_ai_complete == 9
