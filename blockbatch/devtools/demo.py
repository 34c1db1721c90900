"""`make demo`: bring up the embedded stack and a worker, run the bundled sample, report.

`python -m blockbatch.devtools.demo --document samples/handbook.pdf` runs the same handbook
as a PDF (samples/make_pdf.py writes it); any document and schema can be given the same way.

Everything is real: embedded Postgres, the Temporal dev server (UI on :8233), the simulated
Claude over HTTP through the anthropic SDK, and a worker process. The stack keeps running
afterwards so the run can be explored in the UI; `make down` stops it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blockbatch.cli.parser import STARTER, starter_prog
from blockbatch.devtools.stack import LocalStack, StackError, spawn, stop_pid
from blockbatch.runtime.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DOC = ROOT / "samples" / "handbook.md"
SAMPLE_SCHEMA = ROOT / "samples" / "extract.json"


def ensure_worker(stack: LocalStack) -> int:
    """(Re)start the demo's background worker, so it always runs the current code."""
    pid_file = stack.pid_file("demo-worker")
    stop_pid(pid_file)
    return spawn(
        [sys.executable, str(ROOT / "worker.py")],
        stack.log("worker"),
        pid_file,
        env={"PYTHONUNBUFFERED": "1"},
    )


def wait_for_worker(timeout_s: float = 60.0) -> bool:
    """Wait until the worker just started polls the task queue (it imports the SDK and
    connects first), so the run does not begin with a "no worker is polling" note."""
    import asyncio
    import time

    from blockbatch.api import open_default

    async def polling() -> bool:
        bb = await open_default()
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if await bb.workers_polling():
                    return True
                await asyncio.sleep(0.5)
            return False
        finally:
            await bb.close()

    return asyncio.run(polling())


def as_typed(path: Path) -> str:
    """``path`` as a user types it here: relative to the current directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def closing_words() -> str:
    """What to try next, in commands that work as printed: this interpreter (the project's
    environment, where the packages are), not whichever ``python`` the shell finds."""
    # Not resolved: a .venv that is a symlink keeps its short name.
    starter = starter_prog(as_typed(Path(sys.executable).absolute()), as_typed(STARTER))
    ui = load_settings().resolved_temporal_ui_url
    return "\n".join(
        [
            "The stack is still up. Explore the run in the Temporal UI at " + ui + ", or try:",
            f"  `{starter} list`",
            f"  `{starter} review RUN_ID`   (then `confirm`, `export` and `calls`)",
            (
                "Run `source .venv/bin/activate` first and the commands the summary suggests "
                "work as printed; `make down` stops everything."
            ),
        ]
    )


def run_sample(document: Path = SAMPLE_DOC, schema: Path = SAMPLE_SCHEMA) -> int:
    """Run the sample through exactly what the CLI's `run` does, summary included."""
    from blockbatch.cli import main as starter

    code = starter(["run", str(document), "--schema", str(schema)])
    print()
    print(closing_words())
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m blockbatch.devtools.demo")
    parser.add_argument(
        "--document",
        type=Path,
        default=SAMPLE_DOC,
        help=f"the document to run (default: {as_typed(SAMPLE_DOC)}; any format the CLI "
        f"reads, e.g. {as_typed(SAMPLE_DOC.with_suffix('.pdf'))})",
    )
    parser.add_argument(
        "--schema",
        type=Path,
        default=SAMPLE_SCHEMA,
        help=f"the schema to apply (default: {as_typed(SAMPLE_SCHEMA)})",
    )
    args = parser.parse_args(argv)
    stack = LocalStack(load_settings())
    try:
        for line in stack.up():
            print(line)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    pid = ensure_worker(stack)
    print(f"worker     running  pid {pid}  (log {stack.log('worker')})")
    if not wait_for_worker():
        print(f"worker     not polling yet: see {stack.log('worker')}", file=sys.stderr)
    return run_sample(args.document, args.schema)


if __name__ == "__main__":
    sys.exit(main())
