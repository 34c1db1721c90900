"""At a terminal: a redrawn progress bar, and Ctrl-C asks whether to cancel or detach."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys

from tests.conftest import ROOT, Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`


class Terminal:
    """The master side of a pseudo-terminal the CLI uses as stdin, stdout and stderr."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        os.set_blocking(self.master, False)  # never block the loop that runs the worker
        self.text = ""

    async def read_until(self, marker: str, timeout: float = 60) -> str:
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(self.master, readable.set)
        try:
            async with asyncio.timeout(timeout):
                while marker not in self.text:
                    await readable.wait()
                    readable.clear()
                    try:
                        self.text += os.read(self.master, 65536).decode(errors="replace")
                    except BlockingIOError:  # woken twice for one chunk
                        continue
                    except OSError:  # the child closed the terminal
                        break
        finally:
            loop.remove_reader(self.master)
        return self.text

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> None:
        os.close(self.master)


async def test_ctrl_c_at_a_terminal_offers_cancel_and_cancels(cli: Cli, bbstack: Stack) -> None:
    bbstack.sim.scenario(speed_factor=1.0, latency={"ttft_ms": 200, "per_output_token_ms": 0})
    term = Terminal()
    async with bbstack.worker():
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "starter.py",
            "run",
            cli.doc(80),
            "--schema",
            cli.schema(),
            "--pack-size",
            "2",
            "--set",
            "max_concurrent_packs=1",
            cwd=ROOT,
            env={**cli.env, "COLUMNS": "200"},
            stdin=term.slave,
            stdout=term.slave,
            stderr=term.slave,
        )
        os.close(term.slave)
        try:
            await term.read_until(" blocks · ")
            assert "\r\x1b[2K" in term.text  # redrawn in place, not a line per update
            proc.send_signal(signal.SIGINT)  # what the terminal sends on Ctrl-C
            await term.read_until("[c]ancel the run")
            term.type("c\n")
            out = await term.read_until("its packs")
            await asyncio.wait_for(proc.wait(), 60)
        finally:
            term.close()
    assert proc.returncode == 1, out
    assert "cancel requested" in out and "cancelled" in out
    assert "cancelled by request" in out
