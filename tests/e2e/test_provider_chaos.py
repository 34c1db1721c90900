"""The demo document on each cloud platform under the simulator's chaos faults.

``blockbatch run samples/handbook.md ... --provider P`` through the platform's own SDK
client (``blockbatch.runtime.claude.provider_client``) against the local stack, with the
model misbehaving as in tests/e2e/test_chaos.py (429, 529 and 500 answers, truncated
answers, malformed tool input, skipped, duplicated and unknown block uids), each answered
in the platform's own shape (``blockbatch/simulator/platforms.py``: Bedrock's
``ThrottlingException``, ...). The invariants are recomputed from rows
(``bench/chaos_check.py``): every block answered once (by the ledger call its overlay
names, written once), the cost recorded, no pack attempt paid twice, no answer the
simulator billed left out of the ledger; and the platform's credential is nowhere: not
in the run's Temporal histories, any row, the logs or the command's output.
"""

from __future__ import annotations

import logging
import secrets

import pytest

from bench.chaos_check import check_run, install_audit, violations
from tests.conftest import Stack
from tests.e2e.test_chaos import MODEL_FAULTS
from tests.e2e.test_providers import PROVIDERS, run_demo_on
from tests.e2e.test_secrets import every_row, histories, leaks
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_the_demo_keeps_every_guarantee_under_chaos_on_each_provider(
    provider: str,
    cli: Cli,
    bbstack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = bbstack
    _, route, _ = PROVIDERS[provider]
    token = secrets.token_hex(12)
    key = f"platform-SECRET-{token}"
    caplog.set_level(logging.DEBUG)
    await install_audit(s.pool)
    # The 500s and 529s name no retry-after: their retries back off from 0.2 s, not 2 s.
    run = await run_demo_on(
        provider, s, cli, monkeypatch, key, "call_retry_s=0.2", seed=38, **MODEL_FAULTS
    )
    assert run.code == 0, run.out + run.err
    assert run.run_id
    requests = s.sim.stats()["requests"]
    assert requests[route].get("200", 0) > 0, requests
    assert "POST /v1/messages" not in requests  # nothing went to the Claude API's route
    faults = {status for status in requests[route] if status != "200"}
    assert faults, f"no fault reached {provider}'s route: {requests[route]}"

    async with s.pool.acquire() as conn:
        result = await check_run(conn, run.run_id, sim_log=s.sim.requests())
    assert violations(result) == [], result
    assert result["blocks"]["ai_complete"] == result["blocks"]["total"] > 0
    assert result["calls"]["answers_never_recorded"] == 0, result["calls"]
    assert result["calls"]["cost_usd"] > 0
    assert result["calls"]["split_events"] > 0  # the truncations were halved, not lost

    found = await histories(s.client, f"run-{run.run_id}")
    assert [wid for wid, raw in found.items() if leaks(raw, key, token)] == []
    tables = await every_row(s)
    assert [t for t, text in tables.items() if leaks(text, key, token)] == []
    assert not leaks(caplog.text, key, token)
    assert not leaks(run.out + run.err, key, token)
