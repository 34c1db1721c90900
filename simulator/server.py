"""The HTTP routes of the simulator and :class:`SimulatorServer` for in-process use."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Self

from aiohttp import web
from pydantic import ValidationError

from simulator import messages
from simulator.batches import validate_batch_requests
from simulator.clock import Clock
from simulator.errors import ApiError, error_body, invalid, new_id
from simulator.scenario import Scenario
from simulator.state import SimState, Sleep

log = logging.getLogger("simulator")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

STATE: web.AppKey[SimState] = web.AppKey("simulator_state", SimState)
_REQUEST_ID: web.RequestKey[str] = web.RequestKey("simulator_request_id", str)
_HTTP_ERRORS = {404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large"}


def _state(request: web.Request) -> SimState:
    return request.app[STATE]


def _base_url(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


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
    _state(request).stats.count_request(_endpoint(request), response.status)
    return response


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def create_message(request: web.Request) -> web.Response:
    state = _state(request)
    message, headers = await messages.create_message(
        state, request.headers, await request.read(), request[_REQUEST_ID]
    )
    return web.json_response(message, headers=headers)


async def count_tokens(request: web.Request) -> web.Response:
    body = await messages.count_tokens(_state(request), request.headers, await request.read())
    return web.json_response(body)


async def create_batch(request: web.Request) -> web.Response:
    state = _state(request)
    messages.check_headers(state, request.headers)
    requests = validate_batch_requests(messages.parse_json(await request.read()))
    record = state.batches.create(requests)
    return web.json_response(record.to_json(_base_url(request)))


async def get_batch(request: web.Request) -> web.Response:
    state = _state(request)
    messages.check_headers(state, request.headers)
    record = state.batches.get(request.match_info["batch_id"])
    return web.json_response(record.to_json(_base_url(request)))


async def list_batches(request: web.Request) -> web.Response:
    state = _state(request)
    messages.check_headers(state, request.headers)
    try:
        limit = int(request.query.get("limit", "20"))
    except ValueError:
        raise invalid("limit: Input should be a valid integer") from None
    if not 1 <= limit <= 1000:
        raise invalid("limit: Input should be between 1 and 1000")
    page, has_more = state.batches.list(
        limit=limit,
        after_id=request.query.get("after_id"),
        before_id=request.query.get("before_id"),
    )
    data = [record.to_json(_base_url(request)) for record in page]
    return web.json_response(
        {
            "data": data,
            "has_more": has_more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )


async def cancel_batch(request: web.Request) -> web.Response:
    state = _state(request)
    messages.check_headers(state, request.headers)
    record = state.batches.cancel(request.match_info["batch_id"])
    return web.json_response(record.to_json(_base_url(request)))


async def delete_batch(request: web.Request) -> web.Response:
    state = _state(request)
    messages.check_headers(state, request.headers)
    batch_id = request.match_info["batch_id"]
    state.batches.delete(batch_id)
    return web.json_response({"id": batch_id, "type": "message_batch_deleted"})


async def batch_results(request: web.Request) -> web.Response:
    state = _state(request)
    messages.check_headers(state, request.headers)
    record = state.batches.get(request.match_info["batch_id"])
    if record.status != "ended":
        raise invalid(f"message batch {record.id} has not ended yet; results are not available")
    lines = "".join(json.dumps(line) + "\n" for line in record.results)
    return web.Response(text=lines, content_type="application/binary")


async def get_scenario(request: web.Request) -> web.Response:
    return web.json_response(_state(request).scenario.model_dump(mode="json"))


async def put_scenario(request: web.Request) -> web.Response:
    state = _state(request)
    raw = messages.parse_json(await request.read())
    try:
        state.scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise invalid(f"invalid scenario: {_describe(exc)}") from None
    return web.json_response(state.scenario.model_dump(mode="json"))


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(root)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


async def get_stats(request: web.Request) -> web.Response:
    return web.json_response(_state(request).stats.snapshot())


async def get_requests(request: web.Request) -> web.Response:
    log_entries = list(_state(request).stats.log)
    if "limit" in request.query:
        log_entries = log_entries[-max(0, int(request.query["limit"])) :]
    return web.json_response(log_entries)


async def reset(request: web.Request) -> web.Response:
    _state(request).reset()
    return web.json_response({"status": "reset"})


def build_app(
    scenario: Scenario | None = None, clock: Clock | None = None, sleep: Sleep | None = None
) -> web.Application:
    """The simulator as an aiohttp application; its state is ``app[STATE]``.

    Args:
        scenario: faults, latency and limits; the default is a well-behaved API.
        clock: unix-seconds clock for cache TTLs, rate windows and timestamps.
        sleep: how simulated latency is waited for (default ``asyncio.sleep``).
    """
    app = web.Application(middlewares=[api_middleware], client_max_size=256 * 1024**2)
    app[STATE] = SimState(scenario, clock, sleep)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/messages", create_message)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    app.router.add_post("/v1/messages/batches", create_batch)
    app.router.add_get("/v1/messages/batches", list_batches)
    app.router.add_get("/v1/messages/batches/{batch_id}", get_batch)
    app.router.add_delete("/v1/messages/batches/{batch_id}", delete_batch)
    app.router.add_post("/v1/messages/batches/{batch_id}/cancel", cancel_batch)
    app.router.add_get("/v1/messages/batches/{batch_id}/results", batch_results)
    app.router.add_get("/_sim/scenario", get_scenario)
    app.router.add_put("/_sim/scenario", put_scenario)
    app.router.add_get("/_sim/stats", get_stats)
    app.router.add_get("/_sim/requests", get_requests)
    app.router.add_post("/_sim/reset", reset)
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
