"""The one way a request reaches Claude: the :class:`Sender` seam, and the anthropic SDK behind it.

Every Messages request (the worker's pack calls, warm-ups and probes through
:class:`~activities.calls.CallPath`, ``check --provider``), every token count (the quote)
and every Message Batches call (create, look, list, cancel, results: ``activities/batches/``)
goes through a :class:`Sender`. It is the one place that builds the request a provider is
sent (a :class:`~blockbatch.core.providers.Route`: the run's provider and its model as the
provider knows it; the Claude API's request is sent exactly as built), types the error
(:class:`NotSent`, classified by ``blockbatch.send.errors``), hands back the response's
headers (the fleet's rate limiter reads its ``anthropic-ratelimit-*`` there) and keeps the
key inside the client: nothing it raises or returns holds a credential.

A provider plugs in by implementing :class:`Sender` (a ``Protocol``: no base class to
inherit). :class:`AnthropicSender` serves the Claude API with the worker's client and the
other platforms (Bedrock, Vertex, Claude Platform on AWS, Foundry:
``blockbatch/core/providers.py``) with their SDK clients, opened through ``open_client``
(``blockbatch.runtime.claude.provider_client``, the one client factory) on the first call
of a run that names one and kept for the sender's life. A run whose provider serves no
Message Batches never reaches the batch calls: ``blockbatch.core.providers.batch_refused``
refuses it at start.

This layer imports only ``blockbatch.core`` (and the SDK): the activities, the runtime and
the front doors (``blockbatch/api``) all stand on it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from temporalio.exceptions import ApplicationError

from blockbatch.core.batch_types import BatchCounts
from blockbatch.core.claude_errors import ClaudeError
from blockbatch.core.endpoint import Endpoint, endpoint_of
from blockbatch.core.prompt import needs_streaming
from blockbatch.core.providers import CLAUDE_API, ProviderName, Route, provider_info
from blockbatch.send.endpoint import client_endpoint, models_get
from blockbatch.send.errors import from_api_error
from blockbatch.send.sdk import anthropic

if TYPE_CHECKING:
    from anthropic.types.messages import MessageBatch

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


@dataclass(frozen=True)
class Counted:
    """A token count: the request's input tokens and the response's headers."""

    input_tokens: int
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderBatch:
    """A provider's message batch as it reports it.

    Attributes:
        id: the provider's batch id.
        status: ``in_progress``, ``canceling`` or ``ended``.
        counts: its requests by state.
        created_at, expires_at, ended_at: as the provider says.
    """

    id: str
    status: str
    counts: BatchCounts
    created_at: datetime
    expires_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def requests(self) -> int:
        """Every request of the batch, whatever its state."""
        c = self.counts
        return c.processing + c.succeeded + c.errored + c.canceled + c.expired


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
    """Sends requests to Claude where a :class:`~blockbatch.core.providers.Route` says.

    Every method raises :class:`NotSent` when no answer came or the answer is an error.
    The batch methods serve ``--mode batch``; a provider without batches is refused at
    the run's start and never asked.
    """

    async def send(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Sent:
        """The answer to one Messages ``request``."""
        ...

    async def count_tokens(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Counted:
        """The input tokens of one Messages ``request`` (token counting is free)."""
        ...

    async def endpoint(self, route: Route = CLAUDE_API) -> Endpoint:
        """Where ``route``'s requests go (recorded on each ledger row)."""
        ...

    async def create_batch(
        self, requests: list[dict[str, Any]], route: Route = CLAUDE_API
    ) -> ProviderBatch:
        """Create one batch of ``requests`` (``{"custom_id", "params"}`` each). Not
        idempotent: ``activities/batches/create.py`` says how it is made exactly once."""
        ...

    async def batch(self, batch_id: str, route: Route = CLAUDE_API) -> ProviderBatch:
        """One batch as the provider reports it now."""
        ...

    async def cancel_batch(self, batch_id: str, route: Route = CLAUDE_API) -> ProviderBatch:
        """Ask the provider to cancel a batch; what already ran is kept."""
        ...

    def batches(self, route: Route = CLAUDE_API) -> AsyncGenerator[ProviderBatch, None]:
        """The account's batches, newest first."""
        ...

    def batch_results(
        self, batch_id: str, route: Route = CLAUDE_API, wanted: Collection[str] | None = None
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """An ended batch's results, streamed: ``(custom_id, result as JSON)`` each;
        ``wanted``: the custom ids still uncollected (a provider that answers records
        itself, as Bedrock's sync parts do, answers only those; others ignore it)."""
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
        if route.provider == "gateway":  # not an anthropic client: send/gateway.py
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
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as err:
            _raise_not_sent(err)
        return Sent(message, headers)

    async def count_tokens(self, request: dict[str, Any], route: Route = CLAUDE_API) -> Counted:
        try:
            raw = await self.client_for(route.provider).messages.with_raw_response.count_tokens(
                **route.request(request)
            )
            return Counted((await raw.parse()).input_tokens, raw.headers)
        except anthropic.APIError as err:
            _raise_not_sent(err)

    async def create_batch(
        self, requests: list[dict[str, Any]], route: Route = CLAUDE_API
    ) -> ProviderBatch:
        batches = self.client_for(route.provider).messages.batches
        wire = [{**r, "params": route.request(r["params"])} for r in requests]
        try:
            return provider_batch(await batches.create(requests=wire))
        except anthropic.APIError as err:
            _raise_not_sent(err)

    async def batch(self, batch_id: str, route: Route = CLAUDE_API) -> ProviderBatch:
        try:
            return provider_batch(
                await self.client_for(route.provider).messages.batches.retrieve(batch_id)
            )
        except anthropic.APIError as err:
            _raise_not_sent(err)

    async def cancel_batch(self, batch_id: str, route: Route = CLAUDE_API) -> ProviderBatch:
        try:
            return provider_batch(
                await self.client_for(route.provider).messages.batches.cancel(batch_id)
            )
        except anthropic.APIError as err:
            _raise_not_sent(err)

    async def batches(self, route: Route = CLAUDE_API) -> AsyncGenerator[ProviderBatch, None]:
        try:
            async for batch in self.client_for(route.provider).messages.batches.list(limit=100):
                yield provider_batch(batch)
        except anthropic.APIError as err:
            _raise_not_sent(err)

    async def batch_results(
        self, batch_id: str, route: Route = CLAUDE_API, wanted: Collection[str] | None = None
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        try:
            lines = await self.client_for(route.provider).messages.batches.results(batch_id)
            async for line in lines:
                yield line.custom_id, line.result.model_dump(mode="json")
        except anthropic.APIError as err:
            _raise_not_sent(err)

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


def _raise_not_sent(err: anthropic.APIError) -> NoReturn:
    """The SDK's failure as :class:`NotSent`: an error answer, or no answer at all."""
    if isinstance(err, anthropic.APIStatusError):
        raise NotSent(
            from_api_error(err),
            answered=True,
            headers=err.response.headers,
            request_id=err.request_id,
        ) from None
    raise NotSent(
        from_api_error(err),
        answered=False,
        ledger_type=type(err).__name__,
        ledger_message=str(err),
    ) from None


def provider_batch(batch: MessageBatch) -> ProviderBatch:
    c = batch.request_counts
    return ProviderBatch(
        id=batch.id,
        status=batch.processing_status,
        counts=BatchCounts(
            processing=c.processing,
            succeeded=c.succeeded,
            errored=c.errored,
            canceled=c.canceled,
            expired=c.expired,
        ),
        created_at=batch.created_at,
        expires_at=batch.expires_at,
        ended_at=batch.ended_at,
    )


async def _provider_endpoint(client: Any, provider: ProviderName) -> tuple[Endpoint, bool]:
    """Who answers a provider's client, and whether it answered at all
    (:func:`blockbatch.send.endpoint.models_get`)."""
    simulated, answered, _ = await models_get(client)
    endpoint = endpoint_of(str(client.base_url), simulated=simulated, provider=provider)
    return endpoint, answered
