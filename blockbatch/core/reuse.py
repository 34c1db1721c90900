"""Incremental re-runs: which earlier answer may stand in for a call, by content.

A block's **answer key** is a hash over everything that decides the model's answer for it:

* the block: its ``block_type`` and ``block_content`` (:func:`block_digest`, stored with
  the block at ingest). Not its ``block_uid``: an edited document ingested again is a new
  document with new uids, and its unchanged blocks must still match. Not its metadata,
  which is never sent;
* the prompt (:func:`prompt_digest`): the system prompt and the tool as built for the
  schema (instructions, field definitions with types, enums and limits, the fixed rules
  with the channel's answer rule), the user message's fixed text (``per_block_prompt``),
  the model the run calls, the run's call shape (``blockbatch.core.answer.CallShape.key``: the
  answer channel, thinking and effort), and :data:`blockbatch.core.prompt.PROMPT_FORMAT_VERSION` for
  what the rendered texts do not show (how blocks are named and laid out on the wire),
  and ``layout`` for question mode (``prompt_config.questions``: blocks sent as questions
  with their contexts). Not ``temperature``: it is never sent (the API removed it).

Left out on purpose, because they do not change what a block's answer is: the schema's
name, ``max_tokens_per_block``, ``max_batch_size`` and its default ``model`` (the run's
model is in the key); and every other ``RunOptions`` field: packing (``pack_size``,
``batching_enabled``, output budget, margins), ``cache_ttl`` (only the cache marker),
``mode`` (sync or batch: the same request at another price), concurrency, attempts,
weight and outage handling. Which other blocks share a pack is not in the key either:
every block's answer must come from its own content only (the prompt says so, and
parity is measured: bench/cost.py).

What may be reused (:data:`REUSABLE`): an overlay the model answered and nobody rejected
(``ai_complete`` or ``confirmed``), and of it the model's own answer, never a reviewer's
edit (``overlays.model_answer`` keeps it once staging is edited).
"""

from __future__ import annotations

import hashlib
import json

from blockbatch.core.answer import CallShape
from blockbatch.core.prompt import (
    PROMPT_FORMAT_VERSION,
    build_system,
    build_tool,
    user_instructions,
)
from blockbatch.core.schema import SchemaSpec

#: Overlay statuses whose answer another run may reuse. Not ``rejected``: a person refused
#: it. Not ``failed``, ``cancelled`` or ``pending``: there is no valid answer.
REUSABLE = ("ai_complete", "confirmed")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def block_digest(block_type: str, block_content: str) -> str:
    """The digest of what a request says of one block besides its name.

    The type is length-prefixed so that no type/content split can collide with another;
    migration 010 computes the same in SQL for blocks stored before it.
    """
    return _sha256(f"{len(block_type)}:{block_type}{block_content}")


def prompt_digest(spec: SchemaSpec, model_id: str, shape: CallShape) -> str:
    """The digest of everything a run's requests share that decides an answer.

    Args:
        spec: the run's schema.
        model_id: the model the run calls (``ModelInfo.id``, as sent).
        shape: the run's call shape (``RunContext.shape``).
    """
    material = {
        "format": PROMPT_FORMAT_VERSION,
        "model": model_id,
        "shape": shape.key(),
        # The texts without their cache marker: cache_ttl does not change an answer.
        "system": [block["text"] for block in build_system(spec, channel=shape.channel)],
        # The user's fields as the answer's schema; on a strict channel the API's copy is
        # their translation (blockbatch/core/structured.py), which the channel in the shape names.
        "tool": build_tool(spec),
        "user": user_instructions(spec, 1),
    }
    if spec.prompt_config.questions:
        # Blocks laid out as questions with their contexts (blockbatch/core/prompt.py); only then, so
        # the digests of schema runs stay as they were.
        material["layout"] = "questions"
    return _sha256(json.dumps(material, sort_keys=True, ensure_ascii=False))


def answer_key(prompt: str, block: str) -> str:
    """The answer key of one block (:func:`block_digest`) under one prompt
    (:func:`prompt_digest`)."""
    return _sha256(f"{prompt}:{block}")
