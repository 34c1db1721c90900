"""The model registry: limits and prices of the Claude models blockbatch knows.

One table, used by pack planning (context window, max output), by cost accounting
(prices) and by the simulator (limits it enforces like the real API).
Prices are USD per million tokens, from Anthropic's public price list.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class ModelInfo:
    """Limits and prices of one model."""

    id: str
    aliases: tuple[str, ...]
    context_window: int
    max_output_tokens: int
    price_input: float
    price_output: float
    price_cache_write_5m: float
    price_cache_write_1h: float
    price_cache_read: float
    min_cacheable_tokens: int
    #: The day the API stops serving the model (Anthropic's deprecation list), if announced.
    end_of_life: date | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


MODELS: tuple[ModelInfo, ...] = (
    # Sonnet 4.6 (released 2026-02-17): Sonnet 4.5's prices, a 1M-token context window and
    # 128K of output (platform.claude.com's model page). The prompt-cache minimum is the
    # documented 1,024 tokens; anthropic-sdk-python#1194 reports 2,048 observed.
    # Sonnet 5 is cheaper ($2/$10) but answers 400 to a non-default temperature, which our
    # schemas may set, and counts with a new tokenizer: not the default until both are handled.
    ModelInfo(
        id="claude-sonnet-4-6",
        aliases=(),
        context_window=1_000_000,
        max_output_tokens=128_000,
        price_input=3.0,
        price_output=15.0,
        price_cache_write_5m=3.75,
        price_cache_write_1h=6.0,
        price_cache_read=0.30,
        min_cacheable_tokens=1024,
    ),
    ModelInfo(
        id="claude-sonnet-4-5",
        aliases=("claude-sonnet-4-5-20250929",),
        context_window=200_000,
        max_output_tokens=64_000,
        price_input=3.0,
        price_output=15.0,
        price_cache_write_5m=3.75,
        price_cache_write_1h=6.0,
        price_cache_read=0.30,
        min_cacheable_tokens=1024,
        end_of_life=date(2026, 11, 30),
    ),
    ModelInfo(
        id="claude-haiku-4-5",
        aliases=("claude-haiku-4-5-20251001",),
        context_window=200_000,
        max_output_tokens=64_000,
        price_input=1.0,
        price_output=5.0,
        price_cache_write_5m=1.25,
        price_cache_write_1h=2.0,
        price_cache_read=0.10,
        min_cacheable_tokens=4096,
    ),
    ModelInfo(
        id="claude-opus-4-5",
        aliases=("claude-opus-4-5-20251101",),
        context_window=200_000,
        max_output_tokens=64_000,
        price_input=5.0,
        price_output=25.0,
        price_cache_write_5m=6.25,
        price_cache_write_1h=10.0,
        price_cache_read=0.50,
        min_cacheable_tokens=4096,
    ),
    ModelInfo(
        id="claude-opus-4-1",
        aliases=("claude-opus-4-1-20250805",),
        context_window=200_000,
        max_output_tokens=32_000,
        price_input=15.0,
        price_output=75.0,
        price_cache_write_5m=18.75,
        price_cache_write_1h=30.0,
        price_cache_read=1.50,
        min_cacheable_tokens=1024,
    ),
)

DEFAULT_MODEL = "claude-sonnet-4-6"

#: Message Batches API price as a fraction of the standard price.
BATCH_DISCOUNT = 0.5

_BY_NAME: dict[str, ModelInfo] = {name: m for m in MODELS for name in m.names}


class UnknownModelError(ValueError):
    """A model name that is not in the registry."""


def known_model_names() -> list[str]:
    return sorted(_BY_NAME)


def get_model(name: str) -> ModelInfo:
    """Return the registry entry for ``name`` (id or dated alias).

    Raises:
        UnknownModelError: with the list of known names, so the user can fix the schema.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}; known models: {', '.join(m.id for m in MODELS)}"
        ) from None


def retirement_warning(model: ModelInfo, today: date) -> str | None:
    """What to tell a user who starts a run on a model that is retiring (``None``: not)."""
    if model.end_of_life is None:
        return None
    days = (model.end_of_life - today).days
    if days > 90:
        return None
    when = (f"reached end-of-life on {model.end_of_life}" if days < 0
            else f"reaches end-of-life on {model.end_of_life} (in {days} days)")
    return (f"{model.id} {when}: the API will refuse it; set prompt_config.model in the "
            f"schema or --model to {DEFAULT_MODEL}")


class Usage(BaseModel):
    """Token usage of one or more calls, by kind, as the API reports it."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    #: Of cache_creation_input_tokens, how many were written with the 1-hour TTL.
    cache_creation_1h_tokens: int = 0

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Usage:
        """The usage of an API answer (a Message as JSON)."""
        u = message.get("usage") or {}
        creation = u.get("cache_creation") or {}
        return cls(
            input_tokens=u.get("input_tokens") or 0,
            output_tokens=u.get("output_tokens") or 0,
            cache_creation_input_tokens=u.get("cache_creation_input_tokens") or 0,
            cache_read_input_tokens=u.get("cache_read_input_tokens") or 0,
            cache_creation_1h_tokens=creation.get("ephemeral_1h_input_tokens") or 0,
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_1h_tokens=self.cache_creation_1h_tokens + other.cache_creation_1h_tokens,
        )


def cost_usd(model: ModelInfo, usage: Usage, *, batch: bool = False) -> float:
    """Cost of ``usage`` at ``model``'s prices; Message Batches are half price."""
    write_5m = usage.cache_creation_input_tokens - usage.cache_creation_1h_tokens
    total = (
        usage.input_tokens * model.price_input
        + usage.output_tokens * model.price_output
        + write_5m * model.price_cache_write_5m
        + usage.cache_creation_1h_tokens * model.price_cache_write_1h
        + usage.cache_read_input_tokens * model.price_cache_read
    ) / 1_000_000
    return total * (BATCH_DISCOUNT if batch else 1.0)
