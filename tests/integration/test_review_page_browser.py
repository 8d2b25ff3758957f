"""An apply review on the run page, in a real browser (Debian's Chromium driven by
Playwright): the change set's diff is shown file by file, and every name and line a
subagent wrote stays text: a file name and a line holding `<img src=x onerror=...>`
and `<script>` are shown as themselves and run nothing, ANSI escapes and bidi
overrides appear as visible escapes, a lookalike name gets its ASCII spelling. The
yes posts the change set's hash and is bound to it; an answer naming another hash
(a stale page) is refused and changes nothing; a no carries its reason."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Page, Route, async_playwright

from orchestrator.apply.changeset import ContentStore
from orchestrator.store import Store, TaskRecord
from orchestrator.web.approver import LocalQuestions, WebApprover
from orchestrator.web.guard import CSP
from orchestrator.web.server import PageServer
from tests.integration.test_run_page_browser import CHROMIUM, CHROMIUM_FLAGS
from tests.review_fixtures import (
    ANSI_LINE,
    BIDI_NAME,
    SCRIPT_LINE,
    SCRIPT_NAME,
    hostile_review,
)

pytestmark = pytest.mark.integration

RUN = "run_review"
STEP_MS = 60_000
"""Longest wait for one thing to appear on the page."""


@asynccontextmanager
async def _page_server(tmp_path: Path) -> AsyncIterator[tuple[PageServer, WebApprover]]:
    store = Store.open(tmp_path / "warden.db")
    store.create_run(RUN, prompt="review", workspace="/w", model="m", pid=1)
    store.create_task(TaskRecord(task_id="sa_review", run_id=RUN, agent_type="coder", prompt="p"))
    approver = WebApprover()
    server = PageServer(store, LocalQuestions(approver), run_id=RUN)
    await server.start()
    try:
        yield server, approver
    finally:
        await server.close()
        store.close()


@asynccontextmanager
async def _chromium(tmp_path: Path) -> AsyncIterator[BrowserContext]:
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            args=CHROMIUM_FLAGS,
            headless=True,
        )
        try:
            yield context
        finally:
            await context.close()


async def _review_card(page: Page, sha256: str) -> object:
    card = page.locator(".question.review:not(.settled)", has_text=sha256[:16])
    await card.wait_for(timeout=STEP_MS)
    await card.locator(".file").first.wait_for(timeout=STEP_MS)
    return card


async def test_a_review_on_the_page_shows_attacker_text_as_text_and_binds_the_yes(
    tmp_path: Path,
) -> None:
    review = hostile_review(ContentStore(tmp_path / "store"))
    sha = review.change_set.sha256
    async with _page_server(tmp_path) as (server, approver), _chromium(tmp_path) as browser:
        dialogs: list[str] = []
        browser.on("dialog", lambda d: dialogs.append(d.message))
        asked = asyncio.create_task(approver.approve(review))
        page = await browser.new_page()
        response = await page.goto(server.url)
        assert response is not None and response.headers["content-security-policy"] == CSP
        await page.fill("#user", "alice")
        await page.locator("#user").dispatch_event("change")
        card = page.locator(".question.review:not(.settled)", has_text=sha[:16])
        await card.wait_for(timeout=STEP_MS)
        await card.locator(".file").nth(6).wait_for(timeout=STEP_MS)

        paths = await card.locator(".file-path").all_text_contents()
        assert f"── {SCRIPT_NAME}" in paths  # the markup name, shown as itself
        assert "── invoice\\u202etxt.exe" in paths and BIDI_NAME not in "".join(paths)
        assert "── notes\\n── fake.py" in paths
        lines = await card.locator(".line-added").all_text_contents()
        assert f"+{SCRIPT_LINE}" in lines
        escaped = ANSI_LINE.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
        escaped = escaped.replace("\u202e", "\\u202e").replace("\u200b", "\\u200b")
        assert f"+{escaped}" in lines
        notes = " ".join(await card.locator(".file-note").all_text_contents())
        assert "name in ASCII: p\\u0430ypal.py" in notes and "NEW EXECUTABLE BIT" in notes
        # Nothing the subagent wrote became an element or ran.
        assert await page.locator("img").count() == 0
        assert await page.locator("script").count() == 1  # the page's own app.js
        assert await page.evaluate("window.__pwned") is None
        body = await page.evaluate("document.body.innerText")
        assert "\x1b" not in body and "\u202e" not in body and "\u200b" not in body

        # A stale page's answer (another hash) is refused, and the review stays open.
        stale = await page.evaluate(
            """async ([path, sha]) => {
                const r = await fetch(path, {method: "POST",
                    headers: {"Content-Type": "application/json"},
                    body: JSON.stringify({choice: "once", user: "mallory", change_set: sha})});
                return [r.status, await r.json()];
            }""",
            [f"{server.url}api/runs/{RUN}/questions/{review.question_id}", "f" * 64],
        )
        assert stale[0] == 400 and "another change set" in stale[1]["error"], stale
        assert not asked.done()

        await card.locator("button.apply-yes").click()
        answer = await asyncio.wait_for(asked, STEP_MS / 1000)
        assert answer.behavior == "allow" and answer.bound_to == sha
        assert answer.decided_by == "web:alice"
        settled = page.locator(f'.question[data-id="{review.question_id}"].settled')
        await settled.wait_for(timeout=STEP_MS)
        assert "answered by web:alice" in (await settled.locator(".note").text_content() or "")
        assert dialogs == []


async def test_a_no_on_the_page_carries_its_reason(tmp_path: Path) -> None:
    review = hostile_review(ContentStore(tmp_path / "store"))
    async with _page_server(tmp_path) as (server, approver), _chromium(tmp_path) as browser:
        asked = asyncio.create_task(approver.approve(review))
        page = await browser.new_page()
        await page.goto(server.url)
        await page.fill("#user", "bob")
        card = page.locator(".question.review:not(.settled)")
        await card.locator(".file").first.wait_for(timeout=STEP_MS)
        await card.locator("input.reason").fill("the link to /etc/shadow is not ok")
        await card.locator("button.apply-no").click()
        answer = await asyncio.wait_for(asked, STEP_MS / 1000)
        assert (answer.behavior, answer.reason, answer.bound_to) == (
            "deny",
            "the link to /etc/shadow is not ok",
            "",
        )
        assert answer.decided_by == "web:bob"


async def test_a_name_typed_before_the_page_has_loaded_is_the_one_that_answers(
    tmp_path: Path,
) -> None:
    """The page fills in the default name when `api/info` answers; a name the person
    typed before that (a slow machine, a slow server) is kept, so the answer is
    recorded under who actually gave it."""
    review = hostile_review(ContentStore(tmp_path / "store"))
    async with _page_server(tmp_path) as (server, approver), _chromium(tmp_path) as browser:
        asked = asyncio.create_task(approver.approve(review))
        page = await browser.new_page()
        typed = asyncio.Event()
        info_held = asyncio.Event()

        async def hold_info(route: Route) -> None:
            info_held.set()
            await typed.wait()
            await route.continue_()

        await page.route("**/api/info", hold_info)
        await page.goto(server.url, wait_until="domcontentloaded")
        await asyncio.wait_for(info_held.wait(), STEP_MS / 1000)
        await page.fill("#user", "carol")
        typed.set()
        card = page.locator(".question.review:not(.settled)")
        await card.locator(".file").first.wait_for(timeout=STEP_MS)
        assert await page.input_value("#user") == "carol"
        await card.locator("button.apply-no").click()
        answer = await asyncio.wait_for(asked, STEP_MS / 1000)
        assert answer.decided_by == "web:carol"
