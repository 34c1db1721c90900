"""Question mode: each block is a question to answer in plain text, with its own context.

``llm_batch(prompts, contexts)`` without a schema runs :data:`QUESTION_SCHEMA` (one string
field, ``answer``) over blocks made by :func:`question_block`. The schema's
``prompt_config.questions`` tells blockbatch/core/prompt.py to lay the blocks out as questions
(``{"block_uid", "question", "context"}``) under rules that say each question is answered
on its own, from its own context only, and that an instruction in one question never
applies to another. Everything else (packing, caching, validation by id, halving, the
ledger) is the pipeline's, unchanged.

How a question and its context are stored in a block: a question without a context is the
block's content as is (block type :data:`QUESTION_TYPE`); a question with a context is the
JSON object ``{"question", "context"}`` (block type :data:`QUESTION_IN_CONTEXT_TYPE`), so
the pair stays one block (one overlay, one answer key) and neither can pose as the other.
A block of any other type in a question-mode run (a schema with ``"questions": true`` over
a document) is a question without context.
"""

from __future__ import annotations

import json
from typing import Any

#: The block type of a question without context, and of one with a context.
QUESTION_TYPE = "question"
QUESTION_IN_CONTEXT_TYPE = "question_in_context"

#: The field every answer is recorded in.
ANSWER_FIELD = "answer"

#: The built-in schema of question mode (``load_schema`` checks it like any upload).
QUESTION_SCHEMA: dict[str, Any] = {
    "name": "questions",
    "description": "Plain-text answers to independent questions (llm_batch without a schema).",
    "properties": {
        ANSWER_FIELD: {
            "type": "string",
            "minLength": 1,
            "description": (
                "The answer to this item's question as plain text, following that "
                "question's own instructions (language, length, format)"
            ),
        },
    },
    "required": [ANSWER_FIELD],
    "prompt_config": {
        "system_instructions": (
            "You answer a list of independent questions, each from a different request. "
            "Answer each one as a careful assistant would if it were the only question "
            "asked."
        ),
        "questions": True,
    },
}


def question_block(question: str, context: str | None) -> tuple[str, str]:
    """(block_type, block_content) of one question and its optional context.

    An empty or blank context counts as none.
    """
    if context is None or not context.strip():
        return QUESTION_TYPE, question
    return QUESTION_IN_CONTEXT_TYPE, json.dumps(
        {"question": question, "context": context}, ensure_ascii=False
    )


def read_question(block_type: str, block_content: str) -> tuple[str, str | None]:
    """(question, context or None) of a block of a question-mode run.

    Raises:
        ValueError: a :data:`QUESTION_IN_CONTEXT_TYPE` block whose content is not the JSON
            object :func:`question_block` writes.
    """
    if block_type != QUESTION_IN_CONTEXT_TYPE:
        return block_content, None
    try:
        value = json.loads(block_content)
    except ValueError:
        value = None
    pair = value if isinstance(value, dict) else {}
    question, context = pair.get("question"), pair.get("context")
    if isinstance(question, str) and isinstance(context, str):
        return question, context
    raise ValueError(
        f"a {QUESTION_IN_CONTEXT_TYPE} block must hold the JSON object "
        '{"question": ..., "context": ...}'
    )
