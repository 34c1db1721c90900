"""One function opens every Anthropic client (blockbatch/runtime/claude.py)."""

from __future__ import annotations

import ast
import ssl
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from blockbatch.runtime.claude import anthropic_client, configured_client, tls_context
from blockbatch.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: Where the product's code lives; the simulator is the API's stand-in, not a caller.
PRODUCT = ["blockbatch", "activities", "workflows", "worker.py", "starter.py"]
FACTORY = ROOT / "blockbatch" / "runtime" / "claude.py"
SIMULATOR = ROOT / "blockbatch" / "simulator"


def _settings(**env: Any) -> Settings:
    return Settings(_env_file=None, **env)


async def test_a_client_talks_to_the_configured_endpoint_without_retries_of_its_own() -> None:
    settings = _settings(
        anthropic_api_key=SecretStr("sk-ant-test-secret"),
        anthropic_base_url="https://claude.example",
        anthropic_timeout_s=42.0,
    )
    async with anthropic_client(settings) as client:
        assert client.max_retries == 0  # retries belong to Temporal
        assert str(client.base_url).startswith("https://claude.example")
        assert client.timeout == 42.0
        assert client.api_key == "sk-ant-test-secret"
    async with anthropic_client(settings, timeout_s=10, max_retries=2) as client:
        assert (client.timeout, client.max_retries) == (10, 2)


def _tls_of(client: Any) -> ssl.SSLContext:
    """The TLS context a client's HTTP connections are made with (httpx2's pool)."""
    context: ssl.SSLContext = client._client._transport._pool._ssl_context
    return context


async def test_clients_share_one_tls_context_and_it_verifies_certificates() -> None:
    # Each client loaded the CA bundle for a context of its own (0.06 CPU s); the process
    # now builds one, and it still verifies the server's certificate and name.
    settings = _settings(anthropic_api_key=SecretStr("sk-ant-test-secret"))
    async with anthropic_client(settings) as one, anthropic_client(settings) as two:
        assert _tls_of(one) is _tls_of(two) is tls_context()
    context = tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # a CA bundle is loaded


def test_no_key_for_a_base_url_is_refused_with_what_to_set() -> None:
    settings = _settings(anthropic_base_url="https://claude.example", anthropic_api_key=None)
    with pytest.raises(RuntimeError, match="ANTHROPIC_API_KEY"):
        anthropic_client(settings)
    assert configured_client(settings) is None


def _client_constructions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("AsyncAnthropic", "Anthropic"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_client_of_the_product_is_opened_by_the_one_factory() -> None:
    files = [
        p
        for entry in PRODUCT
        for p in ([ROOT / entry] if entry.endswith(".py") else (ROOT / entry).rglob("*.py"))
        if p != FACTORY and not p.is_relative_to(SIMULATOR)
    ]
    built = [where for p in files for where in _client_constructions(p)]
    assert not built, "open the client with blockbatch.runtime.claude.anthropic_client:\n" + (
        "\n".join(built)
    )
