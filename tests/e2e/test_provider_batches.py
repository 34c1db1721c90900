"""Batch mode on the platforms that serve the Message Batches API through the anthropic SDK's
own client: Claude Platform on AWS (``AnthropicAWS``) and Claude on Google Cloud
(``AnthropicGoogleCloud``).

``blockbatch run samples/handbook.md ... --provider P --mode batch`` against the local stack:
the worker opens P's client from its environment and the simulator answers the batches
under P's own path and headers (``blockbatch/simulator/platforms.py``). Every block is
answered once, at the batch price, nothing goes to the Claude API's routes, and the
platform's credential is nowhere: not in the run's histories, any row, the logs or the
command's output.
"""

from __future__ import annotations

import logging
import secrets

import pytest

from bench.chaos_check import check_run, install_audit, violations
from blockbatch.core.registry import Usage, cost_usd, get_model
from tests.conftest import Stack
from tests.e2e.test_providers import run_demo_on
from tests.e2e.test_secrets import every_row, histories, leaks
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

#: Per platform, where its batches are created on the simulator.
BATCH_ROUTES = {
    "aws": "POST /aws/v1/messages/batches",
    "google-cloud": (
        "POST /v1/projects/{project}/locations/{region}/workspaces/{workspace}"
        "/invoke/v1/messages/batches"
    ),
}


#: A batch run's polls, short: the simulator's batches end within a second.
BATCH_POLLS = ("batch.poll_initial_s=0.2", "batch.poll_max_s=0.5")


@pytest.mark.parametrize("provider", list(BATCH_ROUTES))
async def test_the_demo_runs_in_batch_mode_through_the_platforms_message_batches(
    provider: str,
    cli: Cli,
    bbstack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = bbstack
    token = secrets.token_hex(12)
    key = f"platform-SECRET-{token}"
    caplog.set_level(logging.DEBUG)
    await install_audit(s.pool)
    run = await run_demo_on(
        provider,
        s,
        cli,
        monkeypatch,
        key,
        *BATCH_POLLS,
        args=("--mode", "batch"),
        batch={"processing_delay_s": 0.2},
    )
    assert run.code == 0, run.out + run.err
    assert run.run_id

    requests = s.sim.stats()["requests"]
    assert requests[BATCH_ROUTES[provider]].get("200", 0) > 0, requests
    # Nothing went through the Claude API's own batch routes.
    assert not any(r.split(" ", 1)[1].startswith("/v1/messages/batches") for r in requests)
    row = await s.pool.fetchrow(
        "select status, blocks_total, blocks_ai_complete from runs where run_id = $1",
        run.run_id,
    )
    assert row["status"] == "completed" and row["blocks_ai_complete"] == row["blocks_total"]
    async with s.pool.acquire() as conn:
        result = await check_run(conn, run.run_id)
    assert violations(result) == [], result

    model = get_model("claude-haiku-5-5")
    calls = await s.pool.fetch(
        """select response, cost_usd from llm_calls where run_id = $1
           and purpose = 'batch_request' and status = 'succeeded'""",
        run.run_id,
    )
    assert calls
    for c in calls:  # the batch price: half the on-demand one
        usage = Usage.from_message(c["response"])
        assert float(c["cost_usd"]) == pytest.approx(cost_usd(model, usage, batch=True), abs=1e-8)

    found = await histories(s.client, f"run-{run.run_id}")
    assert [wid for wid, raw in found.items() if leaks(raw, key, token)] == []
    tables = await every_row(s)
    assert [t for t, text in tables.items() if leaks(text, key, token)] == []
    assert not leaks(caplog.text, key, token)
    assert not leaks(run.out + run.err, key, token)
