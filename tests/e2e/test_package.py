"""The wheel is a package that behaves like one: ``blockbatch`` plus the deployment layout's names.

A user's environment gets one top-level package of ours (``blockbatch``) and the names the
deployment layout keeps at top level (``workflows``, ``activities``, ``worker.py``,
``starter.py``), the console script, and the data files the code reads at run time.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = {"blockbatch", "workflows", "activities", "worker.py", "starter.py"}


def _wheel(tmp_path: Path) -> zipfile.ZipFile:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("blockbatch-*.whl")
    return zipfile.ZipFile(wheel)


def test_the_wheel_installs_blockbatch_and_the_deployment_layout_only(tmp_path: Path) -> None:
    with _wheel(tmp_path) as wheel:
        names = wheel.namelist()
        top = {n.split("/", 1)[0] for n in names if ".dist-info/" not in n}
        assert top == OURS
        assert not [n for n in names if n.startswith(("tests/", "bench/"))]
        # What the code opens at run time travels with it.
        assert any(n.startswith("blockbatch/store/migrations/") and n.endswith(".sql")
                   for n in names)  # fmt: skip
        assert "blockbatch/web/templates/base.html" in names
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "blockbatch = blockbatch.cli:run" in wheel.read(entry_points).decode()
