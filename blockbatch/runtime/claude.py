"""The one place a Claude client is opened: key, base URL, retries and timeout; per provider.

Every caller (the worker, the front doors' Models API reads and token counts, tests and
benchmarks) opens its client here, so they all talk to the same endpoint the same way. The
key is read from :class:`~blockbatch.runtime.settings.Settings` (a ``SecretStr``) and handed
to the client only: it never reaches a log line, a workflow input, the ledger or an error.

Retries belong to Temporal (``/work/shared/DESIGN.md``, "Retries belong to Temporal"): a
client is opened with ``max_retries=0`` unless a caller outside any activity asks for the
SDK's own retries (the quote's free token counts).

Another provider's client (:func:`provider_client`: ``AsyncAnthropicBedrock``,
``AsyncAnthropicVertex``, ``AsyncAnthropicAWS``, ``AsyncAnthropicFoundry``; for an
OpenAI-compatible gateway, blockbatch's own ``blockbatch.send.gateway.GatewaySender``) reads its
credentials, region and base URL where its SDK class reads them, from the environment of
the process that opens it; only a Vertex access token is handed in (the SDK reads none
from the environment). The variables per provider: ``docs/providers.md``.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from blockbatch.core.providers import provider_info
from blockbatch.runtime.settings import Settings
from blockbatch.send.sdk import anthropic

#: The SDK (loaded on first use, blockbatch/send/sdk.py), for the front doors' ``except`` clauses.
__all__ = ["anthropic", "anthropic_client", "configured_client", "provider_client"]

if TYPE_CHECKING:
    from blockbatch.send.gateway import GatewaySender

    #: A client of any provider: each sends ``messages.create`` on its platform's wire.
    ClaudeClient = (
        anthropic.AsyncAnthropic
        | anthropic.AsyncAnthropicBedrock
        | anthropic.AsyncAnthropicVertex
        | GatewaySender
    )


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The one TLS context of this process's Claude clients: certificates verified against
    the system's CA bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as the SDK's HTTP client
    reads them (its own default, built once). Each client built its own before, loading the
    CA bundle each time (0.06 CPU s), and a worker, the CLI and every test open several."""
    import httpcore2  # the SDK's HTTP client's transport (anthropic 2.x runs on httpx2)

    return httpcore2.default_ssl_context()


def _http_client() -> Any:
    """An HTTP client for an SDK client, as the SDK would build it, on :func:`tls_context`."""
    return anthropic.DefaultAsyncHttpxClient(verify=tls_context())


def anthropic_client(
    settings: Settings, *, timeout_s: float | None = None, max_retries: int = 0
) -> anthropic.AsyncAnthropic:
    """A Claude client for ``settings``' endpoint (the simulator when no key is set).

    Args:
        timeout_s: seconds a request may take (default ``ANTHROPIC_TIMEOUT_S``).
        max_retries: the SDK's own retries; 0 wherever Temporal retries the call.

    Raises:
        RuntimeError: a base URL is set without a key (the message says what to set).
    """
    return anthropic.AsyncAnthropic(
        api_key=settings.resolved_api_key(),
        base_url=settings.resolved_anthropic_base_url,
        max_retries=max_retries,
        timeout=settings.anthropic_timeout_s if timeout_s is None else timeout_s,
        http_client=_http_client(),
    )


def configured_client(
    settings: Settings, *, timeout_s: float | None = None, max_retries: int = 0
) -> anthropic.AsyncAnthropic | None:
    """:func:`anthropic_client`, or ``None`` when no key is configured for the endpoint
    (callers for whom Claude is an improvement, not a condition: the Models API read and
    the quote's token counts)."""
    try:
        return anthropic_client(settings, timeout_s=timeout_s, max_retries=max_retries)
    except RuntimeError:
        return None


class ProviderUnavailable(RuntimeError):
    """A provider's client cannot be opened with this environment (the message says what
    to set or install; it never holds a credential)."""


def provider_client(
    settings: Settings, provider: str, *, timeout_s: float | None = None, max_retries: int = 0
) -> ClaudeClient:
    """A client for ``provider`` (``anthropic``: :func:`anthropic_client`).

    Raises:
        ValueError: an unknown provider.
        ProviderUnavailable: its credentials, region or project are not set, or signing
            needs a package that is not installed.
    """
    info = provider_info(provider)
    if info.name == "anthropic":
        return anthropic_client(settings, timeout_s=timeout_s, max_retries=max_retries)
    _redact_sdk_debug_log()
    timeout = settings.anthropic_timeout_s if timeout_s is None else timeout_s
    if info.name == "gateway":
        return gateway_sender(settings, timeout_s=timeout)
    try:
        if info.name == "bedrock":
            _needs("AWS_BEARER_TOKEN_BEDROCK", "boto3", "bedrock", "AWS SigV4 signing")
            return anthropic.AsyncAnthropicBedrock(
                max_retries=max_retries, timeout=timeout, http_client=_http_client()
            )
        if info.name == "vertex":
            token = settings.anthropic_vertex_access_token
            if token is None:
                _needs(None, "google.auth", "vertex", "Google Application Default Credentials")
            return anthropic.AsyncAnthropicVertex(
                access_token=token.get_secret_value() if token is not None else None,
                max_retries=max_retries,
                timeout=timeout,
                http_client=_http_client(),
            )
        if info.name == "google-cloud":
            return _google_cloud_client(settings, max_retries=max_retries, timeout=timeout)
        if info.name == "aws":
            _needs("ANTHROPIC_AWS_API_KEY", "boto3", "aws", "AWS SigV4 signing")
            return anthropic.AsyncAnthropicAWS(
                max_retries=max_retries, timeout=timeout, http_client=_http_client()
            )
        return anthropic.AsyncAnthropicFoundry(
            max_retries=max_retries, timeout=timeout, http_client=_http_client()
        )
    except (ValueError, anthropic.AnthropicError) as err:
        # The SDK's own sentence names the argument and the variable; no value.
        raise ProviderUnavailable(
            f"cannot open the {info.title} client: {err} (see docs/providers.md, "
            f"{info.name}: {', '.join(info.settings)})"
        ) from None


def _google_cloud_client(
    settings: Settings, *, max_retries: int, timeout: float
) -> anthropic.AsyncAnthropicGoogleCloud:
    """Anthropic-managed Google Cloud's client: an access token when one is set (handed in
    as the SDK's ``token_provider``), else Application Default Credentials. The SDK reads
    its project, location, workspace and base URL from the environment; a derived URL
    needs the workspace, checked here so a run fails at once saying what to set (the SDK
    would raise it only on the first request)."""
    base_url = os.environ.get("ANTHROPIC_GOOGLE_CLOUD_BASE_URL", "").strip()
    if not base_url and not os.environ.get("ANTHROPIC_GOOGLE_CLOUD_WORKSPACE_ID", "").strip():
        raise ProviderUnavailable(
            "cannot open the Claude on Google Cloud client: set "
            "ANTHROPIC_GOOGLE_CLOUD_WORKSPACE_ID to your Anthropic workspace (see "
            "docs/providers.md, google-cloud)"
        )
    token = settings.anthropic_google_cloud_access_token
    if token is None:
        _needs(None, "google.auth", "google-cloud", "Google Application Default Credentials")
        return anthropic.AsyncAnthropicGoogleCloud(
            max_retries=max_retries, timeout=timeout, http_client=_http_client()
        )
    value = token.get_secret_value()
    return anthropic.AsyncAnthropicGoogleCloud(
        token_provider=lambda: value,
        max_retries=max_retries,
        timeout=timeout,
        http_client=_http_client(),
    )


def gateway_sender(settings: Settings, *, timeout_s: float) -> GatewaySender:
    """The sender of ``--provider gateway``: its base URL and key from ``settings``
    (``BLOCKBATCH_GATEWAY_BASE_URL``, ``BLOCKBATCH_GATEWAY_API_KEY`` or
    ``OPENROUTER_API_KEY``).

    Raises:
        ProviderUnavailable: no key, or no usable base URL (the message says what to set).
    """
    from blockbatch.send.gateway import GatewaySender

    key = settings.blockbatch_gateway_api_key or settings.openrouter_api_key
    base_url = settings.blockbatch_gateway_base_url.strip()
    if key is None:
        raise ProviderUnavailable(
            "cannot open the OpenAI-compatible gateway: set BLOCKBATCH_GATEWAY_API_KEY (or "
            "OPENROUTER_API_KEY) to the gateway's key (see docs/providers.md, gateway)"
        )
    if not base_url.startswith(("http://", "https://")):
        raise ProviderUnavailable(
            "cannot open the OpenAI-compatible gateway: BLOCKBATCH_GATEWAY_BASE_URL must be "
            "an http(s) URL such as https://openrouter.ai/api/v1 (see docs/providers.md, "
            "gateway)"
        )
    return GatewaySender(base_url, key, timeout_s=timeout_s)


def _needs(key_variable: str | None, module: str, extra: str, what: str) -> None:
    """Refuse a client that would sign with ``module`` when it is not installed and no
    key is set in ``key_variable``."""
    if key_variable is not None and os.environ.get(key_variable, "").strip():
        return
    try:
        if importlib.util.find_spec(module) is not None:
            return
    except ModuleNotFoundError:  # a missing parent package (``google`` of google.auth)
        pass
    key = f"set {key_variable}, or " if key_variable else ""
    raise ProviderUnavailable(
        f"{what} needs the {module} package, which is not installed: {key}install "
        f"blockbatch[{extra}] (pip install 'blockbatch[{extra}]')"
    )


#: Request headers that carry a credential on some platform (Foundry's ``api-key``).
_SECRET_HEADERS = frozenset({"x-api-key", "api-key", "authorization", "x-amz-security-token"})


class _RedactAuthHeaders(logging.Filter):
    """Blank the credential headers of the SDK's ``Request options`` debug line: Foundry's
    client puts its key into each request's options (``lib/foundry.py``
    ``_prepare_options``), which the SDK logs at DEBUG (``ANTHROPIC_LOG=debug``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, Mapping):
            record.args = _redacted(args)
        elif isinstance(args, tuple) and args and isinstance(args[0], Mapping):
            record.args = (_redacted(args[0]), *args[1:])
        return True


def _redacted(options: Mapping[str, object]) -> dict[str, object]:
    headers = options.get("headers")
    if not isinstance(headers, Mapping):
        return dict(options)
    return {
        **options,
        "headers": {
            k: "<redacted>" if str(k).lower() in _SECRET_HEADERS else v for k, v in headers.items()
        },
    }


_REDACTOR = _RedactAuthHeaders()


def _redact_sdk_debug_log() -> None:
    """Install the redaction on the SDK's request log, once per process."""
    sdk_log = logging.getLogger("anthropic._base_client")
    if _REDACTOR not in sdk_log.filters:
        sdk_log.addFilter(_REDACTOR)
