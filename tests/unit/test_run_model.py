"""A run's model at run time (blockbatch/core/run_model.py, blockbatch/runtime/models_api.py): the Models API's
facts over the registry, configured prices for a model the registry does not price, and
retired models refused with the model to move to (contract §1, "Check at run time")."""

from __future__ import annotations

from datetime import date
from typing import Any

import httpx2 as httpx
import pytest

from blockbatch.core.registry import RetiredModelError, UnknownModelError, get_model
from blockbatch.core.run_model import check_usable, run_model
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import SchemaError, load_schema
from blockbatch.runtime.models_api import ModelFacts
from blockbatch.send.sdk import anthropic

TODAY = date(2026, 11, 25)

#: ``GET /v1/models/claude-haiku-5-5`` as the SDK's ModelInfo dumps it (trimmed).
HAIKU_FACTS: dict[str, Any] = {
    "id": "claude-haiku-5-5",
    "type": "model",
    "display_name": "Claude Haiku 5.5",
    "created_at": "2026-10-07T00:00:00Z",
    "lifecycle": "active",
    "max_input_tokens": 500_000,
    "max_tokens": 64_000,
    "capabilities": {
        "structured_outputs": {"supported": False},
        "thinking": {
            "supported": True,
            "types": {
                "adaptive": {"supported": True},
                "disabled": {"supported": True},
                "between_tools": {"supported": False},
                "enabled": {"supported": False},
            },
        },
    },
}


def test_the_apis_facts_override_the_registry() -> None:
    model = run_model("claude-haiku-5-5", HAIKU_FACTS)
    registry = get_model("claude-haiku-5-5")
    assert (model.context_window, model.max_output_tokens) == (500_000, 64_000)
    assert registry.context_window == 1_000_000
    assert not model.structured_outputs
    assert model.thinking_types == frozenset({"adaptive", "disabled"})
    # Prices never come from the API.
    assert (model.price_input, model.price_output) == (registry.price_input, registry.price_output)
    assert model.priced
    # No facts: the registry stands.
    assert run_model("claude-haiku-5-5", None) == registry


def test_a_model_the_registry_does_not_price_runs_on_configured_prices() -> None:
    facts = {
        "id": "claude-haiku-6",
        "lifecycle": "active",
        "max_input_tokens": 400_000,
        "max_tokens": 32_000,
    }
    model = run_model("claude-haiku-6", facts, {"claude-haiku-6": {"input": 0.2, "output": 1.0}})
    assert not model.priced
    assert (model.price_input, model.price_output, model.price_cache_read) == pytest.approx(
        (0.2, 1.0, 0.02)
    )
    assert model.context_window == 400_000
    # Its quote says where its prices came from.
    from blockbatch.core.quote import quote, quote_context
    from blockbatch.core.quote_tokens import PromptTokens
    from tests.helpers import extract_schema

    ctx = quote_context(RunOptions(model=model.id), load_schema(extract_schema(200)), model)
    q = quote(
        ctx,
        [100] * 10,
        PromptTokens(source="planner", prefix=500, per_call=0, blocks=1_400, warm_up=600),
        document="d.md",
    )
    assert any("priced from configuration" in n for n in q.notes)
    # Without prices, or without the API describing it, it does not run, and says why.
    with pytest.raises(UnknownModelError, match="BLOCKBATCH_MODEL_PRICES has no prices"):
        run_model("claude-haiku-6", facts, {})
    with pytest.raises(UnknownModelError, match="Models API does not describe it") as caught:
        run_model("claude-haiku-6", None, {"claude-haiku-6": {"input": 0.2, "output": 1.0}})
    # Pricing it would not help: nothing describes it.
    assert "BLOCKBATCH_MODEL_PRICES" not in str(caught.value)


def test_a_misspelt_model_is_answered_with_the_name_meant() -> None:
    with pytest.raises(UnknownModelError) as caught:
        run_model("claude-sonet-5-5")
    message = str(caught.value)
    assert "did you mean claude-sonnet-5-5?" in message
    assert "BLOCKBATCH_MODEL_PRICES" not in message
    with pytest.raises(UnknownModelError, match="did you mean claude-haiku-5-5"):
        get_model("claude-haiku5-5")
    # Nothing near: no guess.
    with pytest.raises(UnknownModelError) as far:
        get_model("gpt-4o")
    assert "did you mean" not in str(far.value)


@pytest.mark.parametrize(
    ("name", "day", "replacement"),
    [
        ("claude-3-5-sonnet-20241022", "2025-10-22", "claude-sonnet-5-5"),
        ("claude-3-5-sonnet-latest", "2025-10-22", "claude-sonnet-5-5"),
        ("claude-3-7-sonnet-20250219", "2026-02-19", "claude-sonnet-5-5"),
        ("claude-3-7-sonnet-latest", "2026-02-19", "claude-sonnet-5-5"),
        ("claude-3-5-haiku-20241022", "2026-02-19", "claude-haiku-5-5"),
        ("claude-3-opus-20240229", "2026-01-05", "claude-opus-5-5"),
        ("claude-3-sonnet-20240229", "2025-07-21", "claude-sonnet-5-5"),
        ("claude-sonnet-4-20250514", "2026-06-15", "claude-sonnet-5-5"),
        ("claude-sonnet-4-0", "2026-06-15", "claude-sonnet-5-5"),
        ("claude-opus-4-0", "2026-06-15", "claude-opus-5-5"),
        ("claude-opus-4-1-20250805", "2026-08-05", "claude-opus-5-5"),
    ],
)
def test_every_retired_claude_id_is_refused_with_its_day_and_replacement(
    name: str, day: str, replacement: str
) -> None:
    with pytest.raises(RetiredModelError) as caught:
        run_model(name)
    assert str(caught.value).startswith(f"{name} was retired on {day}: ")
    assert f"use {replacement}" in str(caught.value)


def test_a_retired_family_id_without_a_known_day_is_still_refused_as_retired() -> None:
    # Claude 3 Haiku: retired, but no day the contract or the deprecations page gives us.
    for name in ("claude-3-haiku-20240307", "claude-3-haiku-latest", "claude-instant-1.2"):
        with pytest.raises(RetiredModelError, match=r"was retired: the API no longer serves it"):
            run_model(name)
    with pytest.raises(RetiredModelError, match="use claude-haiku-5-5"):
        run_model("claude-3-haiku-20240307")
    # The served 4.x models are not caught by the families' prefixes.
    for served in (
        "claude-opus-4-5-20251101",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
        "claude-opus-4-8",
    ):
        assert run_model(served).id.startswith(served[: len("claude-opus-4")])


def test_a_retired_model_is_refused_with_the_model_to_move_to() -> None:
    with pytest.raises(RetiredModelError, match="claude-opus-5-5"):
        run_model("claude-opus-4-1")
    # Past its end-of-life in the registry.
    sonnet45 = get_model("claude-sonnet-4-5")
    check_usable(sonnet45, None, TODAY)  # retires 2026-11-30: still served
    with pytest.raises(RetiredModelError, match="claude-sonnet-5-5"):
        check_usable(sonnet45, None, date(2026, 12, 1))
    # The Models API says so: its lifecycle, or a retires_at that has passed.
    with pytest.raises(RetiredModelError, match=r"retired on 2026-11-20 .*claude-haiku-5-5"):
        check_usable(
            run_model("claude-haiku-4-5"),
            {"lifecycle": "retired", "retires_at": "2026-11-20T00:00:00Z"},
            TODAY,
        )
    gone = run_model(
        "claude-haiku-4-5", {"lifecycle": "deprecated", "retires_at": "2026-11-01T00:00:00Z"}
    )
    with pytest.raises(RetiredModelError, match="claude-haiku-5-5"):
        check_usable(gone, {"lifecycle": "deprecated"}, TODAY)


def test_a_schema_naming_a_retired_model_is_refused_with_its_replacement() -> None:
    with pytest.raises(SchemaError, match=r"claude-opus-4-1 was retired.*use claude-opus-5-5"):
        load_schema(
            {
                "properties": {"a": {"type": "string"}},
                "prompt_config": {"system_instructions": "x", "model": "claude-opus-4-1"},
            }
        )


class _FakeModels:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def retrieve(self, model_id: str, **_: Any) -> Any:
        self.asked.append(model_id)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class _FakeClient:
    def __init__(self, answer: Any) -> None:
        self.models = _FakeModels(answer)


def _status_error(status: int) -> Exception:
    request = httpx.Request("GET", "https://api.example/v1/models/x")
    response = httpx.Response(
        status,
        request=request,
        json={"type": "error", "error": {"type": "not_found_error", "message": "no"}},
    )
    return anthropic.APIStatusError("no", response=response, body=response.json())


async def test_the_models_api_answer_is_read_through_the_sdk() -> None:
    # The SDK builds its answers leniently (construct), as it does from the wire.
    info = anthropic.types.ModelInfo.construct(**HAIKU_FACTS)
    reader = ModelFacts(_FakeClient(info))  # type: ignore[arg-type]  # stands in for the SDK client
    facts = await reader.fetch("claude-haiku-5-5")
    assert facts is not None
    assert facts["max_input_tokens"] == 500_000 and facts["lifecycle"] == "active"
    assert run_model("claude-haiku-5-5", facts).context_window == 500_000


@pytest.mark.parametrize("failure", [404, 405, 500, "connection"])
async def test_an_api_without_the_endpoint_leaves_the_registry(failure: int | str) -> None:
    error = (
        anthropic.APIConnectionError(request=httpx.Request("GET", "https://x"))
        if failure == "connection"
        else _status_error(int(failure))
    )
    reader = ModelFacts(_FakeClient(error))  # type: ignore[arg-type]  # stands in for the SDK client
    assert await reader.fetch("claude-haiku-5-5") is None
