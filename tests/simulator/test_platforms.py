"""Each platform's wire, through the anthropic SDK's own platform client as blockbatch opens
it (``blockbatch.runtime.claude.provider_client``) and its sender
(``blockbatch/send/sender.py``), against the simulator's platform routes
(``blockbatch/simulator/platforms.py``)."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from blockbatch.core.providers import Route, wire_model
from blockbatch.runtime.claude import ProviderUnavailable, anthropic_client, provider_client
from blockbatch.runtime.settings import Settings
from blockbatch.send.sender import AnthropicSender, NotSent
from blockbatch.simulator.scenario import Auth, Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import make_blocks, pack_params

KEY = "platform-test-SECRET-key"
BLOCKS = make_blocks(4)


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(scenario=Scenario(auth=Auth(valid_keys=[KEY]))) as server:
        yield server


def platform_env(monkeypatch: pytest.MonkeyPatch, base: str) -> None:
    """Each platform's own variables, as a worker's environment would hold them."""
    for name, value in {
        "AWS_REGION": "us-east-1",
        "AWS_BEARER_TOKEN_BEDROCK": KEY,
        "ANTHROPIC_BEDROCK_BASE_URL": base,
        "CLOUD_ML_REGION": "us-east5",
        "ANTHROPIC_VERTEX_PROJECT_ID": "proj-1",
        "ANTHROPIC_VERTEX_BASE_URL": f"{base}/v1",
        "ANTHROPIC_AWS_API_KEY": KEY,
        "ANTHROPIC_AWS_WORKSPACE_ID": "wrkspc_1",
        "ANTHROPIC_AWS_BASE_URL": f"{base}/aws",
        "ANTHROPIC_FOUNDRY_API_KEY": KEY,
        "ANTHROPIC_FOUNDRY_BASE_URL": f"{base}/anthropic",
        "ANTHROPIC_GOOGLE_CLOUD_BASE_URL": (
            f"{base}/v1/projects/proj-1/locations/global/workspaces/wrkspc_1/invoke"
        ),
    }.items():
        monkeypatch.setenv(name, value)


def settings() -> Settings:
    return Settings(
        anthropic_vertex_access_token=KEY,
        anthropic_google_cloud_access_token=KEY,
        anthropic_api_key="unused",
    )


ROUTES = {
    "bedrock": "POST /model/{model_id}/invoke",
    "vertex": "POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/{tail}",
    "aws": "POST /aws/v1/messages",
    "foundry": "POST /anthropic/v1/messages",
    "google-cloud": (
        "POST /v1/projects/{project}/locations/{region}/workspaces/{workspace}/invoke/v1/messages"
    ),
}


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        ("bedrock", "us.anthropic.claude-haiku-5-5"),
        ("vertex", "claude-haiku-5-5@20261007"),
        ("aws", "claude-haiku-5-5"),
        ("foundry", "claude-haiku-5-5"),
        ("google-cloud", "claude-haiku-5-5"),
    ],
)
async def test_a_pack_is_answered_on_each_platforms_wire(
    sim: SimulatorServer, monkeypatch: pytest.MonkeyPatch, provider: str, model: str
) -> None:
    platform_env(monkeypatch, sim.base_url)
    claude = anthropic_client(settings().model_copy(update={"anthropic_base_url": sim.base_url}))
    sender = AnthropicSender(claude, lambda p: provider_client(settings(), p))
    route = Route(provider, wire_model(provider, "claude-haiku-5-5", model))  # type: ignore[arg-type]
    try:
        sent = await sender.send(pack_params(BLOCKS, model="claude-haiku-5-5"), route)
        endpoint = await sender.endpoint(route)
    finally:
        await sender.close()
        await claude.close()
    tool = next(b for b in sent.message["content"] if b["type"] == "tool_use")
    assert {r["block_uid"] for r in tool["input"]["results"]} == {b["block_uid"] for b in BLOCKS}
    assert sent.message["usage"]["input_tokens"] > 0
    assert sim.state.stats.requests[ROUTES[provider]] == {"200": 1}
    assert "POST /v1/messages" not in sim.state.stats.requests
    assert endpoint.simulated
    # No Claude API rate-limit headers where the platform sends none.
    if provider != "aws":
        assert not any(h.startswith("anthropic-ratelimit") for h in sent.headers)


async def test_bedrock_without_its_auth_header_is_refused_the_bedrock_way(
    sim: SimulatorServer,
) -> None:
    import httpx2

    async with httpx2.AsyncClient() as http:
        response = await http.post(
            f"{sim.base_url}/model/anthropic.claude-haiku-5-5/invoke",
            json={"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5, "messages": []},
        )
    assert response.status_code == 401
    assert response.headers["x-amzn-ErrorType"] == "UnrecognizedClientException"
    assert "authorization" in response.json()["message"]


async def test_bedrock_refuses_2026_10_21_for_a_model_before_claude_4_7(
    sim: SimulatorServer,
) -> None:
    import httpx2

    async with httpx2.AsyncClient() as http:
        response = await http.post(
            f"{sim.base_url}/model/anthropic.claude-haiku-4-5/invoke",
            headers={"authorization": f"Bearer {KEY}"},
            json={"anthropic_version": "2026-10-21", "max_tokens": 5, "messages": []},
        )
    assert response.status_code == 400
    assert "bedrock-2023-05-31" in response.json()["message"]


async def test_the_sender_asks_older_models_on_bedrock_at_bedrocks_version(
    sim: SimulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform_env(monkeypatch, sim.base_url)
    sender = AnthropicSender(anthropic_client(settings()), lambda p: provider_client(settings(), p))
    params = pack_params(BLOCKS, model="claude-haiku-4-5")
    try:
        sent = await sender.send(params, Route("bedrock", None))
    finally:
        await sender.close()
    assert sent.message["model"] == "claude-haiku-4-5"
    assert sim.state.stats.requests["POST /model/{model_id}/invoke"] == {"200": 1}


async def test_a_rejected_key_is_a_rejected_key_on_a_platform(
    sim: SimulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform_env(monkeypatch, sim.base_url)
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "another-key")
    sender = AnthropicSender(anthropic_client(settings()), lambda p: provider_client(settings(), p))
    try:
        with pytest.raises(NotSent) as failed:
            await sender.send(pack_params(BLOCKS, model="claude-haiku-5-5"), Route("bedrock"))
    finally:
        await sender.close()
    assert failed.value.error.status == 401
    assert "another-key" not in str(failed.value) and KEY not in str(failed.value)


def test_a_provider_without_its_settings_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", KEY)
    with pytest.raises(ProviderUnavailable, match="AWS_REGION"):
        provider_client(settings(), "bedrock")
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    # As on a machine without the bedrock extra (the dev install has boto3).
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "boto3" else find_spec(name)
    )
    with pytest.raises(ProviderUnavailable, match=r"set AWS_BEARER_TOKEN_BEDROCK, or install"):
        provider_client(settings(), "bedrock")
    monkeypatch.delenv("CLOUD_ML_REGION", raising=False)
    with pytest.raises(ProviderUnavailable, match="CLOUD_ML_REGION"):
        provider_client(settings(), "vertex")
    with pytest.raises(ProviderUnavailable, match="blockbatch\\[vertex\\]"):
        provider_client(Settings(), "vertex")
    for name in ("ANTHROPIC_GOOGLE_CLOUD_BASE_URL", "ANTHROPIC_GOOGLE_CLOUD_WORKSPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ProviderUnavailable, match="ANTHROPIC_GOOGLE_CLOUD_WORKSPACE_ID"):
        provider_client(settings(), "google-cloud")
    monkeypatch.setenv("ANTHROPIC_GOOGLE_CLOUD_WORKSPACE_ID", "wrkspc_1")
    with pytest.raises(ProviderUnavailable, match="blockbatch\\[google-cloud\\]"):
        provider_client(Settings(), "google-cloud")


async def test_no_platform_credential_in_the_sdks_debug_log(
    sim: SimulatorServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Foundry's client puts its key into each request's options, which the SDK logs.
    platform_env(monkeypatch, sim.base_url)
    caplog.set_level(logging.DEBUG)
    sender = AnthropicSender(anthropic_client(settings()), lambda p: provider_client(settings(), p))
    try:
        for provider in ROUTES:
            await sender.send(pack_params(BLOCKS, model="claude-haiku-5-5"), Route(provider))  # type: ignore[arg-type]
    finally:
        await sender.close()
    assert "Request options" in caplog.text
    assert KEY not in caplog.text


async def test_check_says_the_provider_answers_and_never_prints_the_credential(
    sim: SimulatorServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from blockbatch.cli import amain

    platform_env(monkeypatch, sim.base_url)
    argv = ["check", "--provider", "bedrock", "--model", "us.anthropic.claude-haiku-5-5"]
    assert await amain(argv, settings=settings()) == 0
    out, err = capsys.readouterr()
    assert "AWS_BEARER_TOKEN_BEDROCK" in out and "AWS_REGION" in out  # names, set here
    assert "model us.anthropic.claude-haiku-5-5 (claude-haiku-5-5) answered" in out
    assert "(SIMULATED)" in out and "no Models API" in err
    assert sim.state.stats.requests["POST /model/{model_id}/invoke"] == {"200": 1}
    assert KEY not in out + err

    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "another-key")
    assert await amain([*argv, "--json"], settings=settings()) == 4
    out, err = capsys.readouterr()
    assert "credentials were refused" in err and "another-key" not in out + err

    monkeypatch.delenv("AWS_REGION")
    assert await amain(argv, settings=settings()) == 4
    out, err = capsys.readouterr()
    assert "settings: cannot open the Amazon Bedrock client" in err and "AWS_REGION" in err
