"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: checks, faults, answer, latency.

A streamed request (``stream: true``) gets the same Message, written as events by
``blockbatch/simulator/streaming.py``; the latency counts every output token, thinking included.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from blockbatch.simulator.errors import ApiError, invalid
from blockbatch.simulator.refusals import refuse_by_scenario
from blockbatch.simulator.state import SimState
from blockbatch.simulator.validate import ApiContext, check_auth, check_version


def parse_json(raw: bytes) -> Any:
    """The request body as JSON, or a 400 like the API's."""
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise invalid(f"There was an error parsing the body of your request: {exc}") from None


def wants_stream(raw: bytes) -> bool:
    """Whether a (validated) Messages request asks for Server-Sent Events (contract §8)."""
    body = json.loads(raw)
    return isinstance(body, dict) and body.get("stream") is True


def check_headers(state: SimState, headers: Mapping[str, str]) -> None:
    """Authentication, then the ``anthropic-version`` header."""
    check_auth(headers, state.scenario.auth)
    check_version(headers)


async def count_tokens(state: SimState, headers: Mapping[str, str], raw: bytes) -> dict[str, Any]:
    """``{"input_tokens": N}``, the same total /v1/messages would bill."""
    check_headers(state, headers)
    prepared = state.engine.prepare(
        parse_json(raw), count_only=True, context=ApiContext.from_headers(headers)
    )
    return {"input_tokens": prepared.prompt.total_tokens}


async def create_message(
    state: SimState, headers: Mapping[str, str], raw: bytes, request_id: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """Answer one Messages request; returns the Message JSON and extra headers.

    Raises:
        ApiError: validation errors, rate limits and injected failures.
    """
    entry: dict[str, Any] = {
        "request_id": request_id,
        "time": state.clock(),
        "model": None,
        "status": None,
        "block_uids": [],
        "stop_reason": None,
        "usage": None,
        "faults": [],
    }
    state.stats.log.append(entry)
    try:
        message, extra = await _answer(state, headers, raw, entry)
    except ApiError as error:
        entry["status"] = error.status
        if error.fault and error.fault not in entry["faults"]:
            entry["faults"].append(error.fault)
            state.stats.count_faults([error.fault])
        raise
    entry["status"] = 200
    return message, extra


async def _answer(
    state: SimState, headers: Mapping[str, str], raw: bytes, entry: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    check_headers(state, headers)
    body = parse_json(raw)
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        entry["model"] = body["model"]
    engine, scenario = state.engine, state.scenario
    prepared = engine.prepare(body, context=ApiContext.from_headers(headers))
    entry["block_uids"] = [block.uid for block in prepared.prompt.blocks]
    dice = engine.dice_for(body)
    limiter = state.limiter
    reservation = limiter.admit(engine.peek_uncached_tokens(prepared), body["max_tokens"])
    output_tokens = 0
    try:
        errors = scenario.errors
        if errors.outage_status is not None:
            status = errors.outage_status
            raise ApiError(
                "overloaded_error" if status == 529 else "api_error",
                "Overloaded" if status == 529 else "Service unavailable",
                fault="outage",
                status=status,
            )
        refuse_by_scenario(errors, dice, limiter, reservation)  # sim-a hook
        if dice.chance(errors.rate_timeout, "timeout"):
            # A real hang, whatever the speed factor: the client's own timeout must fire.
            entry["status"] = 529
            entry["faults"].append("timeout")
            state.stats.count_faults(["timeout"])
            await asyncio.sleep(errors.timeout_s)
            raise ApiError("overloaded_error", "Overloaded")
        if dice.chance(errors.rate_429, "rate_429"):
            # A 429 admits nothing, so the request gives back all it took.
            limiter.cancel(reservation)
            raise limiter.injected(errors.retry_after_s)
        if dice.chance(errors.rate_529, "rate_529"):
            raise ApiError("overloaded_error", "Overloaded", fault="rate_529")
        if dice.chance(errors.rate_500, "rate_500"):
            raise ApiError("api_error", "Internal server error", fault="rate_500")

        outcome = engine.answer(prepared, dice)
        output_tokens = outcome.output_tokens
        stats = state.stats
        stats.count_usage(outcome.usage)
        stats.count_cache(eligible=outcome.cache.eligible, read=outcome.cache.read)
        stats.count_faults(outcome.faults)
        if outcome.quality is not None:
            stats.count_quality(
                outcome.quality.pack_size, outcome.quality.checked, outcome.quality.model
            )
        stats.stop_reasons[outcome.stop_reason] += 1
        entry.update(stop_reason=outcome.stop_reason, usage=outcome.usage)
        entry["faults"].extend(outcome.faults)

        latency_ms = scenario.latency.ttft_ms + scenario.latency.per_output_token_ms * output_tokens
        delay = latency_ms * scenario.speed_factor / 1000
        if delay > 0:
            await state.sleep(delay)
        await state.pass_gate()
    finally:
        # The output reservation is held while the answer is generated, as the API holds
        # ``max_tokens`` until the end of a request; a failure produced no output.
        limiter.settle(reservation, output_tokens)
    return outcome.message, limiter.headers()
