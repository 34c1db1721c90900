"""The CLI's commands that never call Claude do not load the anthropic SDK, and no front
door loads the worker's workflows.

The SDK's imports cost about 2.7 s of CPU, three quarters of the CLI's start
(blockbatch/send/sdk.py).
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

_CHECK = """
import importlib, importlib.util, sys

def sdk_state():
    sdk = sys.modules.get("anthropic")
    return "not-loaded" if sdk is None or isinstance(sdk, importlib.util._LazyModule) \\
        else "loaded"

for name in sys.argv[1:]:
    importlib.import_module(name)
print(sdk_state())
from blockbatch.send.sdk import anthropic
anthropic.APIError
print(sdk_state())
"""


def test_the_cli_imports_without_the_sdk_which_loads_on_first_use() -> None:
    modules = [
        "blockbatch.cli",
        "blockbatch.cli.session",
        "blockbatch.cli.run",
        "blockbatch.cli.inspect",
        "blockbatch.cli.review",
        "blockbatch.cli.follow",
        "blockbatch.api",
        "workflows.run",
        "activities.llm",
    ]
    out = subprocess.run(
        [sys.executable, "-c", _CHECK, *modules],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.split() == ["not-loaded", "loaded"]


_WORKER_MODULES = """
import importlib, sys

for name in sys.argv[1:]:
    importlib.import_module(name)
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] == "workflows")) or "none")
"""


def test_the_front_doors_import_no_workflow() -> None:
    # The Python API starts and asks workflows by their registered names
    # (blockbatch/core/workflow_names.py); only a worker built in-process loads them.
    modules = [
        "blockbatch.cli",
        "blockbatch.cli.run",
        "blockbatch.cli.inspect",
        "blockbatch.cli.review",
        "blockbatch.cli.follow",
        "blockbatch.cli.stream",
        "blockbatch.api",
        "blockbatch.report",
        "blockbatch.web.app",
    ]
    out = subprocess.run(
        [sys.executable, "-c", _WORKER_MODULES, *modules],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.split() == ["none"]
