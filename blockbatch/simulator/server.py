"""The simulator's aiohttp app (middleware, /v1/messages routes) and :class:`SimulatorServer`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Self

from aiohttp import web

from blockbatch.simulator import messages, models_api
from blockbatch.simulator.bedrock_jobs import add_bedrock_job_routes
from blockbatch.simulator.bodies import BATCH_MAX_BYTES, MESSAGES_MAX_BYTES, read_body
from blockbatch.simulator.clock import Clock
from blockbatch.simulator.errors import ApiError, error_body, new_id
from blockbatch.simulator.platforms import add_platform_routes
from blockbatch.simulator.routes_batches import add_batch_routes, page_limit
from blockbatch.simulator.routes_control import add_control_routes
from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.state import STATE, SimState, Sleep, state_of
from blockbatch.simulator.streaming import send_stream
from blockbatch.simulator.vertex_jobs import add_vertex_job_routes

log = logging.getLogger("simulator")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_REQUEST_ID: web.RequestKey[str] = web.RequestKey("simulator_request_id", str)
_HTTP_ERRORS = {404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large"}


def _endpoint(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return f"{request.method} {resource.canonical if resource is not None else 'unmatched'}"


@web.middleware
async def api_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give every answer a request-id, shape every error like the API, count everything."""
    request_id = new_id("req_")
    request[_REQUEST_ID] = request_id
    try:
        response = await handler(request)
    except ApiError as error:
        response = web.json_response(
            error.body(request_id), status=error.status, headers=error.headers
        )
    except web.HTTPException as exc:
        error_type = _HTTP_ERRORS.get(exc.status, "invalid_request_error")
        body = error_body(error_type, exc.reason or "Not Found", request_id)
        response = web.json_response(body, status=exc.status)
    except Exception:  # answer like the API instead of dropping the connection
        log.exception("simulator bug while handling %s", _endpoint(request))
        body = error_body("api_error", "Internal server error", request_id)
        response = web.json_response(body, status=500)
    response.headers["request-id"] = request_id
    response.headers["x-blockbatch-simulator"] = (
        "1"  # not the API's: who answered (blockbatch/core/endpoint.py)
    )
    state_of(request).stats.count_request(_endpoint(request), response.status)
    return response


async def create_message(request: web.Request) -> web.StreamResponse:
    state = state_of(request)
    raw = await read_body(request, MESSAGES_MAX_BYTES)
    message, headers = await messages.create_message(
        state, request.headers, raw, request[_REQUEST_ID]
    )
    if messages.wants_stream(raw):
        return await send_stream(request, message, {**headers, "request-id": request[_REQUEST_ID]})
    return web.json_response(message, headers=headers)


async def count_tokens(request: web.Request) -> web.Response:
    raw = await read_body(request, MESSAGES_MAX_BYTES)
    body = await messages.count_tokens(state_of(request), request.headers, raw)
    return web.json_response(body)


async def get_model(request: web.Request) -> web.Response:
    """``GET /v1/models/{model_id}`` (contract §1, "Check at run time")."""
    state = state_of(request)
    messages.check_headers(state, request.headers)
    return web.json_response(models_api.retrieve(request.match_info["model_id"], state.scenario))


async def list_models(request: web.Request) -> web.Response:
    """``GET /v1/models[?limit&after_id&before_id]``."""
    state = state_of(request)
    messages.check_headers(state, request.headers)
    limit = page_limit(request)
    page = models_api.list_page(
        state.scenario,
        limit=limit,
        after_id=request.query.get("after_id"),
        before_id=request.query.get("before_id"),
    )
    return web.json_response(page)


def build_app(
    scenario: Scenario | None = None, clock: Clock | None = None, sleep: Sleep | None = None
) -> web.Application:
    """The simulator as an aiohttp application; its state is ``app[STATE]``.

    Args:
        scenario: faults, latency and limits; the default is a well-behaved API.
        clock: unix-seconds clock for cache TTLs, rate-limit buckets and timestamps.
        sleep: how simulated latency is waited for (default ``asyncio.sleep``).
    """
    # aiohttp's own cap sits above the largest body any route takes; routes check theirs.
    app = web.Application(middlewares=[api_middleware], client_max_size=BATCH_MAX_BYTES + 1)
    app[STATE] = SimState(scenario, clock, sleep)
    app.router.add_post("/v1/messages", create_message)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model_id}", get_model)
    add_batch_routes(app)
    add_platform_routes(app, lambda request: request[_REQUEST_ID])
    add_bedrock_job_routes(app)
    add_vertex_job_routes(app)
    add_control_routes(app)
    return app


class SimulatorServer:
    """The simulator on a local port, for tests and embedding.

    Example:
        async with SimulatorServer(scenario=Scenario(seed=1)) as sim:
            client = anthropic.AsyncAnthropic(base_url=sim.base_url, api_key="k", max_retries=0)
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        scenario: Scenario | None = None,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.app = build_app(scenario, clock, sleep)
        self._runner: web.AppRunner | None = None

    @property
    def state(self) -> SimState:
        """The live state: scenario, engine, stats, batches."""
        return self.app[STATE]

    @property
    def scenario(self) -> Scenario:
        return self.state.scenario

    @scenario.setter
    def scenario(self, scenario: Scenario) -> None:
        self.state.scenario = scenario

    @property
    def base_url(self) -> str:
        """``http://host:port``, for ``ANTHROPIC_BASE_URL`` or ``AsyncAnthropic(base_url=...)``."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Bind and serve; with ``port=0`` a free port is picked and stored in ``port``."""
        # Cancel a handler when its client goes away, so a simulated hang ends with it.
        self._runner = web.AppRunner(
            self.app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop serving and release the port."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
