"""A Message as the Server-Sent Events of a streamed answer (``stream: true``).

Contract §8 "Long calls": the SDK refuses non-streaming requests expected to run past
10 minutes, so long answers are streamed. The events are the API's: ``message_start``
(the Message with empty content, no stop reason, the input side of the usage), a
``ping``, then per content block ``content_block_start`` / ``content_block_delta``
(``thinking_delta`` and ``signature_delta``, ``text_delta``, ``input_json_delta``) /
``content_block_stop``, then ``message_delta`` (stop reason, ``stop_details`` and the
final usage) and ``message_stop``. Accumulated by the SDK (``messages.stream(...)
.get_final_message()``) they give the same Message as the non-streaming answer.

The events are written together once the answer's latency has passed (the time to the
last token); pacing between events is not simulated.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from aiohttp import web

#: Characters per text or JSON delta: small enough that a block spans several deltas.
DELTA_CHARS = 64


def stream_events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs that stream ``message``."""
    usage = message["usage"]
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens_details"}
    start_usage["output_tokens"] = 0
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "stop_details": None,
        "usage": start_usage,
    }
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message["content"]):
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": _empty(block)},
        )
        for delta in _deltas(block):
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    final_usage = {
        k: usage[k]
        for k in (
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "output_tokens",
            "output_tokens_details",
        )
        if k in usage
    }
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": message["stop_reason"],
                "stop_sequence": message["stop_sequence"],
                "stop_details": message.get("stop_details"),
            },
            "usage": final_usage,
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _empty(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    if block["type"] == "text":
        return {"type": "text", "text": ""}
    if block["type"] == "tool_use":
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
    return block


def _chunks(text: str) -> Iterator[str]:
    for start in range(0, len(text), DELTA_CHARS):
        yield text[start : start + DELTA_CHARS]


def _deltas(block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if block["type"] == "thinking":
        for piece in _chunks(block["thinking"]):
            yield {"type": "thinking_delta", "thinking": piece}
        yield {"type": "signature_delta", "signature": block["signature"]}
    elif block["type"] == "text":
        for piece in _chunks(block["text"]):
            yield {"type": "text_delta", "text": piece}
    elif block["type"] == "tool_use":
        for piece in _chunks(json.dumps(block["input"], ensure_ascii=False)):
            yield {"type": "input_json_delta", "partial_json": piece}


async def send_stream(
    request: web.Request, message: dict[str, Any], headers: dict[str, str]
) -> web.StreamResponse:
    """Write ``message`` to ``request``'s client as an event stream."""
    response = web.StreamResponse(
        status=200,
        headers={**headers, "content-type": "text/event-stream", "cache-control": "no-cache"},
    )
    await response.prepare(request)
    for event, data in stream_events(message):
        payload = json.dumps(data, ensure_ascii=False)
        await response.write(f"event: {event}\ndata: {payload}\n\n".encode())
    await response.write_eof()
    return response
