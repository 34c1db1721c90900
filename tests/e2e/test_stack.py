"""The local stack (`make up/down/status`): idempotent, durable, and clear when it cannot start."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client

from blockbatch.devtools import stack
from blockbatch.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def stack_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "blockbatch.devtools.stack", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=180,
        check=False,
    )


@pytest.fixture
def stack_env() -> Iterator[dict[str, str]]:
    # Under /tmp, not pytest's directory (see the `pg` fixture in tests/conftest.py).
    data = Path(tempfile.mkdtemp(prefix="bb-test-stack-"))
    env = {
        "BLOCKBATCH_DATA_DIR": str(data / "data"),
        "PG_PORT": str(stack.free_port()),
        "TEMPORAL_PORT": str(stack.free_port()),
        "TEMPORAL_UI_PORT": str(stack.free_port()),
        "SIMULATOR_PORT": str(stack.free_port()),
    }
    yield env
    stack_cli(["down"], env)
    shutil.rmtree(data, ignore_errors=True)


async def test_up_twice_down_up_keeps_data_and_history(stack_env: dict[str, str]) -> None:
    first = stack_cli(["up"], stack_env)
    assert first.returncode == 0, first.stderr
    again = stack_cli(["up"], stack_env)
    assert again.returncode == 0, again.stderr
    assert "ready" in again.stdout

    fields: dict[str, Any] = {k.lower(): v for k, v in stack_env.items()}
    settings = Settings(**fields)
    conn = await asyncpg.connect(settings.resolved_database_url)
    await conn.execute("create table keepme (x int); insert into keepme values (42)")
    await conn.close()
    client = await Client.connect(settings.resolved_temporal_address)
    await client.start_workflow("NoSuchWorkflow", id="kept-history", task_queue="nobody")

    down = stack_cli(["down"], stack_env)
    assert down.returncode == 0, down.stderr
    assert "data kept" in down.stdout
    status = stack_cli(["status", "--json"], stack_env)
    assert '"running": false' in status.stdout

    assert stack_cli(["up"], stack_env).returncode == 0
    conn = await asyncpg.connect(settings.resolved_database_url)
    assert await conn.fetchval("select x from keepme") == 42
    await conn.close()
    client = await Client.connect(settings.resolved_temporal_address)
    desc = await client.get_workflow_handle("kept-history").describe()
    assert desc.workflow_type == "NoSuchWorkflow"


#: `up` starts Postgres before Temporal, and initialising and starting one is most of an
#: `up` that then fails on Temporal. The two Temporal failures below name an external
#: Postgres instead (`up` never connects to it: it only says it is external), so they go
#: straight to Temporal's start, the path they check;
#: `test_up_twice_down_up_keeps_data_and_history` starts the whole stack.
EXTERNAL_POSTGRES = {"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/not-started-by-up"}


def test_port_taken_names_the_setting(stack_env: dict[str, str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        result = stack_cli(["up"], {**stack_env, **EXTERNAL_POSTGRES, "TEMPORAL_PORT": str(taken)})
    assert result.returncode == 1
    assert f"port {taken} is already in use" in result.stderr
    assert "TEMPORAL_PORT" in result.stderr


def test_missing_temporal_binary_says_what_to_do(stack_env: dict[str, str]) -> None:
    env = {**stack_env, **EXTERNAL_POSTGRES, "TEMPORAL_CLI": "/nonexistent/temporal"}
    result = stack_cli(["up"], env)
    assert result.returncode == 1
    assert "`temporal` CLI was not found" in result.stderr
    assert "TEMPORAL_CLI" in result.stderr


async def test_concurrent_migrations_apply_each_file_once(pg: stack.PostgresInstance) -> None:
    from blockbatch.store.db import migrate, migration_files

    conn = await asyncpg.connect(pg.url("postgres"))
    await conn.execute("create database migrate_race")
    await conn.close()
    conns = [await asyncpg.connect(pg.url("migrate_race")) for _ in range(4)]
    applied = await asyncio.gather(*(migrate(c) for c in conns))
    # Exactly one process applied the files; the others found nothing to do.
    assert sorted(len(a) for a in applied) == [0, 0, 0, len(migration_files())]
    rows = await conns[0].fetch("select version from schema_migrations order by version")
    assert [r["version"] for r in rows] == [v for v, _, _ in migration_files()]
    for c in conns:
        await c.close()
