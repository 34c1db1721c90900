"""Outcomes that say what happened: a run's final status, its summary, exit codes and the API.

Every block done: ``completed``, exit 0. Some blocks failed: ``completed_with_failures``,
exit 5, the summary names the reasons with counts and the next command. Nothing done
(every block failed): ``failed`` ("nothing done"), exit 1, and ``llm_batch`` raises
``AllItemsFailed``. The endpoint is the simulator refusing any request holding a marker.
The rule itself and the documented exit codes are tested in tests/unit/test_outcome_rule.py.
"""

from __future__ import annotations

import pytest

from blockbatch.api import AllItemsFailed, allm_batch
from tests.conftest import Stack
from tests.helpers import REJECT_MARKER, extract_schema, marked_document, marked_paragraphs
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`


def write_doc(cli: Cli, n: int, marked: set[int]) -> str:
    path = cli.tmp / "doc.md"
    path.write_bytes(marked_document(n, marked))
    return str(path)


async def reasons_in_postgres(s: Stack, run_id: str) -> dict[str, int]:
    rows = await s.pool.fetch(
        """select coalesce(reason_code, 'unknown') as code, count(*) as n from overlays
           where run_id = $1 and status in ('failed', 'cancelled') group by 1""",
        run_id,
    )
    return {r["code"]: r["n"] for r in rows}


# --------------------------------------------------------------------------- nothing done


async def test_an_endpoint_that_rejects_everything_ends_the_run_nothing_done(
    bbstack: Stack, cli: Cli
) -> None:
    bbstack.sim.scenario(reject_marker=REJECT_MARKER)
    doc = write_doc(cli, 4, marked={0, 1, 2, 3})
    async with bbstack.worker():
        run = await cli("run", doc, "--schema", cli.schema(), "--pack-size", "2")
        meta = await bbstack.bb.handle(run.run_id).query("__temporal_workflow_metadata")
    assert run.code == 1, run.out + run.err
    run_id = run.run_id
    assert meta.current_details.startswith("**failed** · 0/4 blocks ok · 4 failed")
    assert "nothing done: 4 blocks failed" in meta.current_details
    row = await bbstack.pool.fetchrow(
        "select status, error, blocks_failed, blocks_ai_complete from runs where run_id = $1",
        run_id,
    )
    reasons = await reasons_in_postgres(bbstack, run_id)
    (code,) = reasons
    assert code == "request_rejected"
    assert (row["status"], row["blocks_failed"], row["blocks_ai_complete"]) == ("failed", 4, 0)
    assert row["error"] == f"nothing done: 4 blocks failed (4 {code})"
    assert f"run {run_id}: failed (nothing done: 4 blocks failed (4 {code}))" in run.out
    assert f"4 failed: 4 {code}" in run.out
    assert (
        f"python starter.py review {run_id} --failed, then python starter.py retry {run_id}"
    ) in run.out

    # watch and status say the same; --json carries the grouped reasons.
    watched = await cli("watch", run_id, "--json")
    assert watched.code == 1
    summary = watched.json()
    assert summary["status"] == "failed" and summary["failure_reasons"] == {code: 4}
    assert summary["next"] == (
        f"python starter.py review {run_id} --failed, then python starter.py retry {run_id}"
    )
    status = await cli("status", run_id)
    assert status.code == 0 and "failed" in status.out and f"4 failed: 4 {code}" in status.out


async def test_llm_batch_raises_when_every_item_failed(bbstack: Stack) -> None:
    bbstack.sim.scenario(reject_marker=REJECT_MARKER)
    items = marked_paragraphs(3, marked={0, 1, 2})
    with pytest.raises(AllItemsFailed) as caught:
        await allm_batch(
            items,
            extract_schema(instruction_words=200),
            bb=bbstack.bb,
            with_worker=True,
            pack_size=3,
        )
    exc = caught.value
    assert [e.index for e in exc.errors] == [0, 1, 2]
    assert all(e.status == "failed" and e.error and e.value is None for e in exc.errors)
    assert exc.result.run.status == "failed" and not exc.result.all_succeeded
    reasons = await reasons_in_postgres(bbstack, exc.result.run_id)
    assert exc.reasons == reasons and sum(reasons.values()) == 3
    assert all((e.reason or "unknown") in reasons for e in exc.errors)
    assert "every item failed" in str(exc) and exc.result.run_id in str(exc)


# --------------------------------------------------------------------------- some failed


async def test_a_run_with_a_failed_block_is_done_with_failures_and_exits_5(
    bbstack: Stack, cli: Cli
) -> None:
    bbstack.sim.scenario(reject_marker=REJECT_MARKER)
    doc = write_doc(cli, 8, marked={5})
    async with bbstack.worker():
        run = await cli("run", doc, "--schema", cli.schema(), "--pack-size", "4")
        # The Temporal UI shows the same status and reasons in the run's details.
        meta = await bbstack.bb.handle(run.run_id).query("__temporal_workflow_metadata")
    assert run.code == 5, run.out + run.err
    run_id = run.run_id
    reasons = await reasons_in_postgres(bbstack, run_id)
    (code,) = reasons
    assert meta.current_details.startswith("**completed_with_failures** · 7/8 blocks ok")
    assert f"\n\nnot done: 1 {code}" in meta.current_details  # then the limiter line
    assert f"run {run_id}: completed_with_failures" in run.out
    assert "7 ok · 1 failed · 0 cancelled · 8 total" in run.out
    assert f"1 failed: 1 {code}" in run.out
    assert (
        f"next         python starter.py review {run_id} --failed, then python "
        f"starter.py retry {run_id}"
    ) in run.out
    row = await bbstack.pool.fetchrow("select status, error from runs where run_id = $1", run_id)
    assert (row["status"], row["error"]) == ("completed_with_failures", None)

    watched = await cli("watch", run_id, "--json")
    assert watched.code == 5
    assert watched.json()["failure_reasons"] == {code: 1}
    listed = await cli("list", "--status", "completed_with_failures")
    assert listed.code == 0 and run_id in listed.out and "completed_with_failures" in listed.out
    status = await cli("status", run_id, "--json")
    assert status.json()["run"]["status"] == "completed_with_failures"
    assert status.json()["failure_reasons"] == {code: 1}


async def test_llm_batch_with_some_failures_reports_them_grouped(bbstack: Stack) -> None:
    bbstack.sim.scenario(reject_marker=REJECT_MARKER)
    items: list[str] = [*marked_paragraphs(6, marked={2, 4}), "   "]
    out = await allm_batch(
        items, extract_schema(instruction_words=200), bb=bbstack.bb, with_worker=True, pack_size=3
    )
    assert out.run.status == "completed_with_failures"
    assert not out.all_succeeded and out.error_count == 3
    assert [r.index for r in out.successes] == [0, 1, 3, 5]
    assert [r.index for r in out.errors] == [2, 4, 6]
    reasons = await reasons_in_postgres(bbstack, out.run_id)
    (code,) = reasons
    assert out.run.failure_reasons == {code: 2}
    assert out[6].reason == "skipped" and out[6].status == "skipped"
    assert [r.reason or "unknown" for r in out.errors[:2]] == [code, code]
    groups = out.errors_by_reason()
    assert {k: [r.index for r in v] for k, v in groups.items()} == {code: [2, 4], "skipped": [6]}
    report = out.error_report()
    assert report.splitlines()[0] == (
        f"3 of 7 items failed (run {out.run_id}, completed_with_failures):"
    )
    assert f"  2 {code}" in report and "  1 skipped" in report
    assert f"    item 2: {out[2].error}" in report


# --------------------------------------------------------------------------- all done


async def test_a_clean_run_is_completed_and_exits_0(bbstack: Stack, cli: Cli) -> None:
    async with bbstack.worker():
        run = await cli("run", write_doc(cli, 6, marked=set()), "--schema", cli.schema())
    assert run.code == 0, run.out + run.err
    assert f"run {run.run_id}: completed" in run.out and "not done" not in run.out
    assert f"python starter.py confirm {run.run_id}" in run.out
    out = await allm_batch(
        marked_paragraphs(3, marked=set()),
        extract_schema(instruction_words=200),
        bb=bbstack.bb,
        with_worker=True,
    )
    assert out.all_succeeded and out.error_count == 0 and len(out.successes) == 3
    assert out.error_report() == "" and out.run.failure_reasons == {}
