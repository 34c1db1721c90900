"""Each test's database goes when its test ends (``tests/conftest.py``: ``db_url``,
``fresh_database``).

Kept to the session's end, the copies (about 460 files, 15 MB each) were written to disk
and removed with the session's directory: 12 to 19 s of every xdist worker's last teardown
after 65 tests on this machine, growing with the number of tests (docs/testing.md,
h-teardown).
"""

from __future__ import annotations

import os
import uuid

import asyncpg
import pytest

from blockbatch.devtools import stack
from tests.conftest import TEMPLATE_DB, fresh_database


async def databases(pg: stack.PostgresInstance, like: str) -> list[str]:
    conn = await asyncpg.connect(pg.url("postgres"))
    try:
        rows = await conn.fetch(
            "select datname from pg_database where datname like $1 order by datname", like
        )
    finally:
        await conn.close()
    return [row["datname"] for row in rows]


async def test_a_fresh_database_is_dropped_when_its_block_ends_even_with_a_connection_open(
    pg: stack.PostgresInstance,
) -> None:
    name = f"fresh_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    async with fresh_database(pg, name, TEMPLATE_DB) as url:
        conn = await asyncpg.connect(url)  # left open: a leaked pool or worker would be
        assert await conn.fetchval("select current_database()") == name
        assert await conn.fetchval("select count(*) from runs") == 0  # the migrated copy
    assert await databases(pg, name) == []
    with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
        await conn.fetchval("select 1")  # its server side was closed by the drop
    await conn.close()


async def test_no_earlier_tests_database_is_left_in_the_sessions_postgres(
    pg: stack.PostgresInstance, db_url: str
) -> None:
    """Every test before this one in this process (xdist worker) that had a database of its
    own (``db_url``) has had it dropped: only this test's own is left. In ``make test``
    each worker runs hundreds of database tests before this file's."""
    own = db_url.rsplit("/", 1)[1]
    assert await databases(pg, f"t\\_{os.getpid()}\\_%") == [own]
