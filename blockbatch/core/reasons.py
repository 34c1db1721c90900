"""Why a block did not end done: one small, documented set of reason codes.

Every ``failed`` or ``cancelled`` overlay carries one of these in ``reason_code`` next to its
readable ``last_error``; the run summary, ``review``, ``export``, ``--json`` and the API's
per-item errors show them, and scripts may rely on them.

One code is a review flag, not a failure: ``ungrounded`` marks an ``ai_complete`` overlay
whose answer quoted, for some value, words its block does not hold (evidence,
blockbatch/core/evidence.py). The overlay is staged like any other; the code lets the review
grid and ``review --reason`` list it (:data:`REVIEW_FLAGS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

ReasonCode = Literal[
    "missing_from_answer",
    "invalid_value",
    "malformed_answer",
    "truncated",
    "prompt_too_long",
    "oversized",
    "request_rejected",
    "refused",
    "api_unavailable",
    "unreachable",
    "key_rejected",
    "spend_limit",
    "billing",
    "model_unavailable",
    "cancelled",
    "budget_exhausted",
    "unfinished",
    "invalid_row",
    "ungrounded",
]

#: Codes an answered (``ai_complete``) overlay may carry: flags for a person, not failures.
REVIEW_FLAGS: frozenset[str] = frozenset({"ungrounded"})

#: Each code and what it means for the user (docs/how-it-works.md's table is generated from this).
REASONS: dict[ReasonCode, str] = {
    "missing_from_answer": "the model's answers never included this block (after retries)",
    "invalid_value": "the model's result for this block did not validate against the schema",
    "malformed_answer": "the model's answer could not be parsed as the tool's input",
    "truncated": "the answer was cut off at max_tokens even with the block alone",
    "prompt_too_long": "the request was too long for the model even with the block alone",
    "oversized": "the block alone exceeds the model's context window; split it in the source",
    "request_rejected": "Claude refused the request holding this block alone (a 4xx)",
    "refused": "the model refused this block alone (stop_reason refusal; the message names "
    "the category); it is not asked again on the same model, and `retry` takes it "
    "only when asked by name (`--reason refused`), best on another model",
    "api_unavailable": "Claude stayed unavailable (429/5xx/529/no answer) through every retry, "
    "or a run's pause outlasted its limit (outage.max_pause_s)",
    "unreachable": "no connection reached Claude's endpoint (DNS, refused, TLS, proxy) and it "
    "never answered the run; the run stopped: check the workers' network, HTTPS_PROXY and "
    "ANTHROPIC_BASE_URL, then `retry RUN_ID --cancelled`",
    "key_rejected": "the API key was rejected (401/403); the run stopped",
    "spend_limit": "the account's spend limit was reached (a tier's monthly cap, a contract "
    "or organisation cap, or a limit set in the Console); the run stopped: "
    "raise the limit, then `retry RUN_ID --cancelled`",
    "billing": "Claude refused the call for billing (402: no credit, a payment problem); the "
    "run stopped: fix billing in the Console, then `retry RUN_ID --cancelled`",
    "model_unavailable": "Claude does not serve the run's model (404: retired or unknown); "
    "the run stopped: start a new run on the replacement it names",
    "cancelled": "the run was cancelled before this block was done",
    "budget_exhausted": "the run's budget (--max-cost) could not hold the call for this block; "
    "no call was made (`retry RUN_ID --max-cost USD` finishes it)",
    "unfinished": "no pack finished this block (a bug: please report it)",
    "invalid_row": "a stream row that was not JSON, or had no text in its text field; it was "
    "never stored, the stream went on",
    "ungrounded": "not a failure: the block was answered, but the quote given for at least one "
    "value is not in the block (evidence); review those values before confirming",
}


def counts_text(reasons: Mapping[str, int]) -> str:
    """``28 api_unavailable, 3 invalid_value``: reason codes with their counts, most first
    (ties by code), as every summary, error and UI line writes them."""
    ordered = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {code}" for code, n in ordered)
