"""Request in, Message out: the simulated model, shared by /v1/messages and batches.

What an answer holds follows the contract (``../shared/reference/claude-api-2026-11.md``),
decided from the request and the model's registry entry alone:

- **Channel** (§2): a forced tool (``tool_choice`` ``tool``/``any``) answers with a
  ``tool_use`` block of that tool; else ``output_config.format`` (``json_schema``) answers
  with one ``text`` block holding the JSON of the object; else ``tool_choice: auto`` (or
  none given) with a tool whose schema has a ``results`` array calls it, except with
  probability ``faults.auto_tool_text_rate`` (then it answers in text); anything else
  gets a short text. A results schema gets ``{"results": [...]}``, one result per block.
- **Structured outputs** (§2): under ``output_config.format`` or a ``strict: true`` tool the
  output conforms to the schema, required properties first, then optional ones, each in
  schema order. Faults that would break the schema (``malformed_tool_input``,
  ``always_malformed``) are recorded as ``*_suppressed`` instead; the rest still happen.
- **Thinking** (§3): see :func:`thinking_tokens`. A thinking answer starts with a
  ``thinking`` block (``thinking`` text empty when the display is ``omitted``, the 5.x
  default; a short summary when ``summarized``, the default of models that do not think
  by default), then the answer. Thinking is output: it counts in ``usage.output_tokens``,
  in ``usage.output_tokens_details.thinking_tokens`` and against ``max_tokens``.
- **Stops** (§0 rule 9, §2 failure modes): ``max_tokens`` cuts the answer (thinking
  first: a thinking run that uses up ``max_tokens`` leaves the thinking block only); when
  the prompt fits the context window but prompt plus output would not, the answer stops
  where the window ends with ``model_context_window_exceeded``; a refused block
  (``refuse_contents``, ``refuse_marker``) gives ``refusal`` with ``stop_details``;
  ``max_tokens: 0`` (§5) gives ``content: []``, ``max_tokens``, zero output, the cache
  written. Every other answer has ``stop_details: null``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from blockbatch.core.registry import ModelInfo
from blockbatch.simulator.cache import CacheUsage, PromptCache
from blockbatch.simulator.clock import Clock
from blockbatch.simulator.content import generate
from blockbatch.simulator.errors import invalid, new_id
from blockbatch.simulator.faults import Answer, Dice, answer_blocks, malform
from blockbatch.simulator.prompt import Prompt, analyse
from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.tokenizer import Tokenizer, tokenizer_for
from blockbatch.simulator.validate import ApiContext, check_context_window, validate_body

#: What the model says when it refuses (a refusal bills a little output, contract §2).
REFUSAL_TEXT = "I can't help with this request."


@dataclass
class Prepared:
    """A validated request, ready to answer."""

    body: dict[str, Any]
    model: ModelInfo
    prompt: Prompt
    tokenizer: Tokenizer


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


@dataclass
class _Channel:
    """How the request asks for its answer."""

    kind: str  # "tool", "json" or "text"
    schema: dict[str, Any] | None = None
    tool_name: str | None = None
    strict: bool = False


@dataclass
class _Reply:
    """The answer part after any thinking: its block (if any), tokens and stop."""

    block: dict[str, Any] | None
    tokens: int
    stop: str
    quality: Answer | None = None


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
        """The random source for this arrival of ``body``.

        ``stream`` is transport, not request: a streamed request draws like the same
        request unstreamed.
        """
        if isinstance(body, dict) and "stream" in body:
            body = {k: v for k, v in body.items() if k != "stream"}
        digest = body_hash(body)
        occurrence = self._seen.get(digest, 0)
        self._seen[digest] = occurrence + 1
        return Dice(seed=self.scenario.seed, body_hash=digest, occurrence=occurrence)

    def prepare(
        self, body: Any, *, count_only: bool = False, context: ApiContext | None = None
    ) -> Prepared:
        """Validate ``body`` and analyse its prompt with its model's tokenizer.

        ``context`` (sim-a hook): the API version, betas and batch membership the request
        is validated under, and the scenario's models (:mod:`blockbatch.simulator.validate`).

        Raises:
            ApiError: with the API's error type and message.
        """
        model = validate_body(body, count_only=count_only, scenario=self.scenario, context=context)
        tokenizer = tokenizer_for(model)
        prompt = analyse(body, tokenizer, model.default_effort)
        check_context_window(prompt.total_tokens, model)
        marker = self.scenario.reject_marker
        if marker and any(marker in block.content for block in prompt.blocks):
            raise invalid(
                "messages.0.content: the request was refused because of the "
                "content of one of its blocks"
            )
        return Prepared(body=body, model=model, prompt=prompt, tokenizer=tokenizer)

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
        body, model, prompt, tok = (
            prepared.body,
            prepared.model,
            prepared.prompt,
            prepared.tokenizer,
        )
        cache = self.cache.lookup(
            model.id, prompt.breakpoints, model.min_cacheable_tokens, commit=True
        )
        max_tokens: int = body["max_tokens"]
        # Contract §0 rule 9: output may run to max_tokens or to the end of the window.
        room = model.context_window - prompt.total_tokens
        limit, cut = (
            (max_tokens, "max_tokens")
            if max_tokens <= room
            else (room, "model_context_window_exceeded")
        )
        faults: list[str] = []
        content: list[dict[str, Any]] = []
        stop_details: dict[str, Any] | None = None
        thought = 0
        quality: Answer | None = None
        if max_tokens == 0:
            # Contract §5: a cache pre-warm; nothing is generated.
            stop, output = "max_tokens", 0
        elif self._refused(prompt):
            text = tok.truncate(REFUSAL_TEXT, limit)
            content, output, stop = [{"type": "text", "text": text}], tok.count(text), "refusal"
            stop_details = {
                "type": "refusal",
                "category": self.scenario.refusal_category,
                "explanation": self.scenario.refusal_explanation,
            }
            faults.append("refusal")
        else:
            planned = thinking_tokens(body, model, prompt, self.scenario, dice)
            if planned is not None:
                thought = min(planned, limit)
                content.append(_thinking_block(body, model, prompt, thought, dice))
            if planned is not None and planned >= limit:
                stop, output = cut, limit
            else:
                reply = self._reply(prepared, dice, limit - thought, cut, faults)
                if reply.block is not None:
                    content.append(reply.block)
                stop, output, quality = reply.stop, thought + reply.tokens, reply.quality
        usage = {
            "input_tokens": prompt.total_tokens - cache.cached_upto,
            "output_tokens": output,
            "cache_creation_input_tokens": cache.creation,
            "cache_read_input_tokens": cache.read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": cache.creation_5m,
                "ephemeral_1h_input_tokens": cache.creation_1h,
            },
            "output_tokens_details": {"thinking_tokens": thought},
            "service_tier": service_tier,
        }
        message = {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "stop_details": stop_details,
            "usage": usage,
        }
        return Outcome(
            message=message,
            stop_reason=stop,
            usage=usage,
            cache=cache,
            faults=faults,
            quality=quality,
        )

    def _refused(self, prompt: Prompt) -> bool:
        contents, marker = set(self.scenario.refuse_contents), self.scenario.refuse_marker
        return any(
            block.content in contents or (marker and marker in block.content)
            for block in prompt.blocks
        )

    def _reply(
        self, prepared: Prepared, dice: Dice, room: int, cut: str, faults: list[str]
    ) -> _Reply:
        """The answer after any thinking, in at most ``room`` tokens (``cut``: the stop
        reason when it does not fit)."""
        channel = _channel(prepared.body, dice, self.scenario, faults)
        tok, prompt = prepared.tokenizer, prepared.prompt
        if channel.kind == "text" or channel.schema is None:
            return _fit_text(_text_answer(prompt), room, cut, tok, end="end_turn")
        value, quality = self._structured(channel, prompt, dice, faults, prepared.model.id)
        needed = _json_tokens(value, tok)
        limit, reason = room, cut
        if needed >= 2 and dice.chance(self.scenario.faults.truncate, "truncate"):
            if needed // 2 < limit:
                limit, reason = needed // 2, "max_tokens"
            faults.append("truncate")
        if channel.kind == "json":
            text = json.dumps(value, ensure_ascii=False)
            reply = _fit_text(text, limit, reason, tok, end="end_turn")
        else:
            stop, tokens = "tool_use", needed
            if needed > limit:
                stop, tokens = reason, limit
                value = _truncate_input(value, limit, self.scenario.truncation_mode, tok)
            block = {
                "type": "tool_use",
                "id": new_id("toolu_"),
                "name": channel.tool_name,
                "input": value,
            }
            reply = _Reply(block, tokens, stop)
        complete = reply.stop in ("tool_use", "end_turn")
        reply.quality = quality if complete else None
        return reply

    def _structured(
        self, channel: _Channel, prompt: Prompt, dice: Dice, faults: list[str], model: str
    ) -> tuple[Any, Answer | None]:
        """The object the channel's schema asks for, with the scenario's faults (and
        ``model``'s own quality rates, if the scenario gives it some)."""
        schema = channel.schema or {}
        items = _results_items(schema)
        if items is None:
            value = generate(schema, prompt.user_text, channel.tool_name or "output")
            return (schema_ordered(value, schema) if channel.strict else value), None
        properties = items.get("properties") or {}
        answer = answer_blocks(
            prompt.blocks, properties, self.scenario, dice, strict=channel.strict, model=model
        )
        faults.extend(answer.faults)
        if dice.chance(self.scenario.faults.malformed_tool_input, "malformed_tool_input"):
            if channel.strict:
                faults.append("malformed_tool_input_suppressed")
            else:
                faults.append("malformed_tool_input")
                required = [r for r in items.get("required", []) if isinstance(r, str)]
                return malform(answer.results, required, dice), None
        value = {"results": answer.results}
        return (schema_ordered(value, schema) if channel.strict else value), answer


def thinking_tokens(
    body: dict[str, Any], model: ModelInfo, prompt: Prompt, scenario: Scenario, dice: Dice
) -> int | None:
    """How many tokens the request thinks (``None``: it does not think), contract §3.

    It thinks when the model thinks by default (``thinking_default`` ``adaptive`` or
    ``always``) or the request asks for ``adaptive`` or ``enabled`` thinking, unless:
    the request sends ``{"type": "disabled"}``; it sends ``{"type": "between_tools"}``
    and its last user turn carries no tool result (the first answer does not think); or
    it forces a tool on a model that then answers without thinking (Haiku 5.5). How
    much: :class:`blockbatch.simulator.scenario.Thinking` (assumptions, not measurements) at the
    request's ``output_config.effort``, else the model's default effort, else ``high``;
    ``enabled`` thinking uses at most ``budget_tokens``.
    """
    config = body.get("thinking") or {}
    kind = config.get("type")
    if kind == "disabled":
        return None
    if kind == "between_tools" and not _after_tool_result(body):
        return None
    if kind is None and not model.thinks_by_default:
        return None
    if _forced_tool(body) is not None and model.forced_tool_skips_thinking:
        return None
    effort = (body.get("output_config") or {}).get("effort") or model.default_effort or "high"
    settings = scenario.thinking
    adaptive = kind != "enabled" and model.thinking_default != "always"
    if (
        adaptive
        and effort == "low"
        and len(prompt.blocks) <= 1
        and dice.steady("thinking_skip") < settings.low_effort_skip
    ):
        return None
    planned = settings.base.get(effort, 0) + settings.per_block.get(effort, 0) * len(prompt.blocks)
    planned = round(
        planned * (1 - settings.jitter + 2 * settings.jitter * dice.steady("thinking_jitter"))
    )
    if kind == "enabled" and isinstance(config.get("budget_tokens"), int):
        planned = min(planned, config["budget_tokens"])
    return max(1, planned)


def _after_tool_result(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    content = last.get("content")
    return (
        last["role"] == "user"
        and isinstance(content, list)
        and any(isinstance(part, dict) and part.get("type") == "tool_result" for part in content)
    )


def _thinking_block(
    body: dict[str, Any], model: ModelInfo, prompt: Prompt, tokens: int, dice: Dice
) -> dict[str, Any]:
    """A ``thinking`` block: the text empty when the display is ``omitted`` (the default
    where the model thinks by default, the 5.x line), a short summary when ``summarized``
    (the default of Sonnet 4.6 and earlier), and an opaque signature."""
    display = (body.get("thinking") or {}).get("display") or (
        "omitted" if model.thinks_by_default else "summarized"
    )
    text = ""
    if display == "summarized":
        text = (
            f"The request holds {len(prompt.blocks)} block(s); each field comes from its "
            "own block's content only."
            if prompt.blocks
            else "A short, direct answer is enough here."
        )
    seed = f"{dice.body_hash}\x1f{model.id}\x1f{tokens}".encode()
    signature = base64.b64encode(hashlib.sha512(seed).digest()).decode()
    return {"type": "thinking", "thinking": text, "signature": signature}


def _channel(body: dict[str, Any], dice: Dice, scenario: Scenario, faults: list[str]) -> _Channel:
    forced = _forced_tool(body)
    if forced is not None:
        return _Channel(
            "tool", forced["input_schema"], forced["name"], strict=forced.get("strict") is True
        )
    output_format = (body.get("output_config") or {}).get("format")
    if isinstance(output_format, dict) and output_format.get("type") == "json_schema":
        return _Channel("json", output_format.get("schema") or {}, strict=True)
    choice = (body.get("tool_choice") or {}).get("type", "auto")
    ours = next(
        (
            t
            for t in body.get("tools") or []
            if _results_items(t.get("input_schema") or {}) is not None
        ),
        None,
    )
    if choice == "auto" and ours is not None:
        if dice.chance(scenario.faults.auto_tool_text_rate, "auto_tool_text"):
            faults.append("auto_tool_text")
            return _Channel("text")
        return _Channel(
            "tool", ours["input_schema"], ours["name"], strict=ours.get("strict") is True
        )
    return _Channel("text")


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


def schema_ordered(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with every object's keys in structured-output order (contract §2):
    required properties first, then optional ones, each in schema order; keys the
    schema does not name keep their place at the front."""
    if isinstance(value, list):
        items = schema.get("items")
        return [schema_ordered(v, items if isinstance(items, dict) else {}) for v in value]
    if not isinstance(value, dict):
        return value
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return value
    required = [name for name in properties if name in set(schema.get("required") or [])]
    optional = [name for name in properties if name not in required]
    ordered = {k: v for k, v in value.items() if k not in properties}
    for name in (*required, *optional):
        if name in value:
            sub = properties[name]
            ordered[name] = schema_ordered(value[name], sub if isinstance(sub, dict) else {})
    return ordered


def _json_tokens(value: Any, tok: Tokenizer) -> int:
    return tok.count(json.dumps(value, ensure_ascii=False))


def _truncate_input(tool_input: Any, limit: int, mode: str, tok: Tokenizer) -> dict[str, Any]:
    """The part of ``tool_input`` a model cut off at ``limit`` tokens would have sent."""
    results = tool_input.get("results") if isinstance(tool_input, dict) else None
    if mode == "empty" or not isinstance(results, list):
        return {}
    if _json_tokens({"results": []}, tok) > limit:
        return {}
    low, high = 0, len(results)  # invariant: results[:low] fits, results[:high+1] does not
    while low < high:
        mid = (low + high + 1) // 2
        if _json_tokens({"results": results[:mid]}, tok) <= limit:
            low = mid
        else:
            high = mid - 1
    return {"results": results[:low]}


def _text_answer(prompt: Prompt) -> str:
    if prompt.blocks:
        return (
            f"This is a simulated answer. I received {len(prompt.blocks)} blocks; "
            "ask with the results tool or a JSON output format to get one result per block."
        )
    words = prompt.user_text.split()
    return "This is a simulated answer about: " + " ".join(words[:8])


def _fit_text(text: str, limit: int, cut: str, tok: Tokenizer, *, end: str) -> _Reply:
    """A text block of ``text``, cut (invalid JSON, if it was JSON) when it needs more
    than ``limit`` tokens; an answer cut to nothing has no text block."""
    needed = tok.count(text)
    if needed <= limit:
        return _Reply({"type": "text", "text": text}, needed, end)
    cut_text = tok.truncate(text, limit)
    return _Reply({"type": "text", "text": cut_text} if cut_text else None, limit, cut)
