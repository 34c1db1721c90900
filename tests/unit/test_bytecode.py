"""The suite keeps compiled bytecode, whatever the shell exports (tests/conftest.py)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_a_process_the_suite_starts_writes_and_reuses_its_bytecode(tmp_path: Path) -> None:
    """Each ``worker.py``, ``starter.py`` and simulator process inherits the environment:
    one compiles a module, the next ones load the compiled file."""
    (tmp_path / "suite_module.py").write_text("VALUE = 1\n")
    subprocess.run(
        [sys.executable, "-c", "import suite_module"], cwd=tmp_path, env=os.environ, check=True
    )
    assert list((tmp_path / "__pycache__").glob("suite_module.*.pyc"))


def test_the_test_process_writes_the_bytecode_of_what_it_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "suite_module_here.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importlib.import_module("suite_module_here").VALUE == 2
    assert list((tmp_path / "__pycache__").glob("suite_module_here.*.pyc"))
