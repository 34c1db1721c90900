"""How a run ends: the status it finishes in, from its blocks, and the reason code of the
blocks it ends unfinished. ``blockbatch.store.runs.close_run`` and
``blockbatch.store.overlays.end_pending`` apply these rules; the worker's metrics count by them.
"""

from __future__ import annotations

from blockbatch.core.claude_errors import fatal_code_of
from blockbatch.core.reasons import ReasonCode, counts_text
from blockbatch.core.run_types import RunStatus


def final_status(
    asked: RunStatus,
    error: str | None,
    *,
    total: int,
    done: int,
    failed: int,
    cancelled: int,
    reasons: dict[str, int],
) -> tuple[RunStatus, str | None]:
    """The status a finishing run ends in, from its blocks.

    A run the workflow ends as ``completed`` is ``completed`` when every block is done,
    ``completed_with_failures`` when some are, and ``failed`` ("nothing done") when none
    is. ``cancelled`` and ``failed`` (a fatal error) stay as they are; so does
    ``budget_exhausted`` unless every block got done after all (then ``completed``).
    """
    if asked == "budget_exhausted" and done >= total:
        return "completed", None
    if asked == "completed" and reasons.get("budget_exhausted"):
        # A budget refusal the workflow did not hear of (a batch round cut, then its
        # activity retried): the blocks say the budget ran out.
        return "budget_exhausted", error
    if asked != "completed" or done >= total:
        return asked, error
    if done > 0:
        return "completed_with_failures", error
    parts = [f"{failed} block{'s' if failed != 1 else ''} failed"]
    if cancelled:
        parts.append(f"{cancelled} cancelled")
    why = f" ({counts_text(reasons)})" if reasons else ""
    return "failed", f"nothing done: {' and '.join(parts)}{why}"


def end_code(status: str, error: str | None) -> ReasonCode:
    """The reason code of the blocks a run ends without finishing, by the run's final
    status (``blockbatch.store.overlays.end_pending``): the fatal error's code for a run
    that a fatal error stopped."""
    if status == "budget_exhausted":
        return "budget_exhausted"
    if status in ("completed", "completed_with_failures"):
        return "unfinished"
    return fatal_code_of(error) or "cancelled"
