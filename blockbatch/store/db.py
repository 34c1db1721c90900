"""Postgres access: one pool per process and forward-only migrations.

Migrations are the numbered ``.sql`` files in ``blockbatch/store/migrations``. They are applied
at start-up by the worker and the starter under a transaction-scoped advisory lock, so two
processes starting at once apply each file exactly once.
"""

from __future__ import annotations

import errno
import json
import re
import socket
from pathlib import Path
from typing import Any

import asyncpg

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_MIGRATION_LOCK_KEY = 0x626C6F636B  # "block": any constant shared by every process
_FILE_RE = re.compile(r"^(\d{3,})_[a-z0-9_]+\.sql$")


class DatabaseUnavailable(RuntimeError):
    """Postgres could not be reached; the message says which URL and what to do."""


def unavailable(url: str, exc: BaseException) -> DatabaseUnavailable:
    """The error every entry point shows when Postgres at ``url`` cannot be reached."""
    return DatabaseUnavailable(
        f"cannot connect to Postgres at {redact_url(url)} ({exc.__class__.__name__}: {exc}); "
        "start the local stack with `make up`, or set DATABASE_URL"
    )


#: The errno values of a plain ``OSError`` that mean the server is out of reach (asyncpg
#: raises a plain one, errno None, when every address of a host refused).
_UNREACHABLE = {
    None,
    errno.ECONNREFUSED,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.EADDRNOTAVAIL,
    errno.ETIMEDOUT,
    errno.ECONNRESET,
}


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says Postgres is down or out of reach (not a bad query, not a full
    disk): a new connection refused or timed out, or the server ended ours (shut down,
    crashed, still starting)."""
    if isinstance(
        exc,
        ConnectionError
        | TimeoutError
        | socket.gaierror
        | asyncpg.PostgresConnectionError
        | asyncpg.CannotConnectNowError
        | asyncpg.AdminShutdownError
        | asyncpg.CrashShutdownError,
    ):
        return True
    return type(exc) is OSError and exc.errno in _UNREACHABLE


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration file, in order."""
    out = []
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        match = _FILE_RE.match(path.name)
        if not match:
            raise RuntimeError(f"migration file name {path.name!r} must look like 001_name.sql")
        out.append((int(match.group(1)), path.name, path.read_text()))
    versions = [v for v, _, _ in out]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration numbers in {MIGRATIONS_DIR}")
    return out


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Apply pending migrations; return the names applied. Safe to call concurrently."""
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute("select pg_advisory_xact_lock($1)", _MIGRATION_LOCK_KEY)
        await conn.execute(
            """create table if not exists schema_migrations (
                   version integer primary key,
                   name text not null,
                   applied_at timestamptz not null default now())"""
        )
        done = {r["version"] for r in await conn.fetch("select version from schema_migrations")}
        for version, name, sql in migration_files():
            if version in done:
                continue
            await conn.execute(sql)
            await conn.execute(
                "insert into schema_migrations (version, name) values ($1, $2)", version, name
            )
            applied_now.append(name)
    return applied_now


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    # jsonb in its binary format (a version byte, 1, then the JSON text), which binary COPY
    # needs (store/repo.py stores blocks by COPY); the same values as the text format.
    await conn.set_type_codec(
        "jsonb",
        encoder=_jsonb_encode,
        decoder=_jsonb_decode,
        schema="pg_catalog",
        format="binary",
    )


class JsonText(str):
    """A value's JSON text, made by the caller: stored in a jsonb column as it is (the
    pool's codec encodes every other value with ``json.dumps``). The ingest makes its
    blocks' provenance this way, from parts shared by many blocks (store/repo.py)."""


#: ``json.dumps`` with its defaults, without its per-call check of the options.
_encode_json = json.JSONEncoder().encode


def _jsonb_encode(value: Any) -> bytes:
    if type(value) is JsonText:
        return b"\x01" + value.encode()
    return b"\x01" + _encode_json(value).encode()


def _jsonb_decode(data: bytes) -> Any:
    if data[:1] != b"\x01":
        raise ValueError(f"unknown jsonb binary format version {data[:1]!r}")
    return json.loads(data[1:])


def redact_url(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


async def connect_reading(url: str, *, timeout: float) -> asyncpg.Connection:
    """One connection that decodes json/jsonb like the pool's, without migrating: for a
    reader that must create nothing (a quote)."""
    conn = await asyncpg.connect(url, timeout=timeout)
    await _init_connection(conn)
    return conn


async def create_pool(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """Connect, migrate, and return a pool whose connections decode json/jsonb."""
    try:
        conn = await asyncpg.connect(url, timeout=10)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise unavailable(url, exc) from exc
    try:
        await migrate(conn)
    finally:
        await conn.close()
    pool = await asyncpg.create_pool(
        url, min_size=min_size, max_size=max_size, init=_init_connection, command_timeout=60
    )
    assert pool is not None
    return pool
