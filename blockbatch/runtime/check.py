"""One small call to a provider (``max_tokens: 1``): what `check` reports.

It sends through the worker's own sender (``blockbatch.send.sender``), so what `check` says is
what a run's calls would meet. It lives in the runtime layer because the CLI does not import
the worker's modules (tests/unit/test_layers.py).
"""

from __future__ import annotations

import time
from typing import Any

from blockbatch.core.answer import call_shape
from blockbatch.core.gateway import answer_cost_usd
from blockbatch.core.providers import ProviderName, Route, provider_info
from blockbatch.core.registry import ModelInfo, Usage
from blockbatch.send.sender import AnthropicSender, NotSent


async def check_call(
    out: dict[str, Any],
    provider: ProviderName,
    model: ModelInfo,
    wire: str,
    client: Any,
) -> str | None:
    """Send the one small call and fill ``out`` with what it says; the problem, or None."""
    info = provider_info(provider)
    sender = AnthropicSender(client, lambda _: client)
    route = Route(provider, wire)
    request: dict[str, Any] = {
        "model": model.id,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "Reply with OK."}],
    }
    thinking = call_shape(info.shaped(model), None, strict_fits=False).thinking
    if thinking is not None:  # thinking off, so the one output token answers
        request["thinking"] = dict(thinking)
    started = time.monotonic()
    try:
        sent = await sender.send(request, route)
    except NotSent as failed:
        error = failed.error
        if not failed.answered:
            problem = f"not reachable ({error.host or 'no host'}): {error.message}"
        elif error.status in (401, 403):
            problem = f"reachable, but the credentials were refused: {error.text}"
        elif error.status == 404:
            problem = f"reachable, but model {wire} is not available: {error.text}"
        else:
            problem = f"reachable, but the call failed: {error.text}"
        out["endpoint"] = (await sender.endpoint(route)).text() if failed.answered else None
        return problem
    endpoint = await sender.endpoint(route)
    usage = Usage.from_message(sent.message)
    out.update(
        ok=True,
        endpoint=endpoint.text(),
        simulated=endpoint.simulated,
        seconds=round(time.monotonic() - started, 2),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=answer_cost_usd(model, sent.message),
        fallbacks=info.fallbacks_text(),
    )
    if provider == "vertex":  # batch mode's own settings and bucket
        from activities.vertex_jobs import batch_readiness

        out["batch"] = await batch_readiness(client)
    return None
