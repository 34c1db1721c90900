"""Validation and injected errors map to the SDK's exception classes."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from anthropic._error_classes import (
    ContractSpendLimitReachedError,
    EnforcedSpendLimitReachedError,
    LinkedOrganizationSpendLimitReachedError,
    RampLimitExceededError,
)
from anthropic.types import MessageParam, TextBlockParam

from blockbatch.simulator.bodies import MESSAGES_MAX_BYTES
from blockbatch.simulator.scenario import Auth, Errors, Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import control, make_blocks, pack_params
from tests.helpers import error_body
from tests.simulator.sdk import sdk_client
from tests.waiting import until

MODEL = "claude-haiku-4-5"  # 200K context; no retirement announced
HI: list[MessageParam] = [{"role": "user", "content": "hi"}]


def sdk(sim: SimulatorServer, key: str = "test-key", **kwargs) -> anthropic.AsyncAnthropic:
    return sdk_client(sim.base_url, key, **kwargs)


def test_overloaded_error_class_exists():
    assert issubclass(anthropic.OverloadedError, anthropic.InternalServerError)


@pytest.mark.parametrize(
    ("rate", "exception", "status"),
    [
        ("rate_429", anthropic.RateLimitError, 429),
        ("rate_529", anthropic.OverloadedError, 529),
        ("rate_500", anthropic.InternalServerError, 500),
    ],
)
async def test_injected_errors_map_to_sdk_exceptions(sim, rate, exception, status):
    sim.scenario = Scenario(errors=Errors(**{rate: 1.0, "retry_after_s": 7}))
    with pytest.raises(exception) as caught:
        await sdk(sim).messages.create(**pack_params(make_blocks(2)))
    error = caught.value
    assert error.status_code == status
    assert error_body(error)["type"] == "error"
    assert (
        error_body(error)["error"]["type"]
        == {
            429: "rate_limit_error",
            529: "overloaded_error",
            500: "api_error",
        }[status]
    )
    if status == 429:
        headers = error.response.headers
        assert headers["retry-after"] == "7"
        for kind in ("requests", "input-tokens", "output-tokens"):
            for part in ("limit", "remaining", "reset"):
                assert f"anthropic-ratelimit-{kind}-{part}" in headers
    faults = sim.state.stats.snapshot()["faults"]
    assert faults == {rate: 1}


async def test_retried_identical_request_gets_a_fresh_draw(sim):
    sim.scenario = Scenario(seed=3, errors=Errors(rate_529=0.5))
    params = pack_params(make_blocks(3))
    outcomes = []
    for _ in range(24):
        try:
            await sdk(sim).messages.create(**params)
            outcomes.append("ok")
        except anthropic.OverloadedError:
            outcomes.append("529")
    assert "ok" in outcomes and "529" in outcomes


async def test_fault_draws_replay_after_reset(sim):
    sim.scenario = Scenario(seed=11, errors=Errors(rate_500=0.5))
    params = pack_params(make_blocks(3))

    async def run() -> list[str]:
        outcomes = []
        for _ in range(10):
            try:
                await sdk(sim).messages.create(**params)
                outcomes.append("ok")
            except anthropic.InternalServerError:
                outcomes.append("500")
        return outcomes

    first = await run()
    sim.state.reset()
    assert await run() == first


async def test_timeout_fault_hangs_until_the_client_gives_up(sim):
    sim.scenario = Scenario(errors=Errors(rate_timeout=1.0, timeout_s=30))
    client = sdk(sim, timeout=0.3)
    with pytest.raises(anthropic.APITimeoutError):
        await client.messages.create(**pack_params(make_blocks(1)))
    log = sim.state.stats.log
    entry = await until(
        lambda: log and log[-1]["status"] is not None and log[-1], "the call logged"
    )
    assert entry["faults"] == ["timeout"] and entry["status"] == 529


async def test_short_timeout_answers_529(sim):
    sim.scenario = Scenario(errors=Errors(rate_timeout=1.0, timeout_s=0.05))
    with pytest.raises(anthropic.OverloadedError):
        await sdk(sim).messages.create(**pack_params(make_blocks(1)))


async def test_missing_key_is_401(sim):
    client = sdk(sim, default_headers={"Authorization": anthropic.Omit()})
    with pytest.raises(anthropic.AuthenticationError) as caught:
        await client.messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert error_body(caught.value)["error"]["type"] == "authentication_error"


async def test_bearer_and_x_api_key_both_accepted(sim):
    sim.scenario = Scenario(auth=Auth(valid_keys=["good"]))
    bearer = await sdk(sim, "good").messages.create(model=MODEL, max_tokens=100, messages=HI)
    legacy = anthropic.AsyncAnthropic(
        base_url=sim.base_url,
        api_key="good",
        max_retries=0,
        default_headers={"Authorization": anthropic.Omit(), "X-Api-Key": "good"},  # type: ignore[dict-item]  # Omit drops a header
    )
    old_style = await legacy.messages.create(model=MODEL, max_tokens=100, messages=HI)
    assert bearer.stop_reason == old_style.stop_reason == "end_turn"


async def test_wrong_key_is_401_and_forbidden_key_is_403(sim):
    sim.scenario = Scenario(auth=Auth(valid_keys=["good", "blocked"], forbidden_keys=["blocked"]))
    with pytest.raises(anthropic.AuthenticationError) as caught:
        await sdk(sim, "sk-secret-wrong").messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert "sk-secret-wrong" not in str(caught.value.body)
    with pytest.raises(anthropic.PermissionDeniedError) as forbidden:
        await sdk(sim, "blocked").messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert error_body(forbidden.value)["error"]["type"] == "permission_error"
    assert "sk-secret-wrong" not in str(list(sim.state.stats.log))


async def test_missing_anthropic_version_is_400(sim):
    client = sdk(sim, default_headers={"anthropic-version": anthropic.Omit()})
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert "anthropic-version" in error_body(caught.value)["error"]["message"]


async def test_unknown_model_is_404(sim):
    with pytest.raises(anthropic.NotFoundError) as caught:
        await sdk(sim).messages.create(model="xyz", max_tokens=10, messages=HI)
    assert error_body(caught.value)["error"] == {"type": "not_found_error", "message": "model: xyz"}


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"max_tokens": 128_001}, "max_tokens: 128001 > 128000"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "role"),
        ({"temperature": 3}, "temperature"),
    ],
)
async def test_invalid_requests_are_400(sim, change, fragment):
    params = {**pack_params(make_blocks(1)), **change}
    with pytest.raises(anthropic.BadRequestError) as caught:
        # The raw post skips the SDK's own client-side checks (e.g. on large max_tokens).
        await sdk(sim).post("/v1/messages", body=params, cast_to=object)
    assert error_body(caught.value)["error"]["type"] == "invalid_request_error"
    assert fragment in error_body(caught.value)["error"]["message"]


async def test_missing_required_field_is_400(sim):
    with pytest.raises(anthropic.BadRequestError) as caught:
        await sdk(sim).post("/v1/messages", body={"model": MODEL, "messages": HI}, cast_to=object)
    assert error_body(caught.value)["error"]["message"] == "max_tokens: Field required"


async def test_too_many_cache_breakpoints_is_400(sim):
    system: list[TextBlockParam] = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
        for i in range(5)
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        await sdk(sim).messages.create(model=MODEL, max_tokens=10, system=system, messages=HI)
    assert "maximum of 4" in error_body(caught.value)["error"]["message"]


async def test_prompt_too_long_uses_the_real_message(sim):
    huge = "word " * 200_001
    with pytest.raises(anthropic.BadRequestError) as caught:
        await sdk(sim).messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": huge}]
        )
    message = error_body(caught.value)["error"]["message"]
    assert message.startswith("prompt is too long: ")
    assert message.endswith(" tokens > 200000 maximum")


async def test_an_outage_answers_every_request_with_its_status_until_lifted(sim):
    sim.scenario = Scenario(errors=Errors(outage_status=503))
    client = sdk(sim)
    for _ in range(3):
        with pytest.raises(anthropic.InternalServerError) as caught:
            await client.messages.create(**pack_params(make_blocks(2)))
        assert caught.value.status_code == 503
        assert error_body(caught.value)["error"]["type"] == "api_error"
    # A probe-sized request is answered too once the outage is lifted.
    sim.scenario = Scenario()
    message = await client.messages.create(model=MODEL, max_tokens=1, messages=HI)
    assert message.usage.output_tokens <= 1
    assert sim.state.stats.snapshot()["faults"] == {"outage": 3}
    sim.scenario = Scenario(errors=Errors(outage_status=529))
    with pytest.raises(anthropic.OverloadedError):
        await client.messages.create(**pack_params(make_blocks(1)))


# Contract §6 ("Spend limits", "Error types") and api_findings.md §3: each account
# refusal maps to its SDK class and error_code, and none carries retry-after.
@pytest.mark.parametrize(
    ("kind", "exception", "status", "error_type", "error_code"),
    [
        ("billing_error", anthropic.PaymentRequiredError, 402, "billing_error", None),
        (
            "enforced_spend_limit_reached",
            EnforcedSpendLimitReachedError,
            429,
            "rate_limit_error",
            "enforced_spend_limit_reached",
        ),
        (
            "contract_spend_limit_reached",
            ContractSpendLimitReachedError,
            429,
            "rate_limit_error",
            "contract_spend_limit_reached",
        ),
        (
            "linked_organization_spend_limit_reached",
            LinkedOrganizationSpendLimitReachedError,
            402,
            "billing_error",
            "linked_organization_spend_limit_reached",
        ),
        ("self_spend_limit", anthropic.BadRequestError, 400, "invalid_request_error", None),
    ],
)
async def test_account_refusals_map_to_the_sdk_classes(
    sim, kind, exception, status, error_type, error_code
):
    client = sdk(sim)
    await client.messages.create(**pack_params(make_blocks(1)))
    # Switched on mid-run through the control API; the rest of the scenario stays.
    await asyncio.to_thread(
        control, sim.base_url, "PATCH", "/_sim/scenario", {"errors": {"account_error": kind}}
    )
    for call in (
        client.messages.create(**pack_params(make_blocks(1))),
        client.messages.batches.create(
            requests=[{"custom_id": "a", "params": pack_params(make_blocks(1))}]  # type: ignore[typeddict-item]  # pack_params: a plain dict
        ),
    ):
        with pytest.raises(exception) as caught:
            await call
        error = caught.value
        assert type(error) is exception
        assert (error.status_code, error.type, error.error_code) == (status, error_type, error_code)
        assert "retry-after" not in error.response.headers
        assert (
            error.request_id
            == error_body(error)["request_id"]
            == error.response.headers["request-id"]
        )
        if error_code is None:
            assert "details" not in error_body(error)["error"]
        else:
            assert error_body(error)["error"]["details"] == {"error_code": error_code}
    if kind == "self_spend_limit":
        assert error.api_message == "You have reached your specified API usage limits."
    await asyncio.to_thread(
        control, sim.base_url, "PATCH", "/_sim/scenario", {"errors": {"account_error": None}}
    )
    await client.messages.create(**pack_params(make_blocks(1)))


async def test_a_504_is_a_timeout_error(sim):
    sim.scenario = Scenario(errors=Errors(rate_504=1.0))
    with pytest.raises(anthropic.GatewayTimeoutError) as caught:
        await sdk(sim).messages.create(**pack_params(make_blocks(1)))
    assert caught.value.status_code == 504 and caught.value.type == "timeout_error"


async def test_an_injected_ramp_limit_is_retried_after_its_retry_after(sim):
    sim.scenario = Scenario(errors=Errors(rate_ramp=1.0, retry_after_s=3))
    with pytest.raises(RampLimitExceededError) as caught:
        await sdk(sim).messages.create(**pack_params(make_blocks(1)))
    assert caught.value.error_code == "ramp_limit_exceeded"
    assert caught.value.response.headers["retry-after"] == "3"


async def test_a_body_above_32_mb_is_413_request_too_large(sim):
    params = pack_params(make_blocks(1))
    params["messages"][0]["content"][0]["text"] = "x" * (MESSAGES_MAX_BYTES + 1)
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        with pytest.raises(anthropic.ContentTooLargeError) as caught:
            await sdk(sim).post(path, body=params, cast_to=object)
        assert caught.value.status_code == 413
        assert error_body(caught.value)["error"]["type"] == "request_too_large"


async def test_a_batch_above_256_mb_is_413(sim, monkeypatch):
    # The route checks the limit it is given; a smaller one keeps the test light.
    import blockbatch.simulator.routes_batches as routes

    monkeypatch.setattr(routes, "BATCH_MAX_BYTES", 1000)
    # pack_params builds the request as a plain dict, not the SDK's TypedDict.
    requests: list[Any] = [{"custom_id": "a", "params": pack_params(make_blocks(5))}]
    with pytest.raises(anthropic.ContentTooLargeError):
        await sdk(sim).messages.batches.create(requests=requests)
