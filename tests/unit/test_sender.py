"""The one sender: token counts and Message Batches calls answered, typed and keyless.

The anthropic SDK over an in-memory transport: what a provider plugging into
``blockbatch.send.sender.Sender`` has to match.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx2
from anthropic import AsyncAnthropic

from blockbatch.send.sender import AnthropicSender, NotSent

KEY = "sk-ant-secret-never-shown"
BATCH = {
    "id": "msgbatch_1",
    "type": "message_batch",
    "processing_status": "ended",
    "request_counts": {"processing": 0, "succeeded": 2, "errored": 1, "canceled": 0, "expired": 0},
    "created_at": "2026-11-28T10:00:00Z",
    "expires_at": "2026-11-29T10:00:00Z",
    "ended_at": "2026-11-28T10:05:00Z",
    "cancel_initiated_at": None,
    "archived_at": None,
    "results_url": "http://claude.test/v1/messages/batches/msgbatch_1/results",
}


def _sender(handle: Callable[[httpx2.Request], httpx2.Response]) -> AnthropicSender:
    return AnthropicSender(
        AsyncAnthropic(
            api_key=KEY,
            base_url="http://claude.test",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handle)),
        )
    )


def _error(status: int, error_type: str, message: str) -> httpx2.Response:
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return httpx2.Response(status, json=body, headers={"request-id": "req_e"})


def test_a_token_count_comes_back_with_its_headers() -> None:
    def handle(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages/count_tokens"
        return httpx2.Response(
            200, json={"input_tokens": 42}, headers={"x-blockbatch-simulator": "1"}
        )

    counted = asyncio.run(
        _sender(handle).count_tokens(
            {"model": "claude-haiku-5-5", "messages": [{"role": "user", "content": "hi"}]}
        )
    )
    assert counted.input_tokens == 42 and counted.headers["x-blockbatch-simulator"] == "1"


def test_a_refused_token_count_is_typed_and_never_shows_the_key() -> None:
    sender = _sender(lambda _: _error(401, "authentication_error", "invalid x-api-key"))

    async def count() -> NotSent:
        try:
            await sender.count_tokens({"model": "claude-haiku-5-5", "messages": []})
        except NotSent as failed:
            return failed
        raise AssertionError("the count was refused")

    failed = asyncio.run(count())
    assert failed.answered and failed.error.status == 401 and failed.error.code == "key_rejected"
    assert failed.request_id == "req_e"
    assert KEY not in f"{failed} {failed.error!r} {failed.ledger_message} {failed.headers}"


def test_the_batch_calls_answer_in_one_shape_whoever_serves_them() -> None:
    lines = [
        {
            "custom_id": "a",
            "result": {
                "type": "errored",
                "error": {"type": "error", "error": {"type": "api_error", "message": "x"}},
            },
        },
        {"custom_id": "b", "result": {"type": "expired"}},
    ]
    seen: list[tuple[str, str]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        seen.append((request.method, request.url.path))
        if request.url.path.endswith("/results"):
            body = "\n".join(json.dumps(line) for line in lines)
            return httpx2.Response(200, content=body.encode())
        if request.method == "GET" and request.url.path == "/v1/messages/batches":
            return httpx2.Response(200, json={"data": [BATCH], "has_more": False})
        return httpx2.Response(200, json=BATCH)

    sender = _sender(handle)

    async def calls() -> tuple[Any, ...]:
        created = await sender.create_batch(
            [{"custom_id": "a", "params": {"model": "claude-haiku-5-5", "max_tokens": 5}}]
        )
        looked = await sender.batch("msgbatch_1")
        cancelled = await sender.cancel_batch("msgbatch_1")
        listed = [b async for b in sender.batches()]
        results = [r async for r in sender.batch_results("msgbatch_1")]
        return created, looked, cancelled, listed, results

    created, looked, cancelled, listed, results = asyncio.run(calls())
    for batch in (created, looked, cancelled, *listed):
        assert batch.id == "msgbatch_1" and batch.status == "ended"
        assert batch.requests == 3 and batch.counts.errored == 1
        assert batch.ended_at is not None
    assert [(custom_id, r["type"]) for custom_id, r in results] == [
        ("a", "errored"),
        ("b", "expired"),
    ]
    assert ("POST", "/v1/messages/batches/msgbatch_1/cancel") in seen


def test_a_batch_call_without_an_answer_says_so() -> None:
    def handle(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    async def look() -> NotSent:
        try:
            await _sender(handle).batch("msgbatch_1")
        except NotSent as failed:
            return failed
        raise AssertionError("nothing answered")

    failed = asyncio.run(look())
    assert not failed.answered and failed.error.kind == "retryable"
    assert failed.ledger_type == "APIConnectionError"
