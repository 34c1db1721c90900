"""Why a block did not end done: one small, documented set of reason codes.

Every ``failed`` or ``cancelled`` overlay carries one of these in ``reason_code`` next to its
readable ``last_error``; the run summary, ``review``, ``export``, ``--json`` and the API's
per-item errors show them, and scripts may rely on them.
"""

from __future__ import annotations

from typing import Literal

ReasonCode = Literal[
    "missing_from_answer", "invalid_value", "malformed_answer", "truncated",
    "prompt_too_long", "oversized", "request_rejected", "api_unavailable", "key_rejected",
    "cancelled", "budget_exhausted", "unfinished", "invalid_row", "refused",
]

#: Each code and what it means for the user (the README's table is built from this).
REASONS: dict[ReasonCode, str] = {
    "missing_from_answer": "the model's answers never included this block (after retries)",
    "invalid_value": "the model's result for this block did not validate against the schema",
    "malformed_answer": "the model's answer could not be parsed as the tool's input",
    "truncated": "the answer was cut off at max_tokens even with the block alone",
    "prompt_too_long": "the request was too long for the model even with the block alone",
    "oversized": "the block alone exceeds the model's context window; split it in the source",
    "request_rejected": "Claude refused the request holding this block alone (a 4xx)",
    "api_unavailable": "Claude stayed unavailable (429/5xx/529/no answer) through every retry",
    "key_rejected": "the API key was rejected (401/403); the run stopped",
    "cancelled": "the run was cancelled before this block was done",
    "budget_exhausted": "the run's budget (--max-cost) could not hold the call for this block; "
                        "no call was made (`retry RUN_ID --max-cost USD` finishes it)",
    "unfinished": "no pack finished this block (a bug: please report it)",
    "invalid_row": "a stream row that was not JSON, or had no text in its text field; it was "
                   "never stored, the stream went on",
    "refused": "the model refused to answer for this block (stop_reason refusal; the "
               "category is in last_error); not asked again on the same model",
}
