"""Which endpoint a worker's Claude client talks to (blockbatch/core/endpoint.py), asked once.

One GET of the Models API (``/v1/models?limit=1``, contract §1) on the client's base URL:
the simulator answers it, like every request, with
:data:`blockbatch.core.endpoint.SIMULATOR_HEADER`; the Claude API never sends that header.
The same answer says whether the endpoint is reachable at all and whether it accepts the
key (:func:`check_endpoint`, the line a worker says at its start). It sends no prompt and
costs nothing. An endpoint that does not answer is asked again next time (its calls fail
meanwhile, whoever it is).
"""

from __future__ import annotations

import weakref
from typing import Any

from blockbatch.core.endpoint import SIMULATOR_HEADER, Endpoint, endpoint_of
from blockbatch.send.errors import from_api_error
from blockbatch.send.sdk import anthropic

#: Seconds the one question may take.
ASK_TIMEOUT_S = 5.0

_known: weakref.WeakKeyDictionary[object, Endpoint] = weakref.WeakKeyDictionary()


async def client_endpoint(client: anthropic.AsyncAnthropic) -> Endpoint:
    """The endpoint ``client`` talks to: asked once per client, then remembered."""
    known = _known.get(client)
    if known is not None:
        return known
    endpoint, _ = await check_endpoint(client)
    return endpoint


async def ask_endpoint(client: anthropic.AsyncAnthropic) -> Endpoint | None:
    """The endpoint ``client`` talks to, asked now (``None``: it did not answer)."""
    endpoint, answered, _ = await _ask(client)
    return endpoint if answered else None


async def check_endpoint(client: anthropic.AsyncAnthropic) -> tuple[Endpoint, str | None]:
    """Ask the endpoint once: who it is, and what is wrong with reaching it, said after its
    name (``is NOT reachable ...``; ``None``: it answered and accepted the key).

    The problem is one sentence naming the host and the cause: no connection (DNS,
    refused, TLS, proxy), a rejected key, or another error status.
    """
    endpoint, _, problem = await _ask(client)
    return endpoint, problem


async def models_get(
    client: Any,
) -> tuple[bool, bool, anthropic.APIStatusError | anthropic.APIConnectionError | None]:
    """One GET of ``/v1/models`` under a client's base URL, which costs nothing and which
    the simulator answers (whatever its status) with :data:`SIMULATOR_HEADER`: whether the
    simulator answered, whether anything answered, and the SDK's error if it failed (an
    error status is an answer too: a platform without a Models API gives one)."""
    import httpx2  # the SDK's HTTP client, loaded with it

    try:
        response = await client.get(
            "/v1/models",
            cast_to=httpx2.Response,
            options={"params": {"limit": 1}, "timeout": ASK_TIMEOUT_S, "max_retries": 0},
        )
    except anthropic.APIStatusError as err:
        return SIMULATOR_HEADER in err.response.headers, True, err
    except anthropic.APIConnectionError as err:
        return False, False, err
    return SIMULATOR_HEADER in response.headers, True, None


async def _ask(client: anthropic.AsyncAnthropic) -> tuple[Endpoint, bool, str | None]:
    """One GET of the Models API: the endpoint, whether it answered, and what is wrong."""
    simulated, answered, failed = await models_get(client)
    problem = None
    if isinstance(failed, anthropic.APIStatusError):
        error = from_api_error(failed)
        problem = (
            f"is reachable, but the API key was rejected ({error.text}): set a valid "
            "ANTHROPIC_API_KEY for the workers"
            if error.code == "key_rejected"
            else f"is reachable, but the Models API answered {error.text}"
        )
    elif failed is not None:
        error = from_api_error(failed)
        problem = (
            f"is NOT reachable ({error.host or client.base_url}): {error.message}; runs end "
            "unreachable until it is: check this worker's network, HTTPS_PROXY and "
            "ANTHROPIC_BASE_URL"
        )
    endpoint = endpoint_of(str(client.base_url), simulated=simulated, api_key=client.api_key)
    if answered:
        _known[client] = endpoint
    return endpoint, answered, problem
