"""`make demo`: bring up the embedded stack and a worker, run the bundled sample, report.

Everything is real: embedded Postgres, the Temporal dev server (UI on :8233), the simulated
Claude over HTTP through the anthropic SDK, and a worker process. The stack keeps running
afterwards so the run can be explored in the UI; `make down` stops it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from blockbatch.stack import LocalStack, StackError, _spawn, _stop_pid
from blockbatch.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DOC = ROOT / "samples" / "handbook.md"
SAMPLE_SCHEMA = ROOT / "samples" / "extract.json"


def ensure_worker(stack: LocalStack) -> int:
    """(Re)start the demo's background worker, so it always runs the current code."""
    pid_file = stack.pid_file("demo-worker")
    _stop_pid(pid_file)
    return _spawn([sys.executable, str(ROOT / "worker.py")], stack.log("worker"), pid_file,
                  env={"PYTHONUNBUFFERED": "1"})


async def run_sample() -> int:
    from blockbatch.api import Blockbatch
    from blockbatch.report import baseline_cost, summary_lines

    settings = load_settings()
    async with await Blockbatch.connect(settings) as bb:
        doc = await bb.ingest_file(SAMPLE_DOC)
        schema = await bb.add_schema_file(SAMPLE_SCHEMA)
        started = time.monotonic()
        run_id = await bb.start_run(doc, schema)
        print(f"started run {run_id} ({SAMPLE_DOC.name} x {SAMPLE_SCHEMA.name})")
        print(f"  follow it in the Temporal UI: {settings.run_url(f'run-{run_id}')}")
        while True:
            done = asyncio.ensure_future(bb.wait(run_id))
            await asyncio.wait([done], timeout=1.0)
            if done.done():
                result = done.result()
                break
            try:
                p = await bb.progress(run_id)
                print(f"  {p.status}: {p.blocks_done}/{p.blocks_total} blocks, "
                      f"{p.packs_done}/{p.packs_total} packs, {p.calls} calls", flush=True)
            except Exception:  # noqa: BLE001 - progress is best effort while planning
                pass
            done.cancel()
        baseline = await baseline_cost(bb.pool, run_id)
        print()
        for line in summary_lines(result, baseline=baseline,
                                  ui_url=settings.run_url(f"run-{run_id}"),
                                  duration_s=time.monotonic() - started):
            print(line)
    print()
    print("The stack is still up: explore the run in the UI; `make down` stops everything.")
    return 0 if result.status == "completed" else 1


def main() -> int:
    stack = LocalStack(load_settings())
    try:
        for line in stack.up():
            print(line)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    pid = ensure_worker(stack)
    print(f"worker     running  pid {pid}  (log {stack.log('worker')})")
    return asyncio.run(run_sample())


if __name__ == "__main__":
    sys.exit(main())
