"""``exit_process``: a command leaves with its code and everything it wrote, without the
interpreter's finalization (where the Temporal core's threads can abort it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Buffered output, as a command's is when nothing sets PYTHONUNBUFFERED: what it wrote is
#: still in the buffer when it exits.
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _run(code: str) -> subprocess.CompletedProcess[str]:
    program = (
        "import logging, sys\n"
        "from blockbatch.runtime.process import exit_process\n"
        "logging.basicConfig(stream=sys.stderr, format='%(message)s')\n"
        "print('written, not yet flushed', end='')\n"
        "logging.getLogger('x').warning('logged')\n"
        f"exit_process({code})\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env=BUFFERED,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_code_and_the_unflushed_output_come_out() -> None:
    done = _run("3")
    assert (done.returncode, done.stdout) == (3, "written, not yet flushed")
    assert "logged" in done.stderr


def test_a_message_goes_to_stderr_and_exits_1_like_sys_exit() -> None:
    done = _run("'error: no database'")
    assert done.returncode == 1 and done.stderr.strip().endswith("error: no database")


def test_none_is_success() -> None:
    assert _run("None").returncode == 0


def test_a_closed_stdout_does_not_turn_into_an_error() -> None:
    program = (
        "import sys\n"
        "from blockbatch.runtime.process import exit_process\n"
        "sys.stdout.write('x' * 1000)  # buffered: the flush meets the closed pipe\n"
        "sys.stdin.read()  # until the reader has gone\n"
        "exit_process(0)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env=BUFFERED,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader went away (`| head`)
    proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
