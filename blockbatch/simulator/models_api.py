"""The models the simulator serves, and the Models API (``GET /v1/models[/{id}]``).

One place decides which models exist and what they can do: the registry
(:mod:`blockbatch.core.registry`, contract §1) with the scenario's ``models`` over it, so a test can
change a model's facts (a smaller ``max_tokens``, no structured outputs) or add a model the
registry does not know, and both ``/v1/models`` and ``/v1/messages`` follow. The answer has
the shape of SDK 2.14's ``anthropic.types.ModelInfo`` (contract §1, "Check at run time").

A model is retired (404 ``not_found_error`` ``model: <id>`` on every endpoint, the Models
API included; contract §1, "Not in the table") when ``blockbatch.core.registry.retired_model`` names it or
its ``end_of_life`` is on or before the scenario's ``today``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

from blockbatch.core.registry import (
    MODELS,
    ModelInfo,
    UnknownModelError,
    configured_model,
    get_model,
    retired_model,
)
from blockbatch.simulator.errors import ApiError
from blockbatch.simulator.scenario import ModelFacts, Scenario

#: The lines of SDK 2.14's ``ModelLine``.
_LINES = ("haiku", "sonnet", "opus", "fable", "mythos")
_EPOCH = "1970-01-01T00:00:00Z"


@dataclass(frozen=True)
class ServedModel:
    """A model as the simulator serves it: the registry's facts plus the API-only ones."""

    info: ModelInfo
    display_name: str
    #: The model takes Message Batches (``capabilities.batch``).
    batch: bool = True


def today_of(scenario: Scenario) -> dt.date:
    """The simulator's today: the scenario's, else the real UTC date."""
    return scenario.today or dt.datetime.now(dt.UTC).date()


def not_found(name: str) -> ApiError:
    return ApiError("not_found_error", f"model: {name}")


def resolve(name: str, scenario: Scenario) -> ServedModel:
    """The model ``name`` (id or alias) names, with the scenario's facts over the registry's.

    Raises:
        ApiError: 404 ``not_found_error`` for an unknown or retired model.
    """
    if retired_model(name) is not None:
        raise not_found(name)
    facts = scenario.models.get(name)
    try:
        base: ModelInfo | None = get_model(name)
    except UnknownModelError:
        base = None
    if base is not None and facts is None:
        # An alias may carry the scenario's facts under the canonical id.
        facts = scenario.models.get(base.id)
    if facts is None and base is None:
        raise not_found(name)
    served = _apply(name, base, facts or ModelFacts())
    if served.info.retired(today_of(scenario)):
        raise not_found(name)
    return served


def _apply(name: str, base: ModelInfo | None, facts: ModelFacts) -> ServedModel:
    if facts.based_on is not None:  # a known model: the scenario checks it
        base = replace(get_model(facts.based_on), id=name, aliases=())
    if base is None:
        base = configured_model(name, {"input": 1.0, "output": 5.0}, {})
    changes: dict[str, Any] = {}
    if facts.max_input_tokens is not None:
        changes["context_window"] = facts.max_input_tokens
    if facts.max_tokens is not None:
        changes["max_output_tokens"] = facts.max_tokens
        changes["batch_max_output_tokens"] = None
    for field in (
        "structured_outputs",
        "forced_tool",
        "prefill",
        "default_effort",
        "end_of_life",
        "released",
    ):
        value = getattr(facts, field)
        if value is not None:
            changes[field] = value
    if facts.thinking_types is not None:
        changes["thinking_types"] = frozenset(facts.thinking_types)
    info = replace(base, **changes) if changes else base
    return ServedModel(
        info=info,
        display_name=facts.display_name or _display_name(info.id),
        batch=facts.batch if facts.batch is not None else True,
    )


def _display_name(model_id: str) -> str:
    """``claude-haiku-5-5`` → ``Claude Haiku 5.5``; ``claude-sonnet-5`` → ``Claude Sonnet 5``."""
    words = [w for w in model_id.split("-") if not (w.isdigit() and len(w) == 8)]
    name = [w.capitalize() for w in words if not w.isdigit()]
    version = ".".join(w for w in words if w.isdigit())
    return " ".join(name + ([version] if version else []))


def _served_ids(scenario: Scenario) -> list[str]:
    ids = [m.id for m in MODELS]
    return ids + [
        name for name in scenario.models if name not in ids and retired_model(name) is None
    ]


def _timestamp(day: dt.date | None) -> str | None:
    return f"{day.isoformat()}T00:00:00Z" if day is not None else None


def _support(flag: bool) -> dict[str, bool]:
    return {"supported": flag}


def model_info(served: ServedModel) -> dict[str, Any]:
    """The ``ModelInfo`` JSON (SDK 2.14 ``types/model_info.py``, ``model_capabilities.py``).

    Capabilities the simulator has no data for (citations, images, PDFs, server tools,
    context management) are given as the API gives them for the current lineup; the
    simulator enforces only the ones the registry holds.
    """
    info = served.info
    word = info.id.split("-")[1] if info.id.count("-") >= 1 else ""
    effort = info.default_effort is not None
    types = info.thinking_types
    deprecated = info.status == "deprecated" or info.end_of_life is not None
    return {
        "type": "model",
        "id": info.id,
        "display_name": served.display_name,
        "created_at": _timestamp(info.released) or _EPOCH,
        "lifecycle": "deprecated" if deprecated else "active",
        # The registry holds no deprecation day; the field is optional in the SDK.
        "deprecated_at": None,
        "retires_at": _timestamp(info.end_of_life),
        "line": word if word in _LINES else None,
        "max_input_tokens": info.context_window,
        "max_tokens": info.max_output_tokens,
        "capabilities": {
            "batch": _support(served.batch),
            "citations": _support(True),
            "code_execution": _support(False),
            "context_management": {
                "supported": False,
                "clear_thinking_20251015": None,
                "clear_tool_uses_20250919": None,
                "compact_20260112": None,
            },
            "effort": {
                "supported": effort,
                "low": _support(effort),
                "medium": _support(effort),
                "high": _support(effort),
                "xhigh": _support(effort),
                "max": _support(effort),
            },
            "image_input": _support(True),
            "pdf_input": _support(True),
            "server_tools": {
                "supported": False,
                "code_execution": _support(False),
                "web_search": _support(False),
            },
            "structured_outputs": _support(info.structured_outputs),
            "thinking": {
                "supported": bool(types - {"disabled"}),
                "types": {
                    name: _support(name in types)
                    for name in ("adaptive", "between_tools", "disabled", "enabled")
                },
            },
        },
    }


def retrieve(name: str, scenario: Scenario) -> dict[str, Any]:
    """``GET /v1/models/{id}``.

    Raises:
        ApiError: 404 for an unknown or retired model.
    """
    return model_info(resolve(name, scenario))


def list_page(
    scenario: Scenario, *, limit: int, after_id: str | None, before_id: str | None
) -> dict[str, Any]:
    """``GET /v1/models``: served models, newest release first, paged like the API
    (``data``, ``has_more``, ``first_id``, ``last_id``)."""
    served: list[ServedModel] = []
    for model_id in _served_ids(scenario):
        try:
            served.append(resolve(model_id, scenario))
        except ApiError:
            continue  # retired
    served.sort(key=lambda s: s.info.released or dt.date.min, reverse=True)
    ids = [s.info.id for s in served]
    if after_id is not None:
        start = ids.index(after_id) + 1 if after_id in ids else len(ids)
        page, has_more = served[start : start + limit], start + limit < len(ids)
    elif before_id is not None:
        end = ids.index(before_id) if before_id in ids else 0
        page, has_more = served[max(0, end - limit) : end], end - limit > 0
    else:
        page, has_more = served[:limit], len(ids) > limit
    data = [model_info(s) for s in page]
    return {
        "data": data,
        "has_more": has_more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }
