"""Builders for test documents and schemas."""

from __future__ import annotations

import os
import random
from typing import Any

import asyncpg

from blockbatch.core.batch_types import BatchOptions
from blockbatch.devtools.synthetic import WORDS, checkable_properties, markdown_document

_WORDS = WORDS


#: ``BLOCKBATCH_TEST_TIER``: ``fast`` in `make test-fast`, unset in `make test`, ``deep`` in
#: `make test-deep` (docs/testing.md, "Property tests").
TIER = os.environ.get("BLOCKBATCH_TEST_TIER", "")


def examples(n: int, tier: str | None = None) -> int:
    """A property test's ``max_examples``: ``n`` in `make test-deep`, a quarter (at least 50)
    in `make test`, a tenth (at least 20) in `make test-fast` (``tier``: this run's)."""
    tier = TIER if tier is None else tier
    if tier == "deep":
        return n
    if tier == "fast":
        return min(n, max(20, n // 10))
    return min(n, max(50, n // 4))


def markdown_doc(n_blocks: int, seed: int = 7) -> bytes:
    """A Markdown document of exactly ``n_blocks`` blocks (headings and paragraphs)."""
    return markdown_document(n_blocks, seed)


async def block_content(pool: asyncpg.Pool, block_uid: str) -> str:
    """A block's text. Requests name blocks by short ids (``b1``, ``b2``, … per call), so a
    test picks one block for the simulator by its text (``always_skip_contents``)."""
    content = await pool.fetchval(
        "select block_content from blocks where block_uid = $1", block_uid
    )
    assert content is not None, f"no block {block_uid}"
    return str(content)


#: The simulator refuses any request holding a block with this text (scenario ``reject_marker``).
REJECT_MARKER = "FORBIDDEN-CONTENT"

#: Batch polling for tests: the first look 0.2 s after a batch is submitted, doubling up to
#: 1 s apart (real runs: 5 s, up to 5 minutes). Looking from 0.1 s, at most 0.3 s apart,
#: did not make the batch-mode, retry and rejected-request files faster (72 s and 75 s).
TEST_BATCH_POLLS = BatchOptions(poll_initial_s=0.2, poll_max_s=1.0)


def marked_paragraphs(n: int, marked: set[int]) -> list[str]:
    """``n`` short paragraphs; those at ``marked`` carry :data:`REJECT_MARKER`."""
    return [
        f"Paragraph {i} of the runbook about restarting service {i}."
        + (f" {REJECT_MARKER}" if i in marked else "")
        for i in range(n)
    ]


def marked_document(n: int, marked: set[int]) -> bytes:
    """A Markdown document of :func:`marked_paragraphs`, one block each."""
    return "\n\n".join(marked_paragraphs(n, marked)).encode()


def long_instructions(approx_words: int) -> str:
    rng = random.Random(3)
    sentences: list[str] = []
    while sum(len(s.split()) for s in sentences) < approx_words:
        words = [rng.choice(_WORDS) for _ in range(14)]
        sentences.append("When a block mentions " + " ".join(words) + ", classify it carefully.")
    return " ".join(sentences)


def extract_schema(instruction_words: int = 1500, **prompt: Any) -> dict[str, Any]:
    """An extraction schema whose fields the simulator computes from each block's content."""
    return {
        "name": "test-extract",
        "properties": checkable_properties(),
        "prompt_config": {
            "system_instructions": "You annotate blocks of an on-call handbook. "
            + long_instructions(instruction_words),
            "per_block_prompt": "Annotate each block.",
            **prompt,
        },
    }


def loose_schema(instruction_words: int = 200) -> dict[str, Any]:
    """An extraction schema outside the structured-outputs subset (a lookahead pattern):
    its runs take the plain forced tool, whose input a model can get wrong. A strict
    tool's input always fits its schema (the simulator suppresses malformed faults there)."""
    schema = extract_schema(instruction_words=instruction_words)
    schema["properties"]["block_type"] = {"type": "string", "pattern": "^(?!zzz)"}
    return schema


def revise_schema(instruction_words: int = 800) -> dict[str, Any]:
    return {
        "name": "test-revise",
        "properties": {
            "revised_text": {"type": "string", "description": "The block rewritten."},
            "word_count": {"type": "integer"},
        },
        "prompt_config": {
            "system_instructions": "Edit for clarity. " + long_instructions(instruction_words)
        },
    }


def error_body(err: Exception) -> dict[str, Any]:
    """The JSON body of an SDK ``APIStatusError`` (the SDK types it ``object``)."""
    body = getattr(err, "body", None)
    assert isinstance(body, dict), f"no JSON body on {err!r}"
    return body
