"""Every failed or cancelled block carries a reason code (blockbatch/core/reasons.py), end to end.

Each code the simulator can provoke is produced by a real run (sync mode unless noted) and
read back from Postgres, from ``review`` (the API page ``--json`` prints) and from
``export``; blocks that ended done carry none. The CLI test covers ``review``'s text,
``--json``, ``--reason`` and ``export`` on stdout.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from blockbatch.core.reasons import REASONS
from blockbatch.core.registry import get_model
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.store import overlays as store_overlays
from tests.conftest import Stack
from tests.helpers import (
    REJECT_MARKER,
    TEST_BATCH_POLLS,
    block_content,
    extract_schema,
    loose_schema,
    markdown_doc,
)
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`
from tests.waiting import until


async def start(s: Stack, content: bytes, **options: Any) -> tuple[str, list[str]]:
    doc = await s.bb.ingest_bytes(content, name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(instruction_words=200))
    run_id = await s.bb.start_run(doc, schema_id, RunOptions(**options))
    uids = [
        r["block_uid"]
        for r in await s.pool.fetch(
            "select block_uid from blocks where document_id = $1 order by block_index", doc
        )
    ]
    return run_id, uids


SMALL_WINDOW = "claude-haiku-4-5"


async def run(s: Stack, content: bytes, **options: Any) -> tuple[str, list[str], RunResult]:
    run_id, uids = await start(s, content, **options)
    async with s.worker():
        result = await s.bb.wait(run_id)
    return run_id, uids, result


async def codes(s: Stack, run_id: str) -> dict[str, tuple[str, str | None]]:
    """block_uid -> (status, reason_code) in Postgres, checked against the API and export."""
    rows = await s.pool.fetch(
        "select block_uid, status, reason_code from overlays where run_id = $1", run_id
    )
    found = {r["block_uid"]: (r["status"], r["reason_code"]) for r in rows}
    for status, code in found.values():
        if status in ("failed", "cancelled"):
            assert code in REASONS, found
        else:
            assert code is None, found
    page = await s.bb.review(run_id, limit=500)
    assert {i.block_uid: (i.status, i.reason_code) for i in page.rows} == found
    out = io.StringIO()
    await s.bb.export(run_id, out, staged=True)
    for line in map(json.loads, out.getvalue().splitlines()):
        uid = line["immutable"]["block_uid"]
        if "status" in line:
            assert (line["status"]["status"], line["status"]["reason_code"]) == found[uid]
        else:
            assert found[uid][1] is None
    for code in {c for _, c in found.values() if c}:
        only = await s.bb.review(run_id, limit=500, reason=[code])
        assert {i.block_uid for i in only.rows} == {u for u, (_, c) in found.items() if c == code}
    return found


def paragraphs(n: int, extra: dict[int, str] | None = None) -> bytes:
    texts = [f"Paragraph {i} about restarting service {i}." for i in range(n)]
    for i, text in (extra or {}).items():
        texts[i] = text
    return "\n\n".join(texts).encode()


async def test_missing_and_invalid_results_cli_review_json_and_export(
    cli: Cli, bbstack: Stack
) -> None:
    doc = await bbstack.bb.ingest_bytes(markdown_doc(6), name="doc.md", fmt="markdown")
    skipped, corrupt = f"{doc}:1", f"{doc}:4"
    bbstack.sim.scenario(
        always_skip_contents=[await block_content(bbstack.pool, skipped)],
        always_malformed_contents=[await block_content(bbstack.pool, corrupt)],
    )
    async with bbstack.worker():
        started = await cli(
            "run", cli.doc(6), "--schema", cli.schema(data=loose_schema()), "--pack-size", "3"
        )
    run_id = started.run_id
    found = await codes(bbstack, run_id)
    assert found[skipped] == ("failed", "missing_from_answer")
    assert found[corrupt] == ("failed", "invalid_value")
    assert sum(st == "ai_complete" for st, _ in found.values()) == 4

    text = await cli("review", run_id, "--failed")
    assert text.code == 0, text.err
    assert "failed [missing_from_answer]: " in text.out
    assert "failed [invalid_value]: " in text.out
    as_json = (await cli("review", run_id, "--json", "--reason", "invalid_value")).json()
    assert [(i["block_uid"], i["reason_code"]) for i in as_json["rows"]] == [
        (corrupt, "invalid_value")
    ]
    assert as_json["total"] == 1
    both = (
        await cli(
            "review",
            run_id,
            "--json",
            "--reason",
            "invalid_value",
            "--reason",
            "missing_from_answer",
        )
    ).json()
    assert both["total"] == 2
    unknown = await cli("review", run_id, "--reason", "bogus")
    assert unknown.code == 2
    assert "bogus" in unknown.err and "missing_from_answer" in unknown.err
    exported = await cli("export", run_id, "--out", "-", "--staged")
    assert exported.code == 0, exported.err
    lines = {
        line["immutable"]["block_uid"]: line for line in map(json.loads, exported.out.splitlines())
    }
    assert lines[skipped]["status"]["reason_code"] == "missing_from_answer"
    assert lines[corrupt]["status"]["reason_code"] == "invalid_value"


async def test_oversized_block(bbstack: Stack) -> None:
    # A 200K-token window (the default model's is 1M: a block too large for it would be
    # five times the text for the same rule).
    window = get_model(SMALL_WINDOW).context_window
    huge = "Giant paragraph " + " ".join(["runbook"] * int(window * 0.8)) + "."
    run_id, uids, _ = await run(bbstack, paragraphs(4, {2: huge}), model=SMALL_WINDOW)
    found = await codes(bbstack, run_id)
    assert found[uids[2]] == ("failed", "oversized")
    assert [found[u][0] for u in uids if u != uids[2]] == ["ai_complete"] * 3


async def test_request_rejected_for_one_block(bbstack: Stack) -> None:
    bbstack.sim.scenario(reject_marker=REJECT_MARKER)
    run_id, uids, _ = await run(
        bbstack, paragraphs(4, {1: f"Paragraph {REJECT_MARKER}."}), pack_size=4
    )
    found = await codes(bbstack, run_id)
    assert found[uids[1]] == ("failed", "request_rejected")
    assert sum(st == "ai_complete" for st, _ in found.values()) == 3


async def test_answer_truncated_even_for_a_lone_block(bbstack: Stack) -> None:
    # (malformed_answer is covered by tests/unit/test_results.py: the simulator's malformed
    # tool inputs are picked by hash and include per-item invalid values.)
    bbstack.sim.scenario(faults={"truncate": 1.0})
    run_id, _, _ = await run(bbstack, paragraphs(2), pack_size=2)
    assert set((await codes(bbstack, run_id)).values()) == {("failed", "truncated")}


async def test_rejected_key_ends_blocks_key_rejected(bbstack: Stack) -> None:
    bbstack.sim.scenario(auth={"valid_keys": ["some-other-key"]})
    run_id, _, result = await run(bbstack, paragraphs(4), pack_size=2, max_concurrent_packs=1)
    assert result.status == "failed"
    assert set((await codes(bbstack, run_id)).values()) == {("cancelled", "key_rejected")}


async def test_cancelled_run(bbstack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # The run's end moves its pending blocks a range of block indexes a statement (a
    # million at once would overrun the command timeout): here 3, so 12 blocks take four.
    monkeypatch.setattr(store_overlays, "PLAN_ROWS_PER_STATEMENT", 3)
    run_id, _ = await start(bbstack, paragraphs(12), pack_size=2, max_concurrent_packs=1)
    async with bbstack.worker():

        async def two_done() -> bool:
            done = await bbstack.pool.fetchval(
                "select count(*) from overlays where run_id = $1 and status = 'ai_complete'", run_id
            )
            return bool(done >= 2)

        await until(two_done, "two blocks done")
        # Answers held until the cancel has landed: the run cannot finish first.
        async with bbstack.sim.holding():
            await bbstack.bb.cancel(run_id)
        result = await bbstack.bb.wait(run_id)
    assert result.status == "cancelled"
    found = await codes(bbstack, run_id)
    cancelled = [c for st, c in found.values() if st == "cancelled"]
    assert cancelled and set(cancelled) == {"cancelled"}
    assert len(found) == 12 and {st for st, _ in found.values()} <= {"ai_complete", "cancelled"}
    assert result.blocks_cancelled == len(cancelled)


async def test_batch_requests_never_processed_fail_api_unavailable(bbstack: Stack) -> None:
    bbstack.sim.scenario(batch={"processing_delay_s": 0.2, "errored_rate": 1.0})
    run_id, _, _ = await run(
        bbstack,
        paragraphs(4),
        mode="batch",
        pack_size=2,
        batch=TEST_BATCH_POLLS.model_copy(update={"max_resubmits": 1}),
    )
    assert set((await codes(bbstack, run_id)).values()) == {("failed", "api_unavailable")}
