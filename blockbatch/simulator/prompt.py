"""Reading a (validated) Messages request: token accounting, cache breakpoints, blocks.

The prompt is a sequence of segments in the API's prefix order (tools, then system, then
messages); a segment that carries ``cache_control`` ends a cacheable prefix. Every count
is the request model's tokenizer's (contract §0 rule 8, ``blockbatch/simulator/tokenizer.py``); the
per-message role markers are a fixed number of tokens on either generation.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from blockbatch.simulator.tokenizer import OLD, Tokenizer

#: Fixed tokens per message for the role markers around it.
MESSAGE_OVERHEAD = 3
#: Tokens of the hidden system prompt ``output_config.format`` adds besides the schema's
#: own JSON (contract §2 "Prompt caching": billed as input). An assumption: the API does
#: not publish its size.
FORMAT_PROMPT_TOKENS = 40


@dataclass(frozen=True)
class Breakpoint:
    """The end of a cacheable prefix: its length in tokens, its hash and its TTL."""

    tokens: int
    prefix_hash: str
    ttl: str


@dataclass(frozen=True)
class Block:
    """One document block found in the request (or one question, in question mode:
    ``content`` is the question and ``context`` its own context, if any)."""

    uid: str
    type: str
    content: str
    question: bool = False
    context: str | None = None


@dataclass
class Prompt:
    """What the engine needs to know about a request's prompt."""

    total_tokens: int = 0
    breakpoints: list[Breakpoint] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    user_text: str = ""


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _without_cache_control(part: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in part.items() if k != "cache_control"}


def tool_tokens(tool: dict[str, Any], tokenizer: Tokenizer = OLD) -> int:
    """Tokens of one tool definition: name, description and JSON of its input schema."""
    schema = json.dumps(tool.get("input_schema", {}), ensure_ascii=False)
    return (
        tokenizer.count(str(tool.get("name", "")))
        + tokenizer.count(str(tool.get("description", "")))
        + tokenizer.count(schema)
    )


def content_block_tokens(block: dict[str, Any], tokenizer: Tokenizer = OLD) -> int:
    """Tokens of one content block (text counts its text; others their JSON)."""
    if block.get("type") == "text":
        return tokenizer.count(str(block.get("text", "")))
    return tokenizer.count(_canon(_without_cache_control(block)))


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def analyse(
    body: dict[str, Any], tokenizer: Tokenizer = OLD, default_effort: str | None = None
) -> Prompt:
    """Count tokens (with the request model's ``tokenizer``), find cache breakpoints and
    blocks of a validated request body.

    The prefix follows contract §5's layers: tools, then ``output_config.format``'s
    hidden prompt (a format change invalidates the cache of the whole thread, §2), then
    system, then messages. ``thinking``, the effort (``default_effort`` when the request
    names none: sending the default equals omitting it, §3) and ``tool_choice`` key the
    messages layer only: changing them misses every breakpoint in the messages, never
    one on the tools or system.
    """
    prompt = Prompt()
    digest = hashlib.sha256()

    def add(tokens: int, key: Any, part: dict[str, Any] | None) -> None:
        prompt.total_tokens += tokens
        digest.update(_canon(key).encode())
        control = (part or {}).get("cache_control")
        if isinstance(control, dict):
            ttl = control.get("ttl", "5m")
            prompt.breakpoints.append(
                Breakpoint(prompt.total_tokens, digest.copy().hexdigest(), ttl)
            )

    for tool in body.get("tools") or []:
        add(tool_tokens(tool, tokenizer), ["tool", _without_cache_control(tool)], tool)
    output_config = body.get("output_config") or {}
    output_format = output_config.get("format")
    if isinstance(output_format, dict):
        add(
            FORMAT_PROMPT_TOKENS + tokenizer.count(_canon(output_format)),
            ["format", output_format],
            None,
        )
    system = body.get("system")
    if system:
        for part in _content_parts(system):
            add(
                content_block_tokens(part, tokenizer),
                ["system", _without_cache_control(part)],
                part,
            )
    effort = output_config.get("effort") or default_effort
    digest.update(_canon(["shape", body.get("thinking"), effort, body.get("tool_choice")]).encode())
    for message in body["messages"]:
        add(MESSAGE_OVERHEAD, ["role", message["role"]], None)
        for part in _content_parts(message["content"]):
            add(
                content_block_tokens(part, tokenizer),
                ["content", _without_cache_control(part)],
                part,
            )

    last_user = next((m for m in reversed(body["messages"]) if m["role"] == "user"), None)
    if last_user is not None:
        texts = [
            str(p.get("text", ""))
            for p in _content_parts(last_user["content"])
            if p.get("type") == "text"
        ]
        prompt.user_text = "\n".join(texts)
        prompt.blocks = find_blocks(texts)
    return prompt


def find_blocks(texts: list[str]) -> list[Block]:
    """The blocks of the first text that is a JSON array of ``{"block_uid", ...}`` objects.

    An array whose items carry ``question`` (question mode) gives question blocks.
    """
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if not isinstance(value, list) or not value:
            continue
        if not all(isinstance(item, dict) and "block_uid" in item for item in value):
            continue
        if all("question" in item for item in value):
            return [
                Block(
                    uid=str(item["block_uid"]),
                    type="question",
                    content=_as_text(item["question"]),
                    question=True,
                    context=_as_text(item["context"]) if "context" in item else None,
                )
                for item in value
            ]
        return [
            Block(
                uid=str(item["block_uid"]),
                type=str(item.get("block_type", "")),
                content=_as_text(item.get("block_content", "")),
            )
            for item in value
        ]
    return []


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else _canon(value)
