"""Providers: their model ids map to the registry's models, their capabilities shape calls,
and batch mode is refused where a provider has no batches (blockbatch/core/providers.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from blockbatch.core.answer import call_shape
from blockbatch.core.providers import (
    BEDROCK_LEGACY_VERSION,
    PROVIDERS,
    batch_refused,
    provider_info,
    resolve_model,
    wire_model,
    wire_request,
)
from blockbatch.core.registry import UnknownModelError, Usage, cost_usd, get_model
from blockbatch.core.run_types import RunOptions


@pytest.mark.parametrize(
    ("given", "wire"),
    [
        ("anthropic.claude-haiku-5-5", "anthropic.claude-haiku-5-5"),
        ("us.anthropic.claude-haiku-5-5", "us.anthropic.claude-haiku-5-5"),
        ("global.anthropic.claude-haiku-5-5", "global.anthropic.claude-haiku-5-5"),
        ("claude-haiku-5-5", "anthropic.claude-haiku-5-5"),
    ],
)
def test_bedrock_ids_and_inference_profiles_are_the_registry_model(given: str, wire: str) -> None:
    model, sent = resolve_model("bedrock", given)
    assert model == get_model("claude-haiku-5-5")
    assert sent == wire


def test_bedrock_version_suffix_of_older_ids_maps_to_the_dated_alias() -> None:
    model, sent = resolve_model("bedrock", "us.anthropic.claude-haiku-4-5-20251001-v1:0")
    assert model.id == "claude-haiku-4-5"
    assert sent == "us.anthropic.claude-haiku-4-5-20251001-v1:0"


def test_vertex_ids_with_and_without_a_version() -> None:
    assert resolve_model("vertex", "claude-haiku-5-5@20261007") == (
        get_model("claude-haiku-5-5"),
        "claude-haiku-5-5@20261007",
    )
    assert resolve_model("vertex", "claude-haiku-5-5")[1] == "claude-haiku-5-5"


def test_foundry_deployment_names_come_from_the_users_mapping() -> None:
    model, sent = resolve_model("foundry", "team-haiku", {"team-haiku": "claude-haiku-5-5"})
    assert (model.id, sent) == ("claude-haiku-5-5", "team-haiku")
    # Unmapped, a deployment is named after its model (Foundry's default).
    assert resolve_model("foundry", "claude-sonnet-5-5")[1] == "claude-sonnet-5-5"
    with pytest.raises(UnknownModelError, match="Microsoft Foundry model 'team-opus'"):
        resolve_model("foundry", "team-opus", {"team-haiku": "claude-haiku-5-5"})


def test_a_bedrock_id_on_the_claude_api_says_which_provider_takes_it() -> None:
    with pytest.raises(UnknownModelError, match="--provider bedrock"):
        resolve_model("anthropic", "us.anthropic.claude-haiku-5-5")


def test_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="choose one of anthropic, bedrock"):
        provider_info("openrouter")


def test_same_prices_on_every_provider() -> None:
    # platforms-checked §5b: no provider's per-token prices are confirmed to differ.
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    prices = {cost_usd(resolve_model(p, "claude-haiku-5-5")[0], usage) for p in PROVIDERS}
    assert prices == {cost_usd(get_model("claude-haiku-5-5"), usage)}


def test_call_shape_follows_the_platform_for_structured_outputs() -> None:
    haiku = get_model("claude-haiku-5-5")
    on_api = call_shape(provider_info("anthropic").shaped(haiku), None, strict_fits=True)
    assert on_api.channel == "strict_tool"
    on_bedrock = call_shape(provider_info("bedrock").shaped(haiku), None, strict_fits=True)
    assert on_bedrock.channel == "tool"  # a non-strict tool, validated
    opus46 = get_model("claude-opus-4-6")
    assert provider_info("bedrock").shaped(opus46) is opus46
    assert not provider_info("vertex").shaped(opus46).structured_outputs


@pytest.mark.parametrize("provider", ["foundry", "gateway"])
def test_batch_mode_is_refused_with_the_reason(provider: str) -> None:
    reason = batch_refused(provider, "batch")
    assert reason and "--mode sync" in reason
    with pytest.raises(ValidationError, match="--mode batch"):
        RunOptions(provider=provider, mode="batch")
    assert batch_refused(provider, "sync") is None
    assert batch_refused("anthropic", "batch") is None


@pytest.mark.parametrize("provider", ["aws", "google-cloud", "vertex"])
def test_the_platforms_with_batches_take_batch_mode(
    provider: str,
) -> None:
    assert batch_refused(provider, "batch") is None
    assert RunOptions(provider=provider, mode="batch").mode == "batch"


def test_bedrock_takes_batch_mode_through_its_own_jobs() -> None:
    assert batch_refused("bedrock", "batch") is None
    assert RunOptions(provider="bedrock", mode="batch").mode == "batch"


def test_the_claude_api_request_is_sent_as_it_is() -> None:
    request = {"model": "claude-haiku-5-5", "max_tokens": 10, "messages": []}
    assert wire_request(request, "anthropic", None) is request


def test_wire_request_names_the_providers_model_and_bedrocks_body_version() -> None:
    request = {"model": "claude-haiku-5-5", "max_tokens": 10, "messages": []}
    sent = wire_request(request, "bedrock", "us.anthropic.claude-haiku-5-5")
    assert sent["model"] == "us.anthropic.claude-haiku-5-5"
    assert "extra_body" not in sent  # Claude 4.7 and later take 2026-10-21 on Bedrock
    older = wire_request({**request, "model": "claude-haiku-4-5"}, "bedrock", None)
    assert older["extra_body"] == {"anthropic_version": BEDROCK_LEGACY_VERSION}
    assert older["model"] == "anthropic.claude-haiku-4-5"
    assert request["model"] == "claude-haiku-5-5"  # not changed in place


def test_wire_model_from_the_run_or_the_providers_rule() -> None:
    assert wire_model("bedrock", "claude-haiku-5-5", "us.anthropic.claude-haiku-5-5") == (
        "us.anthropic.claude-haiku-5-5"
    )
    assert wire_model("bedrock", "claude-sonnet-5-5", None) == "anthropic.claude-sonnet-5-5"
    assert wire_model("anthropic", "claude-haiku-5-5", None) == "claude-haiku-5-5"


def test_fallbacks_are_said_for_providers_without_models_api_or_counting() -> None:
    assert provider_info("anthropic").fallbacks_text() is None
    text = provider_info("bedrock").fallbacks_text() or ""
    assert "no Models API" in text and "estimated locally" in text
    assert "token counting" not in (provider_info("vertex").fallbacks_text() or "")


RUN = ["run", "doc.md", "--schema", "s.json"]


def test_run_provider_keeps_the_registry_model_and_the_providers_id() -> None:
    from blockbatch.cli.commands import build_parser
    from blockbatch.cli.run import _options

    args = build_parser().parse_args(
        [*RUN, "--provider", "bedrock", "--model", "us.anthropic.claude-haiku-5-5"]
    )
    options = _options(args)
    assert (options.provider, options.model) == ("bedrock", "claude-haiku-5-5")
    assert options.provider_model == "us.anthropic.claude-haiku-5-5"
    # The provider's default id is not kept: the sender derives it.
    plain = _options(build_parser().parse_args([*RUN, "--provider", "vertex"]))
    assert (plain.provider, plain.provider_model) == ("vertex", None)
    assert _options(build_parser().parse_args(RUN)).provider == "anthropic"


def test_run_provider_foundry_deployment_from_settings() -> None:
    from blockbatch.cli.commands import build_parser
    from blockbatch.cli.run import _options
    from blockbatch.runtime.settings import Settings

    settings = Settings(blockbatch_foundry_deployments={"team-haiku": "claude-haiku-5-5"})
    args = build_parser().parse_args([*RUN, "--provider", "foundry", "--model", "team-haiku"])
    options = _options(args, settings)
    assert (options.model, options.provider_model) == ("claude-haiku-5-5", "team-haiku")


def test_run_provider_batch_is_refused_before_anything_starts() -> None:
    from blockbatch.api.errors import BAD_INPUT
    from blockbatch.cli.commands import build_parser
    from blockbatch.cli.run import _options

    args = build_parser().parse_args([*RUN, "--provider", "foundry", "--mode", "batch"])
    with pytest.raises(BAD_INPUT, match=r"^--mode batch is not available on Microsoft Foundry"):
        _options(args)


def test_a_retired_model_stays_retired_on_every_provider() -> None:
    from blockbatch.core.registry import RETIRED, RetiredModelError

    retired = next(iter(RETIRED))
    for provider in PROVIDERS:
        with pytest.raises(RetiredModelError):
            resolve_model(provider, retired)


def test_an_endpoint_names_its_provider_and_reads_back_from_the_ledger() -> None:
    from blockbatch.core.endpoint import endpoint_of, parse_label

    bedrock = endpoint_of(
        "https://bedrock-runtime.us-east-1.amazonaws.com", simulated=False, provider="bedrock"
    )
    assert bedrock.text() == "Amazon Bedrock at bedrock-runtime.us-east-1.amazonaws.com"
    assert parse_label(bedrock.label()) == bedrock.model_copy(update={"key_sha256": None})
    # Reuse keys on (provider, host): Bedrock's answers are not the Claude API's.
    api = endpoint_of(None, simulated=False)
    assert (api.provider, api.host) != (bedrock.provider, bedrock.host)
    assert endpoint_of("http://127.0.0.1:8765", simulated=True, provider="vertex").simulated
