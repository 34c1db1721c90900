"""The rule of a run's final status and its exit code, and the exit codes ``--help`` documents.

The runs that end each way are in tests/e2e/test_outcomes.py.
"""

from __future__ import annotations

from blockbatch.cli.follow import exit_code
from blockbatch.core.outcome import final_status
from blockbatch.core.run_types import RunStatus


def test_final_status_follows_the_blocks() -> None:
    def final(
        asked: RunStatus, done: int, failed: int, cancelled: int = 0, error: str | None = None
    ) -> tuple[str, str | None]:
        return final_status(
            asked,
            error,
            total=done + failed + cancelled,
            done=done,
            failed=failed,
            cancelled=cancelled,
            reasons={"request_rejected": failed} if failed else {},
        )

    assert final("completed", 4, 0) == ("completed", None)
    assert final("completed", 3, 1) == ("completed_with_failures", None)
    assert final("completed", 0, 4) == (
        "failed",
        "nothing done: 4 blocks failed (4 request_rejected)",
    )
    assert final("completed", 0, 1)[1] == "nothing done: 1 block failed (1 request_rejected)"
    # The workflow's own verdicts stand.
    assert final("cancelled", 0, 0, 4, "cancelled by request") == (
        "cancelled",
        "cancelled by request",
    )
    assert final("failed", 0, 0, 4, "API key rejected") == ("failed", "API key rejected")
    # An empty run has nothing left undone.
    assert final_status("completed", None, total=0, done=0, failed=0, cancelled=0, reasons={}) == (
        "completed",
        None,
    )
    assert [
        exit_code(s) for s in ("completed", "completed_with_failures", "failed", "cancelled")
    ] == [0, 5, 1, 1]


def test_help_documents_the_exit_codes() -> None:
    from blockbatch.cli.commands import build_parser

    text = build_parser().format_help()
    assert "5  run/watch/cancel --wait: done with failures" in text
    assert "completed_with_failures" in text
