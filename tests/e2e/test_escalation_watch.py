"""Following an escalation from the command line (docs/ESCALATION.md): ``escalate`` and
``watch`` show its live progress and then the run's summary with its rows; ``cancel
--wait`` waits for the escalation to stop.

What must happen while an escalation is under way (a follower's look, a page read, a
cancel) happens while the simulator holds its answers (``sim.hold()``), and the answers are
released once it did: the escalation cannot end first, however fast the model or slow the
machine, and no call is slowed down to make room for it.
"""

from __future__ import annotations

import asyncio
import importlib
import re

import aiohttp
import pytest

from blockbatch.cli.progress import ProgressView
from blockbatch.core.escalation_types import EscalationProgress
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from blockbatch.core.workflow_names import escalate_workflow_id
from blockbatch.web.app import create_app
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`
from tests.waiting import until
from tests.web_helpers import serving

HAIKU, SONNET = "claude-haiku-5-5", "claude-sonnet-5-5"
#: Haiku is often wrong in packs (two packings differ, blocks go up); Sonnet never is.
QUALITY = {
    "enabled": True,
    "free_blocks": 2,
    "skip_per_extra_block": 0,
    "bleed_per_extra_block": 0,
    "models": {HAIKU: {"wrong_alone": 0.05, "wrong_per_extra_block": 0.03}, SONNET: {}},
}
_SECOND = re.compile(r"^escalation second pass: (\d+)/(\d+) packs · (\d+)/(\d+) compared", re.M)


async def _finished_run(bbstack: Stack, seed: int) -> str:
    """A finished Haiku run of 24 blocks in 12 packs, one pack at a time."""
    bbstack.sim.scenario(seed=seed, quality=QUALITY)
    doc = await bbstack.bb.ingest_bytes(markdown_doc(24), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(200))
    run_id = await bbstack.bb.start_run(
        doc,
        schema_id,
        RunOptions(
            model=HAIKU,
            pack_size=2,
            max_concurrent_packs=1,
            reuse_answers=False,
            quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
        ),
    )
    result = await bbstack.bb.wait(run_id)
    assert result.status == "completed"
    return run_id


async def _escalation_line(bbstack: Stack, run_id: str) -> str:
    """The run page's escalation line (``""``: none)."""
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, aiohttp.ClientSession() as http:
        page = await http.get(f"{base}/runs/{run_id}")
        html = await page.text()
    assert page.status == 200
    found = re.search(r'<dd id="escalation" class="e-([a-z-]+)">(.*?)</dd>', html, re.S)
    return f"{found.group(1)}: {' '.join(found.group(2).split())}" if found else ""


async def test_escalate_and_watch_show_the_escalation_live_then_its_summary(
    bbstack: Stack, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Which progress views (one a follower) were shown the second pass under way.
    real = ProgressView.update_escalation
    shown: set[int] = set()

    def update_escalation(view: ProgressView, p: EscalationProgress) -> None:
        real(view, p)
        if p.phase == "second pass":
            shown.add(id(view))

    monkeypatch.setattr(ProgressView, "update_escalation", update_escalation)
    async with bbstack.worker():
        run_id = await _finished_run(bbstack, seed=5)
        never = await cli("watch", run_id)  # not escalated: the run's summary, as always
        bbstack.sim.scenario(seed=5, quality=QUALITY)
        # Answers held from the start: the second pass stays under way (its first pack
        # unanswered) until both followers have shown it and the page has been read.
        bbstack.sim.hold()
        try:
            escalating = asyncio.ensure_future(cli("escalate", run_id, "--to", SONNET))
            await until(lambda: bbstack.bb.escalation_running(run_id), "escalating")
            watching = asyncio.ensure_future(cli("watch", run_id))
            await until(lambda: len(shown) == 2, "both followers showing the second pass")
            page_during = await _escalation_line(bbstack, run_id)
        finally:
            bbstack.sim.release()
        watched = await watching
        escalated = await escalating
        after = await cli("watch", run_id)
    assert never.code == 0 and "escalated " not in never.out
    assert page_during.startswith(("second-pass: ", "escalating: ", "finishing: ")), page_during
    page_after = await _escalation_line(bbstack, run_id)
    esc = await bbstack.bb.escalation(run_id)
    assert esc is not None and esc.status == "done" and esc.compared == 24
    packs = await bbstack.pool.fetchval(
        "select count(distinct second_pack) from escalations where run_id = $1", run_id
    )
    summary = f"escalated    to {SONNET}: 24 of 24 blocks compared in a second packing"
    for out in (escalated, watched):
        assert out.code == 0, out.out + out.err
        # Live lines while it compares (piped: one at each phase, then as counts change),
        # their totals the plan's, then the summary with the escalation's rows.
        seen = _SECOND.findall(out.out)
        assert seen, out.out
        assert {(int(t), int(b)) for _, t, _, b in seen} == {(packs, 24)}
        done = [int(d) for d, _, _, _ in seen]
        assert done == sorted(done) and done[-1] < packs
        assert out.out.index("escalation second pass") < out.out.index(summary)
        assert "escalation $ second pass" in out.out
        assert "ended but the run is still" not in out.err
        # The escalation calls may end between two looks; when seen, of those sent up.
        for answered in re.findall(rf"^escalating to {SONNET}: \d+/(\d+) answered", out.out, re.M):
            assert int(answered) == esc.sent_up
    assert page_after == (
        f"done: to {SONNET}: done · 24/24 compared · {esc.kept} kept · {esc.sent_up} sent up · "
        f"{esc.escalated}/{esc.sent_up} answered · "
        f"${esc.second_pass_cost_usd + esc.escalation_cost_usd:.4f}"
    )
    # Once it ended: the summary with the escalation's rows, no live lines.
    assert after.code == 0 and summary in after.out and "second pass:" not in after.out


async def test_cancel_wait_follows_the_escalation_until_it_stops(bbstack: Stack, cli: Cli) -> None:
    async with bbstack.worker():
        run_id = await _finished_run(bbstack, seed=2)
        bbstack.sim.scenario(seed=2)
        escalation = (await bbstack.bb.temporal()).get_workflow_handle(escalate_workflow_id(run_id))

        async def cancel_signalled() -> bool:
            async for event in escalation.fetch_history_events():
                if event.HasField("workflow_execution_signaled_event_attributes"):
                    return True
            return False

        # The escalation's first call is held until the cancel has reached it: the
        # escalation stops with that call answered and what it did not start left.
        bbstack.sim.hold()
        try:
            await bbstack.bb.escalate(run_id, SONNET)
            await until(bbstack.sim.held, "an escalation call held")
            cancelling = asyncio.ensure_future(cli("cancel", run_id, "--wait"))
            await until(cancel_signalled, "the cancel signalled to the escalation")
        finally:
            bbstack.sim.release()
        out = await cancelling
        # It returned once the escalation had ended: the run is finished, not cancelling.
        running = await bbstack.bb.escalation_running(run_id)
    assert out.code == 0, out.out + out.err
    assert not running
    assert f"cancel requested for the escalation of run {run_id}" in out.out
    info = await bbstack.bb.run(run_id)
    esc = await bbstack.bb.escalation(run_id)
    assert info.status == "completed" and esc is not None and esc.status == "cancelled"
    assert f"cancelled with {esc.left} blocks left (their first answers stay)" in out.out
    assert "ended but the run is still" not in out.err
    line = await _escalation_line(bbstack, run_id)
    assert line.startswith(f"cancelled: to {SONNET}: cancelled · ")
    assert f" · {esc.left} left with their first answer · $" in line


async def test_cancel_reaches_an_escalation_still_queued(bbstack: Stack, cli: Cli) -> None:
    async with bbstack.worker():
        run_id = await _finished_run(bbstack, seed=4)
    # No worker: the escalation waits to be planned, and the run is still `completed`.
    await bbstack.bb.escalate(run_id, SONNET)
    out = await cli("cancel", run_id)
    assert out.code == 0, out.out + out.err
    assert f"cancel requested for the escalation of run {run_id}" in out.out
    async with bbstack.worker():
        result = await bbstack.bb.wait_escalation(run_id)
    esc = result.escalation
    assert result.status == "completed" and esc is not None
    assert esc.status == "cancelled" and esc.left == esc.blocks == 24
    assert esc.second_pass_calls == esc.escalation_calls == 0


async def test_watch_follows_an_escalation_that_began_after_its_first_look(
    bbstack: Stack, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`watch` looked before the escalation was there (its first look says none runs):
    it follows the run's workflow, long ended, then sees the escalation that reopened the
    run and follows it to its end, instead of a summary of a run "still running"."""
    # The module, not the package's `run` (the console script's entry point).
    cli_run = importlib.import_module("blockbatch.cli.run")

    real = cli_run._escalating
    looks: list[bool] = []

    async def first_look_misses(bb: object, run_id: str) -> bool:
        seen = await real(bb, run_id) if looks else False
        looks.append(seen)
        if len(looks) == 2:
            bbstack.sim.release()  # seen (or not) on the second look: let it end
        return seen

    async with bbstack.worker():
        run_id = await _finished_run(bbstack, seed=3)
        bbstack.sim.scenario(seed=3)
        # Answers held until watch's second look: the escalation is under way then,
        # however fast it would have ended.
        bbstack.sim.hold()
        try:
            await bbstack.bb.escalate(run_id, SONNET)

            async def reopened() -> bool:
                return (await bbstack.bb.run(run_id)).active

            await until(reopened, "the run reopened by the escalation's plan")
            monkeypatch.setattr(cli_run, "_escalating", first_look_misses)
            out = await cli("watch", run_id)
        finally:
            bbstack.sim.release()
    assert looks[:2] == [False, True], looks
    assert out.code == 0, out.out + out.err
    assert "ended but the run is still" not in out.out + out.err
    esc = await bbstack.bb.escalation(run_id)
    assert esc is not None and esc.status == "done"
    assert f"escalated    to {SONNET}: 24 of 24 blocks compared" in out.out
