"""The review web app in a real headless browser (Debian's chromium-headless-shell via
Playwright) against a finished run on the real stack: open, filter, edit (a bad value
refused with the schema's error and nothing changed), confirm a selection, reject, export,
read a pack's ledger; block text that is a <script> tag shown as text; a change without the
CSRF token refused;
sign-in when a token is set; a non-local bind without a token refused; a PDF block's page
shown with its box drawn; a running header shown as set aside, and a block's box drawn
right on a page shown turned (/Rotate 90).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect
from starlette.routing import Route
from temporalio.testing import WorkflowEnvironment
from yarl import URL

from bench import review_page
from bench.common import SHARED_STACK_ENV, handbook_document
from blockbatch.api import BadRequest, Blockbatch, NotFound
from blockbatch.core.page_image import BOX_COLOUR, DEFAULT_WIDTH, box_pixels
from blockbatch.core.registry import DEFAULT_MODEL
from blockbatch.core.run_types import RunOptions
from blockbatch.devtools import stack
from blockbatch.devtools.services import Services
from blockbatch.runtime.settings import Settings
from blockbatch.store.db import create_pool
from blockbatch.web.app import create_app
from blockbatch.web.security import CSRF_COOKIE, CSRF_FIELD
from tests.conftest import ROOT, TEMPLATE_DB, SimulatorProcess, Stack, fresh_database
from tests.inprocess import run_command
from tests.web_helpers import (
    CHROMIUM,
    FAILED_BLOCK,
    SCRIPT_BLOCK,
    demo_run,
    finished_run,
    fresh_pages,
    keyboard_run,
    launched_chromium,
    screenshot_dir,
    serving,
    stack_on,
)

# Each `expect` waits for its condition, not a time: Playwright's 5 s default deadline was
# met by a page loading on a machine at load 15 (the grid's next page after "confirm all
# shown"), so the deadline is the test's own timeout's business, not a race of its own.
expect.set_options(timeout=60_000)

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="Debian's chromium-headless-shell is missing: `make test` installs it as root, "
    "else `sudo apt-get install chromium-headless-shell`",
)


@pytest_asyncio.fixture(scope="session")
async def chromium() -> AsyncIterator[Browser]:
    """One browser for the browser tests of each test process (xdist worker), launched by
    the first: a launch is seconds of CPU; each test's pages get contexts of their own
    (`fresh_pages`), so no cookie or storage passes from one test to the next."""
    async with launched_chromium() as browser:
        yield browser


@pytest_asyncio.fixture(scope="module")
async def finished_template(
    pg: stack.PostgresInstance,
    temporal_env: WorkflowEnvironment,
    simulator_process: SimulatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[str, str, str]]:
    """(database, run_id, document_id): a finished run of the runbook (`finished_run`),
    made once for the module in a database that each test reviewing it copies
    (`finished`): every test changes a copy of its own, none waits for the run again."""
    name = f"review_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    async with fresh_database(pg, name, TEMPLATE_DB) as url:
        try:
            async with stack_on(
                url, temporal_env, simulator_process, tmp_path_factory.mktemp("finished")
            ) as s:
                run_id, doc = await finished_run(s)
        finally:
            simulator_process.scenario()  # the default again, as the next test's `sim` has it
        yield name, run_id, doc


@pytest_asyncio.fixture
async def finished(
    finished_template: tuple[str, str, str],
    pg: stack.PostgresInstance,
    temporal_env: WorkflowEnvironment,
    sim: SimulatorProcess,
    tmp_path: Path,
) -> AsyncIterator[tuple[Stack, str, str]]:
    """(stack, run_id, document_id): this test's own copy of `finished_template`'s run."""
    template, run_id, doc = finished_template
    async with (
        fresh_database(pg, f"{template}_{uuid.uuid4().hex[:6]}", template) as url,
        stack_on(url, temporal_env, sim, tmp_path / "data") as s,
    ):
        yield s, run_id, doc


async def overlay(s: Stack, run_id: str, index: int) -> dict[str, Any]:
    row = await s.pool.fetchrow(
        "select status, staging, confirmed from overlays where run_id = $1 and block_index = $2",
        run_id,
        index,
    )
    return dict(row)


async def actions(s: Stack, run_id: str) -> list[dict[str, Any]]:
    rows = await s.pool.fetch(
        """select block_uid, action, reviewer, field, before, after, old_status, new_status
           from review_actions where run_id = $1 order by id""",
        run_id,
    )
    return [dict(r) for r in rows]


def other_than(token: str) -> str:
    """``token`` with its first character changed (a near miss)."""
    return ("a" if token[0] != "a" else "b") + token[1:]


def browser_like() -> aiohttp.ClientSession:
    """An HTTP client that keeps cookies of 127.0.0.1, as a browser does."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def shot(page: Page, name: str, *, full_page: bool = True) -> None:
    folder = screenshot_dir()
    if folder is not None:
        await page.screenshot(path=str(folder / f"{name}.png"), full_page=full_page)


@needs_chromium
async def test_review_a_run_in_the_browser(
    finished: tuple[Stack, str, str], tmp_path: Path, chromium: Browser
) -> None:
    bbstack, run_id, doc = finished
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, fresh_pages(chromium) as browser:
        page = await browser.new_page(
            accept_downloads=True, viewport={"width": 1500, "height": 900}
        )
        await _walk_through(page, base, bbstack, run_id, doc, tmp_path)


async def _walk_through(page: Page, base: str, s: Stack, run_id: str, doc: str, tmp: Path) -> None:
    # The runs page lists the finished run with its counts and Temporal UI links.
    await page.goto(base + "/")
    row = page.locator(f"tr[data-run='{run_id}']")
    await expect(row).to_contain_text("completed_with_failures")
    assert await row.locator("a", has_text="run").last.get_attribute("href") == s.settings.run_url(
        f"run-{run_id}"
    )
    await shot(page, "runs")
    await row.locator(f"a[href='/runs/{run_id}']").click()

    # The grid: every block beside its staged fields; the <script> block is text, not run.
    await expect(page.locator("#grid tr[data-uid]")).to_have_count(10)
    assert await page.locator("#content-2").inner_text() == SCRIPT_BLOCK
    assert await page.evaluate("typeof window.__pwned") == "undefined"
    original = (await overlay(s, run_id, 1))["staging"]
    assert await page.locator("#v-1-word_count").input_value() == str(original["word_count"])
    await shot(page, "grid")

    # Filters: by status, by reason code, by block type.
    await page.select_option("#f-status", "failed")
    await page.click("#apply-filter")
    await expect(page.locator("#grid tr[data-uid]")).to_have_count(1)
    await expect(page.locator(f"#row-{FAILED_BLOCK}")).to_contain_text("missing_from_answer")
    await page.select_option("#f-status", "")
    await page.select_option("#f-reason", "missing_from_answer")
    await page.click("#apply-filter")
    await expect(page.locator("#grid tr[data-uid]")).to_have_count(1)
    await page.goto(f"{base}/runs/{run_id}?type=heading")
    await expect(page.locator("#grid tr[data-uid]")).to_have_count(2)
    assert await page.locator("#grid tr[data-uid]").evaluate_all("rows => rows.map(r => r.id)") == [
        "row-0",
        "row-6",
    ]
    await page.goto(f"{base}/runs/{run_id}?limit=4&after=3")  # keyset: blocks 4..7
    assert await page.locator("#grid tr[data-uid]").evaluate_all("rows => rows.map(r => r.id)") == [
        "row-4",
        "row-5",
        "row-6",
        "row-7",
    ]
    await page.click("#next-page")
    # The click starts a navigation: wait for the next page's rows before reading them.
    await expect(page.locator("#grid tr[data-uid]").first).to_have_id("row-8")
    assert await page.locator("#grid tr[data-uid]").evaluate_all("rows => rows.map(r => r.id)") == [
        "row-8",
        "row-9",
    ]
    await page.goto(f"{base}/runs/{run_id}")

    # A value the schema refuses: its error beside the field, and nothing changed, not even
    # the row's other field that was fine.
    await page.fill("#v-1-word_count", "-3")
    await page.fill("#v-1-summary", "A summary that would be fine")
    await page.click("#save-1")
    error = page.locator("#err-1-word_count")
    await expect(error).to_contain_text("minimum of 0")
    assert await page.locator("#v-1-word_count").input_value() == "-3"  # what was typed
    assert await page.locator("#v-1-summary").input_value() == "A summary that would be fine"
    await page.fill("#v-1-word_count", "many")
    await page.click("#save-1")
    await expect(page.locator("#err-1-word_count")).to_contain_text("not a JSON value")
    assert (await overlay(s, run_id, 1))["staging"] == original
    assert await actions(s, run_id) == []
    await shot(page, "edit-error")

    # A good value is staged and recorded; a string field takes the text as typed.
    await page.goto(f"{base}/runs/{run_id}")
    await page.fill("#v-1-word_count", "999")
    await page.click("#save-1")
    await expect(page.locator("#note")).to_contain_text("→ 999")
    await page.fill("#v-1-summary", 'Drain first, then "restart" <one> at a time')
    await page.click("#save-1")
    await expect(page.locator("#note")).to_be_visible()
    staged = (await overlay(s, run_id, 1))["staging"]
    assert staged == {
        **original,
        "word_count": 999,
        "summary": 'Drain first, then "restart" <one> at a time',
    }

    # Confirm a selection (blocks 1 and 2), reject one block (3) from its row.
    await page.check("#row-1 input.pick")
    await page.check("#row-2 input.pick")
    await page.click("#confirm-selected")
    await expect(page.locator("#note")).to_contain_text("confirmed 2 blocks")
    await page.click("#reject-3")
    await expect(page.locator("#note")).to_contain_text("block 3 rejected")
    await shot(page, "grid-reviewed")

    statuses = {i: (await overlay(s, run_id, i))["status"] for i in range(10)}
    assert statuses == {
        0: "ai_complete",
        1: "confirmed",
        2: "confirmed",
        3: "rejected",
        4: "ai_complete",
        5: "ai_complete",
        6: "ai_complete",
        7: "ai_complete",
        8: "failed",
        9: "ai_complete",
    }
    assert (await overlay(s, run_id, 1))["confirmed"] == staged
    acts = await actions(s, run_id)
    uid = f"{doc}:1"
    assert [(a["block_uid"], a["action"], a["field"]) for a in acts] == [
        (uid, "edit", "word_count"),
        (uid, "edit", "summary"),
        (uid, "confirm", None),
        (f"{doc}:2", "confirm", None),
        (f"{doc}:3", "reject", None),
    ]
    assert {a["reviewer"] for a in acts} == {"ada"}
    assert (acts[0]["before"], acts[0]["after"]) == (original["word_count"], 999)
    assert acts[2]["after"] == staged and acts[4]["before"] is not None

    # Export: JSONL and CSV downloads show exactly that.
    async with page.expect_download() as info:
        await page.click("#export-jsonl")
    jsonl = tmp / "export.jsonl"
    await (await info.value).save_as(jsonl)
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [ln["immutable"]["block_index"] for ln in lines] == list(range(10))
    assert lines[1]["user_defined"] == staged
    assert [r["action"] for r in lines[1]["review"]] == ["edit", "edit", "confirm"]
    assert lines[1]["review"][0]["reviewer"] == "ada"
    assert lines[1]["review"][0]["before"] == original["word_count"]
    assert lines[3]["user_defined"] is None and lines[3]["status"]["status"] == "rejected"
    assert lines[3]["review"][0]["action"] == "reject"
    others = [ln for i, ln in enumerate(lines) if i not in (1, 2, 3)]
    assert all(ln["user_defined"] is None and "review" not in ln for ln in others)
    async with page.expect_download() as info:
        await page.click("#export-csv")
    table = list(csv.DictReader(io.StringIO(Path(await (await info.value).path()).read_text())))
    assert table[1]["word_count"] == "999" and table[1]["last_reviewer"] == "ada"
    assert table[1]["review_actions"] == "3" and table[3]["status"] == "rejected"
    assert table[2]["block_content"] == SCRIPT_BLOCK and table[0]["word_count"] == ""

    # "confirm all shown" takes exactly the staged blocks the filter shows.
    await page.goto(f"{base}/runs/{run_id}?type=heading&status=ai_complete")
    await page.click("#confirm-shown")
    await expect(page.locator("#ask-text")).to_have_text("Confirm all 2 staged blocks shown?")
    await page.click("#ask-yes")
    await expect(page.locator("#note")).to_contain_text("confirmed 2 blocks")
    assert [(await overlay(s, run_id, i))["status"] for i in (0, 5, 6)] == [
        "confirmed",
        "ai_complete",
        "confirmed",
    ]
    await expect(page.locator("#grid tr[data-uid]")).to_have_count(0)  # none left to show
    await page.goto(f"{base}/runs/{run_id}")

    # The ledger of block 4's pack, and one call with its request and response.
    await page.click("#row-4 a[href*='/calls?pack=']")
    await expect(page.locator("#calls")).to_be_visible()
    await page.locator("#calls a").first.click()
    # Sent under short ids: the request says b1, the page maps it back to the block.
    await expect(page.locator("#blocks")).to_contain_text(f"b1 = {doc}:4")
    await expect(page.locator("#request")).to_contain_text('\\"block_uid\\": \\"b1\\"')
    await expect(page.locator("#response")).to_contain_text("tool_use")
    assert "sim-test-key" not in await page.content()
    await shot(page, "call")


#: The demo schema's fields that have a fixed set of values (enums, a boolean, 0..3).
CHOICE_FIELDS = ("block_type", "topic", "action_required", "risk_level")


@needs_chromium
@pytest.mark.timeout(300)
async def test_the_grid_in_the_browser_with_the_demos_eight_fields(
    bbstack: Stack, chromium: Browser
) -> None:
    run_id, doc = await demo_run(bbstack)
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, fresh_pages(chromium) as browser:
        for width in (1400, 1920):
            page = await browser.new_page(viewport={"width": width, "height": 1000})
            response = await page.goto(f"{base}/runs/{run_id}?limit=8")
            assert response is not None
            await _reads_well(page, width, response.headers["content-security-policy"])
            await shot(page, f"grid-{width}")
            await page.close()
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        await _review_with_the_demos_schema(page, base, bbstack, run_id, doc)


async def _reads_well(page: Page, width: int, csp: str) -> None:
    # The run page names the model the run used.
    run = await page.locator("#run-model").inner_text()
    assert run.strip() == DEFAULT_MODEL  # the demo's schema names none
    # Nothing runs off the side, and the block text (what a reviewer judges by) keeps a
    # third of the page however many fields there are.
    assert await page.evaluate("document.documentElement.scrollWidth") <= width
    text = await page.locator("#content-1").bounding_box()
    assert text is not None and text["width"] >= width / 3, text
    # Fields with a fixed set of values are choices, the others text boxes.
    for field in CHOICE_FIELDS:
        assert await page.locator(f"#v-1-{field}").evaluate("e => e.tagName") == "SELECT"
    topic = await page.locator("#v-1-topic option").all_inner_texts()
    assert "incident_response" in topic and len(topic) == 7
    assert await page.locator("#v-1-risk_level option").all_inner_texts() == ["0", "1", "2", "3"]
    assert await page.locator("#v-1-word_count").evaluate("e => e.tagName") == "INPUT"
    assert await page.locator("#v-1-summary").evaluate("e => e.tagName") == "TEXTAREA"
    # Every field box is wide enough to read its value, and one save serves each row.
    for field in ("word_count", "first_40_chars", "topic"):
        box = await page.locator(f"#v-1-{field}").bounding_box()
        assert box is not None and box["width"] >= 90, (field, box)
    assert await page.locator("#row-1 button[value=save]").count() == 1
    assert await page.locator("#grid button[value=save]").count() == 8
    # The page's script runs under this response's nonce; no inline handlers.
    assert re.search(r"<[^>]*\son[a-z]+=", await page.content()) is None
    nonce = await page.evaluate("document.querySelector('main script').nonce")
    assert nonce and f"'nonce-{nonce}'" in csp


async def _review_with_the_demos_schema(
    page: Page, base: str, s: Stack, run_id: str, doc: str
) -> None:
    await page.goto(f"{base}/runs/{run_id}?limit=8")
    before = (await overlay(s, run_id, 1))["staging"]
    topic = "post_incident_review" if before["topic"] != "post_incident_review" else "general"
    # Change two fields of a row (a choice and a number) and confirm it in one click.
    await page.select_option("#v-1-topic", topic)
    await page.fill("#v-1-word_count", str(before["word_count"] + 1))
    await expect(page.locator("#row-1")).to_have_class(re.compile("dirty"))
    await page.click("#confirm-1")
    await expect(page.locator("#note")).to_contain_text(f"topic {before['topic']} → {topic}")
    await expect(page.locator("#note")).to_contain_text("confirmed")
    row1 = await overlay(s, run_id, 1)
    assert row1["status"] == "confirmed"
    assert row1["confirmed"] == {**before, "topic": topic, "word_count": before["word_count"] + 1}

    # A bulk confirm with a row's change not saved is refused in the page, not lost.
    risk = (await overlay(s, run_id, 2))["staging"]["risk_level"]
    await page.select_option("#v-2-risk_level", str((risk + 1) % 4))
    await page.click("#confirm-shown")
    await expect(page.locator("#bulk-warning")).to_contain_text("#2 has changes not saved")
    assert (await overlay(s, run_id, 2))["status"] == "ai_complete"

    # Confirm every block shown (more than the review acts list holds): one line in the
    # review acts, the edits before it still in view.
    await page.goto(f"{base}/runs/{run_id}?limit=30")
    await page.click("#confirm-shown")
    await page.click("#ask-yes")
    await expect(page.locator("#note")).to_contain_text("confirmed 29 blocks")
    acts = page.locator("#acts tbody tr")
    await expect(acts.first).to_be_visible()  # the next page has loaded down to its acts
    texts = await acts.all_inner_texts()
    assert any("29 blocks" in t and "confirm" in t for t in texts), texts
    assert sum("edit" in t for t in texts) == 2, texts  # topic and word_count of block 1

    # A confirmed block can be reopened, corrected and confirmed again.
    await page.goto(f"{base}/runs/{run_id}?limit=8")
    await expect(page.locator("#reopen-1")).to_be_visible()
    await page.click("#reopen-1")
    await expect(page.locator("#note")).to_contain_text("block 1 reopened")
    row1 = await overlay(s, run_id, 1)
    assert row1["status"] == "ai_complete" and row1["confirmed"] is None
    assert row1["staging"]["topic"] == topic  # the corrected values are still staged
    await expect(page.locator("#row-1 .edited-mark")).to_have_count(2)
    await page.select_option(
        "#v-1-action_required", "true" if not row1["staging"]["action_required"] else "false"
    )
    await page.click("#save-1")
    await expect(page.locator("#note")).to_contain_text("action_required")
    await page.fill("#v-1-word_count", "-1")
    await page.click("#save-1")
    await expect(page.locator("#err-1-word_count")).to_contain_text("minimum of 0")
    await shot(page, "grid-review-1400")
    await page.set_viewport_size({"width": 1920, "height": 1000})
    await shot(page, "grid-review-1920")

    recorded = [(a["block_uid"], a["action"]) for a in await actions(s, run_id)]
    uid = f"{doc}:1"
    assert recorded[:3] == [(uid, "edit"), (uid, "edit"), (uid, "confirm")]
    assert recorded[-2:] == [(uid, "reopen"), (uid, "edit")]
    reopened = [a for a in await actions(s, run_id) if a["action"] == "reopen"]
    assert reopened[0]["before"]["topic"] == topic and reopened[0]["after"] is None
    assert (reopened[0]["old_status"], reopened[0]["new_status"]) == ("confirmed", "ai_complete")
    info = await s.bb.run(run_id)
    assert info.blocks["confirmed"] == 29


async def test_changes_need_the_csrf_token(finished: tuple[Stack, str, str]) -> None:
    bbstack, run_id, doc = finished
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    # Every route that changes something is behind the CSRF check.
    posts = [r for r in app.routes if isinstance(r, Route) and "POST" in (r.methods or ())]
    assert posts and all(getattr(r.endpoint, "csrf_protected", False) for r in posts)
    async with serving(app) as base, browser_like() as http:
        page = await http.get(f"{base}/runs/{run_id}")
        assert page.status == 200
        token = http.cookie_jar.filter_cookies(URL(base))[CSRF_COOKIE].value
        assert f'name="{CSRF_FIELD}" value="{token}"' in await page.text()
        form = {"act": "confirm", "block": f"{doc}:0", "back": ""}
        missing = await http.post(f"{base}/runs/{run_id}/decide", data=form, allow_redirects=False)
        assert missing.status == 403 and "CSRF" in await missing.text()
        wrong = await http.post(
            f"{base}/runs/{run_id}/decide",
            data={**form, CSRF_FIELD: other_than(token)},
            allow_redirects=False,
        )
        assert wrong.status == 403
        edit = await http.post(
            f"{base}/runs/{run_id}/review",
            data={"block": f"{doc}:0", "index": "0", "act": "save", "v:word_count": "5"},
            allow_redirects=False,
        )
        assert edit.status == 403
        assert (await overlay(bbstack, run_id, 0))["status"] == "ai_complete"
        assert await actions(bbstack, run_id) == []
        # The same form with the token goes through.
        ok = await http.post(
            f"{base}/runs/{run_id}/decide", data={**form, CSRF_FIELD: token}, allow_redirects=False
        )
        assert ok.status == 303
        assert (await overlay(bbstack, run_id, 0))["status"] == "confirmed"


async def test_with_a_token_every_page_needs_sign_in(bbstack: Stack) -> None:
    secret = "a-long-enough-serve-token"
    app = create_app(bbstack.bb, bbstack.settings, token=secret, reviewer="ada")
    async with serving(app) as base, browser_like() as http:
        first = await http.get(f"{base}/", allow_redirects=False)
        assert first.status == 303 and first.headers["location"] == "/login?next=/"
        login = await http.get(f"{base}/login")
        assert login.status == 200
        csrf = http.cookie_jar.filter_cookies(URL(base))[CSRF_COOKIE].value
        bad = await http.post(
            f"{base}/login",
            data={CSRF_FIELD: csrf, "token": "guess", "next": "/"},
            allow_redirects=False,
        )
        assert bad.status == 401
        assert (await http.get(f"{base}/", allow_redirects=False)).status == 303
        good = await http.post(
            f"{base}/login",
            data={CSRF_FIELD: csrf, "token": secret, "next": "//elsewhere.example"},
            allow_redirects=False,
        )
        assert good.status == 303 and good.headers["location"] == "/"  # never off-site
        page = await http.get(f"{base}/", allow_redirects=False)
        assert page.status == 200 and "Runs" in await page.text()
        assert secret not in await page.text()
        async with aiohttp.ClientSession() as script:  # a script sends the token instead
            bearer = await script.get(
                f"{base}/", allow_redirects=False, headers={"Authorization": f"Bearer {secret}"}
            )
            assert bearer.status == 200
            wrong = await script.get(
                f"{base}/", allow_redirects=False, headers={"Authorization": "Bearer guess"}
            )
            assert wrong.status == 303


async def test_a_non_local_bind_without_a_token_is_refused(tmp_path: Path) -> None:
    # `starter.py serve` in this process (tests/inprocess.py), with this environment alone:
    # no token from the shell's. The process's own exit statuses are tested in
    # tests/e2e/test_starter_errors.py.
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "NO_COLOR": "1",
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    }
    refused = await run_command(["serve", "--host", "0.0.0.0"], env)
    assert refused.code == 2
    assert "refusing to serve on 0.0.0.0" in refused.err
    assert "BLOCKBATCH_SERVE_TOKEN" in refused.err
    short = await run_command(
        ["serve", "--host", "0.0.0.0"], {**env, "BLOCKBATCH_SERVE_TOKEN": "short"}
    )
    assert short.code == 2 and "16 or more" in short.err
    assert re.search(r"Traceback", refused.err + short.err) is None


@pytest.mark.timeout(240)
async def test_the_review_page_benchmark_runs_on_a_small_run(
    tmp_path: Path,
    services: Services,
    pg: stack.PostgresInstance,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # In this process, on a database of its own on the session's Postgres (no Postgres of
    # its own to initialise); the app it times still serves as `starter.py serve` does.
    shared = tmp_path / "shared.json"
    services.save(shared)
    monkeypatch.setenv(SHARED_STACK_ENV, str(shared))
    out = tmp_path / "review_page.json"
    args = review_page.parse_args(
        ["--blocks", "300", "--repeat", "1", "--warmup", "0", "--out", str(out)]
    )
    assert await review_page.main(args) == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "review_page" and data["loaded"]["blocks"] == 300
    assert data["loaded"]["failed"] == 9 and data["loaded"]["confirmed"] == 29
    pages = {p["case"]: p for p in data["pages"]}
    assert pages["first page"]["rows"] == 50 and pages["status=failed, first"]["rows"] == 9
    assert all(p["plan"] and p["median_ms"] > 0 for p in data["pages"])
    assert "| first page" in capsys.readouterr().out


@pytest.mark.timeout(180)
async def test_with_postgres_down_the_app_says_so_and_recovers(tmp_path: Path) -> None:
    # A Postgres of this test's own, so stopping it leaves every other test's alone; not
    # under pytest's temporary directory (see the `pg` fixture in tests/conftest.py).
    services = Services(Path(tempfile.mkdtemp(prefix="bb-test-pg-down-")))
    pg = await asyncio.to_thread(services.start_postgres)
    port = pg.port
    settings = Settings(database_url=pg.url("postgres"), blockbatch_data_dir=tmp_path / "bb")
    pool = await create_pool(settings.resolved_database_url, max_size=2)
    app = create_app(Blockbatch(pool, None, settings), settings, reviewer="ada")
    try:
        async with serving(app) as base, browser_like() as http:
            assert (await http.get(f"{base}/")).status == 200
            csrf = http.cookie_jar.filter_cookies(URL(base))[CSRF_COOKIE].value
            await asyncio.to_thread(services.stop_postgres)

            for path in ("/", "/runs/some-run?status=failed", "/runs/some-run/calls"):
                down = await http.get(base + path)
                text = await down.text()
                assert down.status == 503, (path, text[:500])
                assert (
                    f"cannot connect to Postgres at postgresql://postgres@127.0.0.1:{port}" in text
                    and "make up" in text
                ), text
                assert "tries again every 5 seconds" in text and 'http-equiv="refresh"' in text
                assert "nonce-" in down.headers["content-security-policy"]
            change = await http.post(
                f"{base}/runs/some-run/decide",
                allow_redirects=False,
                data={CSRF_FIELD: csrf, "act": "confirm", "block": "d:1"},
            )
            text = await change.text()
            assert change.status == 503 and "cannot connect to Postgres" in text
            assert "may not have been saved" in text and "http-equiv" not in text

            await asyncio.to_thread(services.start_postgres)  # on the same port
            back = await http.get(f"{base}/")
            assert back.status == 200 and "No runs yet" in await back.text()
    finally:
        await pool.close()
        await asyncio.to_thread(services.stop)
        shutil.rmtree(services.root, ignore_errors=True)


async def test_reopen_takes_only_confirmed_blocks_back_and_records_it(
    finished: tuple[Stack, str, str],
) -> None:
    bbstack, run_id, doc = finished
    bb = bbstack.bb
    await bb.confirm(run_id, ["1", "2"], reviewer="ada")
    # All or nothing: a block that is not confirmed, or not the run's, changes nothing.
    with pytest.raises(BadRequest, match=rf"not {doc}:{FAILED_BLOCK} \(failed\)"):
        await bb.reopen(run_id, ["1", str(FAILED_BLOCK)], reviewer="bo")
    with pytest.raises(NotFound, match="has no block"):
        await bb.reopen(run_id, ["1", "nope:3"], reviewer="bo")
    with pytest.raises(BadRequest, match="name the confirmed blocks"):
        await bb.reopen(run_id, [], reviewer="bo")
    assert (await overlay(bbstack, run_id, 1))["status"] == "confirmed"

    done = await bb.reopen(run_id, ["1", "0"], reviewer="bo")  # 0 was never confirmed
    assert done.reopened == [f"{doc}:1"] and done.already_open == [f"{doc}:0"]
    assert done.total_confirmed == 1 and (await bb.run(run_id)).blocks["confirmed"] == 1
    row = await overlay(bbstack, run_id, 1)
    assert row["status"] == "ai_complete" and row["confirmed"] is None
    last = (await actions(bbstack, run_id))[-1]
    assert (last["action"], last["reviewer"], last["old_status"], last["new_status"]) == (
        "reopen",
        "bo",
        "confirmed",
        "ai_complete",
    )
    assert last["before"] == row["staging"] and last["after"] is None
    # Reopened, it is reviewed like any staged block: edited, then confirmed again.
    await bb.edit(run_id, "1", "word_count", 5, reviewer="bo")
    await bb.confirm(run_id, ["1"], reviewer="bo")
    assert (await overlay(bbstack, run_id, 1))["confirmed"]["word_count"] == 5
    activity = await bb.review_activity(run_id)
    assert [(a.action, a.blocks) for a in activity] == [
        ("confirm", 1),
        ("edit", 1),
        ("reopen", 1),
        ("confirm", 2),
    ]
    assert (activity[1].field, activity[1].after) == ("word_count", 5)


@needs_chromium
async def test_a_refused_save_is_shown_as_refused_and_a_reload_sends_nothing(
    finished: tuple[Stack, str, str], chromium: Browser
) -> None:
    """A save the server refuses (a value the schema refuses; a row confirmed in another tab
    since the page was read) comes back as a page of its own: the refusal and what to do
    beside what was typed, and reloading it shows it again without sending the save."""
    bbstack, run_id, _ = finished
    original = (await overlay(bbstack, run_id, 1))["staging"]
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, fresh_pages(chromium) as browser:
        page = await browser.new_page(viewport={"width": 1500, "height": 900})
        posts: list[str] = []
        page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
        await page.goto(f"{base}/runs/{run_id}")
        await page.fill("#v-1-word_count", "-3")
        await page.click("#save-1")
        await expect(page.locator("#err-1-word_count")).to_contain_text("minimum of 0")
        assert len(posts) == 1
        await page.reload()
        await expect(page.locator("#err-1-word_count")).to_contain_text("minimum of 0")
        await expect(page.locator("#error")).to_contain_text("nothing was changed")
        assert await page.locator("#v-1-word_count").input_value() == "-3"
        assert len(posts) == 1  # the reload sent nothing

        # Edited in another tab since this page was read: a field this page left as it
        # showed keeps that edit; the same field changed here too is refused as stale.
        await page.goto(f"{base}/runs/{run_id}")
        await bbstack.bb.edit(run_id, "1", "summary", "theirs", reviewer="bo")
        await page.fill("#v-1-word_count", "4321")
        await page.click("#save-1")
        await expect(page.locator("#note")).to_contain_text("word_count")
        staged = (await overlay(bbstack, run_id, 1))["staging"]
        assert (staged["summary"], staged["word_count"]) == ("theirs", 4321)
        await page.goto(f"{base}/runs/{run_id}")
        await bbstack.bb.edit(run_id, "1", "summary", "theirs again", reviewer="bo")
        await page.fill("#v-1-summary", "mine")
        await page.click("#save-1")
        await expect(page.locator("#err-1-summary")).to_contain_text("now theirs again")
        await expect(page.locator("#error")).to_contain_text("save again to replace it")
        assert await page.locator("#v-1-summary").input_value() == "mine"
        await page.reload()
        await expect(page.locator("#err-1-summary")).to_contain_text("now theirs again")
        assert len(posts) == 3 and (await overlay(bbstack, run_id, 1))["staging"] == {
            **original,
            "summary": "theirs again",
            "word_count": 4321,
        }
        original = (await overlay(bbstack, run_id, 1))["staging"]

        # Confirmed in another tab: this page's save of it is refused, says what to do.
        await page.goto(f"{base}/runs/{run_id}")
        await page.fill("#v-1-word_count", "7")
        await bbstack.bb.confirm(run_id, ["1"], reviewer="bo")
        await page.click("#save-1")
        error = page.locator("#error")
        await expect(error).to_contain_text("block 1 is confirmed")
        await expect(error).to_contain_text("reopen it first")
        assert len(posts) == 4
        await page.reload()
        await expect(error).to_contain_text("reopen it first")
        assert len(posts) == 4
    row = await overlay(bbstack, run_id, 1)
    assert row["status"] == "confirmed" and row["confirmed"] == original
    assert [a["action"] for a in await actions(bbstack, run_id)] == [
        "edit",
        "edit",
        "edit",
        "confirm",
    ]


@needs_chromium
async def test_the_grid_highlights_where_each_value_is_quoted_from(
    bbstack: Stack, chromium: Browser
) -> None:
    # The handbook's first two packs of 8 (its whole 144 blocks add nothing the page of 8
    # checked below shows).
    doc = await bbstack.bb.ingest_bytes(handbook_document(16), name="handbook.md", fmt="markdown")
    schema_data = json.loads((ROOT / "samples" / "extract.json").read_text())
    schema_data["prompt_config"]["evidence"] = True
    schema = await bbstack.bb.add_schema(schema_data)
    # Some quotes invented (words the block does not hold): shown ungrounded, not hidden.
    bbstack.sim.scenario(faults={"bad_quote": 0.1})
    async with bbstack.worker():
        run_id = await bbstack.bb.start_run(doc, schema, RunOptions(pack_size=8))
        await bbstack.bb.wait(run_id)
    rows = await bbstack.pool.fetch(
        """select o.block_index, o.evidence, b.block_content from overlays o
           join blocks b using (block_uid) where o.run_id = $1 and o.block_index < 8
           order by o.block_index""",
        run_id,
    )
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, fresh_pages(chromium) as browser:
        page = await browser.new_page(viewport={"width": 1500, "height": 1000})
        await page.goto(f"{base}/runs/{run_id}?limit=8")
        checked = ungrounded = 0
        for row in rows:
            i, content = row["block_index"], row["block_content"]
            # The block's text reads as it is, marks or not.
            assert await page.locator(f"#content-{i}").text_content() == content
            for field, e in row["evidence"].items():
                badge = page.locator(f"#ev-{i}-{field}")
                if e["match"] == "missing":
                    await expect(badge).to_have_text("ungrounded")
                    ungrounded += 1
                    continue
                # The marks of a field, put together, are exactly its span.
                marks = page.locator(f"#content-{i} mark.ev[data-fields~='{field}']")
                text = "".join(await marks.all_text_contents())
                assert text == content[e["start"] : e["end"]], (i, field)
                checked += 1
        assert checked >= 40 and ungrounded >= 1, (checked, ungrounded)
        # The reason filter offers the flag, and lists just the flagged blocks.
        flagged = await bbstack.pool.fetchval(
            "select count(*) from overlays where run_id = $1 and reason_code = 'ungrounded'",
            run_id,
        )
        await expect(page.locator("#f-reason option[value='ungrounded']")).to_have_text(
            f"ungrounded ({flagged})"
        )

        # Pointing at a field lights up its quote.
        field, e = next((f, e) for f, e in rows[1]["evidence"].items() if e["match"] != "missing")
        first = page.locator(f"#content-1 mark.ev[data-fields~='{field}']").first
        await expect(first).not_to_have_class(re.compile(r"\blit\b"))
        await page.locator(f"#row-1 .field[data-field='{field}']").hover()
        await expect(first).to_have_class(re.compile(r"\blit\b"))
        await page.locator(f"#row-1 .field[data-field='{field}']").scroll_into_view_if_needed()
        await shot(page, "evidence")


@needs_chromium
async def test_a_pdf_blocks_page_is_shown_in_the_browser(bbstack: Stack, chromium: Browser) -> None:
    doc = await bbstack.bb.ingest_file(ROOT / "samples" / "handbook.pdf")
    schema = await bbstack.bb.add_schema_file(ROOT / "samples" / "extract.json")
    async with bbstack.worker():
        run_id = await bbstack.bb.start_run(doc, schema, RunOptions())
        await bbstack.bb.wait(run_id)
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, fresh_pages(chromium) as browser:
        page = await browser.new_page(viewport={"width": 1500, "height": 1000})
        await page.goto(f"{base}/runs/{run_id}?limit=3")
        # Every PDF block offers its page; closed, it is not fetched.
        await expect(page.locator("#grid details.page-view")).to_have_count(3)
        view = page.locator("#page-1")
        await expect(view.locator("summary")).to_contain_text("page 1")
        await view.locator("summary").click()
        picture = view.locator("img")
        await expect(picture).to_be_visible()
        await page.wait_for_function(
            "el => el.complete && el.naturalWidth > 0", arg=await picture.element_handle()
        )
        natural = await picture.evaluate("el => [el.naturalWidth, el.naturalHeight]")
        assert natural[0] == DEFAULT_WIDTH and natural[1] > natural[0]
        # The box is drawn where the block is: read the picture's pixel on its outline.
        prov = await bbstack.pool.fetchval(
            "select provenance from blocks where block_uid = $1", f"{doc}:1"
        )
        scale = DEFAULT_WIDTH / prov["page_size"][0]
        x0, y0, _, _ = box_pixels(tuple(prov["bbox"]), scale, (natural[0], natural[1]))
        rgb = await picture.evaluate(
            """(el, at) => {
                 const c = document.createElement("canvas");
                 c.width = el.naturalWidth; c.height = el.naturalHeight;
                 const g = c.getContext("2d"); g.drawImage(el, 0, 0);
                 return Array.from(g.getImageData(at[0], at[1], 1, 1).data.slice(0, 3));
               }""",
            [x0, y0],
        )
        assert tuple(rgb) == BOX_COLOUR
        await page.evaluate("window.scrollTo(0, 0)")  # the grid's sticky header at its place
        await shot(page, "pdf-block")


def report_with_a_turned_page() -> bytes:
    """Three pages with a running header and a page number; the third is a landscape page
    stored portrait and shown turned (/Rotate 90), as scanners and Word save them: its
    text is drawn turned a quarter, so that it reads across the page as shown."""
    import pypdfium2 as pdfium
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="letter")
    pdf.set_auto_page_break(False)

    def draw(page: int, left: float, top: float, width: float, height: float) -> None:
        pdf.set_font("Helvetica", size=9)
        pdf.text(left + 72, top + 40, "Acme Corporation annual report 2026")
        pdf.text(left + width / 2, top + height - 32, str(page))
        pdf.set_font("Helvetica", size=11)
        pdf.set_xy(left + 72, top + 120)
        pdf.multi_cell(
            width - 144,
            15,
            f"Page {page} tells how the year went. Sales rose in every region and the new "
            "plant opened on time. The board thanks the staff for a year of steady work.",
        )

    for page in range(1, 4):
        pdf.add_page()
        if page < 3:
            draw(page, 0, 0, 612, 792)
            continue
        with pdf.rotation(90, 396, 396):  # counter-clockwise: the frame lands on the page
            draw(page, 0, 0, 792, 612)
    doc = pdfium.PdfDocument(bytes(pdf.output()))
    doc[2].set_rotation(90)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


@needs_chromium
@pytest.mark.timeout(600)
async def test_a_set_aside_block_and_a_turned_pages_box_in_the_browser(
    bbstack: Stack, tmp_path: Path, chromium: Browser
) -> None:
    """Issue 34's last line: the grid shows a running header as set aside (kept, not sent),
    and a block on a page with /Rotate 90 is outlined where the page shows it."""
    source = tmp_path / "annual-report.pdf"
    source.write_bytes(report_with_a_turned_page())
    doc = await bbstack.bb.ingest_file(source)
    schema = await bbstack.bb.add_schema_file(ROOT / "samples" / "extract.json")
    async with bbstack.worker():
        run_id = await bbstack.bb.start_run(doc, schema, RunOptions())
        await bbstack.bb.wait(run_id)
    blocks = await bbstack.pool.fetch(
        "select block_index, block_type, provenance from blocks where document_id = $1"
        " order by block_index",
        doc,
    )
    header = next(b for b in blocks if b["block_type"] == "page_header")
    turned = next(
        b for b in blocks if b["block_type"] == "paragraph" and b["provenance"]["page"] == 3
    )
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, fresh_pages(chromium) as browser:
        page = await browser.new_page(viewport={"width": 1500, "height": 1000})
        await page.goto(f"{base}/runs/{run_id}?limit=50")
        row = page.locator(f"#row-{header['block_index']}")
        await expect(row).to_have_attribute("data-status", "set_aside")
        label = row.locator(".status")
        await expect(label).to_have_text("set aside")
        assert "not sent to the model" in (await label.get_attribute("title") or "")
        await expect(row.locator(".meta")).to_contain_text("page_header")
        await page.evaluate("window.scrollTo(0, 0)")
        await shot(page, "grid-set-aside")
        # The turned page's block: its picture is the page as shown (landscape), the
        # box drawn on the block's text.
        view = page.locator(f"#page-{turned['block_index']}")
        await expect(view.locator("summary")).to_contain_text("page 3")
        await view.locator("summary").click()
        picture = view.locator("img")
        await expect(picture).to_be_visible()
        await page.wait_for_function(
            "el => el.complete && el.naturalWidth > 0", arg=await picture.element_handle()
        )
        natural = await picture.evaluate("el => [el.naturalWidth, el.naturalHeight]")
        assert natural[0] > natural[1]  # landscape, as the page is shown
        prov = turned["provenance"]
        scale = natural[0] / prov["page_size"][0]
        x0, y0, x1, y1 = box_pixels(tuple(prov["bbox"]), scale, (natural[0], natural[1]))
        assert x1 - x0 > 3 * (y1 - y0)  # the block's lines run across the page as shown
        rgb = await picture.evaluate(
            """(el, at) => {
                 const c = document.createElement("canvas");
                 c.width = el.naturalWidth; c.height = el.naturalHeight;
                 const g = c.getContext("2d"); g.drawImage(el, 0, 0);
                 const d = g.getImageData(at[0], at[1], at[2] - at[0], at[3] - at[1]).data;
                 let ink = 0;
                 for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 200) ink++;
                 const edge = g.getImageData(at[0], at[1], 1, 1).data;
                 return [Array.from(edge.slice(0, 3)), ink];
               }""",
            [x0, y0, x1, y1],
        )
        assert tuple(rgb[0]) == BOX_COLOUR
        assert rgb[1] > 50  # the text is inside the box, not blank paper
        await view.scroll_into_view_if_needed()
        await shot(page, "pdf-rotated-page-block", full_page=False)


@needs_chromium
@pytest.mark.timeout(600)
async def test_three_pages_of_rows_are_reviewed_in_the_browser_by_keyboard_alone(
    bbstack: Stack, chromium: Browser
) -> None:
    # Pages of 20 rows (`limit`, which every act keeps), three of them: what a hundred rows
    # in pages of 50 would exercise, with a run and pages less than half the size.
    run_id, _ = await keyboard_run(bbstack, 2 * KEYBOARD_PAGE + 1)
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, fresh_pages(chromium) as browser:
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        await _review_by_keyboard(page, base, run_id)
    statuses = await bbstack.pool.fetch(
        "select status, count(*) from overlays where run_id = $1 group by status", run_id
    )
    assert {r["status"]: r["count"] for r in statuses} == {
        "confirmed": 2 * KEYBOARD_PAGE,
        "rejected": 1,
    }
    acts = await actions(bbstack, run_id)
    assert {a["reviewer"] for a in acts} == {"ada"}
    edited = await overlay(bbstack, run_id, 5)
    assert edited["confirmed"]["word_count"] == 7
    assert edited["confirmed"]["first_40_chars"] == "short"
    assert (await overlay(bbstack, run_id, 6))["status"] == "rejected"


#: The keyboard test's page size.
KEYBOARD_PAGE = 20


async def _review_by_keyboard(page: Page, base: str, run_id: str) -> None:
    last = 2 * KEYBOARD_PAGE  # the third page's only row
    await page.goto(f"{base}/runs/{run_id}?limit={KEYBOARD_PAGE}")
    await expect(page.locator("#keys")).to_contain_text("confirm all shown")
    # The first Tab stop skips to the first row; c confirms it, and the page comes back
    # with the next row current, not at the top.
    await page.keyboard.press("Tab")
    await expect(page.locator("#skip")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("#row-0")).to_be_focused()
    for i in range(5):
        await page.keyboard.press("c")
        await expect(page.locator("#note")).to_contain_text(f"block {i}: nothing changed")
        await expect(page.locator(f"#row-{i + 1}")).to_be_focused()
    # e edits the row: type, Tab to the next field; a value over its limit is refused with
    # the limit stated, and the field keeps the focus.
    await page.keyboard.press("e")
    await expect(page.locator("#v-5-word_count")).to_be_focused()
    await page.keyboard.press("Control+a")
    await page.keyboard.type("7")
    await page.keyboard.press("Tab")
    await page.keyboard.press("Tab")
    await expect(page.locator("#v-5-first_40_chars")).to_be_focused()
    await page.keyboard.press("Control+a")
    await page.keyboard.type("x" * 45)
    await page.keyboard.press("Control+Enter")
    error = page.locator("#err-5-first_40_chars")
    await expect(error).to_have_text("first_40_chars: 45 characters; at most 40 characters")
    await expect(page.locator("#v-5-first_40_chars")).to_be_focused()
    box = await error.bounding_box()
    field = await page.locator("#v-5-first_40_chars").bounding_box()
    assert box is not None and field is not None and box["width"] <= field["width"] * 2.2
    await shot(page, "grid-keyboard-error", full_page=False)
    await page.keyboard.press("Control+a")
    await page.keyboard.type("short")
    await page.keyboard.press("Control+Enter")
    await expect(page.locator("#note")).to_contain_text("block 5: word_count")
    await expect(page.locator("#row-5")).to_be_focused()  # saved: still the row to review
    await page.keyboard.press("c")
    await expect(page.locator("#row-6")).to_be_focused()
    # j and k move; x rejects.
    await page.keyboard.press("j")
    await expect(page.locator("#row-7")).to_be_focused()
    await page.keyboard.press("k")
    await expect(page.locator("#row-6")).to_be_focused()
    await page.keyboard.press("x")
    await expect(page.locator("#note")).to_contain_text("block 6 rejected")
    await expect(page.locator("#row-7")).to_be_focused()
    await shot(page, "grid-keyboard", full_page=False)
    # A (shift+a) confirms all shown: it asks, Enter says yes, and the next page comes.
    await page.keyboard.press("Shift+A")
    await expect(page.locator("#ask")).to_be_visible()
    await expect(page.locator("#ask-text")).to_have_text(
        f"Confirm all {KEYBOARD_PAGE - 7} staged blocks shown, then go to the next page?"
    )
    await shot(page, "grid-keyboard-confirm-all", full_page=False)
    await page.keyboard.press("Enter")
    await expect(page.locator("#note")).to_contain_text(f"confirmed {KEYBOARD_PAGE - 7} blocks")
    await expect(page.locator("#grid tr[data-uid]").first).to_have_id(f"row-{KEYBOARD_PAGE}")
    # The rows are there before the page's script at its end has bound the keys: wait for it.
    await page.wait_for_load_state("load")
    await page.keyboard.press("Shift+A")
    await expect(page.locator("#ask-text")).to_contain_text(
        f"Confirm all {KEYBOARD_PAGE} staged blocks"
    )
    await page.keyboard.press("Enter")
    await expect(page.locator("#note")).to_contain_text(f"confirmed {KEYBOARD_PAGE} blocks")
    await expect(page.locator("#grid tr[data-uid]").first).to_have_id(f"row-{last}")
    await page.keyboard.press("j")
    await page.keyboard.press("c")
    await expect(page.locator("#note")).to_contain_text(f"block {last}: nothing changed; confirmed")
