"""The model registry: what blockbatch knows of each Claude model, as data.

One table of the models the Claude API serves today (the current lineup and the legacy
models still served), used by pack planning (context window, max output, the price-tier
line, the tokenizer), by cost accounting (prices, with Haiku 5.5's long-prompt tier), by
the request builder (the answer channel, thinking and effort a model takes) and by the
simulator (which enforces the same rules). Every figure is from the contract page,
``../shared/reference/claude-api-2026-11.md`` §1 (prices §1 and §5, thinking §3).

At run start the Models API (``GET /v1/models/{id}``) is read where it answers
(``blockbatch/runtime/models_api.py``); what it says of limits, capabilities and retirement overrides
this table (:func:`with_api_facts`). Prices never come from the API: a model the API
describes but this table does not price runs only with prices given in configuration.

Prices are USD per million tokens.
"""

from __future__ import annotations

import contextlib
import difflib
import math
from dataclasses import dataclass, replace
from datetime import date
from typing import Any, Literal, TypedDict

from pydantic import BaseModel

#: How a model thinks when a request says nothing: ``off``; ``adaptive`` (on by default,
#: the model decides how much); ``always`` (cannot be turned off).
ThinkingDefault = Literal["off", "adaptive", "always"]
#: How a request turns thinking off on a model that thinks by default (contract §3):
#: ``disabled`` (``thinking: {"type": "disabled"}``, at effort high or below),
#: ``between_tools`` (Sonnet 5.5: no thinking in a reply without tool calls, at effort
#: high or below), ``None``: it cannot (Opus 5.5, Fable).
ThinkingOff = Literal["disabled", "between_tools"]
Effort = Literal["low", "medium", "high", "xhigh", "max"]
EFFORTS: tuple[Effort, ...] = ("low", "medium", "high", "xhigh", "max")
#: Effort levels at which a model's thinking can be turned off (contract §3: ``xhigh`` and
#: ``max`` with ``disabled`` or ``between_tools`` are a 400).
EFFORTS_THINKING_OFF: tuple[Effort, ...] = ("low", "medium", "high")
#: The tokenizer generation: the 5.x and 4.7+ models count about 30% more tokens for the
#: same text (contract §0 rule 8).
Tokenizer = Literal["old", "new"]
TOKENIZER_SCALE: dict[str, float] = {"old": 1.0, "new": 1.3}


@dataclass(frozen=True)
class ModelInfo:
    """Limits, prices and capabilities of one model."""

    id: str
    aliases: tuple[str, ...]
    #: ``active`` (the current lineup), ``legacy`` (still served, superseded) or
    #: ``deprecated`` (a retirement date is announced).
    status: Literal["active", "legacy", "deprecated"]
    context_window: int
    max_output_tokens: int
    price_input: float
    price_output: float
    price_cache_write_5m: float
    price_cache_write_1h: float
    price_cache_read: float
    min_cacheable_tokens: int
    tokenizer: Tokenizer = "old"
    #: Output tokens a Message Batches request may ask for (the ``output-300k`` beta).
    batch_max_output_tokens: int | None = None
    #: A request whose prompt (input, cache writes and reads) is over this many tokens
    #: pays every line at ``long_prompt_multiplier`` (Haiku 5.5: 100,000 and 5x).
    long_prompt_threshold: int | None = None
    long_prompt_multiplier: float = 1.0
    thinking_default: ThinkingDefault = "off"
    #: How thinking is turned off where it is on by default (``None``: it cannot be).
    thinking_off: ThinkingOff | None = None
    #: The ``thinking.type`` values a request may carry on this model.
    thinking_types: frozenset[str] = frozenset({"disabled"})
    #: The effort the model uses when a request names none; ``None``: no effort parameter.
    default_effort: Effort | None = None
    #: ``tool_choice`` of type ``tool`` / ``any`` (a forced tool) is accepted.
    forced_tool: bool = True
    #: A forced tool answers without thinking (Haiku 5.5, contract §3).
    forced_tool_skips_thinking: bool = False
    #: Structured outputs (``output_config.format``, ``strict`` tools).
    structured_outputs: bool = True
    #: An assistant prefill is accepted (only the models before 4.6).
    prefill: bool = False
    released: date | None = None
    #: The day the API stops serving the model, if announced.
    end_of_life: date | None = None
    #: The model to move to when this one retires.
    replacement: str | None = None
    #: Whether this entry's prices come from this table (``False``: from configuration).
    priced: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)

    @property
    def tokenizer_scale(self) -> float:
        """Tokens this model counts per token of the old tokenizer, for the same text."""
        return TOKENIZER_SCALE[self.tokenizer]

    @property
    def thinks_by_default(self) -> bool:
        return self.thinking_default != "off"

    def retired(self, today: date) -> bool:
        return self.end_of_life is not None and self.end_of_life <= today


MODELS: tuple[ModelInfo, ...] = (
    # The current lineup (contract §1). Haiku 5.5 is priced by prompt length: at most
    # 100,000 prompt tokens, $0.10 / $0.50; above, 5x on every line.
    ModelInfo(
        id="claude-haiku-5-5",
        aliases=(),
        status="active",
        context_window=1_000_000,
        max_output_tokens=128_000,
        batch_max_output_tokens=300_000,
        price_input=0.10,
        price_output=0.50,
        price_cache_write_5m=0.125,
        price_cache_write_1h=0.20,
        price_cache_read=0.01,
        min_cacheable_tokens=512,
        tokenizer="new",
        long_prompt_threshold=100_000,
        long_prompt_multiplier=5.0,
        thinking_default="adaptive",
        thinking_off="disabled",
        thinking_types=frozenset({"adaptive", "disabled"}),
        default_effort="medium",
        forced_tool=True,
        forced_tool_skips_thinking=True,
        released=date(2026, 10, 7),
    ),
    ModelInfo(
        id="claude-sonnet-5-5",
        aliases=(),
        status="active",
        context_window=1_000_000,
        max_output_tokens=128_000,
        batch_max_output_tokens=300_000,
        price_input=2.0,
        price_output=10.0,
        price_cache_write_5m=2.50,
        price_cache_write_1h=4.0,
        price_cache_read=0.10,
        min_cacheable_tokens=512,
        tokenizer="new",
        thinking_default="adaptive",
        thinking_off="between_tools",
        thinking_types=frozenset({"adaptive", "between_tools"}),
        default_effort="high",
        forced_tool=False,
        released=date(2026, 9, 28),
    ),
    ModelInfo(
        id="claude-opus-5-5",
        aliases=(),
        status="active",
        context_window=1_000_000,
        max_output_tokens=128_000,
        batch_max_output_tokens=300_000,
        price_input=4.0,
        price_output=20.0,
        price_cache_write_5m=5.0,
        price_cache_write_1h=8.0,
        price_cache_read=0.20,
        min_cacheable_tokens=512,
        tokenizer="new",
        thinking_default="always",
        thinking_off=None,
        thinking_types=frozenset({"adaptive"}),
        default_effort="medium",
        forced_tool=False,
        released=date(2026, 9, 22),
    ),
    # Legacy models still served.
    ModelInfo(
        id="claude-sonnet-5",
        aliases=(),
        status="legacy",
        context_window=1_000_000,
        max_output_tokens=128_000,
        batch_max_output_tokens=300_000,
        price_input=2.0,
        price_output=10.0,
        price_cache_write_5m=2.50,
        price_cache_write_1h=4.0,
        price_cache_read=0.20,
        min_cacheable_tokens=1024,
        tokenizer="new",
        thinking_default="adaptive",
        thinking_off="disabled",
        thinking_types=frozenset({"adaptive", "disabled"}),
        default_effort="high",
        released=date(2026, 6, 30),
        replacement="claude-sonnet-5-5",
    ),
    ModelInfo(
        id="claude-opus-5",
        aliases=(),
        status="legacy",
        context_window=1_000_000,
        max_output_tokens=128_000,
        batch_max_output_tokens=300_000,
        price_input=5.0,
        price_output=25.0,
        price_cache_write_5m=6.25,
        price_cache_write_1h=10.0,
        price_cache_read=0.50,
        min_cacheable_tokens=512,
        tokenizer="new",
        thinking_default="adaptive",
        thinking_off="disabled",
        thinking_types=frozenset({"adaptive", "disabled"}),
        default_effort="high",
        released=date(2026, 7, 24),
        replacement="claude-opus-5-5",
    ),
    # Sonnet 4.6: the documented cache minimum is 1,024 tokens (anthropic-sdk-python#1194
    # reports about 2,048 observed): the warm-up's cache_creation_input_tokens says which.
    ModelInfo(
        id="claude-sonnet-4-6",
        aliases=(),
        status="legacy",
        context_window=1_000_000,
        max_output_tokens=128_000,
        batch_max_output_tokens=300_000,
        price_input=3.0,
        price_output=15.0,
        price_cache_write_5m=3.75,
        price_cache_write_1h=6.0,
        price_cache_read=0.30,
        min_cacheable_tokens=1024,
        thinking_types=frozenset({"adaptive", "enabled", "disabled"}),
        default_effort="high",
        released=date(2026, 2, 17),
        replacement="claude-sonnet-5-5",
    ),
    ModelInfo(
        id="claude-opus-4-8",
        aliases=(),
        status="legacy",
        context_window=1_000_000,
        max_output_tokens=128_000,
        batch_max_output_tokens=300_000,
        price_input=5.0,
        price_output=25.0,
        price_cache_write_5m=6.25,
        price_cache_write_1h=10.0,
        price_cache_read=0.50,
        min_cacheable_tokens=1024,
        tokenizer="new",
        thinking_types=frozenset({"adaptive", "disabled"}),
        default_effort="high",
        replacement="claude-opus-5-5",
    ),
    ModelInfo(
        id="claude-opus-4-7",
        aliases=(),
        status="legacy",
        context_window=1_000_000,
        max_output_tokens=128_000,
        batch_max_output_tokens=300_000,
        price_input=5.0,
        price_output=25.0,
        price_cache_write_5m=6.25,
        price_cache_write_1h=10.0,
        price_cache_read=0.50,
        min_cacheable_tokens=2048,
        tokenizer="new",
        thinking_types=frozenset({"adaptive", "disabled"}),
        default_effort="high",
        replacement="claude-opus-5-5",
    ),
    ModelInfo(
        id="claude-opus-4-6",
        aliases=(),
        status="legacy",
        context_window=1_000_000,
        max_output_tokens=128_000,
        batch_max_output_tokens=300_000,
        price_input=5.0,
        price_output=25.0,
        price_cache_write_5m=6.25,
        price_cache_write_1h=10.0,
        price_cache_read=0.50,
        min_cacheable_tokens=4096,
        thinking_types=frozenset({"adaptive", "enabled", "disabled"}),
        default_effort="high",
        replacement="claude-opus-5-5",
    ),
    ModelInfo(
        id="claude-haiku-4-5",
        aliases=("claude-haiku-4-5-20251001",),
        status="legacy",
        context_window=200_000,
        max_output_tokens=64_000,
        price_input=1.0,
        price_output=5.0,
        price_cache_write_5m=1.25,
        price_cache_write_1h=2.0,
        price_cache_read=0.10,
        min_cacheable_tokens=4096,
        thinking_types=frozenset({"enabled", "disabled"}),
        prefill=True,
        replacement="claude-haiku-5-5",
    ),
    # Deprecated: a retirement date is announced (the SDK's DEPRECATED_MODELS).
    ModelInfo(
        id="claude-opus-4-5",
        aliases=("claude-opus-4-5-20251101",),
        status="deprecated",
        context_window=200_000,
        max_output_tokens=64_000,
        price_input=5.0,
        price_output=25.0,
        price_cache_write_5m=6.25,
        price_cache_write_1h=10.0,
        price_cache_read=0.50,
        min_cacheable_tokens=4096,
        thinking_types=frozenset({"enabled", "disabled"}),
        default_effort="high",
        end_of_life=date(2027, 1, 22),
        replacement="claude-opus-5-5",
    ),
    ModelInfo(
        id="claude-sonnet-4-5",
        aliases=("claude-sonnet-4-5-20250929",),
        status="deprecated",
        context_window=200_000,
        max_output_tokens=64_000,
        price_input=3.0,
        price_output=15.0,
        price_cache_write_5m=3.75,
        price_cache_write_1h=6.0,
        price_cache_read=0.30,
        min_cacheable_tokens=1024,
        thinking_types=frozenset({"enabled", "disabled"}),
        end_of_life=date(2026, 11, 30),
        replacement="claude-sonnet-5-5",
    ),
)

#: Models the Claude API no longer serves (requests to them fail), with their retirement
#: day and the current model to move to. Contract §1, "Not in the table" (Opus 4.1, Opus 4,
#: Sonnet 4, Haiku 3.5 retired; Opus 4.1 on 2026-08-05). The other days are from Anthropic's
#: model-deprecations page (its status table: Sonnet 3.7 and Haiku 3.5 2026-02-19, Opus 3
#: 2026-01-05, Sonnet 3 and Claude 2.x 2025-07-21, Sonnet 3.5 2025-10-22) and its release
#: notes (Sonnet 4 and Opus 4 retired 2026-06-15). ``None``: retired, no day found.
RETIRED: dict[str, tuple[date | None, str]] = {
    "claude-opus-4-1": (date(2026, 8, 5), "claude-opus-5-5"),
    "claude-opus-4-1-20250805": (date(2026, 8, 5), "claude-opus-5-5"),
    "claude-opus-4-0": (date(2026, 6, 15), "claude-opus-5-5"),
    "claude-opus-4-20250514": (date(2026, 6, 15), "claude-opus-5-5"),
    "claude-sonnet-4-0": (date(2026, 6, 15), "claude-sonnet-5-5"),
    "claude-sonnet-4-20250514": (date(2026, 6, 15), "claude-sonnet-5-5"),
    "claude-3-7-sonnet-latest": (date(2026, 2, 19), "claude-sonnet-5-5"),
    "claude-3-7-sonnet-20250219": (date(2026, 2, 19), "claude-sonnet-5-5"),
    "claude-3-5-haiku-latest": (date(2026, 2, 19), "claude-haiku-5-5"),
    "claude-3-5-haiku-20241022": (date(2026, 2, 19), "claude-haiku-5-5"),
    "claude-3-5-sonnet-latest": (date(2025, 10, 22), "claude-sonnet-5-5"),
    "claude-3-5-sonnet-20241022": (date(2025, 10, 22), "claude-sonnet-5-5"),
    "claude-3-5-sonnet-20240620": (date(2025, 10, 22), "claude-sonnet-5-5"),
    "claude-3-opus-latest": (date(2026, 1, 5), "claude-opus-5-5"),
    "claude-3-opus-20240229": (date(2026, 1, 5), "claude-opus-5-5"),
    "claude-3-sonnet-20240229": (date(2025, 7, 21), "claude-sonnet-5-5"),
    "claude-3-haiku-20240307": (None, "claude-haiku-5-5"),
    "claude-2.1": (date(2025, 7, 21), "claude-sonnet-5-5"),
    "claude-2.0": (date(2025, 7, 21), "claude-sonnet-5-5"),
}

#: The families every id of which is retired (contract §1: everything before Claude 4.5 but
#: Haiku 4.5 is gone): an id of theirs not in :data:`RETIRED` is retired all the same.
_RETIRED_FAMILIES: tuple[str, ...] = (
    "claude-3",
    "claude-2",
    "claude-instant",
    "claude-opus-4-0",
    "claude-opus-4-1",
    "claude-opus-4-2025",
    "claude-sonnet-4-0",
    "claude-sonnet-4-2025",
)


def retired_model(name: str) -> tuple[date | None, str] | None:
    """When ``name`` (an id, dated id or alias) was retired and the current model to use;
    ``None``: not a retired Claude model."""
    if name in RETIRED:
        return RETIRED[name]
    if not name.startswith(_RETIRED_FAMILIES):
        return None
    for tier in ("haiku", "opus"):
        if tier in name:
            return None, f"claude-{tier}-5-5"
    return None, "claude-sonnet-5-5"


#: The default: the cheapest current model, made for high-volume extraction; it takes a
#: forced tool and then answers without thinking (README, "Choosing a model").
DEFAULT_MODEL = "claude-haiku-5-5"

#: Message Batches API price as a fraction of the standard price.
BATCH_DISCOUNT = 0.5

_BY_NAME: dict[str, ModelInfo] = {name: m for m in MODELS for name in m.names}


class UnknownModelError(ValueError):
    """A model name that is not in the registry."""


class RetiredModelError(UnknownModelError):
    """A model the API no longer serves; the message names the one to move to."""


def known_model_names() -> list[str]:
    return sorted(_BY_NAME)


def get_model(name: str) -> ModelInfo:
    """Return the registry entry for ``name`` (id or dated alias).

    Raises:
        RetiredModelError: the API no longer serves it (the message names its replacement).
        UnknownModelError: with the list of known names, so the user can fix the schema.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        pass
    gone = retired_model(name)
    if gone is not None:
        when, replacement = gone
        on = f" on {when}" if when else ""
        raise RetiredModelError(
            f"{name} was retired{on}: the API no longer serves it; use {replacement} "
            f"(set prompt_config.model in the schema, or --model)"
        )
    raise UnknownModelError(f"unknown model {name!r}{did_you_mean(name)}; {known_models_text()}")


def did_you_mean(name: str) -> str:
    """``"; did you mean claude-sonnet-5-5?"`` for a near miss of a served model's name
    (a typo), else ``""``."""
    close = difflib.get_close_matches(name, known_model_names(), n=1, cutoff=0.8)
    return f"; did you mean {close[0]}?" if close else ""


def known_models_text() -> str:
    """The models blockbatch knows, as a user reads them in an error."""
    return f"known models: {', '.join(m.id for m in MODELS)}"


def check_not_retired(model: ModelInfo, today: date) -> None:
    """Refuse a model whose retirement day has come, naming the one to move to.

    Raises:
        RetiredModelError: ``model.end_of_life`` is today or earlier.
    """
    if model.retired(today):
        replacement = model.replacement or DEFAULT_MODEL
        raise RetiredModelError(
            f"{model.id} reached end-of-life on {model.end_of_life}: the API no longer "
            f"serves it; use {replacement} (set prompt_config.model in the schema, or --model)"
        )


def retirement_warning(model: ModelInfo, today: date) -> str | None:
    """What to tell a user who starts a run on a model that retires within 90 days
    (``None``: not). A retired model is refused by :func:`check_not_retired` instead."""
    if model.end_of_life is None or model.retired(today):
        return None
    days = (model.end_of_life - today).days
    if days > 90:
        return None
    replacement = model.replacement or DEFAULT_MODEL
    return (
        f"{model.id} reaches end-of-life on {model.end_of_life} (in {days} days): the "
        f"API will refuse it then; move to {replacement} (prompt_config.model or --model)"
    )


def with_api_facts(model: ModelInfo, facts: dict[str, Any]) -> ModelInfo:
    """``model`` with what the Models API says of it (``GET /v1/models/{id}``) taking over.

    ``facts`` is the API's answer as JSON: ``max_input_tokens``, ``max_tokens``,
    ``retires_at`` and ``capabilities`` (``structured_outputs``, ``thinking.types``).
    Fields the answer lacks keep the registry's value. Prices never come from the API.
    """
    changes: dict[str, Any] = {}
    if isinstance(facts.get("max_input_tokens"), int) and facts["max_input_tokens"] > 0:
        changes["context_window"] = facts["max_input_tokens"]
    if isinstance(facts.get("max_tokens"), int) and facts["max_tokens"] > 0:
        changes["max_output_tokens"] = facts["max_tokens"]
    retires = facts.get("retires_at")
    if isinstance(retires, str) and retires:
        with contextlib.suppress(ValueError):
            changes["end_of_life"] = date.fromisoformat(retires[:10])
    caps = facts.get("capabilities")
    if isinstance(caps, dict):
        structured = _supported(caps.get("structured_outputs"))
        if structured is not None:
            changes["structured_outputs"] = structured
        thinking = caps.get("thinking")
        types = thinking.get("types") if isinstance(thinking, dict) else None
        if isinstance(types, dict):
            allowed = {name for name, value in types.items() if _supported(value)}
            if allowed:
                changes["thinking_types"] = frozenset(allowed)
    return replace(model, **changes) if changes else model


def _supported(value: Any) -> bool | None:
    """A capability flag as the Models API writes it: ``true``, or ``{"supported": true}``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, dict) and isinstance(value.get("supported"), bool):
        return bool(value["supported"])
    return None


def configured_model(model_id: str, prices: dict[str, float], facts: dict[str, Any]) -> ModelInfo:
    """An entry for a model the API describes but this registry does not price.

    ``prices``: ``input``, ``output`` (required), ``cache_write_5m``, ``cache_write_1h``,
    ``cache_read`` (default to the usual multipliers of input: 1.25x, 2x, 0.1x) from
    configuration (``BLOCKBATCH_MODEL_PRICES``). Capabilities are the API's; the rest is
    the most careful guess (new tokenizer, thinks by default and cannot stop, no forced
    tool): what a newer model most likely does.

    Raises:
        ValueError: ``input`` or ``output`` is missing.
    """
    if "input" not in prices or "output" not in prices:
        raise ValueError(
            f"prices for {model_id} need at least 'input' and 'output' (USD per million tokens)"
        )
    base = prices["input"]
    entry = ModelInfo(
        id=model_id,
        aliases=(),
        status="active",
        context_window=200_000,
        max_output_tokens=64_000,
        price_input=base,
        price_output=prices["output"],
        price_cache_write_5m=prices.get("cache_write_5m", base * 1.25),
        price_cache_write_1h=prices.get("cache_write_1h", base * 2.0),
        price_cache_read=prices.get("cache_read", base * 0.1),
        min_cacheable_tokens=4096,
        tokenizer="new",
        thinking_default="always",
        thinking_types=frozenset({"adaptive"}),
        default_effort="high",
        forced_tool=False,
        priced=False,
    )
    return with_api_facts(entry, facts)


class Counts(TypedDict):
    """:class:`TokenCounts`' counters as keyword arguments (``**usage.counts()``)."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    thinking_tokens: int


class TokenCounts(BaseModel):
    """Tokens of one or more calls by kind, under the API's names: the one declaration of
    the counters that calls, packs, runs and the ledger's rows carry (as a base class)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    #: Of output_tokens, how many were thinking (billed as output all the same).
    thinking_tokens: int = 0

    def counts(self) -> Counts:
        """The counters alone, by name (to build another model that carries them)."""
        return Counts(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens,
            thinking_tokens=self.thinking_tokens,
        )


class Usage(TokenCounts):
    """Token usage of one or more calls, by kind, as the API reports it."""

    #: Of cache_creation_input_tokens, how many were written with the 1-hour TTL.
    cache_creation_1h_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """The prompt's length as the price tiers count it: input, cache writes and reads."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Usage:
        """The usage of an API answer (a Message as JSON)."""
        u = message.get("usage") or {}
        creation = u.get("cache_creation") or {}
        details = u.get("output_tokens_details") or {}
        return cls(
            input_tokens=u.get("input_tokens") or 0,
            output_tokens=u.get("output_tokens") or 0,
            cache_creation_input_tokens=u.get("cache_creation_input_tokens") or 0,
            cache_read_input_tokens=u.get("cache_read_input_tokens") or 0,
            cache_creation_1h_tokens=creation.get("ephemeral_1h_input_tokens") or 0,
            thinking_tokens=details.get("thinking_tokens") or 0,
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            **{name: getattr(self, name) + getattr(other, name) for name in Usage.model_fields}
        )


def price_multiplier(model: ModelInfo, prompt_tokens: int) -> float:
    """What every line of one request costs relative to the base prices: above the model's
    long-prompt line (Haiku 5.5: 100,000 prompt tokens), ``long_prompt_multiplier``."""
    if model.long_prompt_threshold is not None and prompt_tokens > model.long_prompt_threshold:
        return model.long_prompt_multiplier
    return 1.0


def cost_usd(model: ModelInfo, usage: Usage, *, batch: bool = False) -> float:
    """Cost of one request's ``usage`` at ``model``'s prices; Message Batches are half price.

    A request is priced wholly at one tier, by its own prompt length (contract §1), so
    ``usage`` must be one request's: a sum of several is priced as if it were one.
    """
    write_5m = usage.cache_creation_input_tokens - usage.cache_creation_1h_tokens
    total = (
        usage.input_tokens * model.price_input
        + usage.output_tokens * model.price_output
        + write_5m * model.price_cache_write_5m
        + usage.cache_creation_1h_tokens * model.price_cache_write_1h
        + usage.cache_read_input_tokens * model.price_cache_read
    ) / 1_000_000
    total *= price_multiplier(model, usage.prompt_tokens)
    return total * (BATCH_DISCOUNT if batch else 1.0)


def scaled_tokens(model: ModelInfo, old_tokens: int) -> int:
    """An estimate made in old-tokenizer tokens, in the tokens ``model`` counts."""
    return math.ceil(old_tokens * model.tokenizer_scale)


def priced_elsewhere(model: str | None) -> bool:
    """Whether a run of ``model`` was priced from configuration: the registry has no
    prices of it (a model the Models API describes, ``BLOCKBATCH_MODEL_PRICES`` prices)."""
    return model is not None and model not in known_model_names()
