"""The pack policy: what follows one pack attempt. One pure function for both modes.

A sync ``ProcessPack`` (workflows/pack.py) and a batch round (``apply_round`` in
activities/batches/apply.py) both ask :func:`decide` what to do once an attempt has a
result, and only carry the answer out:

| the attempt | step |
|---|---|
| nothing left to do (every block already finished) | ``done`` |
| answered, every block finished | ``done`` |
| answered, blocks left, run stopping | ``keep`` (they end ``cancelled``) |
| answered, blocks left, one block | ``retry`` (``apply_results`` charged the attempt) |
| answered, blocks left, several | ``split`` into halves (no attempt charged) |
| a single block too large for the model | ``fail`` |
| Claude refused the account: a rejected key (401/403), a spend cap, billing (402), a model it does not serve (404) | ``fatal`` with the error's code (``key_rejected``, ``spend_limit``, ``billing``, ``model_unavailable``): the run's calls stop at once, no retry, no halving |
| answered, refused (``stop_reason: refusal``), several blocks | ``split``: ``apply_results`` charged no attempt (a mapping failure) |
| answered, refused, one block | ``apply_results`` failed it at once with ``refused`` (:func:`attempt_limit`), so ``done``: never asked again on the same model |
| prompt too long / request too large, several blocks | ``split`` (``keep`` when stopping) |
| prompt too long / request too large, one block | ``fail`` |
| rejected request (other 4xx), several blocks | ``split``: one block's content may be why |
| rejected request (other 4xx), one block | ``fail`` with Claude's message |
| run stopping before or instead of a call | ``keep`` |
| the run's budget cannot hold the call (no call made), several blocks, one of them would fit | ``split``: the halves may fit what is left |
| the run's budget cannot hold the call (no call made), otherwise | ``fail`` with ``budget_exhausted``; the run starts no more packs |
| transient error (429, 5xx, 529, no answer, batch expired/canceled/missing), retries left | ``resubmit`` |
| Claude down (5xx, 529, no answer), no retries left, the run can pause | ``wait``: the run pauses and probes; the attempt is made again once Claude answers |
| transient error, no retries left | ``fail`` |

Retries of transient errors in sync mode belong to Temporal (the activity's retry policy);
the workflow sees such an error only once those retries are spent, as ``retries_left=False``.
Splits and resubmissions never consume a block's attempts; per-block failures do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from blockbatch.core.call_types import FailBlocksInput
from blockbatch.core.claude_errors import ClaudeError, is_outage
from blockbatch.core.reasons import REASONS, ReasonCode

Step = Literal["done", "retry", "split", "resubmit", "wait", "fail", "keep", "fatal"]
#: What became of an attempt: ``answered`` (then applied), ``errored`` (a classified
#: Claude error), ``not_processed`` (a batch request that expired, was canceled or has no
#: result line), ``nothing_left``, ``oversized`` (a lone block beyond the model's limits),
#: ``stopped`` (the run is cancelling: no call was made), ``over_budget`` (the run's
#: budget could not hold the call: no call was made).
AttemptResult = Literal[
    "answered", "errored", "not_processed", "nothing_left", "oversized", "stopped", "over_budget"
]

#: Why a batch request was not processed, by its result kind.
NOT_PROCESSED = {
    "expired": "the batch expired (24 h) before this request was processed",
    "canceled": "the batch was canceled before this request was processed",
    "missing": "the ended batch had no result for this request",
}


@dataclass(frozen=True)
class Decision:
    """What to do with one pack attempt once its result is in (and applied)."""

    step: Step
    reason: str = ""
    #: For ``fail``, ``keep`` and ``fatal``: the reason code the blocks end with
    #: (``keep``: ``cancelled``, what they end as unless the run says otherwise).
    code: ReasonCode | None = None


def decide(
    result: AttemptResult,
    *,
    blocks: int,
    remaining: int = 0,
    reason: str = "",
    error: ClaudeError | None = None,
    retries_left: bool = False,
    stopping: bool = False,
    can_pause: bool = False,
) -> Decision:
    """The next step for a pack attempt (see the table in the module docstring).

    Args:
        result: what became of the attempt.
        blocks: how many blocks the attempt held.
        remaining: for ``answered``: blocks still pending after ``apply_results``.
        reason: for ``answered``: ``apply_results``'s summary of why blocks remain; for
            ``oversized`` and ``over_budget``: the readable message; for ``not_processed``: the batch result
            kind (``expired``, ``canceled``, ``missing``); for ``errored``: the readable
            message when the caller already has one (else the error's own description).
        error: for ``errored``: the classified error (``None``: not a Claude error, e.g. a
            worker-side failure; treated as transient).
        retries_left: whether a transient failure may be tried again.
        stopping: the run is cancelling or failing: nothing new is started.
        can_pause: the run rides out outages (sync mode): a pack whose call failed because
            Claude is down waits for the run to resume instead of failing its blocks.
    """
    if result == "nothing_left":
        return Decision("done")
    if result == "answered":
        if not remaining:
            return Decision("done")
        if stopping:
            return Decision("keep", reason, "cancelled")
        return Decision("retry" if blocks == 1 else "split", reason)
    if result == "oversized":
        return Decision("fail", reason, "oversized")
    if result == "stopped":
        return Decision("keep", reason or "run is cancelling", "cancelled")
    if result == "over_budget":
        # Nothing was sent; the blocks end failed (not cancelled), so that a retry with a
        # raised budget takes them.
        return Decision("fail", reason or "the run's budget is spent", "budget_exhausted")
    if result == "errored":
        # An error that was not classified (a worker-side failure) counts as transient.
        what = reason or (error.describe() if error is not None else "unknown error")
        kind = error.kind if error is not None else "retryable"
        if kind == "fatal":
            # The account, not the request: every call of the run would get the same
            # answer, so neither retries nor halving can help (blockbatch/core/claude_errors.py).
            return Decision(
                "fatal", what, error.code if error is not None and error.code else "key_rejected"
            )
        if kind == "overflow":
            if blocks == 1:
                return Decision("fail", what, "prompt_too_long")
            return _split_or_keep(what, stopping)
        if kind == "rejected":
            # A request can be refused for one block's content: halve it like an overflow,
            # so only the block whose own request is refused fails.
            if blocks == 1:
                return Decision("fail", what, "request_rejected")
            return _split_or_keep(what, stopping)
    else:
        what = NOT_PROCESSED.get(reason, reason)
    if stopping:
        return Decision("keep", what, "cancelled")
    if retries_left:
        return Decision("resubmit", what)
    if can_pause and result == "errored" and error is not None and is_outage(error):
        return Decision("wait", what)
    return Decision("fail", f"Claude call failed after retries: {what}", "api_unavailable")


#: What a ``call_model`` that did not answer reports (``CallModelOutput.outcome``), as the
#: attempt result of the table: a call not made (``empty``, ``cancelled``, ``oversized``,
#: ``over_budget``, ``over_budget_split``: a smaller pack would fit) or a request Claude
#: turned down (``overflow``, ``request_error``).
CALL_RESULTS: dict[str, AttemptResult] = {
    "empty": "nothing_left",
    "cancelled": "stopped",
    "oversized": "oversized",
    "over_budget": "over_budget",
    "over_budget_split": "over_budget",
    "overflow": "errored",
    "request_error": "errored",
}


def decide_call(
    outcome: str, *, blocks: int, message: str | None = None, error: ClaudeError | None = None
) -> Decision:
    """The next step after a ``call_model`` that returned without an answer to apply.

    Args:
        outcome: ``call_model``'s outcome, a key of :data:`CALL_RESULTS`.
        blocks: how many blocks the call was about.
        message: the readable message the activity gave (``None``: the outcome says it).
        error: for a request Claude turned down, its classified error; without one an
            ``overflow`` counts as a prompt too long and anything else as a rejected request.
    """
    result = CALL_RESULTS[outcome]
    reason = message or ""
    if outcome == "over_budget_split" and blocks > 1:
        # The pack does not fit what the budget leaves, but one of its blocks would.
        return Decision("split", reason or "the run's budget cannot hold the whole pack")
    if result != "errored":
        return decide(result, blocks=0 if result == "nothing_left" else blocks, reason=reason)
    kind = "overflow" if outcome == "overflow" else "rejected"
    error = error or ClaudeError(
        kind=kind, status=None, error_type=outcome, message=message or outcome
    )
    return decide("errored", blocks=blocks, error=error, reason=message or outcome)


def attempt_limit(blocks: int, refused: bool, max_block_attempts: int) -> int:
    """The attempts a block may have once this answer is applied (``apply_results``).

    A lone block the model refused (``stop_reason: refusal``, contract §0 rule 9, §2) fails
    at once: the same model refuses the same content again, and every refusal is billed. In
    a pack of several, a refusal charges nobody (the pack is halved, a mapping failure).
    """
    return 1 if refused and blocks == 1 else max_block_attempts


def _split_or_keep(what: str, stopping: bool) -> Decision:
    return Decision("keep", what, "cancelled") if stopping else Decision("split", what)


def code_of_failure(reason: str) -> ReasonCode:
    """The code of a ``fail`` step from its readable reason alone.

    For ``fail_blocks`` inputs recorded before decisions carried a code; the texts are
    the ones :func:`decide` and :func:`oversized_message` write.
    """
    if reason.startswith("block is too large"):
        return "oversized"
    if reason.startswith("Claude call failed after retries"):
        return "api_unavailable"
    if reason.startswith(("prompt too long", "request too large")):
        return "prompt_too_long"
    return "request_rejected"


def split_pack(path: str, uids: list[str]) -> list[tuple[str, list[str]]]:
    """Halve a pack's blocks into children ``<path>.0`` and ``<path>.1`` (first half larger)."""
    half = (len(uids) + 1) // 2
    halves = [h for h in (uids[:half], uids[half:]) if h]
    return [(f"{path}.{i}", h) for i, h in enumerate(halves)]


def oversized_message(
    model_id: str, est_input_tokens: int, max_tokens: int, context_window: int
) -> str:
    """Why a lone block cannot be sent, and what to do about it."""
    return (
        f"block is too large for {model_id}: about {est_input_tokens:,} input tokens + "
        f"{max_tokens:,} output tokens exceed the {context_window:,}-token context "
        "window; split the block in the source document"
    )


def failure_code(inp: FailBlocksInput) -> ReasonCode:
    """The reason code ``fail_blocks`` gives its blocks: the input's, or (``None`` or
    unknown) the one derived from its reason. The worker's metrics count by it too."""
    if inp.reason_code in REASONS:
        return inp.reason_code
    return code_of_failure(inp.reason)
