"""Pack planning: which consecutive blocks share one model call, and what to ask for.

Everything here is an estimate made before any call, without a tokenizer: each block's
input, each block's expected output (from the schema's fields) and the model's limits
from the registry. The plan is greedy over consecutive blocks and deterministic, so a
replayed workflow computes the same packs.

Units: :func:`estimate_tokens` and :func:`estimate_output_tokens` count in the old
tokenizer's tokens; a model of the new tokenizer counts more for the same text (contract
§0 rule 8), so every estimate compared with a model's limits or priced is scaled by
:attr:`PlanLimits.tokenizer_scale` first (``blockbatch.core.registry.scaled_tokens``).

Thinking: where a run's calls think (``blockbatch.core.answer.CallShape.thinks``), every call's
``max_tokens`` holds its thinking on top of its answers (:attr:`PlanLimits.thinking_tokens`);
thinking is paid per call, whatever the number of blocks in it.

Price tiers: a model priced by prompt length (Haiku 5.5: 5x on every line above 100,000
prompt tokens, contract §1 rule 7) gets a hard line (:attr:`PlanLimits.max_prompt_tokens`)
that no pack's prompt crosses by estimate, with the safety margin.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from blockbatch.core.evidence import (
    EVIDENCE_OVERHEAD_TOKENS,
    QUOTE_OVERHEAD_TOKENS,
    QUOTE_TOKENS,
)
from blockbatch.core.registry import Effort, ModelInfo, get_model
from blockbatch.core.schema import SchemaSpec

#: Added to every estimate: a text's first and last tokens rarely merge with neighbours.
TEXT_CONSTANT_TOKENS = 3
#: Input per block besides its content: the JSON item around it,
#: ``{"block_uid": "<document>:<index>", "block_type": "...", "block_content": "..."},``.
#: A document id that is a UUID alone is ~25 tokens.
BLOCK_WRAPPER_TOKENS = 40
#: Output per result besides its fields: ``{"block_uid": "<document>:<index>", ... },``.
RESULT_OVERHEAD_TOKENS = 20
#: Output per pack: ``{"results": [`` ... ``]}`` around the results.
PACK_OUTPUT_OVERHEAD_TOKENS = 12

#: Thinking tokens one call is expected to write, by effort, where the run's calls think.
#: Our assumption, not a published figure: the API documents that effort governs how much
#: a model thinks but publishes no numbers (contract §3, "No numeric multipliers are
#: published"). A run replaces it with what its own calls thought (the ledger's
#: ``thinking_tokens``, :func:`thinking_allowance` with ``observed``).
EXPECTED_THINKING_TOKENS: dict[str, int] = {
    "low": 1_000,
    "medium": 2_000,
    "high": 4_000,
    "xhigh": 8_000,
    "max": 16_000,
}
#: ``max_tokens`` holds this many times the expected thinking: one call's thinking varies
#: far more than its answers, and thinking cut off by ``max_tokens`` leaves no answer.
THINKING_HEADROOM = 2.0


def expected_thinking(effort: Effort | None, observed: float | None = None) -> int:
    """The thinking tokens one call of a thinking run is expected to write.

    ``observed``: what the run's calls thought on average so far (wins); else
    :data:`EXPECTED_THINKING_TOKENS` for ``effort`` (``None``: as ``high``).
    """
    if observed is not None:
        return max(0, math.ceil(observed))
    return EXPECTED_THINKING_TOKENS[effort or "high"]


def thinking_allowance(effort: Effort | None, observed: float | None = None) -> int:
    """What a thinking call's ``max_tokens`` holds for its thinking: the expected thinking
    (:func:`expected_thinking`) times :data:`THINKING_HEADROOM`."""
    return math.ceil(expected_thinking(effort, observed) * THINKING_HEADROOM)


_SYMBOL = re.compile(r"[^\w\s]")
#: The ASCII characters :data:`_SYMBOL` does not match (word and space characters): ASCII
#: text's symbols are what is left once they are deleted, without a regex (the ingest
#: estimates every block, docs/benchmarks.md 3.3).
_ASCII_WORD_OR_SPACE = bytes(c for c in range(128) if not _SYMBOL.match(chr(c)))
_NAME_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_REVISION_WORDS = frozenset(
    {
        "revised",
        "revision",
        "rewrite",
        "rewritten",
        "corrected",
        "translated",
        "translation",
        "normalized",
        "normalised",
        "edited",
    }
)
#: "text" in a field's *name* (``text``, ``clean_text``) marks a rewrite; in a description
#: it is too common ("the tone of the text") to mean anything.
_REVISION_NAME_WORDS = _REVISION_WORDS | {"text"}


def estimate_tokens(text: str) -> int:
    """A conservative (high) estimate of the Claude tokens in ``text``.

    Claude's tokenizer is a byte-pair encoding over UTF-8, so the estimate takes the
    largest of three views, each tuned to overestimate its kind of text:

    * characters: English merges to ~4 characters a token, so ``len / 3.5``; every byte
      past the first of a non-ASCII character adds 0.6 (Cyrillic or Greek ~1 token per
      2 characters, CJK ~1.2 per character, emoji ~2);
    * words: ~1.35 tokens per whitespace-separated word (long or rare words split);
    * symbols: code and JSON tokenize punctuation almost one token per symbol, so
      ``(characters - symbols) / 4 + symbols``.

    Plus a small constant. An overestimate costs a few more calls; an underestimate
    costs a truncated answer, a split and a second call, so we lean high.
    """
    if not text:
        return 0
    chars = len(text)
    if text.isascii():
        extra_bytes = 0
        symbols = len(text.encode("ascii").translate(None, _ASCII_WORD_OR_SPACE))
    else:
        extra_bytes = len(text.encode("utf-8")) - chars
        symbols = chars - len(_SYMBOL.sub("", text))
    by_chars = chars / 3.5 + extra_bytes * 0.6
    by_words = len(text.split()) * 1.35
    by_symbols = (chars - symbols) / 4 + symbols + extra_bytes * 0.6
    return math.ceil(max(by_chars, by_words, by_symbols)) + TEXT_CONSTANT_TOKENS


def estimate_output_tokens(spec: SchemaSpec, block_tokens: int, *, setting: bool = True) -> int:
    """The expected output tokens of one block's result under ``spec``.

    ``prompt_config.max_tokens_per_block`` wins when set (unless ``setting`` is False: the
    shape of the answers, which a run learns its ``max_tokens`` against). Otherwise: the result's
    overhead plus, per field, its key and its value: a rewrite of the block (a string
    field whose name or description says revised, rewritten, corrected, translated,
    normalized, edited, or a name with "text"; or ``"x-blockbatch-revision": true``)
    costs about the block itself, ``block_tokens * 1.1 + 8``; other strings
    ``min(maxLength / 3, 60)`` or 40; enums, numbers, integers and booleans ~6;
    arrays and objects ~40 (more if their items or properties say so). A schema asking for
    evidence adds its quotes (:func:`evidence_output_tokens`), on top of
    ``max_tokens_per_block`` too: that setting sizes the fields.

    Args:
        spec: the schema.
        block_tokens: :func:`estimate_tokens` of the block's content.
    """
    if setting and spec.prompt_config.max_tokens_per_block is not None:
        return spec.prompt_config.max_tokens_per_block + evidence_output_tokens(spec, block_tokens)
    total = RESULT_OVERHEAD_TOKENS + evidence_output_tokens(spec, block_tokens)
    for name, field_schema in spec.properties.items():
        total += estimate_tokens(json.dumps(name)) + 1
        total += _value_tokens(name, field_schema, block_tokens)
    return total


def evidence_output_tokens(spec: SchemaSpec, block_tokens: int) -> int:
    """The expected output of one result's evidence (0 when the schema asks for none): per
    field its key and a quote of :data:`~blockbatch.core.evidence.QUOTE_TOKENS` (at most the
    block itself), and the evidence object around them."""
    if not spec.prompt_config.evidence:
        return 0
    quote = min(QUOTE_TOKENS, max(1, block_tokens))
    per_field = sum(
        estimate_tokens(json.dumps(name)) + 1 + quote + QUOTE_OVERHEAD_TOKENS
        for name in spec.properties
    )
    return EVIDENCE_OVERHEAD_TOKENS + per_field


def _value_tokens(name: str, schema: Any, block_tokens: int) -> int:
    if not isinstance(schema, Mapping):
        return 40
    if _is_revision(name, schema):
        rewrite = math.ceil(block_tokens * 1.1) + 8
        max_length = schema.get("maxLength")
        if isinstance(max_length, int) and max_length >= 0:
            return min(rewrite, math.ceil(max_length / 3) + 8)
        return rewrite
    choices = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(choices, list) and choices:
        longest = max(estimate_tokens(json.dumps(c, ensure_ascii=False)) for c in choices)
        return max(6, longest)
    types = _types(schema)
    if not types:
        variants = [v for key in ("anyOf", "oneOf") for v in schema.get(key) or []]
        return max((_value_tokens(name, v, block_tokens) for v in variants), default=40)
    return max(_typed_tokens(t, name, schema, block_tokens) for t in types)


def _typed_tokens(kind: str, name: str, schema: Mapping[str, Any], block_tokens: int) -> int:
    if kind == "string":
        max_length = schema.get("maxLength")
        if isinstance(max_length, int) and max_length >= 0:
            return max(1, min(math.ceil(max_length / 3), 60))
        return 40
    if kind == "array":
        items = schema.get("items")
        return max(40, _value_tokens(name, items, block_tokens) + 4 if items else 0)
    if kind == "object":
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            inner = sum(
                estimate_tokens(json.dumps(k)) + 1 + _value_tokens(k, v, block_tokens)
                for k, v in properties.items()
            )
            return max(40, inner + 4)
        return 40
    return 6  # number, integer, boolean, null


def _types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    types = declared if isinstance(declared, list) else [declared] if declared else []
    real = [t for t in types if isinstance(t, str) and t != "null"]
    return real or [t for t in types if isinstance(t, str)]


def _is_revision(name: str, schema: Mapping[str, Any]) -> bool:
    flag = schema.get("x-blockbatch-revision")
    if isinstance(flag, bool):
        return flag
    if "string" not in _types(schema) or "enum" in schema or "const" in schema:
        return False
    name_words = {w.lower() for w in _NAME_WORD.findall(name)}
    if name_words & _REVISION_NAME_WORDS:
        return True
    description = schema.get("description")
    if isinstance(description, str):
        return bool(set(re.findall(r"[a-z]+", description.lower())) & _REVISION_WORDS)
    return False


#: A run whose output per block is not known yet (no setting, no earlier run of its schema
#: on its model) first sends this many blocks alone: that pack writes the prompt cache, as the
#: warm-up call would, and its answer says how much the schema's answers really write, so
#: the rest is planned from that (:func:`learn_ratios`) instead of from the schema's guess.
LEARNING_PACK_BLOCKS = 5
#: A block type's own ratio is used once this many of its blocks were answered and it
#: differs from the run's ratio by more than :data:`TYPE_RATIO_DIFFERS` (either way).
TYPE_RATIO_MIN_BLOCKS = 5
TYPE_RATIO_DIFFERS = 0.25


@dataclass(frozen=True)
class OutputRatios:
    """What a run's answers write per token of the schema's estimate (its shape: fields and
    block length, :func:`estimate_output_tokens` with ``setting=False``).

    Attributes:
        overall: over every answered block.
        by_type: block types whose answers differ from ``overall`` (see
            :data:`TYPE_RATIO_DIFFERS`).
        blocks: how many answered blocks the ratios come from.
        source: ``"run"`` (this run's answers) or ``"earlier runs"`` (of its schema and model).
    """

    overall: float
    by_type: dict[str, float]
    blocks: int
    source: str = "run"

    def of(self, block_type: str | None) -> float:
        return self.by_type.get(block_type or "", self.overall)

    def text(self) -> str:
        """``0.62x the schema's estimate (from 5 answered blocks; heading 1.40x)``."""
        kinds = "".join(f"; {t} {r:.2f}x" for t, r in sorted(self.by_type.items()))
        where = "this run" if self.source == "run" else self.source
        return (
            f"{self.overall:.2f}x the schema's estimate (from {self.blocks} answered "
            f"blocks of {where}{kinds})"
        )


#: Ratios this close to those a plan was made with leave it as it is (:func:`ratios_close`).
RATIOS_CLOSE = 0.1


def ratios_close(new: OutputRatios, planned: OutputRatios | None) -> bool:
    """Whether ``new`` ratios would plan the run's packs as ``planned`` did, so a re-plan can
    keep the plan without reading the unstarted blocks again (``planned`` ``None``: the plan
    came from the schema's estimate alone, never close).

    Close: every ratio, overall and per block type of either, within :data:`RATIOS_CLOSE`
    (a tenth) of the planned one. A re-plan changes the plan only when the pack count moves
    by a tenth; the packs' estimated answers scale with the ratios, and the count at most as
    much (packs bound by input or by their block cap move less).
    """
    if planned is None:
        return False
    kinds = {"", *new.by_type, *planned.by_type}
    return all(abs(new.of(k) - planned.of(k)) <= RATIOS_CLOSE * planned.of(k) for k in kinds)


def learn_ratios(
    samples: Sequence[tuple[str, int, int]], written_tokens: int, *, source: str = "run"
) -> OutputRatios | None:
    """Output ratios from answered blocks (``None``: no usable sample).

    Args:
        samples: per answered block, ``(block_type, shape, answer_estimate)``: the schema's
            estimate of its answer and :func:`estimate_tokens` of the answer it got (the
            answer's JSON), which spreads ``written_tokens`` over the blocks.
        written_tokens: what the API counted for those answers (the calls' output tokens,
            less each call's ``{"results": [...]}`` wrapper).
    """
    shape_total = sum(shape for _, shape, _ in samples)
    answer_total = sum(answer for _, _, answer in samples)
    if not samples or shape_total <= 0 or answer_total <= 0 or written_tokens <= 0:
        return None
    scale = written_tokens / answer_total
    overall = written_tokens / shape_total
    by_type: dict[str, float] = {}
    kinds: dict[str, list[tuple[int, int]]] = {}
    for kind, shape, answer in samples:
        kinds.setdefault(kind, []).append((shape, answer))
    for kind, rows in kinds.items():
        shape_sum = sum(sh for sh, _ in rows)
        if len(rows) < TYPE_RATIO_MIN_BLOCKS or shape_sum <= 0:
            continue
        ratio = sum(a for _, a in rows) * scale / shape_sum
        if abs(ratio / overall - 1) > TYPE_RATIO_DIFFERS:
            by_type[kind] = round(ratio, 4)
    return OutputRatios(
        overall=round(overall, 4), by_type=by_type, blocks=len(samples), source=source
    )


def answer_tokens(answer: Any) -> int:
    """:func:`estimate_tokens` of one block's answer as the tool input carries it, which
    spreads a call's counted output over its blocks (:func:`learn_ratios`)."""
    return estimate_tokens(json.dumps(answer, ensure_ascii=False)) + RESULT_OVERHEAD_TOKENS


def replan_text(first_pack: int, packs_before: int, packs_after: int, ratios: OutputRatios) -> str:
    """``packs 1-24 re-planned as 1-4: answers so far are 0.62x as long as the schema's
    estimate (5 answered blocks of this run), so each pack takes more blocks``: what
    changed, from what, and why, readable without the docs."""

    def span(end: int) -> str:
        return f"{first_pack}" if end - 1 == first_pack else f"{first_pack}-{end - 1}"

    where = "this run" if ratios.source == "run" else ratios.source
    kinds = "".join(f"; {t} blocks {r:.2f}x" for t, r in sorted(ratios.by_type.items()))
    if packs_after < packs_before:
        effect = ", so each pack takes more blocks"
    elif packs_after > packs_before:
        effect = ", so each pack takes fewer blocks"
    else:
        effect = ""
    return (
        f"packs {span(packs_before)} re-planned as {span(packs_after)}: answers so far are "
        f"{ratios.overall:.2f}x as long as the schema's estimate ({ratios.blocks} answered "
        f"blocks of {where}{kinds}){effect}"
    )


@dataclass(frozen=True)
class PlanLimits:
    """The limits a plan respects.

    Attributes:
        context_window: the model's context window (input + output).
        model_max_output: the most output tokens the model can produce in one call.
        fixed_prompt_tokens: system prompt, tool definition and fixed user text, per call.
        output_budget: ``max_tokens`` of a normal pack (short calls have lower latency),
            capped at ``model_max_output``.
        safety_margin: packs are filled to this fraction of each budget, by estimate.
        hard_cap: the most blocks in one pack.
        max_batch_size: the schema's cap; only ever lowers the pack size.
        pack_size: a request's fixed pack size (replaces ``hard_cap``; still lowered
            by ``max_batch_size`` and by what the model can physically take).
        batching_enabled: ``False`` gives one block per pack.
        tokenizer_scale: the model's tokens per old-tokenizer token (1.3 on the new
            tokenizer): block estimates are scaled by it wherever they meet a limit.
        thinking_tokens: what every call's ``max_tokens`` holds for thinking on top of
            its answers (0: the run's calls do not think).
        max_prompt_tokens: the model's long-prompt price line (Haiku 5.5: 100,000): no
            pack's prompt (fixed prompt and blocks, in the model's tokens) crosses it by
            estimate with the safety margin; ``None``: one price at any length.

    ``fixed_prompt_tokens`` is in the model's tokens already (``RunContext`` scales it).
    """

    context_window: int
    model_max_output: int
    fixed_prompt_tokens: int
    output_budget: int = 8192
    safety_margin: float = 0.8
    hard_cap: int = 50
    max_batch_size: int | None = None
    pack_size: int | None = None
    batching_enabled: bool = True
    tokenizer_scale: float = 1.0
    thinking_tokens: int = 0
    max_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        positive = {
            "context_window": self.context_window,
            "model_max_output": self.model_max_output,
            "output_budget": self.output_budget,
            "hard_cap": self.hard_cap,
            "max_batch_size": self.max_batch_size,
            "pack_size": self.pack_size,
            "max_prompt_tokens": self.max_prompt_tokens,
        }
        for key, value in positive.items():
            if value is not None and value < 1:
                raise ValueError(f"PlanLimits.{key} must be at least 1, got {value}")
        if self.fixed_prompt_tokens < 0:
            raise ValueError("PlanLimits.fixed_prompt_tokens must not be negative")
        if not 0 < self.safety_margin <= 1:
            raise ValueError(
                f"PlanLimits.safety_margin must be in (0, 1], got {self.safety_margin}"
            )
        if self.tokenizer_scale <= 0:
            raise ValueError("PlanLimits.tokenizer_scale must be positive")
        if self.thinking_tokens < 0:
            raise ValueError("PlanLimits.thinking_tokens must not be negative")

    @property
    def budget(self) -> int:
        """The ``max_tokens`` of a normal pack: ``output_budget`` capped by the model."""
        return min(self.output_budget, self.model_max_output)

    def scaled(self, old_tokens: float) -> int:
        """An old-tokenizer estimate in the model's tokens."""
        return math.ceil(old_tokens * self.tokenizer_scale)

    def prompt_tokens(self, blocks_input: float) -> int:
        """A call's whole prompt in the model's tokens: the fixed prompt and the blocks'
        input (old-tokenizer estimate, JSON items included)."""
        return self.fixed_prompt_tokens + self.scaled(blocks_input)

    @property
    def prompt_allowance(self) -> float | None:
        """The most prompt tokens a pack may be planned with under the price line."""
        if self.max_prompt_tokens is None:
            return None
        return self.max_prompt_tokens * self.safety_margin

    @property
    def size_cap(self) -> int:
        """The most blocks in one pack."""
        if not self.batching_enabled:
            return 1
        cap = self.pack_size if self.pack_size is not None else self.hard_cap
        return min(cap, self.max_batch_size) if self.max_batch_size is not None else cap


def limits_for(
    spec: SchemaSpec,
    fixed_prompt_tokens: int,
    *,
    model: str | None = None,
    pack_size: int | None = None,
    batching_enabled: bool = True,
    output_budget: int = 8192,
    safety_margin: float = 0.8,
    hard_cap: int = 50,
) -> PlanLimits:
    """The :class:`PlanLimits` for ``spec`` on its model (or ``model``) from the registry;
    ``fixed_prompt_tokens`` is an old-tokenizer estimate (scaled here)."""
    info = get_model(model or spec.prompt_config.model)
    return PlanLimits(
        context_window=info.context_window,
        model_max_output=info.max_output_tokens,
        fixed_prompt_tokens=math.ceil(fixed_prompt_tokens * info.tokenizer_scale),
        output_budget=output_budget,
        safety_margin=safety_margin,
        hard_cap=hard_cap,
        max_batch_size=spec.prompt_config.max_batch_size,
        pack_size=pack_size,
        batching_enabled=batching_enabled,
        tokenizer_scale=info.tokenizer_scale,
        max_prompt_tokens=price_line(info),
    )


def price_line(model: ModelInfo) -> int | None:
    """The prompt length a pack on ``model`` stays within: its long-prompt threshold, where
    a longer prompt pays more on every line (``None``: one price at any length)."""
    if model.long_prompt_threshold is None or model.long_prompt_multiplier <= 1.0:
        return None
    return model.long_prompt_threshold


@dataclass(frozen=True)
class Pack:
    """Consecutive blocks sent in one call.

    Attributes:
        positions: consecutive positions into the planned block list.
        est_input_tokens: the whole request's input, in the model's tokens: fixed prompt
            plus the blocks.
        est_output_tokens: the results of all the pack's blocks (thinking not included).
        max_tokens: what to request (see :func:`max_tokens_for`): answers and thinking.
        oversized: a single block whose input cannot fit the context window at all.
        learn_output_tokens: the estimate a run's answers are compared with to learn
            ``max_tokens`` (:func:`max_tokens_for`'s ``shape``; in the ledger).
        thinking_tokens: of ``max_tokens``, what is held for thinking.
        over_price_line: a lone block whose prompt alone crosses the model's long-prompt
            price line (it is sent, and paid at the higher tier).
    """

    positions: tuple[int, ...]
    est_input_tokens: int
    est_output_tokens: int
    max_tokens: int
    oversized: bool
    learn_output_tokens: int = 0
    thinking_tokens: int = 0
    over_price_line: bool = False


#: A first attempt asks for this many times its output estimate (at least
#: :data:`MIN_MAX_TOKENS`), not the whole budget: the API counts ``max_tokens`` against the
#: output-tokens-per-minute limit for as long as a call runs, so a single block asking for
#: 8,192 tokens to write ~120 holds back 68 times what it uses.
OUTPUT_HEADROOM = 2.0
MIN_MAX_TOKENS = 256


def learned_headroom(blocks: int) -> float:
    """Headroom over what a run's answers say a pack of ``blocks`` blocks will write:
    ``1.25 + 0.75 / sqrt(blocks)``, 2x for one block, 1.36x for 50 (a pack's total
    varies less than one block's)."""
    return 1.25 + 0.75 / math.sqrt(max(blocks, 1))


def max_tokens_for(
    output_tokens: Sequence[int],
    limits: PlanLimits,
    *,
    generous: bool = False,
    observed: float | None = None,
    shape: Sequence[int] | None = None,
) -> int:
    """The ``max_tokens`` to request for blocks with these expected outputs.

    For the answers: :data:`OUTPUT_HEADROOM` times the estimate (at least
    :data:`MIN_MAX_TOKENS`), up to the normal budget. ``observed`` (what the run's answers
    wrote per estimated token so far): the estimate times ``observed`` times
    :func:`learned_headroom` instead, where the estimate is ``shape`` when given (the
    blocks' estimates from the schema's fields and their lengths, without a fixed
    ``max_tokens_per_block``: a long block's rewrite writes more than a heading's, which a
    flat 800 a block cannot tell). ``generous`` (a later attempt, e.g. after a truncated
    answer) asks for the whole budget. When the estimate exceeds what the budget holds
    with its margin (only a lone block with a large output does, in a greedy plan): enough
    for the estimate with its margin. Then the thinking allowance
    (:attr:`PlanLimits.thinking_tokens`) on top, all up to the model's maximum.

    ``output_tokens`` are in the model's tokens; ``shape`` in the planner's (``observed``
    was measured against it, so it carries the model's tokenizer already).
    """
    estimate = PACK_OUTPUT_OVERHEAD_TOKENS + sum(output_tokens)
    if estimate > limits.budget * limits.safety_margin:
        answers = math.ceil(estimate / limits.safety_margin)
    elif generous:
        answers = limits.budget
    else:
        if observed is not None:
            base = PACK_OUTPUT_OVERHEAD_TOKENS + sum(shape) if shape is not None else estimate
            want = base * observed * learned_headroom(len(output_tokens))
        else:
            want = estimate * OUTPUT_HEADROOM
        answers = min(limits.budget, max(MIN_MAX_TOKENS, math.ceil(want)))
    return min(limits.model_max_output, answers + limits.thinking_tokens)


def describe_pack(
    positions: Sequence[int],
    block_tokens: Sequence[int],
    output_tokens: Sequence[int],
    limits: PlanLimits,
    *,
    generous: bool = False,
    observed: float | None = None,
    shape: Sequence[int] | None = None,
) -> Pack:
    """The :class:`Pack` for these blocks, e.g. for one half of a split pack.

    Args:
        positions: the blocks' positions.
        block_tokens: :func:`estimate_tokens` of each block's content, aligned with
            ``positions`` (old-tokenizer tokens; scaled here).
        output_tokens: each block's expected output in the model's tokens, aligned likewise.
        limits: the plan's limits.
        generous: a later attempt: ``max_tokens`` is the whole budget where the context
            window leaves room for it (see :func:`max_tokens_for`).
        observed: what the run's answers wrote per estimated output token so far.
        shape: each block's estimate that ``observed`` is measured against (default
            ``output_tokens``; see :func:`max_tokens_for`).
    """
    if not (len(positions) == len(block_tokens) == len(output_tokens)) or not positions:
        raise ValueError("positions, block_tokens and output_tokens must align and be non-empty")
    est_input = limits.prompt_tokens(sum(t + BLOCK_WRAPPER_TOKENS for t in block_tokens))
    if shape is not None and len(shape) != len(output_tokens):
        raise ValueError("shape must align with output_tokens")
    max_tokens = max_tokens_for(output_tokens, limits, observed=observed, shape=shape)
    if generous:
        room = limits.context_window - est_input
        max_tokens = max(
            max_tokens, min(max_tokens_for(output_tokens, limits, generous=True), room)
        )
    return Pack(
        positions=tuple(positions),
        est_input_tokens=est_input,
        est_output_tokens=PACK_OUTPUT_OVERHEAD_TOKENS + sum(output_tokens),
        max_tokens=max_tokens,
        oversized=est_input > limits.context_window - max_tokens,
        learn_output_tokens=PACK_OUTPUT_OVERHEAD_TOKENS
        + sum(shape if shape is not None else output_tokens),
        thinking_tokens=min(limits.thinking_tokens, max_tokens),
        over_price_line=(
            limits.max_prompt_tokens is not None and est_input > limits.max_prompt_tokens
        ),
    )


def pack_numbers(packs: Sequence[Pack], first: int = 0) -> list[int]:
    """The pack index of each planned position, in position order; packs numbered from
    ``first`` (a retry's or a re-plan's packs follow the run's earlier ones)."""
    numbers = [0] * sum(len(p.positions) for p in packs)
    for n, pack in enumerate(packs):
        for pos in pack.positions:
            numbers[pos] = first + n
    return numbers


def plan_packs(
    block_tokens: Sequence[int], output_tokens: Sequence[int], limits: PlanLimits
) -> list[Pack]:
    """Split blocks, in order, into packs of consecutive blocks.

    Greedy: the next block joins the current pack while the pack's estimated output
    stays within ``budget * safety_margin``, its input within
    ``(context_window - fixed_prompt_tokens - budget - thinking_tokens) * safety_margin``,
    its whole prompt within ``max_prompt_tokens * safety_margin`` (the price line: a hard
    line, whatever else allows) and its size below :attr:`PlanLimits.size_cap`. A block
    too big to share goes alone. With a fixed ``pack_size`` the budgets give way to what
    the model can take at all (its maximum output, the context window), since
    ``max_tokens`` then grows with the pack; the price line holds all the same.

    Args:
        block_tokens: :func:`estimate_tokens` of each block's content (the JSON item
            around it is added here, and both scaled to the model's tokenizer).
        output_tokens: each block's expected output, in the model's tokens.
        limits: the limits to respect.

    Returns:
        Packs covering every position exactly once, in order. Same input, same plan.
    """
    if len(block_tokens) != len(output_tokens):
        raise ValueError("block_tokens and output_tokens must have the same length")
    fixed_size = limits.pack_size is not None
    margin = limits.safety_margin
    output_allowance = (limits.model_max_output if fixed_size else limits.budget) * margin
    input_allowance = (
        limits.context_window - limits.fixed_prompt_tokens - limits.budget - limits.thinking_tokens
    ) * margin
    prompt_allowance = limits.prompt_allowance

    def fits(output: int, input_: int) -> bool:
        if PACK_OUTPUT_OVERHEAD_TOKENS + output > output_allowance:
            return False
        if prompt_allowance is not None and limits.prompt_tokens(input_) > prompt_allowance:
            return False
        if fixed_size:
            room = limits.context_window - limits.fixed_prompt_tokens
            room -= max_tokens_for([output], limits)
            return limits.scaled(input_) <= room * margin
        return limits.scaled(input_) <= input_allowance

    packs: list[Pack] = []
    cap = limits.size_cap
    start, count = 0, len(block_tokens)
    while start < count:
        end = start + 1
        output = output_tokens[start]
        input_ = block_tokens[start] + BLOCK_WRAPPER_TOKENS
        while end < count and end - start < cap:
            more_output = output + output_tokens[end]
            more_input = input_ + block_tokens[end] + BLOCK_WRAPPER_TOKENS
            if not fits(more_output, more_input):
                break
            output, input_ = more_output, more_input
            end += 1
        packs.append(
            describe_pack(
                range(start, end), block_tokens[start:end], output_tokens[start:end], limits
            )
        )
        start = end
    return packs
