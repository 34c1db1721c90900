"""A command loads what it uses: ``status``, ``list``, ``watch`` and ``--help`` start without
the worker, the converters, the web app, the quote and the other commands' modules.

Each case runs the command line in a fresh interpreter, as a shell does, and reads
``sys.modules`` where the command would first connect to Postgres (``asyncpg.connect`` is
replaced there by a function that reports and ends the process) or, for ``--help``, once
the help is printed. Nothing is timed: a module is loaded or it is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

_PROBE = """
import json, os, sys
import asyncpg

def report():
    sys.stdout.flush()
    loaded = [
        name for name, module in sys.modules.items()
        # The anthropic SDK stays a lazy module until first used (blockbatch/send/sdk.py).
        if type(module).__name__ != "_LazyModule"
    ]
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump(loaded, out)
    os._exit(0)

async def connect(*args, **kwargs):
    report()

asyncpg.connect = connect
from blockbatch.cli import main
main(sys.argv[1:])
report()
"""


#: What no command below uses, at any point: the worker and Claude's SDK, the document
#: converters, the review web app, the simulator, the tokenizer.
NEVER = (
    "anthropic",
    "temporalio.worker",
    "workflows",
    "activities",
    "blockbatch.runtime.temporal",
    "blockbatch.simulator",
    "blockbatch.web.app",
    "starlette",
    "jinja2",
    "uvicorn",
    "pypdfium2",
    "docx",
    "pptx",
    "openpyxl",
    "trafilatura",
    "lxml",
    "PIL",
    "tiktoken",
    "tokenizers",
)
#: What these commands do not use: other commands' parts of the CLI and the API, the
#: request to Claude and its quote, the exports.
NOT_USED = (
    "blockbatch.cli.run",
    "blockbatch.cli.review",
    "blockbatch.cli.calibrate",
    "blockbatch.cli.stream",
    "blockbatch.cli.serve",
    "blockbatch.cli.check",
    "blockbatch.cli.quote",
    "blockbatch.api.calibrate",
    "blockbatch.api.items",
    "blockbatch.api.quote",
    "blockbatch.api.export",
    "blockbatch.api.parquet",
    "blockbatch.api.pages",
    "blockbatch.send.sender",
    "blockbatch.runtime.claude",
    "blockbatch.runtime.models_api",
    "pyarrow",
)


def _loaded(tmp_path: Path, *argv: str) -> set[str]:
    """The modules loaded when ``starter.py argv`` first connects to Postgres, or ends."""
    out = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PROBE_OUT": str(out)},
    )
    return set(json.loads(out.read_text()))


def _among(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in loaded for name in names if n == name or n.startswith(f"{name}."))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["status", "--help"],
        ["status", "run-1"],
        ["list"],
        ["watch", "--help"],
        ["watch", "run-1"],
    ],
    ids=" ".join,
)
def test_no_command_loads_the_worker_the_converters_or_the_web_app(
    tmp_path: Path, argv: list[str]
) -> None:
    assert _among(_loaded(tmp_path, *argv), NEVER) == []


@pytest.mark.parametrize(
    ("argv", "its_own"),
    [
        (["status", "--help"], ()),
        (["status", "run-1"], ()),
        (["list"], ()),
        (["watch", "--help"], ("blockbatch.cli.run",)),
        (["watch", "run-1"], ("blockbatch.cli.run",)),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_reading_a_run_loads_no_other_command_nor_the_quote(
    tmp_path: Path, argv: list[str], its_own: tuple[str, ...]
) -> None:
    unused = tuple(name for name in NOT_USED if name not in its_own)
    assert _among(_loaded(tmp_path, *argv), unused) == []


@pytest.mark.parametrize("argv", [["status", "run-1"], ["list"]], ids=" ".join)
def test_reading_postgres_loads_no_temporal_client(tmp_path: Path, argv: list[str]) -> None:
    # `list` and `status` of a finished run never talk to Temporal; a running run's
    # `status` loads the client when it asks for live progress, after these reads.
    assert _among(_loaded(tmp_path, *argv), ("temporalio",)) == []
