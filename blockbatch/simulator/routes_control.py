"""Routes of the simulator itself: ``/health`` and the ``/_sim/*`` control endpoints.

They need no API key: they are for tests, benchmarks and the local stack.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import ValidationError

from blockbatch.simulator import messages
from blockbatch.simulator.errors import invalid
from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.state import state_of


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def get_scenario(request: web.Request) -> web.Response:
    return web.json_response(state_of(request).scenario.model_dump(mode="json"))


async def put_scenario(request: web.Request) -> web.Response:
    state = state_of(request)
    raw = messages.parse_json(await request.read())
    try:
        state.scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise invalid(f"invalid scenario: {_describe(exc)}") from None
    return web.json_response(state.scenario.model_dump(mode="json"))


async def patch_scenario(request: web.Request) -> web.Response:
    """Change only the fields given (nested objects merged), so a test can switch one
    fault on mid-run, e.g. ``{"errors": {"account_error": "billing_error"}}``; the rest
    of the scenario stays as it is."""
    state = state_of(request)
    raw = messages.parse_json(await request.read())
    if not isinstance(raw, dict):
        raise invalid("invalid scenario: (root): Input should be a valid dictionary")
    merged = _merge(state.scenario.model_dump(mode="json"), raw)
    try:
        state.scenario = Scenario.model_validate(merged)
    except ValidationError as exc:
        raise invalid(f"invalid scenario: {_describe(exc)}") from None
    return web.json_response(state.scenario.model_dump(mode="json"))


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in change.items():
        old = merged.get(key)
        if isinstance(old, dict) and isinstance(value, dict) and key != "models":
            merged[key] = _merge(old, value)
        else:
            merged[key] = value
    return merged


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(root)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


async def get_stats(request: web.Request) -> web.Response:
    return web.json_response(state_of(request).stats.snapshot())


async def get_requests(request: web.Request) -> web.Response:
    log_entries = list(state_of(request).stats.log)
    if "limit" in request.query:
        try:
            limit = int(request.query["limit"])
        except ValueError:
            raise invalid("limit: Input should be a valid integer") from None
        log_entries = log_entries[-limit:] if limit > 0 else []
    return web.json_response(log_entries)


async def hold(request: web.Request) -> web.Response:
    """Hold every answer back once it is ready, and every batch in progress, until
    ``/_sim/release``."""
    state = state_of(request)
    state.gate.clear()
    return web.json_response({"holding": True, "held": state.held})


async def release(request: web.Request) -> web.Response:
    """Send the held answers and hold no more."""
    state = state_of(request)
    held = state.held
    state.gate.set()
    return web.json_response({"holding": False, "released": held})


async def get_hold(request: web.Request) -> web.Response:
    state = state_of(request)
    return web.json_response({"holding": not state.gate.is_set(), "held": state.held})


async def reset(request: web.Request) -> web.Response:
    state_of(request).reset()
    return web.json_response({"status": "reset"})


def add_control_routes(app: web.Application) -> None:
    """Register ``/health`` and ``/_sim/*``."""
    app.router.add_get("/health", health)
    app.router.add_get("/_sim/scenario", get_scenario)
    app.router.add_put("/_sim/scenario", put_scenario)
    app.router.add_patch("/_sim/scenario", patch_scenario)
    app.router.add_get("/_sim/stats", get_stats)
    app.router.add_get("/_sim/requests", get_requests)
    app.router.add_post("/_sim/reset", reset)
    app.router.add_get("/_sim/hold", get_hold)
    app.router.add_post("/_sim/hold", hold)
    app.router.add_post("/_sim/release", release)
