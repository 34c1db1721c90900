"""Safe by default: where the review app may listen, who may use it, and CSRF.

- **Bind.** A loopback address (127.0.0.1, ::1, localhost) needs nothing more; any other
  address needs ``BLOCKBATCH_SERVE_TOKEN`` (16 characters or more), else the app refuses
  to start (:func:`check_bind`).
- **Sign-in.** When a token is set, every page needs it: a person signs in once on
  ``/login`` (the session cookie is an HMAC of the token, so it is worthless without the
  token and dies when the token changes); a script may send ``Authorization: Bearer``.
- **CSRF.** Every response carries a per-browser random token in a cookie (HttpOnly,
  SameSite=Strict); every form that changes something sends it back in a hidden field and
  :func:`csrf_protected` refuses a POST whose field does not match its cookie (403) before
  the handler runs. Another site can neither read the cookie nor set the field.
- **Output.** Templates autoescape (``app.py``), and every page has a Content-Security-Policy
  that only runs the page's own inline script (a per-response nonce), so block text or
  model output that holds ``<script>`` is shown, never run.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from blockbatch.api.errors import BadRequest

#: The environment variable holding the token a non-local bind needs.
TOKEN_ENV = "BLOCKBATCH_SERVE_TOKEN"
MIN_TOKEN_LENGTH = 16
CSRF_COOKIE = "bb_csrf"
CSRF_FIELD = "csrf_token"
SESSION_COOKIE = "bb_session"
#: Pages reachable without signing in (the sign-in page itself).
OPEN_PATHS = ("/login",)


class BindRefused(BadRequest):
    """The app would listen beyond this machine without a token; the message says what to do."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost`` or a loopback address)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback ``host`` without a long enough token.

    Raises:
        BindRefused: what is wrong and how to fix it.
    """
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise BindRefused(
            f"{TOKEN_ENV} is {len(token)} characters long; use {MIN_TOKEN_LENGTH} or more "
            f"(e.g. `export {TOKEN_ENV}=$(python -c 'import secrets; "
            f"print(secrets.token_urlsafe(24))')`)"
        )
    if not is_loopback(host) and not token:
        raise BindRefused(
            f"refusing to serve on {host}: anyone who can reach that address could confirm "
            f"and edit results. Set {TOKEN_ENV} to a secret of {MIN_TOKEN_LENGTH}+ characters "
            f"(people sign in with it), or bind to 127.0.0.1 (the default)"
        )


def session_value(token: str) -> str:
    """The session cookie for ``token``: an HMAC of it, never the token itself."""
    return hmac.new(token.encode(), b"blockbatch-review-session", hashlib.sha256).hexdigest()


def signed_in(request: Request, token: str) -> bool:
    """Whether the request carries the session cookie or the token as a bearer."""
    cookie = request.cookies.get(SESSION_COOKIE, "")
    if cookie and hmac.compare_digest(cookie, session_value(token)):
        return True
    auth = request.headers.get("authorization", "")
    return auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].encode(), token.encode())


class GuardMiddleware(BaseHTTPMiddleware):
    """Sign-in (when a token is set), the CSRF cookie and the security headers."""

    def __init__(self, app: Any, token: str | None) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if self.token and request.url.path not in OPEN_PATHS and not signed_in(request, self.token):
            if request.method in ("GET", "HEAD"):
                response: Response = RedirectResponse(
                    f"/login?next={quote(request.url.path)}", status_code=303
                )
            else:
                response = PlainTextResponse("sign in first (see /login)", status_code=401)
            return self._finish(request, response, new_csrf=None)
        new_csrf = None
        if not request.cookies.get(CSRF_COOKIE):
            new_csrf = secrets.token_urlsafe(32)
        request.state.csrf = request.cookies.get(CSRF_COOKIE) or new_csrf
        request.state.nonce = secrets.token_urlsafe(16)
        response = await call_next(request)
        return self._finish(request, response, new_csrf=new_csrf)

    def _finish(self, request: Request, response: Response, *, new_csrf: str | None) -> Response:
        if new_csrf:
            response.set_cookie(CSRF_COOKIE, new_csrf, httponly=True, samesite="strict")
        nonce = getattr(request.state, "nonce", "")
        response.headers["content-security-policy"] = (
            "default-src 'self'; script-src "
            + (f"'nonce-{nonce}'" if nonce else "'none'")
            + "; style-src 'self' 'unsafe-inline'; img-src 'self' data:; form-action 'self';"
            " frame-ancestors 'none'; base-uri 'none'"
        )
        response.headers["x-content-type-options"] = "nosniff"
        response.headers["referrer-policy"] = "same-origin"
        response.headers["x-frame-options"] = "DENY"
        return response


Handler = Callable[[Request, FormData], Awaitable[Response]]


def csrf_protected(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A POST endpoint that runs ``handler(request, form)`` only when the form's CSRF field
    matches the browser's CSRF cookie; otherwise 403 and nothing runs."""

    async def endpoint(request: Request) -> Response:
        form = await request.form()
        sent = form.get(CSRF_FIELD)
        cookie = request.cookies.get(CSRF_COOKIE)
        if (
            not isinstance(sent, str)
            or not cookie
            or not hmac.compare_digest(sent.encode(), cookie.encode())
        ):
            return PlainTextResponse(
                "refused: this form's CSRF token is missing or does not match this browser's "
                "session; reload the page and try again",
                status_code=403,
            )
        return await handler(request, form)

    endpoint.csrf_protected = True  # type: ignore[attr-defined]  # a marker on the function, read by the route test
    endpoint.__name__ = handler.__name__
    return endpoint
