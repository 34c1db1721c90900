"""Request in, Message out: the simulated model, shared by /v1/messages and batches."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from core.registry import ModelInfo
from simulator.cache import CacheUsage, PromptCache
from simulator.clock import Clock
from simulator.content import generate
from simulator.errors import invalid, new_id
from simulator.faults import Answer, Dice, answer_blocks, malform
from simulator.prompt import Prompt, analyse
from simulator.scenario import Scenario
from simulator.tokenizer import count_tokens, truncate_to_tokens
from simulator.validate import ApiContext, check_context_window, validate_body


@dataclass
class Prepared:
    """A validated request, ready to answer."""

    body: dict[str, Any]
    model: ModelInfo
    prompt: Prompt


@dataclass
class Outcome:
    """The answer to one request, with what the stats and request log need."""

    message: dict[str, Any]
    stop_reason: str
    usage: dict[str, Any]
    cache: CacheUsage
    faults: list[str] = field(default_factory=list)
    #: The blocks' results as delivered (not truncated or malformed), with their true
    #: disagreement; ``None`` when the answer holds no whole set of block results.
    quality: Answer | None = None

    @property
    def output_tokens(self) -> int:
        return int(self.usage["output_tokens"])


def body_hash(body: Any) -> str:
    """A stable hash of a request body (key order does not matter)."""
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest()


class Engine:
    """Computes answers; owns the prompt cache and the per-body occurrence counts."""

    def __init__(self, scenario: Scenario, clock: Clock) -> None:
        self.scenario = scenario
        self.clock = clock
        self.cache = PromptCache(clock)
        self._seen: dict[str, int] = {}

    def reset(self) -> None:
        """Forget the cache and the occurrence counts (not the scenario)."""
        self.cache.clear()
        self._seen.clear()

    def dice_for(self, body: Any) -> Dice:
        """The random source for this arrival of ``body``."""
        digest = body_hash(body)
        occurrence = self._seen.get(digest, 0)
        self._seen[digest] = occurrence + 1
        return Dice(seed=self.scenario.seed, body_hash=digest, occurrence=occurrence)

    def prepare(
        self, body: Any, *, count_only: bool = False, context: ApiContext | None = None
    ) -> Prepared:
        """Validate ``body`` and analyse its prompt.

        ``context`` (sim-a hook): the API version, betas and batch membership the request
        is validated under, and the scenario's models (:mod:`simulator.validate`).

        Raises:
            ApiError: with the API's error type and message.
        """
        model = validate_body(body, count_only=count_only, scenario=self.scenario,
                              context=context)
        prompt = analyse(body)
        check_context_window(prompt.total_tokens, model)
        marker = self.scenario.reject_marker
        if marker and any(marker in block.content for block in prompt.blocks):
            raise invalid("messages.0.content: the request was refused because of the "
                          "content of one of its blocks")
        return Prepared(body=body, model=model, prompt=prompt)

    def peek_uncached_tokens(self, prepared: Prepared) -> int:
        """Input tokens that count against input-token rate limits (cache reads do not)."""
        usage = self.cache.lookup(
            prepared.model.id,
            prepared.prompt.breakpoints,
            prepared.model.min_cacheable_tokens,
            commit=False,
        )
        return prepared.prompt.total_tokens - usage.read

    def answer(self, prepared: Prepared, dice: Dice, *, service_tier: str = "standard") -> Outcome:
        """Produce the Message for a prepared request (writes and reads the cache)."""
        body, model, prompt = prepared.body, prepared.model, prepared.prompt
        cache = self.cache.lookup(
            model.id, prompt.breakpoints, model.min_cacheable_tokens, commit=True
        )
        tool = _forced_tool(body)
        faults: list[str] = []
        quality: Answer | None = None
        if tool is None:
            text, faults = _text_answer(prompt), []
            block, output, stop = _fit_text(text, body["max_tokens"])
        else:
            tool_input, faults, quality = self._tool_input(tool, prompt, dice)
            block, output, stop = self._fit_tool(tool, tool_input, body["max_tokens"], dice, faults)
            if stop != "tool_use":
                quality = None
        usage = {
            "input_tokens": prompt.total_tokens - cache.cached_upto,
            "output_tokens": output,
            "cache_creation_input_tokens": cache.creation,
            "cache_read_input_tokens": cache.read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": cache.creation_5m,
                "ephemeral_1h_input_tokens": cache.creation_1h,
            },
            "service_tier": service_tier,
        }
        message = {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        return Outcome(message=message, stop_reason=stop, usage=usage, cache=cache, faults=faults,
                       quality=quality)

    def _tool_input(
        self, tool: dict[str, Any], prompt: Prompt, dice: Dice
    ) -> tuple[dict[str, Any], list[str], Answer | None]:
        schema = tool["input_schema"]
        items = _results_items(schema)
        if items is None:
            return generate(schema, prompt.user_text, tool["name"]), [], None
        properties = items.get("properties") or {}
        answer = answer_blocks(prompt.blocks, properties, self.scenario, dice)
        if dice.chance(self.scenario.faults.malformed_tool_input, "malformed_tool_input"):
            answer.faults.append("malformed_tool_input")
            required = [r for r in items.get("required", []) if isinstance(r, str)]
            return malform(answer.results, required, dice), answer.faults, None
        return {"results": answer.results}, answer.faults, answer

    def _fit_tool(
        self,
        tool: dict[str, Any],
        tool_input: dict[str, Any],
        max_tokens: int,
        dice: Dice,
        faults: list[str],
    ) -> tuple[dict[str, Any], int, str]:
        needed = _json_tokens(tool_input)
        limit = max_tokens
        if needed >= 2 and dice.chance(self.scenario.faults.truncate, "truncate"):
            limit = min(limit, needed // 2)
            faults.append("truncate")
        stop, output = "tool_use", needed
        if needed > limit:
            stop, output = "max_tokens", limit
            tool_input = _truncate_input(tool_input, limit, self.scenario.truncation_mode)
        block = {
            "type": "tool_use",
            "id": new_id("toolu_"),
            "name": tool["name"],
            "input": tool_input,
        }
        return block, output, stop


def _forced_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    choice: dict[str, Any] = body.get("tool_choice") or {}
    tools: list[dict[str, Any]] = body.get("tools") or []
    if choice.get("type") == "tool":
        return next(t for t in tools if t["name"] == choice["name"])
    if choice.get("type") == "any" and tools:
        return tools[0]
    return None


def _results_items(schema: dict[str, Any]) -> dict[str, Any] | None:
    results = (schema.get("properties") or {}).get("results")
    if not isinstance(results, dict) or results.get("type") != "array":
        return None
    items = results.get("items")
    return items if isinstance(items, dict) else {}


def _json_tokens(value: Any) -> int:
    return count_tokens(json.dumps(value, ensure_ascii=False))


def _truncate_input(tool_input: dict[str, Any], limit: int, mode: str) -> dict[str, Any]:
    """The part of ``tool_input`` a model cut off at ``limit`` tokens would have sent."""
    results = tool_input.get("results")
    if mode == "empty" or not isinstance(results, list):
        return {}
    if _json_tokens({"results": []}) > limit:
        return {}
    low, high = 0, len(results)  # invariant: results[:low] fits, results[:high+1] does not
    while low < high:
        mid = (low + high + 1) // 2
        if _json_tokens({"results": results[:mid]}) <= limit:
            low = mid
        else:
            high = mid - 1
    return {"results": results[:low]}


def _text_answer(prompt: Prompt) -> str:
    if prompt.blocks:
        return (
            f"This is a simulated answer. I received {len(prompt.blocks)} blocks; "
            "ask with the forced tool to get one result per block."
        )
    words = prompt.user_text.split()
    return "This is a simulated answer about: " + " ".join(words[:8])


def _fit_text(text: str, max_tokens: int) -> tuple[dict[str, Any], int, str]:
    needed = count_tokens(text)
    if needed > max_tokens:
        return (
            {"type": "text", "text": truncate_to_tokens(text, max_tokens)},
            max_tokens,
            "max_tokens",
        )
    return {"type": "text", "text": text}, needed, "end_turn"
