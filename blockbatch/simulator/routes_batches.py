"""Routes of the Message Batches API: thin HTTP wrappers over :mod:`blockbatch.simulator.batches`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from blockbatch.simulator import messages
from blockbatch.simulator.batches import validate_batch_requests
from blockbatch.simulator.bodies import BATCH_MAX_BYTES, read_body
from blockbatch.simulator.errors import account_error, invalid
from blockbatch.simulator.state import state_of
from blockbatch.simulator.validate import ApiContext

#: Where the Message Batches API's own path starts: a platform serves it under its prefix.
_BATCHES_PATH = "/v1/messages/batches"


def _base_url(request: web.Request) -> str:
    """This simulator as the request reached it, with the platform's prefix (``/aws``,
    Google Cloud's ``.../invoke``), so a ``results_url`` goes back through the same door."""
    prefix = request.path.split(_BATCHES_PATH, 1)[0]
    return f"{request.scheme}://{request.host}{prefix}"


async def create_batch(request: web.Request) -> web.Response:
    state = state_of(request)
    raw = await read_body(request, BATCH_MAX_BYTES)
    messages.check_headers(state, request.headers)
    if state.scenario.errors.account_error is not None:
        raise account_error(state.scenario.errors.account_error)
    context = ApiContext.from_headers(request.headers, batch=True)
    requests = validate_batch_requests(messages.parse_json(raw), context)
    record = state.batches.create(requests, context)
    return web.json_response(record.to_json(_base_url(request)))


async def get_batch(request: web.Request) -> web.Response:
    state = state_of(request)
    messages.check_headers(state, request.headers)
    record = state.batches.get(request.match_info["batch_id"])
    return web.json_response(record.to_json(_base_url(request)))


def page_limit(request: web.Request) -> int:
    """A list endpoint's ``limit`` (1-1000, default 20), as the API checks it."""
    try:
        limit = int(request.query.get("limit", "20"))
    except ValueError:
        raise invalid("limit: Input should be a valid integer") from None
    if not 1 <= limit <= 1000:
        raise invalid("limit: Input should be between 1 and 1000")
    return limit


async def list_batches(request: web.Request) -> web.Response:
    state = state_of(request)
    messages.check_headers(state, request.headers)
    limit = page_limit(request)
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
    state = state_of(request)
    messages.check_headers(state, request.headers)
    record = state.batches.cancel(request.match_info["batch_id"])
    return web.json_response(record.to_json(_base_url(request)))


async def delete_batch(request: web.Request) -> web.Response:
    state = state_of(request)
    messages.check_headers(state, request.headers)
    batch_id = request.match_info["batch_id"]
    state.batches.delete(batch_id)
    return web.json_response({"id": batch_id, "type": "message_batch_deleted"})


async def batch_results(request: web.Request) -> web.Response:
    state = state_of(request)
    messages.check_headers(state, request.headers)
    record = state.batches.get(request.match_info["batch_id"])
    if record.status != "ended":
        raise invalid(f"message batch {record.id} has not ended yet; results are not available")
    lines = "".join(json.dumps(line) + "\n" for line in record.results)
    return web.Response(text=lines, content_type="application/binary")


Handler = Callable[[web.Request], Awaitable[web.Response]]


def add_batch_routes(
    app: web.Application, prefix: str = "", guard: Callable[[web.Request], None] | None = None
) -> None:
    """Register ``/v1/messages/batches`` and its sub-routes, under ``prefix`` for a platform
    that serves the first-party API under its own path; ``guard`` checks a platform's own
    headers first (``blockbatch/simulator/platforms.py``)."""

    def guarded(handler: Handler) -> Handler:
        if guard is None:
            return handler

        async def handle(request: web.Request) -> web.Response:
            guard(request)
            return await handler(request)

        return handle

    base = prefix + _BATCHES_PATH
    app.router.add_post(base, guarded(create_batch))
    app.router.add_get(base, guarded(list_batches))
    app.router.add_get(base + "/{batch_id}", guarded(get_batch))
    app.router.add_delete(base + "/{batch_id}", guarded(delete_batch))
    app.router.add_post(base + "/{batch_id}/cancel", guarded(cancel_batch))
    app.router.add_get(base + "/{batch_id}/results", guarded(batch_results))
