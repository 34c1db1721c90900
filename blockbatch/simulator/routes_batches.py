"""Routes of the Message Batches API: thin HTTP wrappers over :mod:`blockbatch.simulator.batches`."""

from __future__ import annotations

import json

from aiohttp import web

from blockbatch.simulator import messages
from blockbatch.simulator.batches import validate_batch_requests
from blockbatch.simulator.bodies import BATCH_MAX_BYTES, read_body
from blockbatch.simulator.errors import account_error, invalid
from blockbatch.simulator.state import state_of
from blockbatch.simulator.validate import ApiContext


def _base_url(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


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


def add_batch_routes(app: web.Application) -> None:
    """Register ``/v1/messages/batches`` and its sub-routes."""
    app.router.add_post("/v1/messages/batches", create_batch)
    app.router.add_get("/v1/messages/batches", list_batches)
    app.router.add_get("/v1/messages/batches/{batch_id}", get_batch)
    app.router.add_delete("/v1/messages/batches/{batch_id}", delete_batch)
    app.router.add_post("/v1/messages/batches/{batch_id}/cancel", cancel_batch)
    app.router.add_get("/v1/messages/batches/{batch_id}/results", batch_results)
