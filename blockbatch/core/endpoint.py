"""Which Claude endpoint answers a worker's calls: the Claude API or the local simulator.

A run can be answered by the simulator while its user believes it used Claude (the demo's
worker has no key while the user's shell has one). So every call records who answered
(``llm_calls.provider``: ``anthropic`` or ``simulator``, and ``endpoint_host``, the base URL's
``host[:port]`` when it is not Anthropic's own), every surface that shows answers says
"simulated" when they are (a reused answer keeps the origin of the call that paid for it,
and is reused only where the same provider and host would answer now:
``blockbatch/store/overlays.py`` ``reusable_answers``), and a starter whose Claude settings differ from its workers'
warns before it starts a run.

How a worker knows it talks to the simulator: the simulator says so in a response header
(:data:`SIMULATOR_HEADER`, set on every answer by ``blockbatch/simulator/server.py``; the API never
sends it), read from one request at the worker's start (``blockbatch/send/endpoint.py``). A base
URL alone cannot tell: tests and docker-compose reach the simulator under any host name.

Pure: no I/O. Never the API key: only whether one is set, as a short SHA-256 prefix
(:func:`key_digest`) that tells two keys apart and says nothing of either.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

from blockbatch.core.providers import PROVIDERS, ProviderName, provider_info

#: The response header the simulator adds to every answer; the Claude API never sends it.
SIMULATOR_HEADER = "x-blockbatch-simulator"
#: Anthropic's own API hosts: calls to them record no ``endpoint_host``.
ANTHROPIC_HOSTS = frozenset({"api.anthropic.com"})
#: The SDK's base URL when ``ANTHROPIC_BASE_URL`` is unset.
DEFAULT_BASE_URL = "https://api.anthropic.com"
#: Hex characters of a key's SHA-256 kept to tell keys apart (not enough to find one).
KEY_DIGEST_CHARS = 12

#: Who answered: a provider (``anthropic``: the Claude API; ``bedrock``, ``vertex``, ``aws``,
#: ``foundry``: blockbatch/core/providers.py) or the simulator, whichever wire it spoke.
Provider = Literal[ProviderName, "simulator"]


def endpoint_host(base_url: str | None) -> str | None:
    """``host[:port]`` of a base URL, ``None`` for Anthropic's own API (or no URL)."""
    parts = urlsplit(base_url or DEFAULT_BASE_URL)
    host = (parts.hostname or "").lower()
    if not host or host in ANTHROPIC_HOSTS:
        return None
    return f"{host}:{parts.port}" if parts.port else host


def key_digest(api_key: str | None) -> str | None:
    """The first :data:`KEY_DIGEST_CHARS` hex characters of the key's SHA-256 (``None``:
    no key)."""
    if not api_key:
        return None
    return hashlib.sha256(api_key.encode()).hexdigest()[:KEY_DIGEST_CHARS]


class Endpoint(BaseModel):
    """Who answers a worker's Claude calls, without secrets.

    Attributes:
        provider: ``anthropic`` (the Claude API, directly or through a gateway), another
            provider (``bedrock`` ...) or ``simulator``.
        host: the base URL's ``host[:port]`` when it is not Anthropic's own API.
        key_sha256: :func:`key_digest` of the API key (``None``: no key set).
    """

    provider: Provider
    host: str | None = None
    key_sha256: str | None = None

    @property
    def simulated(self) -> bool:
        return self.provider == "simulator"

    def text(self) -> str:
        """``the simulator at 127.0.0.1:8765``, ``the Claude API``, ``the Claude API via
        gateway.example.com``."""
        if self.simulated:
            return f"the simulator at {self.host}" if self.host else "the simulator"
        if self.provider != "anthropic":
            title = provider_info(self.provider).title
            return f"{title} at {self.host}" if self.host else title
        return f"the Claude API via {self.host}" if self.host else "the Claude API"

    def label(self) -> str:
        """The ledger's words: ``simulator 127.0.0.1:8765``, ``anthropic``."""
        return f"{self.provider} {self.host}" if self.host else self.provider


def endpoint_of(
    base_url: str | None,
    *,
    simulated: bool,
    api_key: str | None = None,
    provider: ProviderName = "anthropic",
) -> Endpoint:
    """The endpoint of a ``provider``'s client with this base URL and key; ``simulated``:
    its answers carry :data:`SIMULATOR_HEADER`."""
    return Endpoint(
        provider="simulator" if simulated else provider,
        host=endpoint_host(base_url),
        key_sha256=key_digest(api_key),
    )


def answering(workers: Sequence[Endpoint]) -> Endpoint | None:
    """The endpoint that would answer a run on workers calling ``workers``: the one
    provider and host they all share (``None``: no worker said, or they differ, so no one
    endpoint would answer and no earlier answer may stand in for it)."""
    sources = {(w.provider, w.host) for w in workers}
    if len(sources) != 1:
        return None
    provider, host = sources.pop()
    return Endpoint(provider=provider, host=host)


def parse_label(label: str) -> Endpoint:
    """An :meth:`Endpoint.label` read back (a run's endpoints, as the ledger has them)."""
    provider, _, host = label.partition(" ")
    known: Provider = (
        provider  # type: ignore[assignment]
        if provider == "simulator" or provider in PROVIDERS
        else "anthropic"
    )
    return Endpoint(provider=known, host=host or None)


def answered_text(labels: Sequence[str]) -> str | None:
    """What answered a run's calls, for a person: ``simulated: the simulator at
    127.0.0.1:8765 answered, not Claude`` (``None``: no call answered yet)."""
    endpoints = [parse_label(label) for label in labels]
    if not endpoints:
        return None
    text = " and ".join(e.text() for e in endpoints)
    if any(e.simulated for e in endpoints):
        return f"simulated: {text} answered, not Claude"
    return text


def mismatch_text(own: Endpoint, workers: Sequence[Endpoint], task_queue: str) -> str | None:
    """Why a starter set for ``own`` should warn before starting a run on workers that
    call ``workers`` (``None``: they agree, or no worker said). Compared: the host and
    the key (their digests); a starter cannot tell the simulator by its settings alone."""
    differ = [w for w in workers if (w.host, w.key_sha256) != (own.host, own.key_sha256)]
    if not differ:
        return None
    theirs = " and ".join(sorted({w.text() for w in differ}))
    if all(w.host == own.host for w in differ):
        theirs += " with a different API key" if own.key_sha256 else " with an API key"
    elif any(w.key_sha256 != own.key_sha256 for w in differ):
        theirs += " with a different API key"
    simulated = any(w.simulated for w in differ)
    return (
        f"the workers on task queue {task_queue!r} call {theirs}, not {own.text()} as "
        "this shell is set for"
        + (": their answers will be SIMULATED" if simulated else "")
        + ". Restart the workers with this shell's ANTHROPIC_API_KEY and "
        "ANTHROPIC_BASE_URL, or start the run from a shell set like theirs."
    )
