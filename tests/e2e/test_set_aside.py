"""Blocks set aside (a web page's navigation here) are kept in the run but never sent:
``starter.py run page.html`` on the real stack calls the simulator with the article only,
counts the rest apart and says what sending them would cost; ``--include-boilerplate``
sends them."""

from __future__ import annotations

import json

import aiohttp

from blockbatch.web.app import create_app
from tests.conftest import Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`
from tests.unit.test_formats import _NEWS_PAGE
from tests.web_helpers import serving


async def _sent_uids(bbstack: Stack, run_id: str) -> set[str]:
    """Every block_uid the run's calls carried, from the ledger (the warm-up's stand-in
    block is none of the document's)."""
    rows = await bbstack.pool.fetch(
        "select unnest(block_uids) as uid from llm_calls where run_id = $1", run_id
    )
    return {r["uid"] for r in rows}


async def test_navigation_is_set_aside_unsent_and_counted_then_sent_when_asked(
    cli: Cli, bbstack: Stack
) -> None:
    page = cli.tmp / "page.html"
    page.write_text(_NEWS_PAGE)
    schema = cli.schema()
    quote = await cli("estimate", str(page), "--schema", schema, "--no-count")
    assert quote.code == 0, quote.out + quote.err
    assert "blocks are set aside" in quote.out and "not quoted" in quote.out, quote.out
    async with bbstack.worker():
        run = await cli("run", str(page), "--schema", schema)
    assert run.code == 0, run.out + run.err
    rows = await bbstack.pool.fetch(
        """select o.block_uid, o.status, o.pack_index, b.block_type from overlays o
           join blocks b using (block_uid) where o.run_id = $1 order by o.block_index""",
        run.run_id,
    )
    aside = {r["block_uid"] for r in rows if r["block_type"] == "navigation"}
    article = {r["block_uid"] for r in rows if r["block_type"] != "navigation"}
    assert len(article) == 9 and len(aside) > 30
    assert {r["status"] for r in rows if r["block_uid"] in aside} == {"set_aside"}
    assert {r["pack_index"] for r in rows if r["block_uid"] in aside} == {None}
    assert {r["status"] for r in rows if r["block_uid"] in article} == {"ai_complete"}
    sent = await _sent_uids(bbstack, run.run_id)
    assert article <= sent and not sent & aside
    counted = await bbstack.pool.fetchrow(
        """select status, blocks_total, blocks_ai_complete, blocks_set_aside,
                  set_aside_usd::float8 as usd from runs where run_id = $1""",
        run.run_id,
    )
    assert counted["status"] == "completed"
    assert (counted["blocks_total"], counted["blocks_ai_complete"]) == (9, 9)
    assert counted["blocks_set_aside"] == len(aside) and counted["usd"] > 0
    assert f"{len(aside)} blocks set aside, not sent" in run.out, run.out

    # The export keeps them, with their status and provenance.
    out = cli.tmp / "page.jsonl"
    await bbstack.bb.export(run.run_id, out, staged=True)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    kept = [x for x in lines if x["immutable"]["block_uid"] in aside]
    assert len(kept) == len(aside)
    assert {x["status"]["status"] for x in kept} == {"set_aside"}
    assert all(x["provenance"]["char_end"] > x["provenance"]["char_start"] for x in kept)
    # The review grid shows each as set aside (a badge), and filters on it.
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, aiohttp.ClientSession() as http:
        grid = await http.get(f"{base}/runs/{run.run_id}", params={"status": "set_aside"})
        assert grid.status == 200
        body = await grid.text()
    assert body.count('<span class="status s-set_aside" title="kept, not sent') >= 1
    assert "Section 1" in body and "Paragraph 1 of the article" not in body

    async with bbstack.worker():
        everything = await cli("run", str(page), "--schema", schema, "--include-boilerplate")
    assert everything.code == 0, everything.out + everything.err
    statuses = await bbstack.pool.fetch(
        "select distinct status from overlays where run_id = $1", everything.run_id
    )
    assert {r["status"] for r in statuses} == {"ai_complete"}
    # The article was answered by the first run (reused); the navigation is sent now.
    assert aside <= await _sent_uids(bbstack, everything.run_id)
