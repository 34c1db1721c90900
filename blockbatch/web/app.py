"""The review web app: runs, a run's blocks in a grid, review acts, exports, the call ledger.

Server-rendered (Starlette + Jinja2 templates with autoescape on; the grid's inline script, run
under the page's CSP nonce, no build step). The grid is reviewed by keyboard too: its
shortcuts are listed on the page; a row's save, confirm or reject comes back at the row's
anchor with the next row to review current, and "confirm all shown" asks, then moves to the
next page. Every page reads through the :class:`~blockbatch.api.Blockbatch`
API and every change goes through it too (``edit``, ``confirm``, ``reject``, ``reopen``),
so the web app, the CLI and a Python program follow the same rules and leave the same
record. In the grid each block is one row: its text wide enough to judge by, its fields
as the controls their schema asks for (``fields.py``), and one form that saves the row's
changes together, optionally confirming it. ``security.py`` says how it is kept safe;
The CLI's ``serve`` starts it.

Every act answers with a redirect, a refused one too (Post/Redirect/Get): the refusal (what
was refused, why and what to do, and what was typed) is kept in the app under a random
token the grid's URL carries (``?refused=``), so reloading the page shows the refusal again
and never sends the act a second time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import secrets
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import asyncpg
import jinja2
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from blockbatch.api import BadRequest, Blockbatch, EditError, NotFound
from blockbatch.api.export import ExportFormat
from blockbatch.api.review import checked_reviewer
from blockbatch.core.commands import CONSOLE_SCRIPT, render
from blockbatch.core.escalation_types import EscalationProgress
from blockbatch.core.evidence import spans
from blockbatch.core.page_image import bounded_width
from blockbatch.core.reasons import REASONS
from blockbatch.core.review import OVERLAY_STATUSES, REVIEWABLE
from blockbatch.core.views import GridPage, GridRow
from blockbatch.report import run_links
from blockbatch.runtime.settings import Settings
from blockbatch.store.db import connection_lost, unavailable
from blockbatch.store.review import MAX_PAGE
from blockbatch.web.fields import field_texts, input_text, own_changes, planned_edits, widget
from blockbatch.web.security import (
    CSRF_FIELD,
    SESSION_COOKIE,
    GuardMiddleware,
    csrf_protected,
    session_value,
)

#: The grid's query parameters; the only ones carried from a form back to the grid.
GRID_PARAMS = ("status", "reason", "type", "disagreeing", "after", "before", "limit", "id")
REVIEWER_COOKIE = "bb_reviewer"
PAGE_SIZE = 50
#: A block's page picture never changes: its uid names a document by its bytes' hash. A
#: browser keeps it a day (``private``: it is behind sign-in) and asks again with its ETag.
PAGE_PICTURE_CACHE = "private, max-age=86400"
#: Refused acts the app keeps to show again (the oldest go first): one a reviewer is
#: looking at is among the latest.
REFUSALS_KEPT = 500
#: What the grid says for a refusal it no longer keeps (the app restarted, or many since).
REFUSAL_GONE = (
    "an act on this page was refused and nothing it asked was changed; what was typed is no "
    "longer kept (the review app restarted since): look at the row as it is now and act again"
)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A refused act, shown by the grid page the act redirects to: the reason (what was
    refused and what to do), each refused field's reason, and what was typed, per
    ``(block_uid, field)``."""

    error: str
    field_errors: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    typed: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)


def _field_text(value: Any) -> str:
    """A value as a person edits it: a string as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def marked(content: str, evidence: dict[str, Any] | None) -> Markup:
    """A block's text with each value's quote marked where it is (``<mark>``, the fields it
    supports in ``data-fields``): every piece of the text escaped, only our tags markup."""
    parts: list[str] = []
    at = 0
    for start, end, names in spans(evidence, len(content)):
        parts.append(str(escape(content[at:start])))
        fields = " ".join(names)
        parts.append(
            f'<mark class="ev" data-fields="{escape(fields)}" title="{escape(", ".join(names))}">'
            f"{escape(content[start:end])}</mark>"
        )
        at = end
    parts.append(str(escape(content[at:])))
    return Markup("".join(parts))


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,  # block text and model output are data, never markup
        undefined=jinja2.StrictUndefined,
    )
    env.filters["field_text"] = _field_text
    env.globals["marked"] = marked
    env.globals["input_text"] = input_text
    env.globals["done_verbs"] = {
        "edit": "edited",
        "confirm": "confirmed",
        "reject": "rejected",
        "reopen": "reopened",
    }
    env.filters["pretty"] = lambda v: json.dumps(v, ensure_ascii=False, indent=2)
    return env


class GridQuery:
    """The grid's filter and page, parsed and checked from query parameters."""

    def __init__(self, params: dict[str, str]) -> None:
        self.params = {k: params[k] for k in GRID_PARAMS if params.get(k)}
        p = self.params
        if p.get("status") and p["status"] not in OVERLAY_STATUSES:
            raise BadRequest(
                f"unknown status {p['status']!r}; one of: " + ", ".join(OVERLAY_STATUSES)
            )
        if p.get("reason") and p["reason"] not in REASONS:
            raise BadRequest(f"unknown reason code {p['reason']!r}; one of: " + ", ".join(REASONS))
        if p.get("disagreeing") not in (None, "1"):
            raise BadRequest("disagreeing: 1 or nothing")
        self.after = self._int("after", 0)
        self.before = self._int("before", 0)
        self.limit = self._int("limit", 1) or PAGE_SIZE
        #: ``id=ticket_id,channel``: the input's columns that name each row (default: the
        #: first column other than the text).
        self.id_columns = [c.strip() for c in p.get("id", "").split(",") if c.strip()] or None
        if self.limit > MAX_PAGE:
            raise BadRequest(f"limit: at most {MAX_PAGE} blocks a page")

    def _int(self, key: str, minimum: int) -> int | None:
        text = self.params.get(key)
        if text is None:
            return None
        if not text.isdigit() or int(text) < minimum:
            raise BadRequest(f"{key}: {text!r} is not a whole number of at least {minimum}")
        return int(text)

    def url(self, run_id: str, **changes: Any) -> str:
        """The grid URL with this query, ``changes`` applied (``None`` drops a key)."""
        params = {**self.params, **changes}
        query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
        return f"/runs/{quote(run_id, safe='')}" + (f"?{query}" if query else "")

    def back(self) -> str:
        """This query as a form's ``back`` field."""
        return urlencode(self.params)

    @classmethod
    def from_back(cls, back: str) -> GridQuery:
        """The query a form came from; a tampered one falls back to the first page."""
        try:
            return cls(dict(parse_qsl(back)))
        except BadRequest:
            return cls({})


class ReviewApp:
    """The pages and actions, over one :class:`Blockbatch`."""

    def __init__(
        self,
        bb: Blockbatch,
        settings: Settings,
        *,
        token: str | None,
        reviewer: str,
        prog: str = CONSOLE_SCRIPT,
    ) -> None:
        #: The program that started the app: the next command in a message is written with it.
        self.prog = prog
        self.bb = bb
        self.settings = settings
        self.token = token
        self.reviewer = reviewer
        self.env = _templates()
        #: Refused acts by token, newest last (:meth:`refused`).
        self.refusals: OrderedDict[str, Refusal] = OrderedDict()

    # ------------------------------------------------------------------ helpers

    def who(self, request: Request) -> str:
        """Who is reviewing: the name this browser set, else the server's reviewer."""
        name = request.cookies.get(REVIEWER_COOKIE, "").strip()
        return name[:100] if name else self.reviewer

    def render(
        self, request: Request, name: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        html = self.env.get_template(name).render(
            csrf=request.state.csrf,
            csrf_field=CSRF_FIELD,
            nonce=request.state.nonce,
            reviewer=self.who(request),
            signed_in=bool(self.token),
            **context,
        )
        return HTMLResponse(render(html, str(escape(self.prog))), status_code=status_code)

    def refused(
        self, run_id: str, query: GridQuery, refusal: Refusal, anchor: str = ""
    ) -> RedirectResponse:
        """Redirect to the grid showing ``refusal``, kept under a new token: a reload of
        that page shows it again and sends nothing."""
        token = secrets.token_urlsafe(12)
        self.refusals[token] = refusal
        while len(self.refusals) > REFUSALS_KEPT:
            self.refusals.popitem(last=False)
        return RedirectResponse(query.url(run_id, refused=token) + anchor, status_code=303)

    def problem(self, request: Request, status_code: int, message: str) -> HTMLResponse:
        return self.render(request, "error.html", status_code, message=message)

    async def database_down(self, request: Request, exc: Exception) -> Response:
        """Postgres is down or out of reach: the CLI's message, 503, and a page that tries
        again by itself (the pool reconnects on the next request once Postgres is back).
        Any other error is not this page's to explain."""
        if not connection_lost(exc):
            raise exc
        message = str(unavailable(self.settings.resolved_database_url, exc))
        changing = request.method not in ("GET", "HEAD")
        response = self.render(
            request,
            "error.html",
            503,
            message=message,
            heading="The database is not answering",
            changing=changing,
            refresh=not changing,
        )
        response.headers["retry-after"] = "5"
        return response

    def _form_text(self, form: FormData, key: str) -> str:
        value = form.get(key)
        return value if isinstance(value, str) else ""

    # ------------------------------------------------------------------ pages

    async def runs(self, request: Request) -> Response:
        runs = await self.bb.runs(limit=100)
        active = [r.run_id for r in runs if r.active]
        live = await self.bb.live_costs(active) if active else {}
        rows = [
            {
                "run": r,
                "links": run_links(self.settings, r.run_id),
                "cost": live.get(r.run_id, r.cost_usd),
            }
            for r in runs
        ]
        return self.render(request, "runs.html", rows=rows, refresh=bool(active))

    async def grid(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            query = GridQuery(dict(request.query_params))
        except BadRequest as err:
            return self.problem(request, 400, str(err))
        token = request.query_params.get("refused")
        if not token:
            return await self.render_grid(
                request, run_id, query, note=request.query_params.get("note")
            )
        refusal = self.refusals.get(token) or Refusal(REFUSAL_GONE)
        return await self.render_grid(
            request,
            run_id,
            query,
            error=refusal.error,
            field_errors=refusal.field_errors,
            typed=refusal.typed,
        )

    async def render_grid(
        self,
        request: Request,
        run_id: str,
        query: GridQuery,
        *,
        status_code: int = 200,
        note: str | None = None,
        error: str | None = None,
        field_errors: dict[tuple[str, str], str] | None = None,
        typed: dict[tuple[str, str], str] | None = None,
    ) -> Response:
        try:
            page = await self.bb.review(
                run_id,
                status=query.params.get("status"),
                reason=query.params.get("reason"),
                block_type=query.params.get("type"),
                limit=query.limit,
                after=query.after,
                before=query.before,
                disagreeing=query.params.get("disagreeing") == "1",
                id_columns=query.id_columns,
            )
        except NotFound as err:
            return self.problem(request, 404, str(err))
        except BadRequest as err:  # an id column the input does not have
            return self.problem(request, 400, str(err))
        return self.render(
            request,
            "grid.html",
            status_code,
            run=page.run,
            page=page,
            query=query,
            types=await self.bb.block_types_of(page.run.document_id),
            reasons={
                **await self.bb.failure_reasons(run_id),
                **await self.bb.review_flags(run_id),
            },
            statuses=OVERLAY_STATUSES,
            reviewable=REVIEWABLE,
            widgets={f: widget(page.spec.properties[f]) for f in page.fields},
            activity=await self.bb.review_activity(run_id, limit=20),
            escalation=await self._escalation(run_id),
            links=run_links(self.settings, run_id),
            note=note,
            error=error,
            field_errors=field_errors or {},
            typed=typed or {},
        )

    async def _escalation(self, run_id: str) -> EscalationProgress | None:
        """The run's escalation as it goes or as it ended (``None``: never escalated, or
        not planned yet)."""
        progress = await self.bb.escalation_progress(run_id)
        return progress if progress.escalation is not None else None

    async def calls(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        pack = request.query_params.get("pack") or None
        offset_text = request.query_params.get("offset", "0")
        if not offset_text.isdigit():
            return self.problem(request, 400, f"offset: {offset_text!r} is not a number")
        try:
            run = await self.bb.run(run_id)
            total, rows = await self.bb.calls(
                run_id, pack=pack, offset=int(offset_text), limit=PAGE_SIZE
            )
        except NotFound as err:
            return self.problem(request, 404, str(err))
        return self.render(
            request,
            "calls.html",
            run=run,
            pack=pack,
            total=total,
            rows=rows,
            offset=int(offset_text),
            page_size=PAGE_SIZE,
        )

    async def call(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        full = request.query_params.get("full") == "1"
        try:
            detail = await self.bb.call(run_id, request.path_params["call_id"], full=full)
        except NotFound as err:
            return self.problem(request, 404, str(err))
        return self.render(request, "call.html", call=detail, full=full)

    async def export(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        asked = request.query_params.get("format", "jsonl")
        media_types = {
            "jsonl": "application/x-ndjson",
            "csv": "text/csv; charset=utf-8",
            "parquet": "application/vnd.apache.parquet",
        }
        if asked not in media_types:
            return self.problem(request, 400, f"format: {asked!r}; jsonl, csv or parquet")
        fmt: ExportFormat = (
            "csv" if asked == "csv" else "parquet" if asked == "parquet" else "jsonl"
        )
        staged = request.query_params.get("staged") == "1"
        tmp = tempfile.TemporaryDirectory(prefix="bb-export-")
        path = Path(tmp.name) / f"{run_id}.{fmt}"
        try:
            await self.bb.export(run_id, path, staged=staged, fmt=fmt)
        except NotFound as err:
            tmp.cleanup()
            return self.problem(request, 404, str(err))
        except BadRequest as err:  # no pyarrow for a Parquet export
            tmp.cleanup()
            return self.problem(request, 400, str(err))
        name = f"{run_id}{'-staged' if staged else ''}.{fmt}"
        return FileResponse(
            path, media_type=media_types[fmt], filename=name, background=BackgroundTask(tmp.cleanup)
        )

    async def block_page(self, request: Request) -> Response:
        """A PDF block's page as PNG with the block's box outlined; ``?width=`` in pixels
        (bounded by blockbatch/core/page_image.py). Not a page picture: 404 and why."""
        run_id, uid = request.path_params["run_id"], request.path_params["uid"]
        width_text = request.query_params.get("width")
        if width_text is not None and not width_text.isdigit():
            return self.problem(request, 400, f"width: {width_text!r} is not a number of pixels")
        width = bounded_width(int(width_text) if width_text else None)
        tag = hashlib.sha256(f"{run_id}\0{uid}\0{width}".encode()).hexdigest()[:32]
        etag = f'"{tag}"'
        headers = {"cache-control": PAGE_PICTURE_CACHE, "etag": etag}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        try:
            png = await self.bb.block_page(run_id, uid, width=width)
        except NotFound as err:
            return self.problem(request, 404, str(err))
        return Response(png, media_type="image/png", headers=headers)

    async def login_page(self, request: Request) -> Response:
        if not self.token:
            return RedirectResponse("/", status_code=303)
        return self.render(
            request, "login.html", next=_local(request.query_params.get("next")), error=None
        )

    # ------------------------------------------------------------------ actions

    async def login(self, request: Request, form: FormData) -> Response:
        if not self.token:
            return RedirectResponse("/", status_code=303)
        target = _local(self._form_text(form, "next"))
        if not hmac.compare_digest(self._form_text(form, "token").encode(), self.token.encode()):
            return self.render(
                request,
                "login.html",
                401,
                next=target,
                error="that is not the token this server was started with",
            )
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE, session_value(self.token), httponly=True, samesite="strict"
        )
        return response

    async def set_reviewer(self, request: Request, form: FormData) -> Response:
        target = _local(self._form_text(form, "next"))
        try:
            name = checked_reviewer(self._form_text(form, "reviewer"))
        except BadRequest as err:
            return self.problem(request, 400, str(err))
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(REVIEWER_COOKIE, name[:100], httponly=True, samesite="strict")
        return response

    async def review_row(self, request: Request, form: FormData) -> Response:
        """One block's form: ``save`` its changed fields, ``confirm`` (save, then confirm),
        ``reject``, or ``reopen`` a confirmed block. A save writes every change or none."""
        run_id = request.path_params["run_id"]
        query = GridQuery.from_back(self._form_text(form, "back"))
        uid, act = self._form_text(form, "block"), self._form_text(form, "act")
        if act not in ("save", "confirm", "reject", "reopen"):
            return self.problem(request, 400, f"act: {act!r}; save, confirm, reject or reopen")
        who = self.who(request)
        index = self._form_text(form, "index")
        anchor = f"#row-{index}" if index.isdigit() else ""
        try:
            if act == "reject":  # what was typed in a rejected row is not kept
                await self.bb.reject(run_id, [uid], reviewer=who)
                note = f"{_block(uid)} rejected"
            elif act == "reopen":
                await self.bb.reopen(run_id, [uid], reviewer=who)
                note = f"{_block(uid)} reopened: correct it, then confirm it again"
            else:
                saved = await self._save_row(request, run_id, uid, form)
                if isinstance(saved, Refusal):  # the schema's refusals beside the fields
                    return self.refused(run_id, query, saved, anchor)
                if act == "confirm":
                    await self.bb.confirm(run_id, [uid], reviewer=who)
                done = "; ".join(saved) if saved else "nothing changed"
                note = f"{_block(uid)}: {done}" + ("; confirmed" if act == "confirm" else "")
        except (NotFound, BadRequest) as err:
            return self.refused(run_id, query, Refusal(str(err), typed=typed_of(form, uid)), anchor)
        # Back at the row's anchor: the page's script makes the first row still to review
        # from there the current one, so a reviewer goes on where they were.
        return RedirectResponse(query.url(run_id, note=note) + anchor, status_code=303)

    async def _save_row(
        self, request: Request, run_id: str, uid: str, form: FormData
    ) -> list[str] | Refusal:
        """Write the row's changed fields (each ``"field before → after"``), or the
        refusal with each refused field's reason, nothing written."""
        page, row = await self._row(run_id, uid, self._form_text(form, "index"))
        typed = {f: self._form_text(form, f"v:{f}") for f in page.fields if f"v:{f}" in form}
        if row.status != REVIEWABLE:
            raise BadRequest(
                f"{_block(uid)} is {row.status}: only a staged result can be "
                "changed"
                + ("; reopen it first" if row.status == "confirmed" else "")
                + "; nothing was changed"
            )
        was = {f: self._form_text(form, f"w:{f}") for f in page.fields if f"w:{f}" in form}
        changed, stale = own_changes(typed, was, field_texts(page.spec, row.staging))
        if stale:
            return Refusal(
                f"{_block(uid)}: nothing was changed: "
                + ", ".join(stale)
                + " changed since this page was read (someone else's edit); the value now is "
                "beside the field and yours is still in it: save again to replace it",
                field_errors={
                    (uid, f): f"changed since this page was read: now {t or '(empty)'}"
                    for f, t in stale.items()
                },
                typed={(uid, f): t for f, t in typed.items()},
            )
        plan = planned_edits(page.spec, row.staging or {}, changed)
        if plan.errors:
            return Refusal(
                f"{_block(uid)}: nothing was changed: "
                + "; ".join(plan.errors.values())
                + "; correct the value beside its field and save again",
                field_errors={(uid, f): e for f, e in plan.errors.items()},
                typed={(uid, f): t for f, t in typed.items()},
            )
        saved: list[str] = []
        for field, value in plan.changes.items():
            try:
                done = await self.bb.edit(run_id, uid, field, value, reviewer=self.who(request))
            except EditError as err:  # changed under us since the page was read
                kept = f" ({'; '.join(saved)} saved)" if saved else ""
                raise BadRequest(f"{_block(uid)} {field}: {err}{kept}") from None
            if done.changed:
                saved.append(f"{field} {_field_text(done.before)} → {_field_text(done.after)}")
        return saved

    async def _row(self, run_id: str, uid: str, index_text: str) -> tuple[GridPage, GridRow]:
        """The grid page of one block (its schema with it) and the block's row."""
        if not index_text.isdigit():
            raise BadRequest(f"index: {index_text!r} is not a block index")
        index = int(index_text)
        page = await self.bb.review(run_id, limit=1, after=index - 1 if index else None)
        if not page.rows or page.rows[0].block_uid != uid:
            raise NotFound(f"run {run_id} has no block {uid} at index {index}; nothing was changed")
        return page, page.rows[0]

    async def decide(self, request: Request, form: FormData) -> Response:
        run_id = request.path_params["run_id"]
        query = GridQuery.from_back(self._form_text(form, "back"))
        # act: confirm / reject the selected (or one row's) blocks, or "-shown": every
        # block on the page that has a staged result.
        act = self._form_text(form, "act")
        decision, _, scope = act.partition("-")
        if decision not in ("confirm", "reject") or scope not in ("", "shown"):
            return self.problem(
                request, 400, f"act: {act!r}; confirm, reject, confirm-shown or reject-shown"
            )
        key = "shown" if scope == "shown" else "block"
        blocks = [b for b in form.getlist(key) if isinstance(b, str) and b]
        if not blocks:
            return self.refused(
                run_id,
                query,
                Refusal(
                    f"nothing to {decision}: select blocks first (or use '{decision} all shown')"
                ),
            )
        try:
            if decision == "confirm":
                confirmed = await self.bb.confirm(run_id, blocks, reviewer=self.who(request))
                moved = len(confirmed.confirmed)
            else:
                rejected = await self.bb.reject(run_id, blocks, reviewer=self.who(request))
                moved = len(rejected.rejected)
        except (NotFound, BadRequest) as err:
            return self.refused(run_id, query, Refusal(str(err)))
        verb = "confirmed" if decision == "confirm" else "rejected"
        note = f"{verb} {moved} block{'s' if moved != 1 else ''}"
        # All shown are decided: on to the next page, where the review goes on.
        next_after = self._form_text(form, "next_after")
        if scope == "shown" and next_after.isdigit():
            return RedirectResponse(
                query.url(run_id, note=note, after=next_after, before=None), status_code=303
            )
        return RedirectResponse(query.url(run_id, note=note), status_code=303)


def typed_of(form: FormData, uid: str) -> dict[tuple[str, str], str]:
    """What a row's form had typed in its fields (``v:<field>``), per ``(uid, field)``."""
    return {
        (uid, key[2:]): value
        for key, value in form.multi_items()
        if key.startswith("v:") and isinstance(value, str)
    }


def _block(uid: str) -> str:
    """A block as a note names it: ``block 7`` for ``<document>:7``."""
    return f"block {uid.rpartition(':')[2]}"


def _local(target: str | None) -> str:
    """A same-site path to go back to (anything else, e.g. ``//evil``, becomes ``/``)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def create_app(
    bb: Blockbatch,
    settings: Settings,
    *,
    token: str | None = None,
    reviewer: str,
    prog: str = CONSOLE_SCRIPT,
) -> Starlette:
    """The ASGI app. ``token``: require sign-in with it; ``reviewer``: the name acts are
    recorded under unless a browser set its own; ``prog``: the program that started it,
    which the next command in a message is written with (``blockbatch.core.commands``)."""
    app = ReviewApp(bb, settings, token=token, reviewer=reviewer, prog=prog)
    routes = [
        Route("/", app.runs),
        Route("/runs/{run_id}", app.grid),
        Route("/runs/{run_id}/export", app.export),
        Route("/runs/{run_id}/calls", app.calls),
        Route("/runs/{run_id}/calls/{call_id:int}", app.call),
        Route("/runs/{run_id}/blocks/{uid}/page.png", app.block_page),
        Route("/login", app.login_page),
        # Every route that changes something is a POST behind the CSRF check.
        Route("/login", csrf_protected(app.login), methods=["POST"]),
        Route("/reviewer", csrf_protected(app.set_reviewer), methods=["POST"]),
        Route("/runs/{run_id}/review", csrf_protected(app.review_row), methods=["POST"]),
        Route("/runs/{run_id}/decide", csrf_protected(app.decide), methods=["POST"]),
    ]
    # Errors that may mean Postgres went away; database_down lets through the ones that don't.
    down = {OSError: app.database_down, asyncpg.PostgresError: app.database_down}
    return Starlette(
        routes=routes,
        middleware=[Middleware(GuardMiddleware, token=token)],
        exception_handlers=down,
    )
