"""Running ``starter.py`` commands against the test stack.

``await cli(*args)`` runs the command in-process (``tests/inprocess.py``): the test's event
loop runs it beside the worker (``async with bbstack.worker():``), with the stack's
addresses in its own environment (``cli.env``), and returns its exit code and what it
printed. ``cli.start`` / ``cli.process`` run ``python starter.py`` as a real process, for
what only a process shows: signals, pipes, a terminal, exit statuses.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Stack
from tests.helpers import extract_schema, markdown_doc
from tests.inprocess import run_command

_RUN_ID = re.compile(r"started run (\S+):")


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def run_id(self) -> str:
        match = _RUN_ID.search(self.out)
        assert match, self.out + self.err
        return match.group(1)


@dataclass
class Cli:
    env: dict[str, str]
    tmp: Path
    s: Stack | None = None
    files: dict[str, Path] = field(default_factory=dict)

    async def start(self, *args: str, **env: str) -> asyncio.subprocess.Process:
        """``python starter.py ARGS`` started as a process of its own, stdout/stderr piped."""
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "starter.py",
            *args,
            cwd=ROOT,
            env={**self.env, **env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

    async def __call__(self, *args: str, timeout: float = 120, **env: str) -> Result:
        """``starter.py ARGS`` in-process with ``cli.env`` plus ``env``."""
        done = await asyncio.wait_for(run_command(args, {**self.env, **env}), timeout)
        return Result(done.code, done.out, done.err)

    async def process(self, *args: str, timeout: float = 120, **env: str) -> Result:
        """``python starter.py ARGS`` as a process of its own (see :meth:`start`)."""
        proc = await self.start(*args, **env)
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        assert proc.returncode is not None
        return Result(proc.returncode, out.decode(), err.decode())

    def doc(self, n_blocks: int, name: str = "doc.md") -> str:
        path = self.tmp / name
        path.write_bytes(markdown_doc(n_blocks))
        return str(path)

    def schema(self, name: str = "schema.json", **kwargs: Any) -> str:
        path = self.tmp / name
        data = kwargs.pop("data", None) or extract_schema(**{"instruction_words": 200, **kwargs})
        path.write_text(json.dumps(data))
        return str(path)


def stack_env(s: Stack) -> dict[str, str]:
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "DATABASE_", "TEMPORAL_", "BLOCKBATCH_"))
    }
    settings = s.settings
    assert settings.database_url and settings.temporal_address and settings.anthropic_base_url
    return {
        **keep,
        "DATABASE_URL": settings.database_url,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "TEMPORAL_TASK_QUEUE": s.task_queue,
        "ANTHROPIC_BASE_URL": settings.anthropic_base_url,
        "ANTHROPIC_API_KEY": "sim-test-key",
        "BLOCKBATCH_DATA_DIR": str(settings.blockbatch_data_dir),
        "NO_COLOR": "1",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture(name="cli")
def cli_fixture(bbstack: Stack, tmp_path: Path) -> Cli:
    return Cli(env=stack_env(bbstack), tmp=tmp_path, s=bbstack)
