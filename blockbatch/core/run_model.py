"""A run's model: the registry's entry with what the Models API says taking over.

Pure rules over ``blockbatch.core.registry``; the facts are read at run time (``blockbatch/runtime/models_api.py``
fetches ``GET /v1/models/{id}``, ``blockbatch/store/model_facts.py`` keeps them) and the prices of a
model the registry does not price come from configuration (``BLOCKBATCH_MODEL_PRICES``).
Contract: ``../shared/reference/claude-api-2026-11.md`` §1, "Check at run time".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from blockbatch.core.registry import (
    DEFAULT_MODEL,
    ModelInfo,
    RetiredModelError,
    UnknownModelError,
    check_not_retired,
    configured_model,
    did_you_mean,
    get_model,
    known_models_text,
    with_api_facts,
)

#: Facts read from the Models API longer ago than this are read again before they are used.
FACTS_MAX_AGE_S = 24 * 3600


def run_model(
    name: str,
    facts: Mapping[str, Any] | None = None,
    prices: Mapping[str, Mapping[str, float]] | None = None,
) -> ModelInfo:
    """The model a run of ``name`` uses.

    The registry's entry with the Models API's ``facts`` taking over where there are any
    (``blockbatch.core.registry.with_api_facts``); a model the registry does not know runs when the
    API describes it (``facts``) and configuration prices it (``prices[name]``): then
    ``ModelInfo.priced`` is False, and the run says so.

    Raises:
        RetiredModelError: a model the API no longer serves (the registry's ``RETIRED``).
        UnknownModelError: unknown to the registry, and not both described by the API and
            priced in configuration (the message says what is missing).
        ValueError: configured prices without ``input`` and ``output``.
    """
    try:
        model = get_model(name)
    except RetiredModelError:
        raise
    except UnknownModelError:
        priced = (prices or {}).get(name)
        if facts and priced is not None:
            return configured_model(name, dict(priced), dict(facts))
        if not facts:
            # Nothing describes it: most likely a typo, or a model of another provider.
            raise UnknownModelError(
                f"unknown model {name!r}{did_you_mean(name)}: the Models API does not "
                f"describe it; {known_models_text()}"
            ) from None
        raise UnknownModelError(
            f"model {name!r} is described by the Models API but blockbatch has no prices "
            f"for it: BLOCKBATCH_MODEL_PRICES has no prices for it; give them there, e.g. "
            f'{{"{name}": {{"input": 1.0, "output": 5.0}}}} (USD per million tokens); '
            f"{known_models_text()}"
        ) from None
    return with_api_facts(model, dict(facts)) if facts else model


def check_usable(model: ModelInfo, facts: Mapping[str, Any] | None, today: date) -> None:
    """Refuse a model that is retired before any call, naming the model to move to: the
    API says ``lifecycle: "retired"`` or a ``retires_at`` that has passed, or the
    registry's end-of-life day has come.

    Raises:
        RetiredModelError: the model is retired.
    """
    if facts and facts.get("lifecycle") == "retired":
        replacement = model.replacement or DEFAULT_MODEL
        when = _day(facts.get("retires_at"))
        on = f" on {when}" if when else ""
        raise RetiredModelError(
            f"{model.id} was retired{on} (the Models API says so): the API no longer serves "
            f"it; use {replacement} (set prompt_config.model in the schema, or --model)"
        )
    check_not_retired(model, today)


def _day(value: Any) -> date | None:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, str) and value:
        try:
            return date.fromisoformat(value[:10])
        except ValueError:
            return None
    return None


def model_json(model: ModelInfo) -> dict[str, Any]:
    """``model`` as JSON, to be kept with a run (``runs.models``) and read back by
    :func:`model_from_json` exactly."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(model):
        value = getattr(model, f.name)
        if isinstance(value, frozenset):
            value = sorted(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, date):
            value = value.isoformat()
        out[f.name] = value
    return out


def model_from_json(data: Mapping[str, Any]) -> ModelInfo:
    """The :class:`ModelInfo` :func:`model_json` wrote (fields it lacks keep their
    defaults; fields this version does not know are left out).

    Raises:
        TypeError: a field the model needs is missing.
    """
    names = {f.name for f in dataclasses.fields(ModelInfo)}
    values = {k: v for k, v in data.items() if k in names}
    values["aliases"] = tuple(values.get("aliases") or ())
    if "thinking_types" in values:
        values["thinking_types"] = frozenset(values["thinking_types"])
    for day in ("released", "end_of_life"):
        if isinstance(values.get(day), str):
            values[day] = date.fromisoformat(values[day])
    return ModelInfo(**values)
