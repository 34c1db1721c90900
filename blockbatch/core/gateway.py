"""Claude through an OpenAI-compatible gateway (OpenRouter and the like): the wire, both ways.

blockbatch builds every call as a Messages request (``blockbatch/core/prompt.py``) and reads
every answer as a Message; a gateway speaks OpenAI's chat completions. This module turns
one into the other and back, so the rest of the call path (ledger, parsing, halving,
costs) is the same on every provider. Sources: ``docs/platforms-checked.md`` §5 (OpenRouter's
API reference, prompt-caching guide, usage-accounting and errors pages):

| Messages request | chat completions request |
|---|---|
| ``model`` | the gateway's id (``anthropic/claude-haiku-5.5``, :func:`~blockbatch.core.providers.gateway_id`) |
| ``system`` text blocks, ``cache_control`` on the last | one ``system`` message whose ``content`` is text parts, ``cache_control`` kept on its part (the prompt-caching guide: Anthropic caching is opt-in per content part) |
| ``messages`` (text) | ``messages``, text parts (``cache_control`` kept) |
| ``tools`` (``name``, ``description``, ``input_schema``) | ``tools``: ``{"type": "function", "function": {"name", "description", "parameters"}}`` |
| ``tool_choice`` ``tool`` / ``auto`` | ``{"type": "function", "function": {"name"}}`` / ``"auto"``; ``parallel_tool_calls: false`` for ``disable_parallel_tool_use`` |
| ``output_config.format`` (json_schema) | ``response_format: {"type": "json_schema", "json_schema": {"name", "strict": true, "schema"}}`` |
| ``max_tokens`` | ``max_tokens`` |
| ``thinking: disabled``, ``output_config.effort`` | not sent: the gateway drops ``reasoning`` when a tool is forced (§1, pydantic-ai#6916), and no thinking is what blockbatch asks for |

| chat completion | Message |
|---|---|
| ``choices[0].message.tool_calls[i]`` (``arguments`` a JSON string) | ``tool_use`` blocks |
| ``choices[0].message.content`` | a ``text`` block |
| ``finish_reason`` ``tool_calls`` / ``stop`` / ``length`` / ``content_filter`` | ``stop_reason`` ``tool_use`` / ``end_turn`` / ``max_tokens`` / ``refusal`` |
| ``usage.prompt_tokens`` (all prompt tokens), ``prompt_tokens_details.cached_tokens`` (read), ``.cache_write_tokens`` (written) | ``input_tokens`` (the rest), ``cache_read_input_tokens``, ``cache_creation_input_tokens`` |
| ``usage.completion_tokens`` | ``output_tokens`` |
| ``usage.cost`` (credits: US dollars) | the call's cost as the gateway reports it (:func:`reported_cost_usd`) |

The gateway's own usage and ids are kept on the Message under :data:`GATEWAY_KEY`, so the
ledger holds what the gateway said. An error comes as ``{"error": {"code", "message",
"metadata"?}}``, with the HTTP status of ``code``, or with status 200 when the model failed
while answering (the errors page): :func:`error_of` classifies both.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from blockbatch.core.claude_errors import ClaudeError, classify
from blockbatch.core.registry import ModelInfo, Usage, cost_usd

#: Where a translated Message keeps what the gateway said (its id, model, usage and cost).
GATEWAY_KEY = "gateway"

#: ``finish_reason`` to ``stop_reason``.
_STOP_REASONS = {
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
}
#: The Messages API's error type for each gateway status (the errors page's codes).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "api_error",
    503: "overloaded_error",
}


class GatewayShapeError(ValueError):
    """A Messages request that has no chat-completions form (an image block, say)."""


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    """Text parts of a Messages ``content`` (a string or text blocks), ``cache_control``
    kept on each part that has it."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts = []
    for block in content:
        if block.get("type") != "text":
            raise GatewayShapeError(
                f"{where}: a {block.get('type')!r} block has no chat-completions form here; "
                "only text is sent through the gateway"
            )
        part: dict[str, Any] = {"type": "text", "text": block["text"]}
        if block.get("cache_control"):
            part["cache_control"] = dict(block["cache_control"])
        parts.append(part)
    return parts


def chat_request(request: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The chat completions body of a Messages ``request``, for the gateway's ``model``.

    Raises:
        GatewayShapeError: the request holds something the gateway is not sent (the
            message says what).
    """
    messages: list[dict[str, Any]] = []
    system = request.get("system")
    if system:
        messages.append({"role": "system", "content": _parts(system, "system")})
    for i, message in enumerate(request["messages"]):
        role = message["role"]
        if role not in ("user", "assistant"):
            raise GatewayShapeError(f"messages[{i}]: role {role!r} is not sent to the gateway")
        messages.append({"role": role, "content": _parts(message["content"], f"messages[{i}]")})
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": request["max_tokens"],
    }
    tools = request.get("tools")
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "parameters": tool["input_schema"],
                },
            }
            for tool in tools
        ]
    choice = request.get("tool_choice")
    if choice:
        if choice["type"] == "tool":
            body["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        else:
            body["tool_choice"] = "auto" if choice["type"] == "auto" else choice["type"]
        if choice.get("disable_parallel_tool_use"):
            body["parallel_tool_calls"] = False
    output_format = (request.get("output_config") or {}).get("format")
    if output_format:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "results", "strict": True, "schema": output_format["schema"]},
        }
    return body


def _arguments(raw: Any) -> Any:
    """A tool call's ``arguments`` (a JSON string) as JSON; text that does not parse is
    kept as a string, and parsing the answer then says it is not a valid tool payload."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def message_of(completion: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The Message a chat ``completion`` stands for, asked of the registry's ``model``.

    Raises:
        GatewayShapeError: the completion has no choice.
    """
    choices = completion.get("choices") or []
    if not choices:
        raise GatewayShapeError("the gateway's answer has no choices")
    choice = choices[0]
    answer = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    text = answer.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    for call in answer.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_gw_{len(content)}",
                "name": function.get("name", ""),
                "input": _arguments(function.get("arguments")),
            }
        )
    usage = completion.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    read = int(details.get("cached_tokens") or 0)
    written = int(details.get("cache_write_tokens") or 0)
    prompt = int(usage.get("prompt_tokens") or 0)
    finish = choice.get("finish_reason")
    return {
        "id": completion.get("id", ""),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP_REASONS.get(finish, "end_turn") if finish else None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": max(prompt - read - written, 0),
            "output_tokens": int(usage.get("completion_tokens") or 0),
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        },
        GATEWAY_KEY: {
            "id": completion.get("id"),
            "model": completion.get("model"),
            "provider": completion.get("provider"),
            "finish_reason": finish,
            "usage": dict(usage),
        },
    }


def reported_cost_usd(message: Mapping[str, Any]) -> float | None:
    """The cost the gateway reported for a Message of :func:`message_of` (``None``: not a
    gateway's answer, or it reported none)."""
    gateway = message.get(GATEWAY_KEY)
    if not isinstance(gateway, Mapping):
        return None
    cost = (gateway.get("usage") or {}).get("cost")
    return float(cost) if isinstance(cost, int | float) else None


def answer_cost_usd(model: ModelInfo, message: Mapping[str, Any]) -> float:
    """What one answer cost: the gateway's own figure when it reported one (what it
    charged, whatever its upstream's prices), else ``model``'s prices of its usage."""
    reported = reported_cost_usd(message)
    if reported is not None:
        return reported
    return cost_usd(model, Usage.from_message(dict(message)))


def answer_error(body: Any) -> Mapping[str, Any] | None:
    """The ``error`` object of a gateway's answer, when it is one (an answer with status 200
    may be an error raised while the model answered: the errors page)."""
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        return body["error"]
    return None


def error_of(
    status: int,
    error: Mapping[str, Any] | None,
    *,
    retry_after: str | None = None,
    model: str | None = None,
) -> ClaudeError:
    """Classify a gateway's error answer as a Claude error of the same meaning.

    ``status``: the HTTP status, or for an error in a 200 answer its ``error.code``. The
    gateway's codes: 400 bad request, 401 key, 402 credits (not retried), 403 input flagged
    by moderation (a rejected request, not a rejected key), 408 timeout, 429 rate limited,
    502 model down or bad upstream answer, 503 no provider (the errors page); each other
    than 403 is given the Messages API's error type of that meaning and classified by
    :func:`~blockbatch.core.claude_errors.classify`.
    """
    error = error or {}
    code = error.get("code")
    if status == 200 and isinstance(code, int):
        status = code
    elif status == 200:
        status = 502  # an error mid-answer without a code: the upstream failed
    message = str(error.get("message") or f"the gateway answered HTTP {status}")
    if status == 403:
        # The gateway's 403 is this request's input flagged by moderation or a guardrail
        # (the errors page: "your input was flagged"), not the key: the pack is halved and
        # a single block fails with the reason, as for any rejected request.
        reasons = (error.get("metadata") or {}).get("reasons")
        if isinstance(reasons, list) and reasons:
            message = f"{message} ({', '.join(map(str, reasons))})"
        return ClaudeError(
            kind="rejected", status=403, error_type="moderation_flagged", message=message
        )
    error_type = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return classify(status, error_type, message, retry_after=retry_after, model=model)
