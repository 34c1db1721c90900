"""The one place an Anthropic client is opened: key, base URL, retries and timeout.

Every caller (the worker, the front doors' Models API reads and token counts, tests and
benchmarks) opens its client here, so they all talk to the same endpoint the same way. The
key is read from :class:`~blockbatch.runtime.settings.Settings` (a ``SecretStr``) and handed
to the client only: it never reaches a log line, a workflow input, the ledger or an error.

Retries belong to Temporal (``/work/shared/DESIGN.md``, "Retries belong to Temporal"): a
client is opened with ``max_retries=0`` unless a caller outside any activity asks for the
SDK's own retries (the quote's free token counts).
"""

from __future__ import annotations

from activities.sdk import anthropic
from blockbatch.runtime.settings import Settings

#: The SDK (loaded on first use, activities/sdk.py), for the front doors' ``except`` clauses.
__all__ = ["anthropic", "anthropic_client", "configured_client"]


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
