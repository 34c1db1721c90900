"""Helpers to build requests shaped like the pipeline's, for tests and benchmarks."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

TOOL_NAME = "record_block_results"

#: Field definitions of a typical schema: computed fields and hash-chosen ones.
DEFAULT_FIELDS: dict[str, Any] = {
    "word_count": {"type": "integer"},
    "first_40_chars": {"type": "string"},
    "summary": {"type": "string", "maxLength": 80},
    "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    "is_question": {"type": "boolean"},
}


def results_tool(fields: dict[str, Any] | None = None, name: str = TOOL_NAME) -> dict[str, Any]:
    """The forced tool: ``{"results": [{"block_uid", ...fields}]}``."""
    fields = DEFAULT_FIELDS if fields is None else fields
    return {
        "name": name,
        "description": "Record one result per block, keyed by block_uid.",
        "input_schema": {
            "type": "object",
            "properties": {
                "results": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"block_uid": {"type": "string"}, **fields},
                        "required": ["block_uid", *fields],
                    },
                }
            },
            "required": ["results"],
        },
    }


def make_blocks(count: int, document: str = "doc", start: int = 0) -> list[dict[str, str]]:
    """``count`` blocks with distinct, deterministic content."""
    return [
        {
            "block_uid": f"{document}:{index}",
            "block_type": "paragraph",
            "block_content": f"Paragraph {index} of {document}: the quick brown fox jumps "
            f"over {index % 7 + 1} lazy dogs near the riverbank.",
        }
        for index in range(start, start + count)
    ]


def pack_params(
    blocks: list[dict[str, Any]],
    *,
    model: str = "claude-sonnet-4-6",
    max_tokens: int = 8000,
    system_text: str = "You extract fields from document blocks. ",
    system_repeat: int = 1,
    cache_ttl: str | None = "5m",
    fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``messages.create``, shaped like one blockbatch pack."""
    system_block: dict[str, Any] = {"type": "text", "text": system_text * system_repeat}
    if cache_ttl is not None:
        control = {"type": "ephemeral"}
        if cache_ttl == "1h":
            control["ttl"] = "1h"
        system_block["cache_control"] = control
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": [system_block],
        "tools": [results_tool(fields)],
        "tool_choice": {"type": "tool", "name": TOOL_NAME},
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Process each block using only its own content."},
                    {"type": "text", "text": json.dumps(blocks)},
                ],
            }
        ],
    }


def results_by_uid(message: Any) -> dict[str, dict[str, Any]]:
    """The tool results of an SDK ``Message``, keyed by block_uid."""
    tool_use = next(block for block in message.content if block.type == "tool_use")
    return {result["block_uid"]: result for result in tool_use.input["results"]}


def tool_input(message: Any) -> Any:
    """The raw tool input of an SDK ``Message``."""
    return next(block for block in message.content if block.type == "tool_use").input


def control(base_url: str, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
    """Call a running simulator's control API (``/_sim/...``) and return the decoded JSON."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        base_url + path, data=data, method=method, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        text = resp.read().decode()
    return json.loads(text) if text else None
