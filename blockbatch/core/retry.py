"""Retry only what failed: which blocks of a finished run a retry takes, or why it cannot.

Pure rules; ``blockbatch/store/retries.py`` reads the run and ``blockbatch/api`` turns a
:class:`Refusal` into the error a user sees. A retry takes the run's ``failed`` blocks (and
its ``cancelled`` ones when asked), optionally only those with given reason codes or only
given blocks; a block that succeeded is never taken. A block whose code is in
:data:`ASKED_BY_NAME` is taken only when the request names that code (``--reason``): the
model refused it, and asking the same model again is billed and refused again.

The blocks a fatal error left (``spend_limit``, ``billing``: the run stopped, the blocks
ended ``cancelled``) are taken with ``--cancelled``, as the error's message says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from blockbatch.core.commands import PROG
from blockbatch.core.reasons import REASONS, counts_text
from blockbatch.core.retry_types import RetryRequest
from blockbatch.core.review import ANSWERED

#: A run may be retried only once it has finished (not while it may still change).
FINISHED_STATUSES = (
    "completed",
    "completed_with_failures",
    "cancelled",
    "failed",
    "budget_exhausted",
)

#: Reason codes a retry takes only when the request names them.
ASKED_BY_NAME = ("refused",)

RefusalKind = Literal["unknown_reason", "active", "unknown_block", "not_retryable", "nothing"]

#: A block's state in a run: (overlay status, reason code or ``None``).
BlockState = tuple[str, str | None]


@dataclass(frozen=True)
class Refusal:
    """Why a retry cannot start; nothing has been changed."""

    kind: RefusalKind
    message: str


@dataclass(frozen=True)
class RetryCheck:
    """What a retry would run again: how many blocks, by reason code, or a refusal."""

    blocks: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    refusal: Refusal | None = None


def unknown_reasons(request: RetryRequest) -> Refusal | None:
    """An unknown reason code in the request, named with the valid ones."""
    unknown = [r for r in request.reasons or () if r not in REASONS]
    if not unknown:
        return None
    return Refusal(
        "unknown_reason",
        f"unknown reason code {', '.join(unknown)}; the codes are: " + ", ".join(REASONS),
    )


def check_retry(
    run_id: str,
    status: str,
    counts: Mapping[BlockState, int],
    named: Mapping[str, BlockState],
    request: RetryRequest,
) -> RetryCheck:
    """What a retry of ``request`` would take from the run, or why it is refused.

    Args:
        run_id: the run (for messages).
        status: the run's status.
        counts: how many of the run's blocks are in each (status, reason code).
        named: the state of each block of ``request.blocks`` the run has (unknown ones
            are missing).
        request: what the user asked to retry.
    """
    refusal = unknown_reasons(request)
    if refusal is not None:
        return RetryCheck(refusal=refusal)
    if status not in FINISHED_STATUSES:
        return RetryCheck(
            refusal=Refusal(
                "active",
                f"run {run_id} is still {status}: only a finished run can be retried; "
                f"follow it with `{PROG} watch {run_id}`",
            )
        )
    statuses = request.statuses()
    wanted = set(request.reasons or ())
    if request.blocks is not None:
        unknown = [u for u in request.blocks if u not in named]
        if unknown:
            return RetryCheck(
                refusal=Refusal(
                    "unknown_block",
                    f"run {run_id} has no block {few(unknown)}; nothing was "
                    f"retried. See the blocks with `{PROG} review "
                    f"{run_id}`",
                )
            )
        refused = [
            f"{u} ({_state(named[u])})"
            for u in request.blocks
            if not _takes(named[u], statuses, wanted)
        ]
        if refused:
            return RetryCheck(
                refusal=Refusal(
                    "not_retryable",
                    f"only {selection_text(request)} can be retried, not "
                    f"{few(refused)}; nothing was retried",
                )
            )
    taken: dict[str, int] = {}
    if request.blocks is not None:
        for uid in request.blocks:
            code = named[uid][1] or "unknown"
            taken[code] = taken.get(code, 0) + 1
    else:
        for state, n in counts.items():
            if _takes(state, statuses, wanted):
                code = state[1] or "unknown"
                taken[code] = taken.get(code, 0) + n
    if not taken:
        return RetryCheck(
            refusal=Refusal(
                "nothing",
                f"run {run_id} has no {selection_text(request)} ({describe_blocks(counts)}); "
                "nothing to retry" + _hint(counts, request),
            )
        )
    ordered = dict(sorted(taken.items(), key=lambda kv: (-kv[1], kv[0])))
    return RetryCheck(blocks=sum(taken.values()), reasons=ordered)


def describe_blocks(counts: Mapping[BlockState, int]) -> str:
    """``140 done, 3 failed: 2 invalid_value, 1 truncated, 1 cancelled: 1 cancelled``."""
    by_status: dict[str, dict[str, int]] = {}
    for (status, code), n in counts.items():
        key = "done" if status in ANSWERED else status
        reasons = by_status.setdefault(key, {})
        reasons[code or "unknown"] = reasons.get(code or "unknown", 0) + n
    parts = []
    for key in ("done", "failed", "cancelled", "pending"):
        reasons = by_status.get(key, {})
        if not reasons:
            continue
        total = sum(reasons.values())
        if key in ("failed", "cancelled"):
            parts.append(f"{total} {key}: {counts_text(reasons)}")
        else:
            parts.append(f"{total} {key}")
    return ", ".join(parts) or "no blocks"


def few(items: list[str], n: int = 5) -> str:
    """The first ``n`` items joined, and how many more."""
    more = f" and {len(items) - n} more" if len(items) > n else ""
    return ", ".join(items[:n]) + more


def _takes(state: BlockState, statuses: list[str], wanted: set[str]) -> bool:
    status, code = state
    if wanted:
        return status in statuses and code in wanted
    return status in statuses and code not in ASKED_BY_NAME


def _state(state: BlockState) -> str:
    status, code = state
    if status in ("failed", "cancelled") and code:
        return f"{status}: {code}"
    return status


def selection_text(request: RetryRequest) -> str:
    """``failed blocks with reason truncated or invalid_value``: what a request takes."""
    what = "failed or cancelled blocks" if request.include_cancelled else "failed blocks"
    if request.reasons:
        what += f" with reason {' or '.join(request.reasons)}"
    return what


def _hint(counts: Mapping[BlockState, int], request: RetryRequest) -> str:
    cancelled = any(status == "cancelled" and n for (status, _), n in counts.items())
    if cancelled and not request.include_cancelled:
        return " (cancelled blocks are retried only when asked: --cancelled)"
    named = [code for code in ASKED_BY_NAME if any(c == code and n for (_, c), n in counts.items())]
    if named and not request.reasons:
        return (
            f" ({', '.join(named)} blocks are retried only when named: "
            + " ".join(f"--reason {c}" for c in named)
            + ")"
        )
    return ""
