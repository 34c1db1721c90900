"""The sending step of a Claude call: one interface, and the Anthropic API behind it.

:class:`~activities.calls.CallPath` opens the ledger row, reserves, sends, settles and
records; only the send itself knows the provider. A provider is a :class:`Sender`: it
sends one Messages request and hands back the answer as JSON with its response headers,
or raises :class:`NotSent` carrying the error classified (``blockbatch.core.claude_errors``)
and what the ledger records of it. :class:`AnthropicSender` sends through the anthropic
SDK: to the Claude API with the worker's client, and to another provider (Bedrock, Vertex,
Claude Platform on AWS, Foundry: ``blockbatch/core/providers.py``) with that provider's
SDK client, opened on the first call of a run that names it and kept for the worker's
life. Each call says where it goes (a :class:`~blockbatch.core.providers.Route`: the
run's provider and its model as the provider knows it); the Claude API's request is sent
exactly as built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from temporalio.exceptions import ApplicationError

from activities.endpoint import client_endpoint, models_get
from activities.errors import from_api_error
from activities.sdk import anthropic
from blockbatch.core.claude_errors import ClaudeError
from blockbatch.core.endpoint import Endpoint, endpoint_of
from blockbatch.core.prompt import needs_streaming
from blockbatch.core.providers import CLAUDE_API, ProviderName, Route, provider_info

#: Opens a provider's client (``blockbatch.runtime.claude.provider_client`` with the
#: worker's settings); raises ``RuntimeError`` or ``ValueError`` saying what to set.
OpenClient = Callable[[str], Any]


@dataclass(frozen=True)
class Sent:
    """An answer: the message as JSON and the response's headers."""

    message: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def request_id(self) -> str | None:
        return self.headers.get("request-id")


class NotSent(Exception):
    """A request that got no answer, or an error answer.

    Attributes:
        error: the failure classified (kind, status, retry-after, error code).
        answered: a server answered (an error status); ``False``: no answer at all.
        headers: the error answer's headers (the rate limiter reads them).
        request_id: the error answer's request id.
        ledger_type, ledger_message: what the ledger records as the error.
    """

    def __init__(
        self,
        error: ClaudeError,
        *,
        answered: bool,
        headers: Mapping[str, str] | None = None,
        request_id: str | None = None,
        ledger_type: str | None = None,
        ledger_message: str | None = None,
    ) -> None:
        super().__init__(error.describe())
        self.error = error
        self.answered = answered
        self.headers = headers
        self.request_id = request_id
        self.ledger_type = ledger_type or error.error_type
        self.ledger_message = ledger_message or error.message


class Sender(Protocol):
    """Sends one Messages request to a provider."""

    async def send(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Sent:
        """The answer to ``request``, sent where ``route`` says.

        Raises:
            NotSent: no answer, or an error answer.
        """
        ...

    async def endpoint(self, route: Route = CLAUDE_API) -> Endpoint:
        """Where ``route``'s requests go (recorded on each ledger row)."""
        ...


class AnthropicSender:
    """Claude through the anthropic SDK: the worker's client for the Claude API
    (``blockbatch.runtime.claude``), a provider's own client for the others."""

    def __init__(
        self, client: anthropic.AsyncAnthropic, open_client: OpenClient | None = None
    ) -> None:
        self.client = client
        self._open = open_client
        self._clients: dict[str, Any] = {}
        self._endpoints: dict[str, Endpoint] = {}

    def client_for(self, provider: ProviderName) -> Any:
        """The client that sends ``provider``'s calls, opened once.

        Raises:
            ApplicationError: (not retryable) this worker cannot open it: what to set.
        """
        if provider == CLAUDE_API.provider:
            return self.client
        client = self._clients.get(provider)
        if client is None:
            title = provider_info(provider).title
            if self._open is None:
                raise ApplicationError(
                    f"this worker sends only to the Claude API, not {title}",
                    type="ProviderUnavailable",
                    non_retryable=True,
                )
            try:
                client = self._open(provider)
            except (RuntimeError, ValueError) as err:
                # What to set on this worker; never a credential (runtime/claude.py).
                raise ApplicationError(
                    f"this worker cannot call {title}: {err}",
                    type="ProviderUnavailable",
                    non_retryable=True,
                ) from None
            self._clients[provider] = client
        return client

    async def endpoint(self, route: Route = CLAUDE_API) -> Endpoint:
        if route.provider == CLAUDE_API.provider:
            return await client_endpoint(self.client)
        if route.provider == "gateway":  # not an anthropic client: activities/gateway.py
            gateway: Any = self.client_for(route.provider)
            endpoint: Endpoint = await gateway.endpoint(route)
            return endpoint
        known = self._endpoints.get(route.provider)
        if known is None:
            known, answered = await _provider_endpoint(
                self.client_for(route.provider), route.provider
            )
            if answered:
                self._endpoints[route.provider] = known
        return known

    async def close(self) -> None:
        """Close the providers' clients this sender opened (not the worker's own)."""
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    async def send(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Sent:
        """Send one request. A request whose ``max_tokens`` the SDK would not send without
        streaming (it could run past ten minutes) streams, and its final message is the
        answer, with the stream's headers. A gateway's calls go to its own sender."""
        if route.provider == "gateway":
            gateway: Any = self.client_for(route.provider)
            sent: Sent = await gateway.send(request, route)
            return sent
        try:
            message, headers = await self._call(request, route)
        except anthropic.APIStatusError as err:
            raise NotSent(
                from_api_error(err),
                answered=True,
                headers=err.response.headers,
                request_id=err.request_id,
            ) from None
        except anthropic.APIConnectionError as err:
            raise NotSent(
                from_api_error(err),
                answered=False,
                ledger_type=type(err).__name__,
                ledger_message=str(err),
            ) from None
        return Sent(message, headers)

    async def _call(self, request: dict[str, Any], route: Route) -> tuple[dict[str, Any], Any]:
        # The SDK's streaming rule is the registry model's, whatever the provider calls it.
        limit = anthropic._constants.MODEL_NONSTREAMING_TOKENS.get(request["model"])
        client = self.client_for(route.provider)
        wire = route.request(request)
        if needs_streaming(request["max_tokens"], limit):
            async with client.messages.stream(**wire) as stream:
                final = await stream.get_final_message()
                return final.model_dump(mode="json"), stream.response.headers
        raw = await client.messages.with_raw_response.create(**wire)
        return (await raw.parse()).model_dump(mode="json"), raw.headers


async def _provider_endpoint(client: Any, provider: ProviderName) -> tuple[Endpoint, bool]:
    """Who answers a provider's client, and whether it answered at all
    (:func:`activities.endpoint.models_get`)."""
    simulated, answered, _ = await models_get(client)
    endpoint = endpoint_of(str(client.base_url), simulated=simulated, provider=provider)
    return endpoint, answered
