"""Request validation with the real API's error types and messages.

The checks run in the API's order: authentication, the ``anthropic-version`` header,
the body's shape (including what the API version removed), the model (404 for an unknown
or retired one), then what the model allows (contract §0–§5): sampling parameters,
prefill, forced ``tool_choice``, ``thinking``, ``output_config`` and structured-output
schemas, ``max_tokens`` and the context window.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blockbatch.core.registry import EFFORTS, ModelInfo
from blockbatch.simulator.errors import ApiError, invalid
from blockbatch.simulator.models_api import resolve
from blockbatch.simulator.scenario import Auth, Scenario
from blockbatch.simulator.strict_schema import check_strict_schemas

MAX_CACHE_BREAKPOINTS = 4
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
#: The version SDK 2.x sends (contract §4); the one before it.
CURRENT_VERSION = "2026-10-21"
LEGACY_VERSION = "2023-06-01"
SAMPLING = ("temperature", "top_p", "top_k")
#: The beta that lets the deprecated ``output_format`` through (contract §2).
OUTPUT_FORMAT_BETA = "structured-outputs-2025-11-13"
THINKING_TYPES = ("adaptive", "between_tools", "disabled", "enabled")
MIN_BUDGET_TOKENS = 1024


@dataclass(frozen=True)
class ApiContext:
    """What a request's headers (or its batch's) say about how to read its body.

    Attributes:
        version: ``anthropic-version``; a batch request keeps the one of the batch's
            creation (contract §4, "Where it applies").
        betas: the ``anthropic-beta`` values.
        batch: the request is one of a Message Batch (``max_tokens: 0`` is refused there,
            contract §5).
    """

    version: str = CURRENT_VERSION
    betas: frozenset[str] = frozenset()
    batch: bool = False

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], *, batch: bool = False) -> ApiContext:
        betas = frozenset(
            b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()
        )
        return cls(
            version=headers.get("anthropic-version") or CURRENT_VERSION, betas=betas, batch=batch
        )

    @property
    def breaking_2026_10_21(self) -> bool:
        """The breaking changes of 2026-10-21 apply (this version or a later one, §4)."""
        return self.version >= CURRENT_VERSION


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


def validate_body(
    body: Any,
    *,
    count_only: bool = False,
    scenario: Scenario | None = None,
    context: ApiContext | None = None,
) -> ModelInfo:
    """Check a Messages request body; return the model's entry (the scenario's facts over
    the registry's, :func:`blockbatch.simulator.models_api.resolve`).

    Args:
        body: the parsed JSON body.
        count_only: for ``/v1/messages/count_tokens`` (no ``max_tokens``).
        scenario: the models and today the simulator serves (default: a plain scenario).
        context: the API version, betas and whether the request is part of a batch.

    Raises:
        ApiError: 400 invalid_request_error, or 404 not_found_error for an unknown or
            retired model.
    """
    scenario = scenario or Scenario()
    context = context or ApiContext()
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
    check_sampling_shape(body, context)
    _check_messages(body["messages"], context)
    _check_system(body.get("system"))
    tool_names = _check_tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"), tool_names)
    _check_cache_controls(body)
    thinking = _check_thinking_shape(body.get("thinking"))
    effort, schema = _check_output_config(body, context)
    model = resolve(body["model"], scenario).info
    _check_sampling_for_model(body, model, context)
    if body["messages"][-1]["role"] == "assistant" and not model.prefill:
        # Contract §4 (model-dependent at any version): no prefill on 4.6+ and 5.x.
        raise invalid(
            "This model does not support assistant message prefill. The "
            "conversation must end with a user message."
        )
    choice = body.get("tool_choice")
    forced = isinstance(choice, dict) and choice.get("type") in ("tool", "any")
    if forced and not model.forced_tool:
        raise invalid('tool_choice: type "tool" and "any" are not supported for this model')
    _check_thinking_for_model(thinking, effort, model, body, count_only)
    if effort is not None and model.default_effort is None:
        raise invalid("output_config.effort: effort is not supported for this model")
    strict = [
        (f"tools.{i}.input_schema", t["input_schema"])
        for i, t in enumerate(body.get("tools") or [])
        if t.get("strict") is True
    ]
    if (schema is not None or strict) and not model.structured_outputs:
        where = "output_config.format" if schema is not None else "tools.strict"
        raise invalid(f"{where}: structured outputs are not supported for this model")
    check_strict_schemas(
        strict + ([("output_config.format.schema", schema)] if schema is not None else [])
    )
    if not count_only:
        _check_max_tokens(body, model, context, thinking, schema, forced)
    return model


def check_sampling_shape(body: dict[str, Any], context: ApiContext) -> None:
    """Under 2026-10-21, ``temperature``, ``top_p`` and ``top_k`` are removed: any of them
    is a 400, even at its default value (contract §0 rule 1, §4; api_findings.md §1 for
    the message). Under 2023-06-01 they are checked for range here and per model later."""
    for name in SAMPLING:
        if name not in body:
            continue
        if context.breaking_2026_10_21:
            raise invalid(f"{name}: Extra inputs are not permitted")
        value = body[name]
        if name == "top_k":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise invalid("top_k: Input should be greater than or equal to 0")
        elif not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
            raise invalid(f"{name}: Input should be less than or equal to 1")


def _pins_sampling(model: ModelInfo) -> bool:
    """Whether a 2023-06-01 request may carry only default sampling: Sonnet 5/5.5, Haiku 5.5
    and Opus 4.7+ (contract §4, "Pinning 2023-06-01"), exactly the models of the new
    tokenizer (contract §0 rule 8: "the 5.x models and the 4.7+ models")."""
    return model.tokenizer == "new"


def _check_sampling_for_model(body: dict[str, Any], model: ModelInfo, context: ApiContext) -> None:
    sent = [name for name in SAMPLING if name in body]
    if context.breaking_2026_10_21 or not sent or not _pins_sampling(model):
        return
    if model.id == "claude-haiku-5-5":
        # Haiku 5.5 takes temperature=1 or top_p=0.99, never both (contract §4).
        allowed = {"temperature": 1, "top_p": 0.99}
        if len(sent) > 1 or body[sent[0]] != allowed.get(sent[0]):
            raise invalid(
                f"{sent[0]}: only temperature=1 or top_p=0.99 (not both) are "
                "supported for this model"
            )
        return
    for name in sent:
        if not (name == "temperature" and body[name] == 1):
            raise invalid(f"{name}: Extra inputs are not permitted")


def _check_thinking_shape(thinking: Any) -> dict[str, Any] | None:
    """The ``thinking`` union of SDK 2.14 (contract §3): each type's own fields only."""
    if thinking is None:
        return None
    if not isinstance(thinking, dict) or thinking.get("type") not in THINKING_TYPES:
        raise invalid(
            "thinking: Input tag does not match any of 'adaptive', "
            "'between_tools', 'disabled', 'enabled'"
        )
    kind = thinking["type"]
    allowed = {
        "adaptive": {"display"},
        "enabled": {"budget_tokens", "display"},
        "disabled": set(),
        "between_tools": set(),
    }[kind]
    for name in thinking:
        if name != "type" and name not in allowed:
            raise invalid(f"thinking.{kind}.{name}: Extra inputs are not permitted")
    if "display" in thinking and thinking["display"] not in ("summarized", "omitted"):
        raise invalid(f"thinking.{kind}.display: Input should be 'summarized' or 'omitted'")
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool):
            raise invalid("thinking.enabled.budget_tokens: Field required")
        if budget < MIN_BUDGET_TOKENS:
            raise invalid(
                "thinking.enabled.budget_tokens: Input should be greater than or "
                f"equal to {MIN_BUDGET_TOKENS}"
            )
    return thinking


def _check_thinking_for_model(
    thinking: dict[str, Any] | None,
    effort: str | None,
    model: ModelInfo,
    body: dict[str, Any],
    count_only: bool,
) -> None:
    if thinking is None:
        return
    kind = thinking["type"]
    if kind not in model.thinking_types:
        # Opus 5.5's wording (api_findings.md §5).
        raise invalid(
            f'"thinking.type.{kind}" is not supported for this model. Use '
            '"thinking.type.adaptive" and "output_config.effort" to control '
            "thinking behavior."
        )
    if kind in ("disabled", "between_tools") and effort in ("xhigh", "max"):
        raise invalid(
            f'output_config.effort: "{effort}" is not supported with '
            f'thinking.type "{kind}"; use effort "high" or lower'
        )
    if kind == "enabled" and not count_only and thinking["budget_tokens"] >= body["max_tokens"]:
        raise invalid("max_tokens: must be greater than thinking.budget_tokens")


def _check_output_config(
    body: dict[str, Any], context: ApiContext
) -> tuple[str | None, dict[str, Any] | None]:
    """``output_config`` (contract §2, §3): its effort and its format's schema, if any.
    The deprecated ``output_format`` needs its beta (contract §2) and is read as a format."""
    effort: str | None = None
    schema: dict[str, Any] | None = None
    if "output_format" in body:
        if OUTPUT_FORMAT_BETA not in context.betas:
            raise invalid(
                f"output_format: Extra inputs are not permitted (the deprecated "
                f"output_format needs the {OUTPUT_FORMAT_BETA} beta; use "
                "output_config.format)"
            )
        schema = _format_schema(body["output_format"], "output_format")
    config = body.get("output_config")
    if config is None:
        return effort, schema
    if not isinstance(config, dict):
        raise invalid("output_config: Input should be a valid dictionary")
    for name in config:
        if name not in ("effort", "format"):
            raise invalid(f"output_config.{name}: Extra inputs are not permitted")
    if "effort" in config:
        if config["effort"] not in EFFORTS:
            raise invalid(
                "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
            )
        effort = config["effort"]
    if config.get("format") is not None:
        schema = _format_schema(config["format"], "output_config.format")
    return effort, schema


def _format_schema(fmt: Any, where: str) -> dict[str, Any]:
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise invalid(f"{where}.type: Input should be 'json_schema'")
    if not isinstance(fmt.get("schema"), dict):
        raise invalid(f"{where}.schema: Field required")
    return fmt["schema"]


def _check_max_tokens(
    body: dict[str, Any],
    model: ModelInfo,
    context: ApiContext,
    thinking: dict[str, Any] | None,
    schema: dict[str, Any] | None,
    forced: bool,
) -> None:
    max_tokens = body["max_tokens"]
    if max_tokens > model.max_output_tokens:
        raise invalid(
            f"max_tokens: {max_tokens} > {model.max_output_tokens}, which is the "
            f"maximum allowed number of output tokens for {body['model']}"
        )
    if max_tokens != 0:
        return
    # max_tokens: 0 pre-warms the cache, but not with these (contract §5).
    conflicts = [
        ("in a Message Batch", context.batch),
        ("with stream", body.get("stream") is True),
        ('with thinking.type "enabled"', thinking is not None and thinking["type"] == "enabled"),
        ("with output_config.format", schema is not None),
        ('with tool_choice "tool" or "any"', forced),
    ]
    for what, present in conflicts:
        if present:
            raise invalid(f"max_tokens: 0 is not supported {what}")


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


def _check_messages(messages: Any, context: ApiContext) -> None:
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
        if context.breaking_2026_10_21 and isinstance(message["content"], list):
            _check_turn_blocks(message["role"], message["content"], f"messages.{index}.content")
    if messages[0]["role"] != "user":
        raise invalid('messages: first message must use the "user" role')


def _check_turn_blocks(role: str, content: list[Any], where: str) -> None:
    """2026-10-21: no ``document`` block directly in an assistant turn, no ``text`` block
    with citations in a user turn (contract §4, breaking changes 2 and 3)."""
    for index, part in enumerate(content):
        if role == "assistant" and part["type"] == "document":
            raise invalid(
                f"{where}.{index}: document blocks are not permitted in assistant messages"
            )
        if role == "user" and part["type"] == "text" and part.get("citations"):
            raise invalid(
                f"{where}.{index}.citations: text blocks with citations are not "
                "permitted in user messages"
            )


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
        if "strict" in tool and not isinstance(tool["strict"], bool):
            raise invalid(f"tools.{index}.strict: Input should be a valid boolean")
        if name in names:
            raise invalid("tools: Tool names must be unique.")
        names.add(name)
    return names


def _check_tool_choice(choice: Any, tool_names: set[str]) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise invalid("tool_choice: Input tag does not match any of 'auto', 'any', 'tool', 'none'")
    parallel = choice.get("disable_parallel_tool_use")
    if parallel is not None and not isinstance(parallel, bool):
        raise invalid(
            f"tool_choice.{choice['type']}.disable_parallel_tool_use: Input should "
            "be a valid boolean"
        )
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
