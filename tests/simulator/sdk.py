"""The real anthropic SDK's client, pointed at a simulator."""

from __future__ import annotations

import functools
import ssl
from typing import Any

import anthropic


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def sdk_client(base_url: str, api_key: str = "k", **options: Any) -> anthropic.AsyncAnthropic:
    """An ``AsyncAnthropic`` on ``base_url`` without the SDK's own retries (``max_retries=0``,
    as the product's clients), ``options`` passed on.

    Its HTTP client is the SDK's default one, sharing one TLS context per test process: the
    SDK otherwise builds one for every client and loads the CA bundle into it (about 0.06 s
    of CPU), although the simulator speaks plain HTTP, and the simulator tests open hundreds.
    """
    http = anthropic.DefaultAsyncHttpxClient(verify=_tls())
    return anthropic.AsyncAnthropic(
        base_url=base_url, api_key=api_key, max_retries=0, http_client=http, **options
    )
