"""Serving the review app inside a test, a finished run to review, and the headless browser.

The browser is Debian's ``chromium-headless-shell`` (Chromium's old headless mode, the
browser Playwright itself runs headless) driven by Playwright (its own browser download
does not work offline); ``make test`` installs the package when it runs as root. The full
``chromium`` package runs headless as a whole browser with its own WebUI renderers: the
browser tests' chromium used 6.7-7.4 s of CPU with the shell against 18.7-20.2 s with it
(docs/testing.md, "The lead, 2026-11-29 14:20-17:15 UTC").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import uvicorn
from playwright.async_api import Browser, async_playwright
from starlette.applications import Starlette
from temporalio.testing import WorkflowEnvironment

from bench.common import handbook_document
from blockbatch.api import Blockbatch
from blockbatch.core.run_types import RunOptions
from blockbatch.devtools import stack
from blockbatch.runtime.settings import Settings
from blockbatch.store.db import create_pool
from tests.conftest import ROOT, SimulatorProcess, Stack
from tests.helpers import block_content, extract_schema, markdown_doc
from tests.waiting import until

CHROMIUM = "/usr/lib/chromium/chromium-headless-shell"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.asynccontextmanager
async def launched_chromium() -> AsyncIterator[Browser]:
    """One headless chromium (Playwright), closed at the end of the block."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@contextlib.asynccontextmanager
async def fresh_pages(browser: Browser) -> AsyncIterator[Browser]:
    """``browser`` for one test: every page it opens (``browser.new_page``, each in a
    context of its own: no cookies or storage shared with another test) is closed at the
    end of the block, the browser itself kept for the next test."""
    before = set(browser.contexts)
    try:
        yield browser
    finally:
        for context in browser.contexts:
            if context not in before:
                await context.close()


#: Set to a folder to have the browser test save a screenshot of each page there
#: (``make screenshots`` writes the ones docs/how-it-works.md shows into docs/screenshots).
SCREENSHOTS_ENV = "BLOCKBATCH_SCREENSHOTS"

#: A small document with a heading, list items and a block that is an HTML script tag.
SCRIPT_BLOCK = "<script>window.__pwned = 1</script>"
_PARAGRAPHS = [
    "# Restarting the queue workers",
    "Drain the queue before you restart any worker on the east cluster.",
    SCRIPT_BLOCK,
    "- check the dashboard for stuck jobs",
    "- page the on-call engineer when the backlog grows",
    "Restart one worker at a time and watch the error rate for five minutes.",
    "## Rolling back",
    "Roll back with the previous image tag when the error rate stays above one percent.",
    "This paragraph is skipped by the simulated model and so fails.",
    "Write down what happened in the incident log before you hand over.",
]
DOCUMENT = "\n\n".join(_PARAGRAPHS).encode()
#: Block index of the block the simulator always skips (it ends ``failed``).
FAILED_BLOCK = 8


async def finished_run(s: Stack) -> tuple[str, str]:
    """(run_id, document_id) of a finished run of :data:`DOCUMENT`: 9 blocks ai_complete,
    block :data:`FAILED_BLOCK` failed (``missing_from_answer``)."""
    doc = await s.bb.ingest_bytes(DOCUMENT, name="runbook.md", fmt="markdown")
    schema = await s.bb.add_schema(extract_schema(instruction_words=200))
    s.sim.scenario(always_skip_contents=[await block_content(s.pool, f"{doc}:{FAILED_BLOCK}")])
    async with s.worker():
        run_id = await s.bb.start_run(doc, schema, RunOptions(pack_size=4))
        await s.bb.wait(run_id)
    return run_id, doc


@contextlib.asynccontextmanager
async def stack_on(
    db_url: str, temporal_env: WorkflowEnvironment, sim: SimulatorProcess, data_dir: Path
) -> AsyncIterator[Stack]:
    """A :class:`Stack` on the database at ``db_url`` (as the ``bbstack`` fixture wires
    one), its pool and API client closed at the end of the block."""
    settings = Settings(
        database_url=db_url,
        temporal_address=temporal_env.client.service_client.config.target_host,
        temporal_task_queue=f"tq-{uuid.uuid4().hex[:8]}",
        anthropic_base_url=sim.base_url,
        anthropic_api_key="sim-test-key",
        blockbatch_data_dir=data_dir,
    )
    pool = await create_pool(db_url, max_size=20)
    bb = Blockbatch(pool, temporal_env.client, settings)
    try:
        yield Stack(settings, temporal_env.client, pool, bb, sim, settings.temporal_task_queue)
    finally:
        await bb.close()
        await pool.close()


async def keyboard_run(s: Stack, blocks: int) -> tuple[str, str]:
    """(run_id, document_id) of a finished run of a markdown document of ``blocks``
    blocks, every one answered (``ai_complete``): rows to review by keyboard."""
    doc = await s.bb.ingest_bytes(markdown_doc(blocks), name="long.md", fmt="markdown")
    schema = await s.bb.add_schema(extract_schema(instruction_words=200))
    async with s.worker():
        run_id = await s.bb.start_run(doc, schema, RunOptions())
        await s.bb.wait(run_id)
    return run_id, doc


#: The demo's document and schema (`make demo`): the grid is judged with its eight fields.
DEMO_DOCUMENT = ROOT / "samples" / "handbook.md"
DEMO_SCHEMA = ROOT / "samples" / "extract.json"
#: The demo document's blocks the grid test runs: its first, enough for a page of 30 and
#: a next page (the whole handbook is 144 blocks, a run almost four times as long).
DEMO_BLOCKS = 40


async def demo_run(s: Stack) -> tuple[str, str]:
    """(run_id, document_id) of a finished run of the demo's schema on the first
    :data:`DEMO_BLOCKS` blocks of its document, every block answered (``ai_complete``)."""
    doc = await s.bb.ingest_bytes(
        handbook_document(DEMO_BLOCKS), name=DEMO_DOCUMENT.name, fmt="markdown"
    )
    schema = await s.bb.add_schema_file(DEMO_SCHEMA)
    async with s.worker():
        run_id = await s.bb.start_run(doc, schema, RunOptions())
        await s.bb.wait(run_id)
    return run_id, doc


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port in this event loop; yield its base URL."""
    port = stack.free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    # The test process keeps its own signal handling (uvicorn would swap SIGINT's).
    server.capture_signals = contextlib.nullcontext  # type: ignore[assignment]  # a stand-in for the method
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done(), "the review app started or failed")
        assert server.started, "the review app did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def screenshot_dir() -> Path | None:
    folder = os.environ.get(SCREENSHOTS_ENV)
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path
