"""Reading a run and reviewing its answers: results, quality, the ledger, review acts,
the grid, exports (part of :class:`~blockbatch.api.client.Blockbatch`).

All from Postgres (blockbatch/store/): none of these needs Temporal or a worker. The
review acts, the page images and the exports load their modules when first used: reading a
run's state (the CLI's ``status``) does not need them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from blockbatch.api.connection import Connection
from blockbatch.api.errors import BadRequest, speaks_python
from blockbatch.core.review import id_columns as identifying_columns
from blockbatch.core.views import GridFilter
from blockbatch.store import escalations, quality, ratelimits, reads, replans, review, runs

if TYPE_CHECKING:
    from blockbatch.api.export import ExportFormat, ExportSummary
    from blockbatch.api.review import ConfirmOutcome, EditOutcome, RejectOutcome, ReopenOutcome
    from blockbatch.core.quality_types import QualityResult
    from blockbatch.core.run_types import RunResult
    from blockbatch.core.views import (
        CallDetail,
        CallRow,
        Disagreement,
        GridPage,
        LimiterView,
        ReviewAction,
        ReviewActivity,
        RunInfo,
    )


@speaks_python
class Reading(Connection):
    """A run's result and answers as stored, and the reviewer's acts on them."""

    async def result(self, run_id: str) -> RunResult:
        """The run's counters and failure reasons from Postgres (final once it has finished)."""
        return await self.result_of(await self.run(run_id))

    async def result_of(self, info: RunInfo) -> RunResult:
        """:meth:`result` of a run already read (``info``): its failure reasons, re-plans,
        quality probe and escalation read beside it (at once, each on a connection of the
        pool)."""
        reasons, changes, found, escalation = await asyncio.gather(
            self.failure_reasons(info.run_id),
            self.plan_changes(info.run_id),
            self.quality(info.run_id),
            escalations.result(self.pool, info.run_id),
        )
        return info.result().model_copy(
            update={
                "failure_reasons": reasons,
                "plan_changes": changes,
                "quality": found,
                "escalation": escalation,
            }
        )

    async def quality(self, run_id: str) -> QualityResult | None:
        """What the run's quality probe found so far: agreement overall (with its 95%
        interval), per field, pack size and position; the probe's calls and cost; the pack
        size the run settled on and what the quality gate did (``None``: no probe)."""
        return await quality.result(self.pool, run_id)

    async def disagreeing(
        self, run_id: str, *, limit: int = 50, offset: int = 0
    ) -> tuple[int, list[Disagreement]]:
        """``(total, page)`` of the run's sampled blocks whose packed and single answers
        differ, both answers side by side with the comparison per field."""
        return await quality.disagreeing(self.pool, run_id, limit=limit, offset=offset)

    async def limits(self) -> list[LimiterView]:
        """The fleet's rate limiters (per API key hash and model), refilled to now."""
        return await ratelimits.views(self.pool)

    async def plan_changes(self, run_id: str) -> list[str]:
        """What the run's re-plans changed (packs that learn from the run's answers)."""
        return await replans.change_texts(self.pool, run_id)

    async def failure_reasons(self, run_id: str) -> dict[str, int]:
        """Reason code -> count over the run's failed and cancelled blocks, most first."""
        return await runs.failure_reasons(self.pool, run_id)

    async def review_flags(self, run_id: str) -> dict[str, int]:
        """Review flag -> count over the run's answered blocks (``ungrounded``)."""
        return await review.review_flags(self.pool, run_id)

    async def _id_columns(
        self, run_id: str, chosen: list[str] | None, present: list[str]
    ) -> list[str]:
        document_id = (await self.run(run_id)).document_id
        stored = await reads.document_columns(self.pool, document_id)
        columns, text = stored if stored is not None else (None, None)
        try:
            return identifying_columns(columns, text, chosen, list(dict.fromkeys(present)))
        except ValueError as err:
            raise BadRequest(str(err)) from None

    async def calls(self, run_id: str, **filters: Any) -> tuple[int, list[CallRow]]:
        """(total, page) of the run's call ledger; see :func:`blockbatch.store.reads.list_calls`."""
        return await reads.list_calls(self.pool, run_id, **filters)

    async def call(self, run_id: str, call_id: int, full: bool = False) -> CallDetail:
        """One ledger row of the run in full: purpose, provider, status, timing, tokens,
        cost, Temporal ids, the request as sent and the raw response or error. The system
        prompt and tool definitions are elided (first characters, length, sha256) unless
        ``full``. Raises NotFound for an unknown run or a call that is not the run's."""
        return await reads.get_call(self.pool, run_id, call_id, full=full)

    async def confirm(
        self,
        run_id: str,
        blocks: list[str] | None = None,
        *,
        reviewer: str | None = None,
    ) -> ConfirmOutcome:
        """Staging -> confirmed for ``blocks`` (uids or indexes), or all ai_complete blocks;
        each recorded for ``reviewer`` (default ``$BLOCKBATCH_REVIEWER``, else the OS user)."""
        from blockbatch.api.review import confirm

        return await confirm(self.pool, run_id, blocks, reviewer)

    async def reject(
        self,
        run_id: str,
        blocks: list[str] | None,
        *,
        reviewer: str | None = None,
    ) -> RejectOutcome:
        """Staging -> rejected for ``blocks`` (uids or indexes; ``None``: every ai_complete
        block), all or nothing, each recorded for ``reviewer``."""
        from blockbatch.api.review import reject

        return await reject(self.pool, run_id, blocks, reviewer)

    async def reopen(
        self,
        run_id: str,
        blocks: list[str],
        *,
        reviewer: str | None = None,
    ) -> ReopenOutcome:
        """Confirmed -> staged (ai_complete) for ``blocks`` (uids or indexes), to correct
        them and confirm again; all or nothing, each recorded for ``reviewer``."""
        from blockbatch.api.review import reopen

        return await reopen(self.pool, run_id, blocks, reviewer)

    async def edit(
        self,
        run_id: str,
        block: str,
        field: str,
        value: Any,
        *,
        reviewer: str | None = None,
        as_text: bool = False,
    ) -> EditOutcome:
        """Set one staged field of an ai_complete block (uid or index); the overlay must
        still validate against the run's schema, else :class:`EditError` and nothing
        changes. ``as_text``: ``value`` is typed text (as is for a string field, else
        JSON). Recorded for ``reviewer`` with the value before and after."""
        from blockbatch.api.review import edit

        return await edit(
            self.pool, run_id, block, field, value, reviewer=reviewer, as_text=as_text
        )

    async def review_actions(
        self,
        run_id: str,
        block: str | None = None,
        *,
        limit: int = 200,
    ) -> list[ReviewAction]:
        """The run's recorded review acts (or one block's, by uid), newest first (none for
        an unknown run)."""
        return await review.review_actions(self.pool, run_id, block, limit=limit)

    async def review_activity(
        self,
        run_id: str,
        *,
        limit: int = 20,
    ) -> list[ReviewActivity]:
        """The run's latest review acts as they were done, newest first: a bulk confirm
        of many blocks is one entry (with how many), an edit is one with its values."""
        return await review.review_activity(self.pool, run_id, limit=limit)

    async def review(
        self,
        run_id: str,
        *,
        status: str | list[str] | None = None,
        reason: str | list[str] | None = None,
        block_uids: list[str] | None = None,
        block_type: str | None = None,
        disagreeing: bool = False,
        limit: int = 50,
        after: int | None = None,
        before: int | None = None,
        id_columns: list[str] | None = None,
    ) -> GridPage:
        """A page of the run's blocks next to their overlays, in block order, paged by block
        index (keyset: ``after`` / ``before`` a block; the page's ``next_after`` and
        ``prev_before`` lead on); the one pager of the CLI's ``review`` and the web app.

        Args:
            status, reason: only blocks in this status (any of these), with this reason
                code or review flag (any of these).
            block_uids: only these blocks.
            block_type: only blocks of this type.
            disagreeing: only those the quality probe found disagreeing.
            limit: blocks on the page, 1 to 500.
            id_columns: the input's columns that say which row each block is (default:
                the first column other than the text; the page's ``id_columns``).

        Raises:
            NotFound: no such run.
            BadRequest: an unknown reason code, a limit out of range, both ``after`` and
                ``before``, or an id column the input does not have.
        """
        flt = GridFilter(
            statuses=_listed(status),
            reasons=_listed(reason),
            block_uids=block_uids or [],
            block_type=block_type,
            disagreeing=disagreeing,
        )
        try:
            page = await review.grid_page(
                self.pool, run_id, flt, limit=limit, after=after, before=before
            )
        except ValueError as err:
            raise BadRequest(str(err)) from None
        present = [k for row in page.rows for k in row.metadata]
        page.id_columns = await self._id_columns(run_id, id_columns, present)
        return page

    async def block_page(self, run_id: str, block_uid: str, *, width: int | None = None) -> bytes:
        """A PDF block's page as PNG bytes with the block's box outlined
        (blockbatch/api/pages.py); ``width`` in pixels, bounded.

        Raises:
            NotFound: no such run or block, or the block has no page to show.
        """
        from blockbatch.api.pages import block_page_png

        return await block_page_png(self.pool, run_id, block_uid, width=width)

    async def live_costs(self, run_ids: list[str]) -> dict[str, float]:
        """Cost so far of each run, from its ledger (for runs still going)."""
        return await review.live_costs(self.pool, run_ids)

    async def block_types(self, run_id: str) -> list[str]:
        """The block types of the run's document."""
        return await self.block_types_of((await self.run(run_id)).document_id)

    async def block_types_of(self, document_id: str) -> list[str]:
        """The block types of a document."""
        return await review.block_types(self.pool, document_id)

    async def export(
        self,
        run_id: str,
        out: str | Path | TextIO,
        *,
        staged: bool = False,
        fmt: ExportFormat = "jsonl",
    ) -> ExportSummary:
        """JSONL (or CSV with ``fmt="csv"``), one line per block in order, review acts
        included; a path also gets a ``.meta.json`` sidecar. ``fmt="parquet"`` writes a
        path only (blockbatch/api/parquet.py)."""
        from blockbatch.api.export import export_run_to_file, export_to
        from blockbatch.api.parquet import export_parquet

        if fmt == "parquet" and isinstance(out, str | Path):
            return await export_parquet(self.pool, run_id, out, staged=staged)
        if isinstance(out, str | Path):
            return await export_run_to_file(self.pool, run_id, out, staged=staged, fmt=fmt)
        return await export_to(self.pool, run_id, out, staged=staged, fmt=fmt)


def _listed(value: str | list[str] | None) -> list[str]:
    """One value or several, as a list without repeats."""
    if value is None:
        return []
    return list(dict.fromkeys([value] if isinstance(value, str) else value))
