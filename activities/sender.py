"""The sending step of a Claude call: one interface, and the Anthropic API behind it.

:class:`~activities.calls.CallPath` opens the ledger row, reserves, sends, settles and
records; only the send itself knows the provider. A provider is a :class:`Sender`: it
sends one Messages request and hands back the answer as JSON with its response headers,
or raises :class:`NotSent` carrying the error classified (``blockbatch.core.claude_errors``)
and what the ledger records of it. :class:`AnthropicSender` is the Anthropic API's, through
the anthropic SDK; the next providers (Bedrock, Vertex) are senders beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from activities.endpoint import client_endpoint
from activities.errors import from_api_error
from activities.sdk import anthropic
from blockbatch.core.claude_errors import ClaudeError
from blockbatch.core.endpoint import Endpoint
from blockbatch.core.prompt import needs_streaming


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

    async def send(self, request: dict[str, Any]) -> Sent:
        """The answer to ``request``.

        Raises:
            NotSent: no answer, or an error answer.
        """
        ...

    async def endpoint(self) -> Endpoint:
        """Where the requests go (recorded on each ledger row)."""
        ...


class AnthropicSender:
    """The Anthropic API through one anthropic client (``blockbatch.runtime.claude``)."""

    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        self.client = client

    async def endpoint(self) -> Endpoint:
        return await client_endpoint(self.client)

    async def send(self, request: dict[str, Any]) -> Sent:
        """Send one request. A request whose ``max_tokens`` the SDK would not send without
        streaming (it could run past ten minutes) streams, and its final message is the
        answer, with the stream's headers."""
        try:
            message, headers = await self._call(request)
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

    async def _call(self, request: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        limit = anthropic._constants.MODEL_NONSTREAMING_TOKENS.get(request["model"])
        if needs_streaming(request["max_tokens"], limit):
            async with self.client.messages.stream(**request) as stream:
                final = await stream.get_final_message()
                return final.model_dump(mode="json"), stream.response.headers
        raw = await self.client.messages.with_raw_response.create(**request)
        return (await raw.parse()).model_dump(mode="json"), raw.headers
