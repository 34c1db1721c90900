"""Issue 28, a new user's first hour: the "% saved" of an uncached prompt, and answers that
say when the simulator gave them. The ticket CSV and its hand-written 3-field schema are
tests/fixtures/tickets.csv and ticket.json; on claude-sonnet-4-6 (cache minimum 1,024) their
779-token prefix is not cached."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

FIXTURES = Path(__file__).parent / "fixtures"
TICKETS, TICKET_SCHEMA = str(FIXTURES / "tickets.csv"), str(FIXTURES / "ticket.json")
UNCACHED_MODEL = "claude-sonnet-4-6"


async def test_the_saving_of_an_uncached_prompt_counts_its_prefix(cli: Cli,
                                                                   bbstack: Stack) -> None:
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
           on c.prefix_sha256 = p.sha256 where c.run_id = $1 limit 1""", run.run_id)
    assert prefix is not None and 700 <= prefix <= 900
    assert int(saved.group(2)) >= 50, run.out
    # Bug 2: the probe's cap priced the uncached prefix as a cache read, and its one call
    # cost 11% of the run, "capped at 5%".
    share = re.search(r"probe +\d+ calls?, \$[\d.]+ \(([\d.]+)% of the run", run.out)
    assert share is None or float(share.group(1)) <= 5.0, run.out
