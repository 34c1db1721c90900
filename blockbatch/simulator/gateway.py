"""An OpenAI-compatible gateway's chat completions (OpenRouter's shape), answered by the
same simulated model.

``POST /v1/chat/completions`` takes a request as a gateway client sends it, turns it into
the Messages request the gateway would send Anthropic, answers it through
``blockbatch/simulator/messages.py`` and gives the answer back in the gateway's shape.
Point a gateway client's base URL at ``http://127.0.0.1:<port>/v1``. Sources, cited per
rule below as "checked §5" (``docs/platforms-checked.md`` §5, from OpenRouter's API
reference, prompt-caching guide, usage-accounting and errors pages):

- ``Authorization: Bearer <key>`` is required (checked §5, "Chat Completions"); its presence
  is checked here, the key itself as the Messages API checks one (a scenario's keys).
- ``model`` is the gateway's id, ``anthropic/claude-haiku-5.5`` (checked §5; the registry's
  rule, ``blockbatch.core.providers.resolve_model``); an unknown id is a 400.
- Messages: a ``system`` message becomes the system prompt and ``user``/``assistant``
  messages the conversation; content is a string or text parts, and a part's
  ``cache_control`` reaches Anthropic unchanged (checked §5, "Anthropic caching needs
  explicit cache_control ... on individual content block objects").
- ``tools`` (``type: function``) become Anthropic tools, ``tool_choice`` a forced or auto
  tool, ``parallel_tool_calls: false`` ``disable_parallel_tool_use``; a forced tool is sent
  with thinking off, as the gateway drops ``reasoning`` when ``tool_choice`` is forced
  (checked §1, pydantic-ai#6916). ``response_format`` ``json_schema`` becomes
  ``output_config.format``.
- The answer: ``choices[0].message`` with ``content`` and ``tool_calls`` (``arguments`` a
  JSON string), ``finish_reason``; ``usage`` with ``prompt_tokens`` (every prompt token,
  cached ones included), ``prompt_tokens_details.cached_tokens`` (read) and
  ``.cache_write_tokens`` (written), ``completion_tokens``, ``total_tokens`` and ``cost`` in
  credits (US dollars), at the registry's prices (checked §5, "Usage/cost reporting").
- Errors: ``{"error": {"code", "message", "metadata"?}}`` with the HTTP status of ``code``
  (checked §5, "Error shape"): 400, 401, 402, 403, 408, 429 (with ``Retry-After``), 502 for
  a model that is down or failed (the Messages API's 5xx and 529), 503 when no provider can
  serve the request. No ``anthropic-ratelimit-*`` headers (their names on the gateway are
  unconfirmed, checked §5).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from blockbatch.core.providers import resolve_model
from blockbatch.core.registry import UnknownModelError, Usage, cost_usd, get_model
from blockbatch.simulator import messages
from blockbatch.simulator.bodies import MESSAGES_MAX_BYTES, read_body
from blockbatch.simulator.errors import ApiError, invalid
from blockbatch.simulator.state import state_of

RequestId = Callable[[web.Request], str]

#: The gateway's status for a Messages API status (checked §5, "Error shape": 502 "model
#: down or invalid upstream response"; 413's prompt-too-long is a 400 there).
_STATUS = {413: 400, 500: 502, 504: 408, 529: 502}
#: ``stop_reason`` to ``finish_reason``.
_FINISH = {
    "tool_use": "tool_calls",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    body = {"error": {"code": status, "message": message}}
    return web.json_response(body, status=status, headers=dict(headers or {}))


def _blocks(content: Any, where: str) -> str | list[dict[str, Any]]:
    """Text parts as Messages text blocks (``cache_control`` kept)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"{where}: content must be a string or an array of parts")
    blocks = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            raise invalid(f"{where}: only text parts are served here")
        block: dict[str, Any] = {"type": "text", "text": str(part.get("text", ""))}
        if isinstance(part.get("cache_control"), dict):
            block["cache_control"] = part["cache_control"]
        blocks.append(block)
    return blocks


def messages_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Messages request the gateway sends Anthropic for a chat completions ``body``.

    Raises:
        ApiError: a request the gateway refuses (400).
    """
    name = body.get("model")
    if not isinstance(name, str):
        raise invalid("model: required")
    try:
        model = resolve_model("gateway", name)[0].id
    except UnknownModelError as err:
        raise invalid(f"{name} is not a valid model ID ({err})") from None
    chat = body.get("messages")
    if not isinstance(chat, list) or not chat:
        raise invalid("messages: a non-empty array is required")
    system: list[dict[str, Any]] = []
    conversation: list[dict[str, Any]] = []
    for i, message in enumerate(chat):
        role = message.get("role") if isinstance(message, dict) else None
        content = _blocks(message.get("content"), f"messages[{i}]") if role else None
        if role == "system":
            system.extend(
                [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            )
        elif role in ("user", "assistant"):
            conversation.append({"role": role, "content": content})
        else:
            raise invalid(f"messages[{i}].role: {role!r} is not served here")
    request: dict[str, Any] = {"model": model, "messages": conversation}
    if "max_tokens" in body:
        request["max_tokens"] = body["max_tokens"]
    if system:
        request["system"] = system
    tools = body.get("tools") or []
    if tools:
        request["tools"] = [
            {
                "name": tool["function"]["name"],
                "description": tool["function"].get("description", ""),
                "input_schema": tool["function"].get("parameters") or {"type": "object"},
            }
            for tool in tools
        ]
    choice = body.get("tool_choice")
    no_parallel = body.get("parallel_tool_calls") is False
    if isinstance(choice, dict):
        request["tool_choice"] = {"type": "tool", "name": choice["function"]["name"]}
        # The gateway drops reasoning when a tool is forced (checked §1).
        request["thinking"] = {"type": "disabled"}
    elif choice in ("auto", "none", "required"):
        request["tool_choice"] = {"type": {"required": "any"}.get(choice, choice)}
    if no_parallel and "tool_choice" in request:
        request["tool_choice"]["disable_parallel_tool_use"] = True
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        request["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return request


def completion_of(message: Mapping[str, Any], gateway_model: str) -> dict[str, Any]:
    """A Message in the gateway's chat completion shape, ``usage.cost`` included."""
    text = "".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
        }
        for b in message["content"]
        if b.get("type") == "tool_use"
    ]
    usage = Usage.from_message(dict(message))
    prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    cost = cost_usd(get_model(message["model"]), usage)
    answer: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        answer["tool_calls"] = calls
    return {
        "id": f"gen-{message['id']}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": gateway_model,
        "provider": "Anthropic",
        "choices": [
            {
                "index": 0,
                "message": answer,
                "finish_reason": _FINISH.get(message.get("stop_reason") or "", "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": usage.output_tokens,
            "total_tokens": prompt + usage.output_tokens,
            "prompt_tokens_details": {
                "cached_tokens": usage.cache_read_input_tokens,
                "cache_write_tokens": usage.cache_creation_input_tokens,
            },
            "completion_tokens_details": {"reasoning_tokens": usage.thinking_tokens},
            "cost": round(cost, 10),
            "cost_details": {"upstream_inference_cost": round(cost, 10)},
        },
    }


def chat_completions(request_id: RequestId) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _error(401, "No auth credentials found")
        try:
            raw = await read_body(request, MESSAGES_MAX_BYTES)
            body = messages.parse_json(raw)
            if not isinstance(body, dict):
                raise invalid("the request body must be a JSON object")
            if body.get("stream") is True:
                raise invalid("stream: streaming is not simulated on the gateway")
            upstream = messages_request(body)
            headers = {"anthropic-version": "2026-10-21", "authorization": f"Bearer {token}"}
            message, _ = await messages.create_message(
                state_of(request), headers, json.dumps(upstream).encode(), request_id(request)
            )
        except ApiError as error:
            status = _STATUS.get(error.status, error.status)
            extra = {k: v for k, v in error.headers.items() if k.lower() == "retry-after"}
            return _error(status, error.message, extra)
        return web.json_response(completion_of(message, str(body["model"])))

    return handle


def add_gateway_routes(app: web.Application, request_id: RequestId) -> None:
    """The gateway's chat completions route (module docstring)."""
    app.router.add_post("/v1/chat/completions", chat_completions(request_id))
