"""Where a run's Claude calls go: the Claude API or a cloud platform that serves Claude.

A run names its provider (``RunOptions.provider``, ``run --provider``; default the Claude
API) and, when the platform knows the model by another name, that name
(``RunOptions.provider_model``: a Bedrock id, a Vertex id, a Foundry deployment). The
provider is kept with the run like its model, so every worker sends the run's calls the
same way; credentials are never part of it: each worker's client reads them from its own
environment (``blockbatch/runtime/claude.py``).

This module is data: per provider what it serves (:class:`ProviderInfo`: Message Batches,
token counting, the Models API, rate-limit headers, structured outputs per model), and
the rules that map a platform's model id to the registry's model, whose facts and prices
the run uses. Sources: ``../shared/reference/platforms-2026-11.md`` and
``docs/platforms-checked.md`` (each figure below names its line there).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from blockbatch.core.registry import ModelInfo, RetiredModelError, UnknownModelError, get_model

ProviderName = Literal[
    "anthropic", "bedrock", "vertex", "aws", "foundry", "google-cloud", "gateway"
]
PROVIDERS: tuple[ProviderName, ...] = get_args(ProviderName)
DEFAULT_PROVIDER: ProviderName = "anthropic"

#: Bedrock's InvokeModel body version for models before Claude 4.7: API version
#: 2026-10-21 is served on Bedrock only for Claude 4.7 and later (platforms-checked §0.3,
#: the versioning page), and the SDK sends ``anthropic_version: 2026-10-21`` unless told.
BEDROCK_LEGACY_VERSION = "bedrock-2023-05-31"
#: Registry models that take API version 2026-10-21 on Bedrock (Claude 4.7 and later).
_BEDROCK_CURRENT_VERSION_FROM = (
    "claude-opus-4-7",
    "claude-opus-4-8",
    "claude-sonnet-5",
    "claude-opus-5",
    "claude-haiku-5-5",
    "claude-sonnet-5-5",
    "claude-opus-5-5",
)


@dataclass(frozen=True)
class ProviderInfo:
    """What one platform serves, as blockbatch uses it.

    Attributes:
        name: the ``--provider`` value.
        title: for a person.
        sdk_client: the anthropic SDK client that speaks its wire.
        batches: ``--mode batch`` runs on it (the Message Batches API through the same
            client: the Claude API, Claude Platform on AWS, Claude on Google Cloud; on
            Bedrock, its model invocation jobs).
        batch_refusal: why ``--mode batch`` is refused, when it is.
        count_tokens: ``messages.count_tokens`` through its client (else the local
            estimate).
        models_api: ``GET /v1/models`` (else the registry's facts only).
        ratelimit_headers: it answers with ``anthropic-ratelimit-*`` headers.
        structured_outputs: the registry models whose structured outputs
            (``output_config.format``, strict tools) it serves; ``None``: as the model
            says. A model outside the set answers through a non-strict tool, validated.
        settings: the environment variables its client reads (docs and errors; values
            are never read here).
    """

    name: ProviderName
    title: str
    sdk_client: str
    batches: bool
    batch_refusal: str | None
    count_tokens: bool
    models_api: bool
    ratelimit_headers: bool
    structured_outputs: frozenset[str] | None
    settings: tuple[str, ...]

    def shaped(self, model: ModelInfo) -> ModelInfo:
        """``model`` as this platform serves it: structured outputs off where it does not
        serve them for this model (the call shape follows, ``blockbatch/core/answer.py``)."""
        if self.structured_outputs is None or model.id in self.structured_outputs:
            return model
        if not model.structured_outputs:
            return model
        return dataclasses.replace(model, structured_outputs=False)

    def fallbacks_text(self) -> str | None:
        """What the run does without this platform's missing APIs, said once in the run's
        output (``None``: it has them all)."""
        missing = []
        if not self.models_api:
            missing.append("no Models API: the model's limits and prices are blockbatch's own")
        if not self.count_tokens:
            missing.append("no token counting: input tokens are estimated locally")
        if not missing:
            return None
        return f"{self.title}: " + "; ".join(missing)


PROVIDER_INFO: dict[ProviderName, ProviderInfo] = {
    "anthropic": ProviderInfo(
        name="anthropic",
        title="the Claude API",
        sdk_client="AsyncAnthropic",
        batches=True,
        batch_refusal=None,
        count_tokens=True,
        models_api=True,
        ratelimit_headers=True,
        structured_outputs=None,
        settings=("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    ),
    # platforms-checked §0.1 table, §2; structured outputs on InvokeModel: Haiku 4.5,
    # Sonnet 4.5, Opus 4.5, Opus 4.6 only, not the 5.5 models (§0.4, [3P] + 5.5 guides).
    "bedrock": ProviderInfo(
        name="bedrock",
        title="Amazon Bedrock",
        sdk_client="AsyncAnthropicBedrock",
        # Batch mode through Bedrock's own model invocation jobs, JSONL in S3
        # (blockbatch/core/bedrock_batch.py), not the SDK client, which refuses batches.
        batches=True,
        batch_refusal=None,
        count_tokens=False,
        models_api=False,
        ratelimit_headers=False,
        structured_outputs=frozenset(
            {"claude-haiku-4-5", "claude-sonnet-4-5", "claude-opus-4-5", "claude-opus-4-6"}
        ),
        settings=(
            "AWS_REGION",
            "AWS_BEARER_TOKEN_BEDROCK",
            "AWS_PROFILE",
            "ANTHROPIC_BEDROCK_BASE_URL",
        ),
    ),
    # §3: rawPredict, count-tokens:rawPredict; structured outputs behind an org policy
    # (constraints/vertexai.allowedPartnerModelFeatures), so off unless the policy is set.
    "vertex": ProviderInfo(
        name="vertex",
        title="Google Vertex AI",
        sdk_client="AsyncAnthropicVertex",
        # Batch mode through Vertex batch prediction jobs, JSONL in Cloud Storage
        # (blockbatch/core/vertex_batch.py), not the SDK client, which refuses batches.
        batches=True,
        batch_refusal=None,
        count_tokens=True,
        models_api=False,
        ratelimit_headers=False,
        structured_outputs=frozenset(),
        settings=(
            "CLOUD_ML_REGION",
            "ANTHROPIC_VERTEX_PROJECT_ID",
            "ANTHROPIC_VERTEX_ACCESS_TOKEN",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "ANTHROPIC_VERTEX_BASE_URL",
        ),
    ),
    # §4: the first-party surface with a workspace id; its batches are the Message
    # Batches API ("Batch processing: Submit batch requests for high-throughput workloads",
    # AWS's Claude Platform user guide, feature-support), through the same client
    # (AnthropicAWS subclasses Anthropic: messages.batches), sent by the run's route.
    "aws": ProviderInfo(
        name="aws",
        title="Claude Platform on AWS",
        sdk_client="AsyncAnthropicAWS",
        batches=True,
        batch_refusal=None,
        count_tokens=True,
        models_api=True,
        ratelimit_headers=True,
        structured_outputs=None,
        settings=(
            "AWS_REGION",
            "ANTHROPIC_AWS_WORKSPACE_ID",
            "ANTHROPIC_AWS_API_KEY",
            "AWS_PROFILE",
            "ANTHROPIC_AWS_BASE_URL",
        ),
    ),
    # §4: no Models API, no batches in the SDK, no rate-limit headers; the model is the
    # deployment name; structured outputs a public beta (not relied on).
    "foundry": ProviderInfo(
        name="foundry",
        title="Microsoft Foundry",
        sdk_client="AsyncAnthropicFoundry",
        batches=False,
        batch_refusal=(
            "is not available on Microsoft Foundry: the anthropic SDK's AnthropicFoundry "
            "has no Message Batches API. Run with --mode sync"
        ),
        count_tokens=True,
        models_api=False,
        ratelimit_headers=False,
        structured_outputs=frozenset(),
        settings=(
            "ANTHROPIC_FOUNDRY_RESOURCE",
            "ANTHROPIC_FOUNDRY_API_KEY",
            "ANTHROPIC_FOUNDRY_BASE_URL",
            "BLOCKBATCH_FOUNDRY_DEPLOYMENTS",
        ),
    ),
    # Anthropic-managed Google Cloud: the first-party API (Messages, Models, Batches ...)
    # behind Google Cloud IAM, with a workspace id (SDK lib/google_cloud/README.md: "the
    # full Anthropic API - Messages, Models, Batches, Files"); batch mode is the Message
    # Batches API through AnthropicGoogleCloud, sent by the run's route. Rate-limit
    # headers there are not confirmed.
    "google-cloud": ProviderInfo(
        name="google-cloud",
        title="Claude on Google Cloud",
        sdk_client="AsyncAnthropicGoogleCloud",
        batches=True,
        batch_refusal=None,
        count_tokens=True,
        models_api=True,
        ratelimit_headers=False,
        structured_outputs=None,
        settings=(
            "ANTHROPIC_GOOGLE_CLOUD_PROJECT",
            "ANTHROPIC_GOOGLE_CLOUD_LOCATION",
            "ANTHROPIC_GOOGLE_CLOUD_WORKSPACE_ID",
            "ANTHROPIC_GOOGLE_CLOUD_ACCESS_TOKEN",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "ANTHROPIC_GOOGLE_CLOUD_BASE_URL",
        ),
    ),
    # platforms-checked §5: an OpenAI-compatible chat completions API (OpenRouter and the
    # like), spoken by blockbatch/core/gateway.py. No batch API, no token counting, no
    # Anthropic Models API or rate-limit headers; the answer comes through a forced
    # function (tool) call, validated by us, as its strict mode is the gateway's own
    # translation and not Claude's structured outputs.
    "gateway": ProviderInfo(
        name="gateway",
        title="the OpenAI-compatible gateway",
        sdk_client="GatewaySender",
        batches=False,
        batch_refusal=(
            "is not available through an OpenAI-compatible gateway: its chat completions "
            "API has no batch jobs. Run with --mode sync, or --provider anthropic for "
            "batch mode"
        ),
        count_tokens=False,
        models_api=False,
        ratelimit_headers=False,
        structured_outputs=frozenset(),
        settings=(
            "BLOCKBATCH_GATEWAY_BASE_URL",
            "BLOCKBATCH_GATEWAY_API_KEY",
            "OPENROUTER_API_KEY",
        ),
    ),
}


def provider_info(name: str) -> ProviderInfo:
    """The provider called ``name``.

    Raises:
        ValueError: not a provider blockbatch knows (the message lists them).
    """
    info = PROVIDER_INFO.get(name)  # type: ignore[call-overload]
    if info is None:
        raise ValueError(f"unknown provider {name!r}: choose one of {', '.join(PROVIDERS)}")
    return info


def batch_refused(provider: str, mode: str) -> str | None:
    """Why a run in ``mode`` cannot run on ``provider`` (``None``: it can)."""
    info = provider_info(provider)
    if mode != "batch" or info.batches:
        return None
    return f"--mode batch {info.batch_refusal}"


# ---------------------------------------------------------------- model ids per provider

#: Bedrock's cross-region inference profile prefixes (``us.anthropic...``).
_BEDROCK_PROFILE = r"(?:us|eu|apac|jp|au|ca|us-gov|global)\."
#: ``[profile.]anthropic.<model>[-v1:0]`` (the version suffix of the older model ids).
_BEDROCK_ID = re.compile(
    rf"^(?P<profile>{_BEDROCK_PROFILE})?anthropic\.(?P<model>.+?)(?:-v\d+(?::\d+)?)?$"
)
#: ``anthropic/claude-haiku-5.5[:variant]`` on a gateway (OpenRouter's ``vendor/model`` ids,
#: the version's dash a dot).
_GATEWAY_ID = re.compile(r"^anthropic/(?P<model>[a-z0-9.-]+?)(?::[a-z0-9-]+)?$")
#: A registry id's trailing ``-<major>-<minor>`` version, dotted on a gateway.
_DOTTED_VERSION = re.compile(r"-(\d{1,2})-(\d{1,2})$")
#: ``<model>[@<date>]`` on Vertex.
_VERTEX_ID = re.compile(r"^(?P<model>[a-z0-9.-]+?)(?:@(?P<version>[0-9]{8}|latest))?$")


class ProviderModelError(UnknownModelError):
    """A model id of another provider's form (a Bedrock id on the Claude API)."""


def _known(name: str, provider: ProviderInfo, given: str) -> ModelInfo:
    try:
        return get_model(name)
    except RetiredModelError:
        raise
    except UnknownModelError as err:
        raise UnknownModelError(f"{provider.title} model {given!r}: {err}") from None


def resolve_model(
    provider: str, name: str, deployments: Mapping[str, str] | None = None
) -> tuple[ModelInfo, str]:
    """The registry's model a run on ``provider`` asks for by ``name``, and the id the
    provider is sent (the wire id).

    ``name`` may be the registry's id (or alias) on any provider, or the provider's own id:
    Bedrock ``anthropic.claude-haiku-5-5`` and its inference profiles
    (``us.anthropic...``, ``global.anthropic...``, older ids' ``-v1:0``), Vertex
    ``claude-haiku-5-5@20261007``, a Foundry deployment named in ``deployments``
    (``BLOCKBATCH_FOUNDRY_DEPLOYMENTS``: deployment name to model id; unnamed, the
    deployment is taken to be called after its model, Foundry's default).

    Raises:
        ValueError: an unknown provider.
        UnknownModelError: an id the provider's rules do not map to a known model (the
            message says which form the provider takes).
    """
    info = provider_info(provider)
    if info.name == "bedrock":
        match = _BEDROCK_ID.match(name)
        if match is None:
            model = _known(name, info, name)
            return model, f"anthropic.{model.id}"
        return _known(match["model"], info, name), name
    if info.name == "vertex":
        match = _VERTEX_ID.match(name)
        model = _known(match["model"] if match else name, info, name)
        return model, name if match and match["version"] else model.id
    if info.name == "gateway":
        match = _GATEWAY_ID.match(name)
        if match is None:
            model = _known(name, info, name)
            return model, gateway_id(model.id)
        return _known(match["model"].replace(".", "-"), info, name), name
    if info.name == "foundry":
        target = (deployments or {}).get(name)
        if target is not None:
            return _known(target, info, name), name
        model = _known(name, info, name)
        return model, name
    if _GATEWAY_ID.match(name):
        raise ProviderModelError(
            f"{name!r} is an OpenAI-compatible gateway's model id: run with --provider "
            f"gateway, or name the model as {info.title} knows it"
        )
    if _BEDROCK_ID.match(name) and not name.startswith("claude"):
        raise ProviderModelError(
            f"{name!r} is an Amazon Bedrock model id: run with --provider bedrock, or name "
            f"the model as {info.title} knows it"
        )
    return _known(name, info, name), name


def wire_request(request: dict[str, Any], provider: str, model: str | None) -> dict[str, Any]:
    """``request`` as ``provider`` is sent it: its model named as the provider knows it
    (``model``, else :func:`wire_model`'s rule), and on Bedrock the body version a model
    before Claude 4.7 takes there (:data:`BEDROCK_LEGACY_VERSION`). The Claude API's
    request is returned as it is."""
    if provider == DEFAULT_PROVIDER:
        return request
    out = dict(request)
    if provider == "bedrock" and request.get("model") not in _BEDROCK_CURRENT_VERSION_FROM:
        out["extra_body"] = {
            **dict(request.get("extra_body") or {}),
            "anthropic_version": bedrock_body_version(str(request.get("model"))),
        }
    out["model"] = wire_model(provider, str(request["model"]), model)
    return out


def bedrock_body_version(model_id: str) -> str:
    """The ``anthropic_version`` a Bedrock body for the registry's ``model_id`` carries:
    2026-10-21 for Claude 4.7 and later, :data:`BEDROCK_LEGACY_VERSION` before."""
    return "2026-10-21" if model_id in _BEDROCK_CURRENT_VERSION_FROM else BEDROCK_LEGACY_VERSION


def wire_model(provider: str, model_id: str, provider_model: str | None) -> str:
    """The id ``provider`` is sent for the registry's ``model_id``: the run's
    ``provider_model`` when it has one (the provider's name for the run's model), else
    the provider's rule: ``anthropic.<id>`` on Bedrock, the id itself elsewhere (a Foundry
    deployment named after its model, Foundry's default)."""
    if provider_model:
        return provider_model
    if provider == "bedrock" and not _BEDROCK_ID.match(model_id):
        return f"anthropic.{model_id}"
    if provider == "gateway" and not _GATEWAY_ID.match(model_id):
        return gateway_id(model_id)
    return model_id


def gateway_id(model_id: str) -> str:
    """The gateway's id of the registry's ``model_id``: ``claude-haiku-5-5`` is
    ``anthropic/claude-haiku-5.5``, ``claude-sonnet-5`` ``anthropic/claude-sonnet-5``
    (OpenRouter's model list: vendor prefix, the version's dash a dot)."""
    return "anthropic/" + _DOTTED_VERSION.sub(r"-\1.\2", model_id)


@dataclass(frozen=True)
class Route:
    """Where one call goes: the provider, and the model as the provider knows it."""

    provider: ProviderName = DEFAULT_PROVIDER
    wire_model: str | None = None

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        """``request`` as this route sends it (:func:`wire_request`)."""
        return wire_request(request, self.provider, self.wire_model)


#: The Claude API, the request as built.
CLAUDE_API = Route()
