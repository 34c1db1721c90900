"""Which endpoint a worker's Claude client talks to (blockbatch/core/endpoint.py), asked once.

One GET of ``/health`` on the client's base URL: the simulator answers it, like every
request, with :data:`blockbatch.core.endpoint.SIMULATOR_HEADER`; the Claude API answers 404 without it.
It sends no prompt and costs nothing. An endpoint that does not answer is asked again
next time (its calls fail meanwhile, whoever it is).
"""

from __future__ import annotations

import weakref

from activities.sdk import anthropic
from blockbatch.core.endpoint import SIMULATOR_HEADER, Endpoint, endpoint_of

#: Seconds the one question may take.
ASK_TIMEOUT_S = 5.0

_known: weakref.WeakKeyDictionary[object, Endpoint] = weakref.WeakKeyDictionary()


async def client_endpoint(client: anthropic.AsyncAnthropic) -> Endpoint:
    """The endpoint ``client`` talks to: asked once per client, then remembered."""
    known = _known.get(client)
    if known is not None:
        return known
    endpoint = await ask_endpoint(client)
    if endpoint is not None:
        _known[client] = endpoint
        return endpoint
    return endpoint_of(str(client.base_url), simulated=False, api_key=client.api_key)


async def ask_endpoint(client: anthropic.AsyncAnthropic) -> Endpoint | None:
    """The endpoint ``client`` talks to, asked now (``None``: it did not answer)."""
    import httpx2  # the SDK's HTTP client, loaded with it

    try:
        response = await client.get(
            "/health", cast_to=httpx2.Response, options={"timeout": ASK_TIMEOUT_S, "max_retries": 0}
        )
        simulated = SIMULATOR_HEADER in response.headers
    except anthropic.APIStatusError as err:
        simulated = SIMULATOR_HEADER in err.response.headers
    except anthropic.APIConnectionError:
        return None
    return endpoint_of(str(client.base_url), simulated=simulated, api_key=client.api_key)
