"""The demo document on each provider, sync, through the anthropic SDK's own platform client
(blockbatch's gateway sender for an OpenAI-compatible gateway).

``blockbatch run samples/handbook.md --schema samples/extract.json --provider P --model M``
against the local stack: the worker opens P's client from its environment
(``blockbatch.runtime.claude.provider_client``) and the simulator answers P's wire
(``blockbatch/simulator/platforms.py``), accepting only a distinctive credential. Every
block is answered once, the cost is recorded, no call went to the Claude API's route, and
the credential is nowhere: not in the Temporal history of the run or its packs, any row of
any table, the logs, or the command's output.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from blockbatch.core.providers import provider_info
from blockbatch.core.run_types import RunOptions
from blockbatch.runtime.claude import anthropic_client, provider_client
from blockbatch.runtime.settings import Settings
from blockbatch.runtime.temporal import build_worker
from tests.conftest import Stack
from tests.e2e.test_secrets import every_row, histories, leaks
from tests.helpers import extract_schema, markdown_doc
from tests.starter_fixtures import Cli, Result, cli_fixture  # noqa: F401 - provides `cli`

SAMPLES = Path(__file__).resolve().parents[2] / "samples"

#: Per provider: the model as the provider knows it, the simulator's route it must reach,
#: and where its platform client reads its credential.
PROVIDERS = {
    "bedrock": (
        "us.anthropic.claude-haiku-5-5",
        "POST /model/{model_id}/invoke",
        "AWS_BEARER_TOKEN_BEDROCK",
    ),
    "vertex": (
        "claude-haiku-5-5@20261007",
        "POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/{tail}",
        "ANTHROPIC_VERTEX_ACCESS_TOKEN",
    ),
    "aws": ("claude-haiku-5-5", "POST /aws/v1/messages", "ANTHROPIC_AWS_API_KEY"),
    "foundry": ("claude-haiku-5-5", "POST /anthropic/v1/messages", "ANTHROPIC_FOUNDRY_API_KEY"),
    "google-cloud": (
        "claude-haiku-5-5",
        "POST /v1/projects/{project}/locations/{region}/workspaces/{workspace}/invoke/v1/messages",
        "ANTHROPIC_GOOGLE_CLOUD_ACCESS_TOKEN",
    ),
    "gateway": ("anthropic/claude-haiku-5.5", "POST /v1/chat/completions", "OPENROUTER_API_KEY"),
}


def platform_settings(s: Stack, key: str) -> Settings:
    """The worker's settings for every platform on the local stack: the credentials the
    environment cannot give (tokens, the gateway's key) are ``key``; the gateway is the
    simulator's."""
    return s.settings.model_copy(
        update={
            "anthropic_vertex_access_token": SecretStr(key),
            "anthropic_google_cloud_access_token": SecretStr(key),
            "openrouter_api_key": SecretStr(key),
            "blockbatch_gateway_base_url": f"{s.sim.base_url}/v1",
        }
    )


def platform_env(monkeypatch: pytest.MonkeyPatch, base: str, key: str) -> None:
    """The worker's environment: each platform's own variables, pointed at the simulator."""
    for name, value in {
        "AWS_REGION": "us-east-1",
        "CLOUD_ML_REGION": "us-east5",
        "ANTHROPIC_VERTEX_PROJECT_ID": "proj-1",
        "ANTHROPIC_AWS_WORKSPACE_ID": "wrkspc_1",
        "ANTHROPIC_BEDROCK_BASE_URL": base,
        "ANTHROPIC_VERTEX_BASE_URL": f"{base}/v1",
        "ANTHROPIC_AWS_BASE_URL": f"{base}/aws",
        "ANTHROPIC_FOUNDRY_BASE_URL": f"{base}/anthropic",
        "ANTHROPIC_GOOGLE_CLOUD_BASE_URL": (
            f"{base}/v1/projects/proj-1/locations/global/workspaces/wrkspc_1/invoke"
        ),
        "AWS_BEARER_TOKEN_BEDROCK": key,
        "ANTHROPIC_AWS_API_KEY": key,
        "ANTHROPIC_FOUNDRY_API_KEY": key,
        "ANTHROPIC_VERTEX_ACCESS_TOKEN": key,
        "OPENROUTER_API_KEY": key,
    }.items():
        monkeypatch.setenv(name, value)


async def run_demo_on(
    provider: str,
    s: Stack,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    *sets: str,
    args: Sequence[str] = (),
    **scenario: Any,
) -> Result:
    """``run`` of the demo document on ``provider`` through its SDK client, with a worker
    whose platforms' credentials are all ``key``; the simulator takes only ``key`` (and the
    front door's key for the Models API), and ``scenario`` besides; ``sets`` are more of
    the run's ``--set KEY=VALUE`` options, ``args`` more of its options (``--mode batch``)."""
    model = PROVIDERS[provider][0]
    s.sim.scenario(auth={"valid_keys": [key, "sim-test-key"]}, **scenario)
    platform_env(monkeypatch, s.sim.base_url, key)
    worker_settings = platform_settings(s, key)
    worker = build_worker(
        s.client,
        s.task_queue,
        s.pool,
        anthropic_client(s.settings),
        open_client=lambda p: provider_client(worker_settings, p),
    )
    async with worker:
        return await cli(
            "run",
            str(SAMPLES / "handbook.md"),
            "--schema",
            str(SAMPLES / "extract.json"),
            "--provider",
            provider,
            "--model",
            model,
            "--set",
            "quality.probe_rate=0",
            *(arg for value in sets for arg in ("--set", value)),
            *args,
            timeout=170,
        )


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_the_demo_runs_on_each_provider_through_its_sdk_client(
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
    run = await run_demo_on(provider, s, cli, monkeypatch, key)
    assert run.code == 0, run.out + run.err
    assert run.run_id
    # What the provider lacks (Models API, token counting) is said, once.
    fallbacks = provider_info(provider).fallbacks_text()
    if fallbacks is not None:
        assert (run.out + run.err).count(fallbacks) == 1, run.out + run.err
    requests = s.sim.stats()["requests"]
    assert requests[route].get("200", 0) > 0, requests
    assert "POST /v1/messages" not in requests  # nothing went to the Claude API's route

    row = await s.pool.fetchrow(
        "select status, blocks_total, blocks_ai_complete, cost_usd, settings from runs "
        "where run_id = $1",
        run.run_id,
    )
    assert row["status"] == "completed"
    assert row["blocks_ai_complete"] == row["blocks_total"] > 0
    assert row["cost_usd"] > 0
    calls = await s.pool.fetch(
        "select block_uids, cost_usd from llm_calls where run_id = $1 and purpose = 'pack' "
        "and status = 'succeeded'",
        run.run_id,
    )
    answered = [uid for c in calls for uid in c["block_uids"]]
    assert len(answered) == len(set(answered)) == row["blocks_total"]  # each block once
    assert all(c["cost_usd"] > 0 for c in calls)
    if provider == "gateway":
        # The cost recorded is the one the gateway reported with each answer.
        reported = await s.pool.fetch(
            "select cost_usd, (response->'gateway'->'usage'->>'cost')::float8 as said "
            "from llm_calls where run_id = $1 and status = 'succeeded'",
            run.run_id,
        )
        assert reported and all(
            float(r["cost_usd"]) == pytest.approx(r["said"], rel=1e-5) for r in reported
        )

    # The credential: nowhere in history, tables, logs or output.
    found = await histories(s.client, f"run-{run.run_id}")
    assert [wid for wid, raw in found.items() if leaks(raw, key, token)] == []
    tables = await every_row(s)
    assert [t for t, text in tables.items() if leaks(text, key, token)] == []
    assert provider in tables["runs"]  # the run keeps its provider, not its credential
    assert not leaks(caplog.text, key, token)
    assert not leaks(run.out + run.err, key, token)


async def test_a_worker_without_the_providers_settings_ends_the_run_saying_what_to_set(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = bbstack
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "platform-SECRET-unused")
    doc = await s.bb.ingest_bytes(markdown_doc(6), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(50))
    worker = build_worker(
        s.client,
        s.task_queue,
        s.pool,
        anthropic_client(s.settings),
        open_client=lambda p: provider_client(s.settings, p),
    )
    async with worker:
        run_id = await s.bb.start_run(doc, schema_id, RunOptions(provider="bedrock"))
        result = await asyncio.wait_for(s.bb.wait(run_id), 150)
    assert result.status == "failed" and result.blocks_ai_complete == 0
    said = (
        (result.error or "")
        + " "
        + " ".join(
            r["last_error"] or ""
            for r in await s.pool.fetch("select last_error from overlays where run_id = $1", run_id)
        )
    )
    assert "cannot call Amazon Bedrock" in said and "AWS_REGION" in said, result
    assert "platform-SECRET-unused" not in said
    assert s.sim.stats()["requests"].get("POST /model/{model_id}/invoke") is None
