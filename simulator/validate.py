"""Request validation with the real API's error types and messages.

The checks run in the API's order: authentication, the ``anthropic-version`` header,
the body's shape, the model, then limits that need the model (max_tokens, context window).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from core.registry import ModelInfo, UnknownModelError, get_model
from simulator.errors import ApiError, invalid
from simulator.scenario import Auth

MAX_CACHE_BREAKPOINTS = 4
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def check_auth(headers: Mapping[str, str], auth: Auth) -> None:
    """Accept ``x-api-key: KEY`` or ``Authorization: Bearer KEY``; never echo the key."""
    key = headers.get("x-api-key", "").strip()
    if not key:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
    if not key:
        raise ApiError("authentication_error", "x-api-key header is required")
    if key in auth.forbidden_keys:
        raise ApiError(
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
        )
    if auth.valid_keys is not None and key not in auth.valid_keys:
        raise ApiError("authentication_error", "invalid x-api-key")


def check_version(headers: Mapping[str, str]) -> None:
    """The ``anthropic-version`` header is required on every API call."""
    if not headers.get("anthropic-version"):
        raise invalid("anthropic-version: header is required")


def validate_body(body: Any, *, count_only: bool = False) -> ModelInfo:
    """Check a Messages request body; return the model's registry entry.

    Args:
        body: the parsed JSON body.
        count_only: for ``/v1/messages/count_tokens`` (no ``max_tokens``).

    Raises:
        ApiError: 400 invalid_request_error, or 404 not_found_error for an unknown model.
    """
    if not isinstance(body, dict):
        raise invalid("Input should be a valid dictionary")
    required = ("model", "messages") if count_only else ("model", "max_tokens", "messages")
    for name in required:
        if name not in body:
            raise invalid(f"{name}: Field required")
    if not isinstance(body["model"], str):
        raise invalid("model: Input should be a valid string")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise invalid("stream: Input should be a valid boolean")
    if not count_only:
        max_tokens = body["max_tokens"]
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise invalid("max_tokens: Input should be a valid integer")
        if max_tokens < 0:
            raise invalid("max_tokens: Input should be greater than or equal to 0")
    _check_messages(body["messages"])
    _check_system(body.get("system"))
    tool_names = _check_tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"), tool_names)
    _check_cache_controls(body)
    temperature = body.get("temperature")
    if temperature is not None and not (
        isinstance(temperature, int | float) and 0 <= temperature <= 1
    ):
        raise invalid("temperature: Input should be less than or equal to 1")
    try:
        model = get_model(body["model"])
    except UnknownModelError:
        raise ApiError("not_found_error", f"model: {body['model']}") from None
    if not count_only and body["max_tokens"] > model.max_output_tokens:
        raise invalid(
            f"max_tokens: {body['max_tokens']} > {model.max_output_tokens}, which is the "
            f"maximum allowed number of output tokens for {body['model']}"
        )
    return model


def check_context_window(total_tokens: int, model: ModelInfo) -> None:
    """The prompt must fit the model's context window."""
    if total_tokens > model.context_window:
        raise invalid(f"prompt is too long: {total_tokens} tokens > {model.context_window} maximum")


def _check_content(content: Any, where: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise invalid(f"{where}: Input should be a valid list")
    for index, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise invalid(f"{where}.{index}: Input should be a valid content block")
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                raise invalid(f"{where}.{index}.text: Field required")
            if not part["text"]:
                raise invalid(f"{where}: text content blocks must be non-empty")


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        raise invalid("messages: Input should be a valid list")
    if not messages:
        raise invalid("messages: at least one message is required")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid(f"messages.{index}: Input should be a valid dictionary")
        if message.get("role") not in ("user", "assistant"):
            raise invalid(f"messages.{index}.role: Input should be 'user' or 'assistant'")
        if "content" not in message:
            raise invalid(f"messages.{index}.content: Field required")
        _check_content(message["content"], f"messages.{index}.content")
    if messages[0]["role"] != "user":
        raise invalid('messages: first message must use the "user" role')


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    _check_content(system, "system")
    for index, part in enumerate(system):
        if part["type"] != "text":
            raise invalid(f"system.{index}.type: Input should be 'text'")


def _check_tools(tools: Any) -> set[str]:
    if tools is None:
        return set()
    if not isinstance(tools, list):
        raise invalid("tools: Input should be a valid list")
    names: set[str] = set()
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise invalid(f"tools.{index}: Input should be a valid dictionary")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise invalid(
                f"tools.{index}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
            )
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise invalid(f"tools.{index}.input_schema: Field required")
        if schema.get("type") != "object":
            raise invalid(f"tools.{index}.input_schema.type: Input should be 'object'")
        if name in names:
            raise invalid("tools: Tool names must be unique.")
        names.add(name)
    return names


def _check_tool_choice(choice: Any, tool_names: set[str]) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise invalid("tool_choice: Input tag does not match any of 'auto', 'any', 'tool', 'none'")
    if choice["type"] in ("any", "tool") and not tool_names:
        raise invalid("tool_choice: tool_choice may only be specified while providing tools.")
    if choice["type"] == "tool":
        name = choice.get("name")
        if not isinstance(name, str):
            raise invalid("tool_choice.tool.name: Field required")
        if name not in tool_names:
            raise invalid(f"tool_choice: Tool '{name}' not found in provided tools")


def _cache_controlled_parts(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    parts: list[tuple[str, dict[str, Any]]] = []
    parts += [(f"tools.{i}", t) for i, t in enumerate(body.get("tools") or [])]
    system = body.get("system")
    if isinstance(system, list):
        parts += [(f"system.{i}", p) for i, p in enumerate(system)]
    for i, message in enumerate(body["messages"]):
        if isinstance(message["content"], list):
            parts += [(f"messages.{i}.content.{j}", p) for j, p in enumerate(message["content"])]
    return [(where, p) for where, p in parts if "cache_control" in p]


def _check_cache_controls(body: dict[str, Any]) -> None:
    parts = _cache_controlled_parts(body)
    if len(parts) > MAX_CACHE_BREAKPOINTS:
        raise invalid(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(parts)}."
        )
    seen_5m = False
    for where, part in parts:
        control = part["cache_control"]
        if not isinstance(control, dict) or control.get("type") != "ephemeral":
            raise invalid(f"{where}.cache_control.type: Input should be 'ephemeral'")
        ttl = control.get("ttl", "5m")
        if ttl not in ("5m", "1h"):
            raise invalid(f"{where}.cache_control.ttl: Input should be '5m' or '1h'")
        if ttl == "1h" and seen_5m:
            raise invalid(
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
            )
        seen_5m = seen_5m or ttl == "5m"
