"""The answer key of incremental re-runs (blockbatch/core/reuse.py): what changes it and what does not."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

import blockbatch.core.prompt
import blockbatch.core.reuse
from blockbatch.core.answer import CallShape, call_shape
from blockbatch.core.prompt import shape_for
from blockbatch.core.registry import get_model
from blockbatch.core.reuse import answer_key, block_digest, prompt_digest
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema

MODEL = "claude-sonnet-4-5"

BASE: dict[str, Any] = {
    "name": "tone",
    "properties": {
        "sentiment": {
            "type": "string",
            "enum": ["positive", "negative"],
            "description": "The overall tone",
        },
        "keywords": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    },
    "required": ["sentiment"],
    "prompt_config": {
        "system_instructions": "You rate the tone of legal text.",
        "per_block_prompt": "Rate this block.",
        "temperature": 0,
    },
}


def key(
    schema: dict[str, Any] = BASE,
    model: str = MODEL,
    block_type: str = "paragraph",
    content: str = "The tenant shall pay the rent.",
    shape: CallShape | None = None,
) -> str:
    spec = load_schema(copy.deepcopy(schema))
    prompt = prompt_digest(spec, model, shape or shape_for(spec, model))
    return answer_key(prompt, block_digest(block_type, content))


def changed(path: list[str], value: Any) -> dict[str, Any]:
    schema = copy.deepcopy(BASE)
    node = schema
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return schema


@pytest.mark.parametrize(
    ("what", "other"),
    [
        ("content", lambda: key(content="The tenant shall pay the rent!")),
        ("block type", lambda: key(block_type="heading")),
        ("model", lambda: key(model="claude-haiku-4-5")),
        (
            "instructions",
            lambda: key(
                changed(["prompt_config", "system_instructions"], "You rate the tone of contracts.")
            ),
        ),
        (
            "per-block prompt",
            lambda: key(changed(["prompt_config", "per_block_prompt"], "Rate it.")),
        ),
        ("channel", lambda: key(shape=call_shape(get_model(MODEL), strict_fits=False))),
        (
            "a field's enum",
            lambda: key(
                changed(["properties", "sentiment", "enum"], ["positive", "negative", "neutral"])
            ),
        ),
        (
            "a field's description",
            lambda: key(changed(["properties", "sentiment", "description"], "The tone")),
        ),
        ("a field's limit", lambda: key(changed(["properties", "keywords", "maxItems"], 3))),
        ("a new field", lambda: key(changed(["properties", "risk"], {"type": "integer"}))),
        ("required fields", lambda: key(changed(["required"], ["sentiment", "keywords"]))),
    ],
)
def test_what_decides_the_answer_changes_the_key(what: str, other: Any) -> None:
    assert other() != key(), what


def test_effort_and_thinking_change_the_key() -> None:
    sonnet = get_model("claude-sonnet-5-5")
    keys = {
        key(model=sonnet.id, shape=call_shape(sonnet, effort)) for effort in ("low", "high", "max")
    }  # max: thinking cannot be turned off
    assert len(keys) == 3


def test_the_prompt_format_version_is_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    before = key()
    monkeypatch.setattr(
        blockbatch.core.reuse,
        "PROMPT_FORMAT_VERSION",
        blockbatch.core.prompt.PROMPT_FORMAT_VERSION + 1,
    )
    assert key() != before


@pytest.mark.parametrize(
    ("what", "schema"),
    [
        ("schema name", changed(["name"], "tone-v2")),
        ("max_tokens_per_block", changed(["prompt_config", "max_tokens_per_block"], 400)),
        ("max_batch_size", changed(["prompt_config", "max_batch_size"], 5)),
        # The run's model is in the key; the schema's default model only picks it.
        ("the schema's default model", changed(["prompt_config", "model"], "claude-haiku-4-5")),
        # Never sent: the API no longer takes sampling parameters.
        ("temperature", changed(["prompt_config", "temperature"], 0.7)),
    ],
)
def test_what_only_sizes_or_names_leaves_the_key_alone(what: str, schema: dict[str, Any]) -> None:
    assert key(schema) == key(), what


def test_the_key_has_no_run_option_but_the_model() -> None:
    # Everything else a run sets changes packing, pacing or price, never the request a
    # block's answer comes from; a new option must be placed on one side of this line.
    # The effort is in the key as part of the run's call shape (core.answer.CallShape.key).
    assert set(RunOptions.model_fields) - {"model", "effort"} == {
        "pack_size",
        "batching_enabled",
        "estimated_output_per_block",
        "max_concurrent_packs",
        "max_block_attempts",
        "output_budget",
        "safety_margin",
        "hard_cap",
        "cache_ttl",
        "mode",
        "batch",
        "weight",
        "outage",
        "reuse_answers",
        # How blocks are named on the wire (b1 or their block_uid): not what a block's
        # answer is (core.prompt.PROMPT_FORMAT_VERSION says why).
        "short_ids",
        # How much the run may spend: which blocks get a call, never what it answers.
        "max_cost_usd",
        # The quality probe and gate: which blocks are also asked alone, and pack sizes.
        "quality",
        # Which blocks are sent (set-aside types or not), never what a block's answer is.
        "include_boilerplate",
        # Which platform answers: reuse keys on the endpoint that would answer now (provider
        # and host, core.endpoint), and the call shape a platform needs is in CallShape.key.
        "provider",
        "provider_model",
        # How long a call may go silent and how soon a failed one is tried again: pacing.
        "call_heartbeat_s",
        "call_retry_s",
        # How long a pack's database steps may take (db_step_s): pacing too.
        "db_step_s",
    }, (
        "a RunOptions field was added or removed: if it changes what a block's answer is, "
        "put it into core.reuse.prompt_digest; either way, list it here"
    )


def test_block_digest_is_unambiguous_and_matches_migration_010() -> None:
    # Type and content cannot trade characters: the type is length-prefixed.
    assert block_digest("ab", "c") != block_digest("a", "bc")
    # Migration 010's SQL: sha256 of length(block_type) || ':' || block_type || content.
    text = "Überweisung ✓ 漢字"
    expected = hashlib.sha256(f"{len('table')}:table{text}".encode()).hexdigest()
    assert block_digest("table", text) == expected
