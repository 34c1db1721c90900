"""`pip install .` gives a `blockbatch` command beside `python starter.py`: the same CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_blockbatch_command_runs_the_starters_cli() -> None:
    command = Path(sys.executable).parent / "blockbatch"
    assert command.exists(), "the package's console script is not installed (make install)"
    done = subprocess.run(
        [str(command), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "COMMAND --help" in done.stdout and "estimate" in done.stdout
    # Its usage lines name the command the user typed.
    assert done.stdout.startswith("usage: blockbatch ")
