"""The cloud platforms' wire shapes of the Messages API, answered by the same simulated model.

Each route takes a request as the anthropic SDK's platform client sends it, checks what that
platform requires (the auth header's presence, not its validity; the body version), turns
it into a first-party request and answers it through ``blockbatch/simulator/messages.py``,
in the platform's shape. Sources: ``../shared/reference/platforms-2026-11.md`` (the
platform table) and ``docs/platforms-checked.md`` (cited per rule as "checked §N"):

- Amazon Bedrock, InvokeModel: ``POST /model/{id}/invoke``; the body is the Messages body
  without ``model`` (it is in the path) and with ``anthropic_version`` (checked §2, "InvokeModel
  body"); ``bedrock-2023-05-31``, or ``2026-10-21`` for Claude 4.7 and later only (checked
  §0.3, the versioning page); ``Authorization``: a Bearer API key or SigV4 (checked §2, "Bedrock
  bearer API key"); no ``anthropic-ratelimit-*`` headers; errors ``{"message": ...}`` with
  ``x-amzn-ErrorType`` (checked §2, "Errors"). ``/invoke-with-response-stream`` (AWS
  event-stream framing) is not simulated: blockbatch streams only calls that could run past
  ten minutes.
- Google Vertex AI: ``POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/
  {model}:rawPredict`` (``:streamRawPredict`` streams, as the API does) and
  ``models/count-tokens:rawPredict``; ``Authorization: Bearer`` (checked §3, "Endpoint shape",
  "Auth"); ``anthropic_version`` in the body, ``vertex-2023-10-16`` or ``2026-10-21``
  (checked §0.3).
- Microsoft Foundry: the first-party API under ``/anthropic/``, with ``x-api-key`` and
  ``api-key`` or ``Authorization: Bearer`` (checked §0.1 table); the model is the deployment,
  named after its model here.
- Claude Platform on AWS: the first-party API with an ``anthropic-workspace-id`` header
  (checked §0.1 table), mounted under ``/aws/`` because one simulator serves every host;
  its Message Batches API too (``/aws/v1/messages/batches``: the SDK's ``AnthropicAWS``
  is the SDK's ``Anthropic`` subclass with ``messages.batches``; AWS's user guide,
  feature-support: "Batch processing: Submit batch requests for high-throughput workloads").
- Claude on Google Cloud (Anthropic-managed): the first-party API under
  ``/v1/projects/{p}/locations/{l}/workspaces/{w}/invoke/``, ``Authorization: Bearer`` a
  Google access token (SDK ``lib/google_cloud/README.md`` and ``_client.py``: the URL
  template and the token on every request), Message Batches included (the README: "the
  full API ... Batches, Files").
- An OpenAI-compatible gateway (OpenRouter's chat completions): ``/v1/chat/completions``,
  ``blockbatch/simulator/gateway.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from blockbatch.core.providers import resolve_model
from blockbatch.core.registry import UnknownModelError
from blockbatch.simulator import messages
from blockbatch.simulator.bodies import MESSAGES_MAX_BYTES, read_body
from blockbatch.simulator.errors import ApiError, invalid
from blockbatch.simulator.gateway import add_gateway_routes
from blockbatch.simulator.routes_batches import add_batch_routes
from blockbatch.simulator.state import state_of
from blockbatch.simulator.streaming import send_stream

RequestId = Callable[[web.Request], str]

#: The first-party ``anthropic-version`` a platform's body version stands for.
_VERSIONS = {
    "bedrock-2023-05-31": "2023-06-01",
    "vertex-2023-10-16": "2023-06-01",
    "2026-10-21": "2026-10-21",
}
#: Models served at API version 2026-10-21 on Bedrock: Claude 4.7 and later (checked §0.3).
_BEDROCK_2026 = frozenset(
    {
        "claude-opus-4-7",
        "claude-opus-4-8",
        "claude-sonnet-5",
        "claude-opus-5",
        "claude-haiku-5-5",
        "claude-sonnet-5-5",
        "claude-opus-5-5",
    }
)
#: ``x-amzn-ErrorType`` by status (checked §2, "Errors").
_AWS_ERRORS = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    413: "ValidationException",
    429: "ThrottlingException",
    500: "InternalServerException",
    529: "ServiceUnavailableException",
}


def _auth_present(headers: Mapping[str, str], *names: str) -> None:
    """The platform's auth header is there (its validity is the platform's business; a
    Bearer key is still checked against the scenario's keys by ``messages``)."""
    if not any(headers.get(name, "").strip() for name in names):
        raise ApiError("authentication_error", f"{' or '.join(names)} header is required")


def _headers_present(*required: tuple[str, ...]) -> Callable[[web.Request], None]:
    """A check that a request carries one header of each group in ``required``."""

    def check(request: web.Request) -> None:
        for names in required:
            _auth_present(request.headers, *names)

    return check


def _first_party_headers(headers: Mapping[str, str], version: str) -> dict[str, str]:
    """What ``messages`` checks, from the platform's request: the key (a SigV4 signature
    stands for one) and the API version the body named."""
    out = {"anthropic-version": version}
    if headers.get("anthropic-beta"):
        out["anthropic-beta"] = headers["anthropic-beta"]
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        out["authorization"] = auth
    elif auth:  # AWS4-HMAC-SHA256 ...: signed, so present; not verified here
        out["x-api-key"] = "sigv4-signed"
    if headers.get("x-api-key"):
        out["x-api-key"] = headers["x-api-key"]
    return out


def _platform_body(
    raw: bytes, model: str, platform: str, headers: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The first-party body and headers of a platform request for ``model``: the body
    version becomes the ``anthropic-version`` header, ``anthropic_beta`` the beta header."""
    body = messages.parse_json(raw)
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    version = body.pop("anthropic_version", None)
    if version not in _VERSIONS or not version.startswith((platform, "2026")):
        allowed = [v for v in _VERSIONS if v.startswith((platform, "2026"))]
        raise invalid(f"anthropic_version: must be one of {', '.join(allowed)} (got {version!r})")
    betas = body.pop("anthropic_beta", None)
    if "model" in body:
        raise invalid("model: the model is named in the URL path, not in the body")
    body["model"] = model
    out = _first_party_headers(headers, _VERSIONS[version])
    if betas:
        out["anthropic-beta"] = ",".join(betas)
    return body, out


def _registry_model(platform: str, name: str) -> str:
    try:
        return resolve_model(platform, name)[0].id
    except UnknownModelError as err:
        raise ApiError("not_found_error", str(err)) from None


async def _answer(
    request: web.Request, body: dict[str, Any], headers: dict[str, str], request_id: str
) -> tuple[dict[str, Any], bool]:
    raw = json.dumps(body).encode()
    message, _ = await messages.create_message(state_of(request), headers, raw, request_id)
    return message, messages.wants_stream(raw)


def bedrock_invoke(request_id: RequestId) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            _auth_present(request.headers, "authorization")
            raw = await read_body(request, MESSAGES_MAX_BYTES)
            model = _registry_model("bedrock", request.match_info["model_id"])
            body, headers = _platform_body(raw, model, "bedrock", request.headers)
            if headers["anthropic-version"] == "2026-10-21" and model not in _BEDROCK_2026:
                raise invalid(
                    f"anthropic_version 2026-10-21 is served on Bedrock for Claude 4.7 and "
                    f"later, not {model}: use bedrock-2023-05-31"
                )
            message, _ = await _answer(request, body, headers, request_id(request))
        except ApiError as error:
            kind = _AWS_ERRORS.get(error.status, "InternalServerException")
            extra = {k: v for k, v in error.headers.items() if k.lower() == "retry-after"}
            return web.json_response(
                {"message": error.message},
                status=error.status,
                headers={"x-amzn-ErrorType": kind, **extra},
            )
        # No anthropic-ratelimit-* headers on Bedrock (checked §2, "Errors").
        return web.json_response(message)

    return handle


def vertex_predict(request_id: RequestId) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        _auth_present(request.headers, "authorization")
        model_id, _, method = request.match_info["tail"].rpartition(":")
        if method not in ("rawPredict", "streamRawPredict"):
            raise ApiError("not_found_error", f"unknown method {method!r}")
        raw = await read_body(request, MESSAGES_MAX_BYTES)
        if model_id == "count-tokens":
            data = messages.parse_json(raw)
            if not isinstance(data, dict):
                raise invalid("the request body must be a JSON object")
            version = _VERSIONS.get(str(data.pop("anthropic_version", "")))
            if version is None:
                raise invalid("anthropic_version: required (vertex-2023-10-16 or 2026-10-21)")
            data["model"] = _registry_model("vertex", str(data.get("model", "")))
            headers = _first_party_headers(request.headers, version)
            counted = await messages.count_tokens(
                state_of(request), headers, json.dumps(data).encode()
            )
            return web.json_response(counted)
        model = _registry_model("vertex", model_id)
        body, headers = _platform_body(raw, model, "vertex", request.headers)
        if method == "streamRawPredict":
            body["stream"] = True
        message, stream = await _answer(request, body, headers, request_id(request))
        if stream:
            return await send_stream(request, message, {"request-id": request_id(request)})
        return web.json_response(message)

    return handle


def first_party(
    request_id: RequestId, platform: str, *required: tuple[str, ...]
) -> Callable[[web.Request], Any]:
    """The first-party Messages route of a platform whose requests must carry one header
    of each group in ``required``."""

    async def handle(request: web.Request) -> web.StreamResponse:
        for names in required:
            _auth_present(request.headers, *names)
        raw = await read_body(request, MESSAGES_MAX_BYTES)
        data = messages.parse_json(raw)
        if isinstance(data, dict) and isinstance(data.get("model"), str):
            data["model"] = _registry_model(platform, data["model"])
        headers = {
            k.lower(): v
            for k, v in request.headers.items()
            if k.lower() in ("x-api-key", "authorization", "anthropic-version", "anthropic-beta")
        }
        if platform == "foundry" and "x-api-key" not in headers and "api-key" in request.headers:
            headers["x-api-key"] = request.headers["api-key"]
        message, extra = await messages.create_message(
            state_of(request), headers, json.dumps(data).encode(), request_id(request)
        )
        if isinstance(data, dict) and data.get("stream") is True:
            return await send_stream(request, message, {"request-id": request_id(request)})
        # Foundry answers without rate-limit headers (checked §0.4).
        return web.json_response(message, headers=extra if platform == "aws" else None)

    return handle


def add_platform_routes(app: web.Application, request_id: RequestId) -> None:
    """The platforms' Messages routes (module docstring)."""
    app.router.add_post("/model/{model_id}/invoke", bedrock_invoke(request_id))
    app.router.add_post(
        "/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{tail}",
        vertex_predict(request_id),
    )
    foundry = first_party(request_id, "foundry", ("x-api-key", "api-key", "authorization"))
    app.router.add_post("/anthropic/v1/messages", foundry)
    aws = first_party(
        request_id, "aws", ("anthropic-workspace-id",), ("x-api-key", "authorization")
    )
    app.router.add_post("/aws/v1/messages", aws)
    google_cloud = first_party(request_id, "google-cloud", ("authorization",))
    google_cloud_base = "/v1/projects/{project}/locations/{region}/workspaces/{workspace}/invoke"
    app.router.add_post(google_cloud_base + "/v1/messages", google_cloud)
    # Both serve the Message Batches API (module docstring), with their own headers.
    add_batch_routes(
        app,
        "/aws",
        _headers_present(("anthropic-workspace-id",), ("x-api-key", "authorization")),
    )
    add_batch_routes(app, google_cloud_base, _headers_present(("authorization",)))
    add_gateway_routes(app, request_id)
