"""The sending step for an OpenAI-compatible gateway (``--provider gateway``: OpenRouter and
the like): one Messages request sent as a chat completion, its answer read back as a Message.

:class:`GatewaySender` has the shape of :class:`~blockbatch.send.sender.Sender` (``send``,
``endpoint``, ``close``): :class:`~blockbatch.send.sender.AnthropicSender` hands it a gateway
route's calls. The wire both ways is ``blockbatch/core/gateway.py``; this module only
sends, over aiohttp (already the simulator's server; one POST of JSON needs no SDK, and
retries belong to Temporal), and classifies what went wrong as a Claude error would be.

The key is sent as ``Authorization: Bearer`` and nowhere else: not in an error, a log
line or the ledger (an error's text is the gateway's own message, or the cause of a failed
connection).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from pydantic import SecretStr

from blockbatch.core.claude_errors import classify
from blockbatch.core.endpoint import SIMULATOR_HEADER, Endpoint, endpoint_of
from blockbatch.core.gateway import (
    GatewayShapeError,
    answer_error,
    chat_request,
    error_of,
    message_of,
)
from blockbatch.core.providers import CLAUDE_API, Route
from blockbatch.send.sender import NotSent, Sent


class GatewaySender:
    """Claude through an OpenAI-compatible gateway's chat completions.

    Args:
        base_url: the gateway's base (``https://openrouter.ai/api/v1``); requests go to
            ``{base_url}/chat/completions``.
        api_key: the gateway's key.
        timeout_s: seconds one request may take.
    """

    def __init__(self, base_url: str, api_key: SecretStr, *, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self._key = api_key
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._endpoint: Endpoint | None = None

    @property
    def host(self) -> str:
        parts = urlsplit(self.base_url)
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    def _headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self._key.get_secret_value()}",
            "Content-Type": "application/json",
            # OpenRouter's optional attribution headers (platforms-checked §5).
            "X-Title": "blockbatch",
        }

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def endpoint(self, route: Route = CLAUDE_API) -> Endpoint:
        """Who answers: the gateway at its host, or the simulator when its answers say so
        (``GET {base}/models``, public on OpenRouter; known once answered)."""
        if self._endpoint is not None:
            return self._endpoint
        simulated, answered = False, False
        try:
            async with self._open().get(f"{self.base_url}/models") as response:
                simulated = response.headers.get(SIMULATOR_HEADER) is not None
                answered = True
        except (aiohttp.ClientError, TimeoutError):
            pass
        found = endpoint_of(self.base_url, simulated=simulated, provider="gateway")
        if answered:
            self._endpoint = found
        return found

    async def send(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Sent:
        """The answer to ``request`` as a Message (``blockbatch/core/gateway.py``).

        Raises:
            NotSent: no answer, an error status, or an error in a 200 answer.
        """
        wire = route.request(request)["model"]
        try:
            body = chat_request(request, wire)
        except GatewayShapeError as err:
            raise NotSent(
                classify(400, "invalid_request_error", str(err)), answered=False
            ) from None
        try:
            async with self._open().post(
                f"{self.base_url}/chat/completions", json=body, headers=self._headers()
            ) as response:
                raw = await response.read()
                headers = dict(response.headers)
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as err:
            cause = type(err).__name__
            error = classify(None, cause, f"{cause}: {err}", host=self.host)
            raise NotSent(
                error, answered=False, ledger_type=cause, ledger_message=str(err)
            ) from None
        request_id = headers.get("x-request-id") or headers.get("request-id")
        try:
            answer: Any = json.loads(raw or b"null")
        except ValueError:
            answer = None
        error_body = answer_error(answer)
        if status != 200 or error_body is not None or not isinstance(answer, dict):
            error = error_of(
                status,
                error_body
                or {"message": f"the gateway answered HTTP {status} without a JSON error"},
                retry_after=headers.get("Retry-After") or headers.get("retry-after"),
                model=request["model"],
            )
            raise NotSent(error, answered=True, headers=headers, request_id=request_id)
        try:
            message = message_of(answer, request["model"])
        except GatewayShapeError as err:
            raise NotSent(
                classify(502, "api_error", str(err)),
                answered=True,
                headers=headers,
                request_id=request_id,
            ) from None
        return Sent(message, {**headers, "request-id": request_id or message["id"]})
