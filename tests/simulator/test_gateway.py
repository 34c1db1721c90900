"""The OpenAI-compatible gateway's wire, through blockbatch's gateway sender as a worker opens
it (``blockbatch.runtime.claude.provider_client``, ``blockbatch/send/gateway.py``) against the
simulator's chat completions route (``blockbatch/simulator/gateway.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from blockbatch.core.providers import Route
from blockbatch.core.registry import Usage, cost_usd, get_model
from blockbatch.runtime.claude import ProviderUnavailable, anthropic_client, provider_client
from blockbatch.runtime.settings import Settings
from blockbatch.send.sender import AnthropicSender, NotSent
from blockbatch.simulator.scenario import Auth, Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import make_blocks, pack_params

KEY = "gateway-test-SECRET-key"
BLOCKS = make_blocks(4)
ROUTE = "POST /v1/chat/completions"
GATEWAY = Route("gateway", "anthropic/claude-haiku-5.5")


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(scenario=Scenario(auth=Auth(valid_keys=[KEY]))) as server:
        yield server


def settings(sim: SimulatorServer, key: str | None = KEY) -> Settings:
    return Settings(
        anthropic_api_key="unused",
        blockbatch_gateway_base_url=f"{sim.base_url}/v1",
        blockbatch_gateway_api_key=key,
    )


def sender_for(sim: SimulatorServer, key: str | None = KEY) -> AnthropicSender:
    return AnthropicSender(
        anthropic_client(settings(sim)), lambda p: provider_client(settings(sim, key), p)
    )


async def test_a_pack_is_answered_through_the_gateway_with_its_reported_cost(
    sim: SimulatorServer,
) -> None:
    sender = sender_for(sim)
    try:
        sent = await sender.send(pack_params(BLOCKS, model="claude-haiku-5-5"), GATEWAY)
        endpoint = await sender.endpoint(GATEWAY)
    finally:
        await sender.close()
    tool = next(b for b in sent.message["content"] if b["type"] == "tool_use")
    assert {r["block_uid"] for r in tool["input"]["results"]} == {b["block_uid"] for b in BLOCKS}
    assert sent.message["stop_reason"] == "tool_use"
    usage = Usage.from_message(sent.message)
    assert usage.input_tokens + usage.cache_creation_input_tokens > 0
    # The gateway's cost, as it reported it (here the registry's prices of the tokens).
    reported = sent.message["gateway"]["usage"]["cost"]
    assert reported == pytest.approx(cost_usd(get_model("claude-haiku-5-5"), usage))
    assert sim.state.stats.requests[ROUTE] == {"200": 1}
    assert "POST /v1/messages" not in sim.state.stats.requests
    assert endpoint.simulated and endpoint.host is not None


async def test_the_prompt_cache_marker_reaches_claude_through_the_gateway(
    sim: SimulatorServer,
) -> None:
    params = pack_params(BLOCKS, model="claude-haiku-5-5", system_repeat=800)
    sender = sender_for(sim)
    try:
        first = await sender.send(params, GATEWAY)
        second = await sender.send(params, GATEWAY)
    finally:
        await sender.close()
    assert Usage.from_message(first.message).cache_creation_input_tokens > 0
    assert Usage.from_message(second.message).cache_read_input_tokens > 0
    details = second.message["gateway"]["usage"]["prompt_tokens_details"]
    assert details["cached_tokens"] == Usage.from_message(second.message).cache_read_input_tokens


async def test_a_request_without_a_key_is_refused_the_gateway_way(sim: SimulatorServer) -> None:
    import httpx2

    async with httpx2.AsyncClient() as http:
        response = await http.post(
            f"{sim.base_url}/v1/chat/completions",
            json={"model": "anthropic/claude-haiku-5.5", "messages": []},
        )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == 401


async def test_a_rejected_gateway_key_stops_the_run_and_is_never_repeated(
    sim: SimulatorServer,
) -> None:
    sender = sender_for(sim, key="another-SECRET")
    try:
        with pytest.raises(NotSent) as failed:
            await sender.send(pack_params(BLOCKS, model="claude-haiku-5-5"), GATEWAY)
    finally:
        await sender.close()
    error = failed.value.error
    assert (error.status, error.kind, error.code) == (401, "fatal", "key_rejected")
    assert "another-SECRET" not in str(failed.value) and KEY not in str(failed.value)


async def test_an_unknown_gateway_model_is_a_400_that_names_it(sim: SimulatorServer) -> None:
    sender = sender_for(sim)
    try:
        with pytest.raises(NotSent) as failed:
            await sender.send(
                pack_params(BLOCKS, model="claude-haiku-5-5"),
                Route("gateway", "anthropic/claude-nope-9"),
            )
    finally:
        await sender.close()
    assert failed.value.error.status == 400
    assert "anthropic/claude-nope-9" in failed.value.error.message


async def test_an_unreachable_gateway_is_retryable_and_names_its_host() -> None:
    sender = AnthropicSender(
        anthropic_client(Settings(anthropic_api_key="unused")),
        lambda p: provider_client(
            Settings(
                blockbatch_gateway_base_url="http://127.0.0.1:9/v1",
                blockbatch_gateway_api_key=KEY,
            ),
            p,
        ),
    )
    try:
        with pytest.raises(NotSent) as failed:
            await sender.send(pack_params(BLOCKS, model="claude-haiku-5-5"), GATEWAY)
    finally:
        await sender.close()
    assert not failed.value.answered
    assert failed.value.error.kind == "retryable"
    assert failed.value.error.host == "127.0.0.1:9"
    assert KEY not in str(failed.value) + failed.value.ledger_message


def test_a_gateway_without_its_key_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BLOCKBATCH_GATEWAY_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ProviderUnavailable, match="BLOCKBATCH_GATEWAY_API_KEY"):
        provider_client(Settings(), "gateway")
    with pytest.raises(ProviderUnavailable, match="http"):
        provider_client(
            Settings(blockbatch_gateway_api_key=KEY, blockbatch_gateway_base_url="openrouter"),
            "gateway",
        )
    # OpenRouter's own variable is taken when blockbatch's is unset.
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    assert provider_client(Settings(), "gateway").base_url == "https://openrouter.ai/api/v1"


async def test_check_on_the_gateway_answers_and_never_prints_the_key(
    sim: SimulatorServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from blockbatch.cli import amain

    monkeypatch.setenv("BLOCKBATCH_GATEWAY_API_KEY", KEY)
    argv = ["check", "--provider", "gateway", "--model", "anthropic/claude-haiku-5.5"]
    assert await amain(argv, settings=settings(sim)) == 0
    out, err = capsys.readouterr()
    assert "BLOCKBATCH_GATEWAY_API_KEY" in out
    assert "model anthropic/claude-haiku-5.5 (claude-haiku-5-5) answered" in out
    assert "(SIMULATED)" in out and "no token counting" in err
    assert KEY not in out + err


@pytest.mark.parametrize(
    ("errors", "status", "retry_after"),
    [({"rate_429": 1.0, "retry_after_s": 7}, 429, 7.0), ({"outage_status": 529}, 502, None)],
)
async def test_a_throttled_or_down_model_is_retryable_through_the_gateway(
    errors: dict[str, object], status: int, retry_after: float | None
) -> None:
    scenario = Scenario.model_validate({"auth": {"valid_keys": [KEY]}, "errors": errors})
    async with SimulatorServer(scenario=scenario) as sim:
        sender = sender_for(sim)
        try:
            with pytest.raises(NotSent) as failed:
                await sender.send(pack_params(BLOCKS, model="claude-haiku-5-5"), GATEWAY)
        finally:
            await sender.close()
    error = failed.value.error
    assert failed.value.answered
    assert (error.status, error.kind) == (status, "retryable")
    if retry_after is not None:
        assert error.retry_after_s == retry_after
