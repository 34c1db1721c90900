"""Issue 28, a new user's first hour: the "% saved" of an uncached prompt, and answers that
say when the simulator gave them. The ticket CSV and its hand-written 3-field schema are
tests/fixtures/tickets.csv and ticket.json; on claude-sonnet-4-6 (cache minimum 1,024) their
779-token prefix is not cached."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

FIXTURES = Path(__file__).parents[1] / "fixtures"
TICKETS, TICKET_SCHEMA = str(FIXTURES / "tickets.csv"), str(FIXTURES / "ticket.json")
UNCACHED_MODEL = "claude-sonnet-4-6"


async def test_the_saving_of_an_uncached_prompt_counts_its_prefix(cli: Cli, bbstack: Stack) -> None:
    """Bug 1: the baseline took the prefix from cache writes + reads, 0 when nothing was
    cached, and printed "-3% saved" where 29 fewer copies of the prompt save about 70%."""
    async with bbstack.worker():
        run = await cli("run", TICKETS, "--schema", TICKET_SCHEMA, "--model", UNCACHED_MODEL)
    assert run.code == 0, run.err
    assert "cache write 0 · cache read 0" in run.out, run.out
    saved = re.search(r"no caching: \$([\d.]+); (-?\d+)% saved", run.out)
    assert saved, run.out
    # The prefix counted once per block: 30 copies of it against the run's one or two.
    prefix = await bbstack.pool.fetchval(
        """select p.input_tokens from prompt_prefixes p join llm_calls c
           on c.prefix_sha256 = p.sha256 where c.run_id = $1 limit 1""",
        run.run_id,
    )
    assert prefix is not None and 700 <= prefix <= 900
    assert int(saved.group(2)) >= 50, run.out
    # Bug 2: the probe's cap priced the uncached prefix as a cache read, and its one call
    # cost 11% of the run, "capped at 5%".
    # Priced as input, one probe call costs more than 5% of this run: none is made, and
    # the summary says why.
    share = re.search(r"probe +\d+ calls?, \$[\d.]+ \(([\d.]+)% of the run", run.out)
    assert share is None or float(share.group(1)) <= 5.0, run.out
    assert "quality      not probed: one probe call would cost more than 5%" in run.out


async def test_answers_of_the_simulator_say_so_wherever_they_are_shown(
    cli: Cli, bbstack: Stack
) -> None:
    """Bug 3: a run answered by the simulator read as Claude's everywhere (the ledger said
    ``provider anthropic``)."""
    import aiohttp

    from blockbatch.web.app import create_app
    from tests.web_helpers import serving

    host = bbstack.sim.base_url.removeprefix("http://")
    async with bbstack.worker():
        run = await cli("run", TICKETS, "--schema", TICKET_SCHEMA)
    assert run.code == 0, run.err
    run_id = run.run_id
    assert (
        "SIMULATED answers, not Claude's" in run.out.splitlines()[-14:][0]
        or f"run {run_id}: completed · SIMULATED" in run.out
    ), run.out
    assert f"simulated: the simulator at {host} answered, not Claude" in run.out, run.out
    rows = await bbstack.pool.fetch(
        "select distinct provider, endpoint_host from llm_calls where run_id = $1", run_id
    )
    assert [tuple(r) for r in rows] == [("simulator", host)]
    status = await cli("status", run_id)
    assert "SIMULATED" in status.out.splitlines()[0] and host in status.out, status.out
    calls = await cli("calls", run_id)
    assert f"answered by the simulator at {host}, not by Claude" in calls.out, calls.out
    assert "messages (simulated)" in calls.out
    as_json = (await cli("status", run_id, "--json")).json()
    assert as_json["run"]["endpoints"] == [f"simulator {host}"]
    out = str(cli.tmp / "tickets.jsonl")
    exported = await cli("export", run_id, "--staged", "--out", out)
    assert exported.code == 0 and "SIMULATED: these answers are the simulator's" in exported.out
    import json

    meta = json.loads(Path(out + ".meta.json").read_text())
    assert meta["simulated"] is True and meta["endpoints"] == [f"simulator {host}"]
    # The workflow's result (what `Blockbatch.wait` and `llm_batch` hand back) says so too.
    result = await bbstack.bb.wait(run_id)
    assert result.simulated and result.endpoints == [f"simulator {host}"]
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, aiohttp.ClientSession() as http:
        page = await (await http.get(f"{base}/runs/{run_id}")).text()
        header = page[page.index("<h1>") : page.index("</h1>")]
        assert 'id="simulated"' in header and ">simulated<" in header
        listed = await (await http.get(f"{base}/")).text()
        assert ">simulated<" in listed
        call_id = await bbstack.pool.fetchval(
            "select min(call_id) from llm_calls where run_id = $1", run_id
        )
        call = await (await http.get(f"{base}/runs/{run_id}/calls/{call_id}")).text()
        assert 'id="simulated"' in call[call.index("<h1>") : call.index("</h1>")]


async def test_a_starter_set_for_claude_warns_when_the_workers_call_the_simulator(
    cli: Cli, bbstack: Stack
) -> None:
    """Bug 3: after `make demo` (a worker on the simulator), `export ANTHROPIC_API_KEY=...`
    then `run` was answered by the simulator without a word."""
    from blockbatch.runtime.claude import anthropic_client
    from blockbatch.runtime.endpoint import announced

    llm = anthropic_client(bbstack.settings)
    async with announced(bbstack.pool, bbstack.task_queue, llm) as endpoint:
        assert endpoint.simulated
        claude = await cli(
            "run",
            TICKETS,
            "--schema",
            TICKET_SCHEMA,
            "--no-wait",
            ANTHROPIC_API_KEY="sk-ant-api03-mine",
            ANTHROPIC_BASE_URL="",
        )
        same = await cli("run", TICKETS, "--schema", TICKET_SCHEMA, "--no-wait")
    assert claude.code == 0 and same.code == 0, claude.err + same.err
    assert "warning: the workers on task queue" in claude.err, claude.err
    assert f"call the simulator at {bbstack.sim.base_url.removeprefix('http://')}" in claude.err
    assert "not the Claude API" in claude.err and "SIMULATED" in claude.err
    assert "sk-ant" not in claude.err + claude.out  # never the key, nor part of it
    assert "warning: the workers" not in same.err, same.err
    # A stopped worker's row is gone: nothing to compare with, nothing said.
    assert await bbstack.pool.fetchval("select count(*) from worker_endpoints") == 0
    await llm.close()


async def test_a_schemas_first_quote_expects_what_answers_write(cli: Cli, bbstack: Stack) -> None:
    """The first quote of the ticket schema was 2.1x the run's cost: its output was the
    planner's shape estimate, which leans high on purpose. After another schema's run (the
    demo's, say), the first quote expects what answers wrote against their estimate."""
    async with bbstack.worker():
        other = await cli("run", cli.doc(40), "--schema", cli.schema(), "--pack-size", "10")
        assert other.code == 0, other.err
        quoted = await cli("estimate", TICKETS, "--schema", TICKET_SCHEMA, "--json")
        assert quoted.code == 0, quoted.err
        run = await cli("run", TICKETS, "--schema", TICKET_SCHEMA)
    assert run.code == 0, run.err
    q = quoted.json()
    assert q["output_source"] == "other_schemas" and q["output_scope"] == "model"
    spent = await bbstack.pool.fetchrow(
        """select sum(output_tokens) as output, sum(cost_usd)::float8 as cost
           from llm_calls where run_id = $1""",
        run.run_id,
    )
    assert 0.8 * spent["output"] <= q["sync"]["output_tokens"] <= 1.25 * spent["output"]
    assert 0.8 * spent["cost"] <= q["sync"]["cost_usd"] <= 1.3 * spent["cost"], (q, spent)
