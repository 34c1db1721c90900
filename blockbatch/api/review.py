"""Reviewing a run: edit a staged value, confirm, reject, reopen; each act recorded with
who, when, before and after. Exporting it is blockbatch/api/export.py."""

from __future__ import annotations

import getpass
import os
from typing import Any, Literal

import asyncpg
from pydantic import BaseModel

from blockbatch.api.errors import BadRequest
from blockbatch.core.commands import PROG
from blockbatch.core.review import parse_field_input
from blockbatch.store import overlays
from blockbatch.store.reads import get_run
from blockbatch.store.repo import NotFound
from blockbatch.store.runs import cached_run_context

#: The environment variable naming who reviews, when no reviewer is given.
REVIEWER_ENV = "BLOCKBATCH_REVIEWER"


def default_reviewer() -> str:
    """Who is reviewing when nobody said: ``$BLOCKBATCH_REVIEWER``, else the OS user."""
    name = os.environ.get(REVIEWER_ENV, "").strip()
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER: a bare container
        return f"uid-{os.getuid()}"


def checked_reviewer(name: str | None) -> str:
    """``name`` trimmed and checked (``None``: :func:`default_reviewer`).

    Raises:
        BadRequest: an empty name, or one over 200 characters.
    """
    if name is None:
        return default_reviewer()
    name = name.strip()
    if not name:
        raise BadRequest(
            "the reviewer name is empty: give one (--reviewer NAME or "
            f"{REVIEWER_ENV}), it is recorded with every review action"
        )
    if len(name) > 200:
        raise BadRequest(f"the reviewer name is {len(name)} characters long; 200 at most")
    return name


class ConfirmOutcome(BaseModel):
    run_id: str
    #: Blocks moved from staging to confirmed by this request.
    confirmed: list[str]
    #: Asked-for blocks that were confirmed before (left as they were).
    already_confirmed: list[str]
    #: Confirmed blocks of the run after this request.
    total_confirmed: int
    #: Who confirmed them (recorded in review_actions).
    reviewer: str = ""


class RejectOutcome(BaseModel):
    run_id: str
    #: Blocks moved from staging to rejected by this request.
    rejected: list[str]
    #: Asked-for blocks that were rejected before (left as they were).
    already_rejected: list[str]
    reviewer: str


class ReopenOutcome(BaseModel):
    run_id: str
    #: Blocks moved from confirmed back to staged (ai_complete) by this request.
    reopened: list[str]
    #: Asked-for blocks that were staged already (left as they were).
    already_open: list[str]
    #: Confirmed blocks of the run after this request.
    total_confirmed: int
    reviewer: str


class EditOutcome(BaseModel):
    run_id: str
    block_uid: str
    field: str
    before: Any
    after: Any
    #: False when the value was already the staged one (nothing recorded).
    changed: bool
    reviewer: str


def resolve_block_refs(document_id: str, refs: list[str]) -> list[str]:
    """Block uids from uids or bare block indexes (``7`` means ``<document_id>:7``)."""
    return list(dict.fromkeys(f"{document_id}:{r}" if r.isdigit() else r for r in refs))


async def _decide(
    pool: asyncpg.Pool,
    run_id: str,
    block_refs: list[str] | None,
    decision: Literal["confirm", "reject"],
    reviewer: str,
) -> overlays.Decided:
    async with pool.acquire() as conn:
        run = await get_run(conn, run_id)
        uids = resolve_block_refs(run.document_id, block_refs) if block_refs else None
        done = await overlays.decide(conn, run_id, uids, decision, reviewer)
    verb = "confirmed" if decision == "confirm" else "rejected"
    if done.unknown:
        raise NotFound(
            f"run {run_id} has no block {_few(done.unknown)}; nothing was {verb}. "
            f"See the blocks with `{PROG} review {run_id}`"
        )
    if done.unready:
        raise BadRequest(
            f"only blocks with an AI result (ai_complete) can be {verb}, not "
            f"{_few(done.unready)}; nothing was {verb}"
        )
    return done


async def confirm(
    pool: asyncpg.Pool,
    run_id: str,
    block_refs: list[str] | None = None,
    reviewer: str | None = None,
) -> ConfirmOutcome:
    """Copy staging to confirmed for the given blocks, or for every ``ai_complete`` block.

    All or nothing: an unknown block, or one without an AI result, changes nothing. Each
    block confirmed is recorded in ``review_actions`` for ``reviewer`` (default:
    :func:`default_reviewer`).

    Raises:
        NotFound: unknown run or block uid.
        BadRequest: a block that has no result to confirm (pending, failed, cancelled,
            rejected), or an empty reviewer name.
    """
    who = checked_reviewer(reviewer)
    done = await _decide(pool, run_id, block_refs, "confirm", who)
    assert done.total_confirmed is not None  # set whenever the decision went through
    return ConfirmOutcome(
        run_id=run_id,
        confirmed=done.moved,
        already_confirmed=done.already,
        total_confirmed=done.total_confirmed,
        reviewer=who,
    )


async def reject(
    pool: asyncpg.Pool,
    run_id: str,
    block_refs: list[str] | None,
    reviewer: str | None = None,
) -> RejectOutcome:
    """Reject the staged results of the given blocks (``None``: every ``ai_complete`` one).

    All or nothing, like :func:`confirm`; a rejected block keeps its staged values for
    the record, exports as ``null`` with status ``rejected``, and is recorded in
    ``review_actions``.

    Raises:
        NotFound: unknown run or block uid.
        BadRequest: a block without a staged result to reject, or an empty reviewer name.
    """
    who = checked_reviewer(reviewer)
    done = await _decide(pool, run_id, block_refs, "reject", who)
    return RejectOutcome(
        run_id=run_id, rejected=done.moved, already_rejected=done.already, reviewer=who
    )


async def reopen(
    pool: asyncpg.Pool,
    run_id: str,
    block_refs: list[str],
    reviewer: str | None = None,
) -> ReopenOutcome:
    """Take confirmed blocks back to staged (``ai_complete``) so a person can correct them
    and confirm again: the confirmed values are cleared from the export, the staged ones
    stay. All or nothing; each block reopened is recorded in ``review_actions`` (before:
    the confirmed overlay).

    Raises:
        NotFound: unknown run or block uid.
        BadRequest: no blocks given, a block that is neither confirmed nor staged (pending,
            failed, cancelled, rejected), or an empty reviewer name.
    """
    who = checked_reviewer(reviewer)
    if not block_refs:
        raise BadRequest("name the confirmed blocks to reopen; nothing was reopened")
    async with pool.acquire() as conn:
        run = await get_run(conn, run_id)
        uids = resolve_block_refs(run.document_id, block_refs)
        done = await overlays.reopen(conn, run_id, uids, who)
    if done.unknown:
        raise NotFound(f"run {run_id} has no block {_few(done.unknown)}; nothing was reopened")
    if done.unready:
        raise BadRequest(
            f"only confirmed blocks can be reopened, not {_few(done.unready)}; nothing was reopened"
        )
    assert done.total_confirmed is not None  # set whenever the reopen went through
    return ReopenOutcome(
        run_id=run_id,
        reopened=done.moved,
        already_open=done.already,
        total_confirmed=done.total_confirmed,
        reviewer=who,
    )


async def edit(
    pool: asyncpg.Pool,
    run_id: str,
    block_ref: str,
    field: str,
    value: Any,
    *,
    reviewer: str | None = None,
    as_text: bool = False,
) -> EditOutcome:
    """Change one staged field of an ``ai_complete`` block; the whole overlay must still
    validate against the run's schema, else nothing changes.

    Args:
        pool: the pool.
        run_id: the run.
        block_ref: the block's uid or block index.
        field: a field of the run's schema.
        value: the new value; with ``as_text`` it is text as a person typed it (taken as
            is for a string field, else parsed as JSON: see
            :func:`blockbatch.core.review.parse_field_input`).
        reviewer: who edits (default: :func:`default_reviewer`).
        as_text: parse ``value`` from text.

    Raises:
        NotFound: unknown run or block.
        EditError: not a field of the schema, text that is not JSON for a non-string field,
            a value the schema refuses, or a block that is not ``ai_complete``.
    """
    who = checked_reviewer(reviewer)
    async with pool.acquire() as conn:
        run = await get_run(conn, run_id)
        uid = resolve_block_refs(run.document_id, [block_ref])[0]
        spec = (await cached_run_context(conn, run_id)).spec
        if as_text:
            value = parse_field_input(spec, field, str(value))
        done = await overlays.edit_staging(conn, run_id, uid, field, value, spec, who)
    return EditOutcome(
        run_id=run_id,
        block_uid=uid,
        field=field,
        before=done.before,
        after=done.after,
        changed=done.changed,
        reviewer=who,
    )


def _few(items: list[str], n: int = 5) -> str:
    more = f" and {len(items) - n} more" if len(items) > n else ""
    return ", ".join(items[:n]) + more
