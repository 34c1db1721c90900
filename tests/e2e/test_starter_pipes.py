"""starter.py piped into a reader that stops early (``| head``) exits quietly."""

from __future__ import annotations

import asyncio
import fcntl
import os
import sys

from blockbatch.core.run_types import RunOptions
from tests.conftest import ROOT, Stack
from tests.helpers import extract_schema, markdown_doc
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

#: The smallest pipe Linux allows: every command below writes well past it.
_PIPE_BYTES = 4096


async def _finished_run(s: Stack, blocks: int) -> str:
    doc = await s.bb.ingest_bytes(markdown_doc(blocks), name="doc.md", fmt="markdown")
    schema = await s.bb.add_schema(extract_schema())
    async with s.worker():
        run_id = await s.bb.start_run(doc, schema, RunOptions(pack_size=1))
        await s.bb.wait(run_id)
    return run_id


async def _into_closed_pipe(cli: Cli, *args: str) -> tuple[int, str]:
    """Run ``starter.py ARGS`` into a small pipe, read a few bytes, close it: (code, stderr)."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *args,
        cwd=ROOT,
        env=cli.env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=write_end,
        stderr=asyncio.subprocess.PIPE,
    )
    os.close(write_end)
    try:
        first = await asyncio.to_thread(os.read, read_end, 64)
    finally:
        os.close(read_end)  # what `head -c 64` does once it has its bytes
    assert first, "the command wrote nothing"
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_review_calls_and_export_exit_quietly_when_the_reader_stops(
    cli: Cli, bbstack: Stack
) -> None:
    run_id = await _finished_run(bbstack, 50)
    for args in (
        ["review", run_id, "--limit", "50"],
        ["calls", run_id],
        ["export", run_id, "--out", "-"],
        ["review", run_id, "--json"],
    ):
        code, err = await _into_closed_pipe(cli, *args)
        assert err == "", (args, err)  # no traceback, no "Exception ignored"
        # 141 = 128 + SIGPIPE: what a shell reports for a tool stopped by a closed pipe.
        # JSON goes out in one write, which an unbuffered stdout (PYTHONUNBUFFERED, as
        # here) may end with a short count instead of an error: done, status 0.
        assert code in ({0, 141} if "--json" in args else {141}), (args, code)
