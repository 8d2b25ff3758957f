"""The run page in a real browser (Debian's Chromium driven by Playwright): a scripted
`warden run --ui` whose nested subagent asks three times. The page shows each
question as the terminal does (chain with descriptions, the whole input, who
asked); "allow once" given on `warden ui`'s page (another process, reaching the
run through its socket) lets the command run and the run's own page says who
answered; "deny" with a reason reaches the subagent's model (seen in the scripted
server's requests); "always" shows its rule, writes nothing until confirmed, then
writes exactly that rule. A container-written task description full of markup,
script, a `javascript:` link and a bidi override stays inert text. A cross-site
page cannot answer, and a rebound host name gets nothing."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Dialog, Page, expect, sync_playwright

from orchestrator.scripted import Script, ScriptedModelServer
from tests.conftest import warden_argv, warden_env
from tests.integration.harness import API_KEY, PARENT_MATCH, convo, text, tool
from tests.json_shapes import arr, obj

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    # A DNS-rebinding page: a foreign name that resolves to this machine.
    "--host-resolver-rules=MAP rebound.test 127.0.0.1",
]  # fmt: skip
"""MACHINE.md's flags: without them Chromium reaches outside addresses."""
STEP_S = 120
"""Longest wait for one step of the run (a question to appear, the run to end)."""
HOSTILE = (
    '<script>window.__pwned="script"</script><img src=x onerror="window.__pwned=\'img\'">'
    "<a href=\"javascript:window.__pwned='link'\">open</a> report\u202eexe.txt"
)
"""The nested task's description, written by its parent inside a container."""
REASON = "not that file: write once.txt instead"


def _script() -> Script:
    return Script.model_validate(
        {
            "conversations": [
                convo(
                    "parent",
                    PARENT_MATCH,
                    [tool("Task", description="lead", prompt="LEAD go", subagent_type="general-purpose")],
                    [text("all done")],
                ),
                convo(
                    "lead",
                    {"prompt_contains": "LEAD"},
                    [tool("Task", description=HOSTILE, prompt="ASK go", subagent_type="bash")],
                    [text("lead done")],
                ),
                convo(
                    "ask",
                    {"prompt_contains": "ASK go"},
                    [tool("Bash", command="touch once.txt")],
                    [tool("Bash", command="touch denied.txt")],
                    [tool("Bash", command="touch always.txt")],
                    [text("ask done")],
                ),
            ]
        }
    )  # fmt: skip


class _Lines:
    """A process's stderr, read in the background; waits for a line that matches."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        assert proc.stderr is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stderr,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def url(self) -> str:
        pattern = re.compile(r"\(its link is its key\): (http://127\.0\.0\.1:\d+/s/[\w-]+/)")
        with self._changed:
            found = self._changed.wait_for(
                lambda: next((m for line in self.lines if (m := pattern.search(line))), None),
                timeout=STEP_S,
            )
        assert found, "".join(self.lines)[-3000:]
        return found.group(1)


@contextmanager
def _chromium(tmp_path: Path) -> Iterator[BrowserContext]:
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            args=CHROMIUM_FLAGS,
            headless=True,
        )
        try:
            yield context
        finally:
            context.close()


def _question(page: Page, command: str) -> Any:
    card = page.locator(".question:not(.settled)", has_text=command)
    card.wait_for(timeout=STEP_S * 1000)
    return page.locator(f'.question[data-id="{card.get_attribute("data-id")}"]')


def test_questions_are_answered_on_the_page_and_container_text_stays_text(
    tmp_path: Path, workspace: Path
) -> None:
    state, settings_file = tmp_path / "state", workspace / ".claude" / "settings.local.json"
    with ScriptedModelServer(_script(), expected_api_key=API_KEY).in_thread() as model:
        env = warden_env(
            WARDEN_STATE_DIR=str(state), WARDEN_CONFIG_DIR=str(tmp_path / "config"),
            CLAUDE_CONFIG_DIR=str(tmp_path / "claude"), CI="true",
            ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY,
        )  # fmt: skip
        argv = warden_argv(
            "run", "--ui", "--workspace", str(workspace), "--trust-workspace",
            "--permission-mode", "default", "--max-depth", "2", "go",
        )  # fmt: skip
        run = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        run_err = _Lines(run)
        run_url = run_err.url()  # the run is recorded: `warden ui` can read it
        viewer = subprocess.Popen(
            warden_argv("ui"), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            with _chromium(tmp_path) as browser:
                _answer_and_attack(browser, run_url, _Lines(viewer).url(), settings_file)
            out, _ = run.communicate(timeout=STEP_S)
        finally:
            for proc in (run, viewer):
                if proc.poll() is None:
                    proc.terminate()
                    proc.communicate(timeout=60)
        requests = [r.body for r in model.requests]
    assert run.returncode == 0, "".join(run_err.lines)[-3000:]
    # The printed link appears once and only on stderr (it is the page's key).
    assert sum("/s/" in line for line in run_err.lines) == 1 and "/s/" not in out

    # Allowed once: it ran. Denied: it did not, and the model was told the reason.
    assert (workspace / "once.txt").exists() and not (workspace / "denied.txt").exists()
    results = [
        obj(block)
        for body in requests
        if isinstance(body, dict)
        for message in arr(body.get("messages", []))
        if isinstance(obj(message).get("content"), list)
        for block in arr(obj(message)["content"])
        if obj(block).get("type") == "tool_result"
    ]
    denial = [r for r in results if REASON in json.dumps(r)]
    assert denial and all(r.get("is_error") for r in denial), results
    assert "web:alice" in json.dumps(denial)
    # Always: exactly the shown rule, in the shown file; and it ran.
    assert (workspace / "always.txt").exists()
    assert json.loads(settings_file.read_text())["permissions"]["allow"] == [
        "Bash(touch always.txt)"
    ]


def _answer_and_attack(
    browser: BrowserContext, run_url: str, viewer_url: str, settings_file: Path
) -> None:
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    browser.on("dialog", on_dialog)
    page = browser.new_page()
    page.goto(run_url)
    page.fill("#user", "alice")
    page.locator("#user").dispatch_event("change")

    # The first question, as the terminal shows it: the chain with each task's
    # description, the whole input, the rule or mode that asked.
    first = _question(page, "touch once.txt")
    shown = first.locator("pre.text").text_content() or ""
    assert "Permission request: Bash for task sa_" in shown
    assert re.search(r"sa_\w+ \(general-purpose\): lead →", shown), shown
    assert re.search(r"\(bash\): <script>window.__pwned=\"script\"</script>.*← asks", shown, re.S)
    assert "report\\u202eexe.txt" in shown and "\u202e" not in shown
    assert re.search(r"asked by:\n  │ mode:default — no allow rule covers 'touch once.txt'", shown)
    assert "touch once.txt" in (first.locator("pre.full-input").text_content() or "")

    # The container-written description is inert text everywhere on the page.
    row = page.locator("#tree tr.task .description", has_text="report")
    expect(row).to_contain_text("<img src=x onerror=\"window.__pwned='img'\">")
    expect(row).to_contain_text("\\u202eexe.txt")
    assert "\u202e" not in (page.locator("body").text_content() or "")
    assert page.evaluate("window.__pwned") is None and dialogs == []
    assert page.evaluate("document.scripts.length") == 1  # app.js, nothing injected
    assert page.locator("img").count() == 0 and page.locator("a").count() == 0

    # `warden ui` (another process) answers "allow once" through the run's socket;
    # the run's own page is told who answered.
    viewer = browser.new_page()
    viewer.goto(viewer_url)
    viewer.fill("#user", "alice")
    _question(viewer, "touch once.txt").locator("button.allow-once").click()
    expect(first.locator(".note")).to_have_text("answered by web:alice", timeout=STEP_S * 1000)

    # A cross-site page cannot answer, even with the link (its Origin is refused).
    second = _question(page, "touch denied.txt")
    qid = second.get_attribute("data-id")
    run_id = page.locator("#run").input_value()
    attacker = browser.new_page()
    attacker.route(
        "http://attacker.test/**", lambda r: r.fulfill(body="<p>hi</p>", content_type="text/html")
    )
    attacker.goto("http://attacker.test/")
    status = attacker.evaluate(
        """async ([url, body]) => {
            try { await fetch(url, {method: "POST", mode: "no-cors", body,
                                    headers: {"Content-Type": "text/plain"}}); return "sent"; }
            catch (e) { return "blocked"; } }""",
        [
            f"{run_url}api/runs/{run_id}/questions/{qid}",
            json.dumps({"choice": "once", "user": "eve"}),
        ],
    )
    assert status in ("sent", "blocked")
    page.wait_for_timeout(1500)  # a stream update would have settled the card by now
    expect(second).not_to_have_class(re.compile("settled"))
    # A DNS-rebinding page (its own name now resolving to 127.0.0.1) reads nothing,
    # even knowing the link: the Host it sends is its own name.
    port = run_url.split(":")[2].split("/")[0]
    rebound = f"http://rebound.test:{port}/"
    attacker.route(
        rebound + "evil", lambda r: r.fulfill(body="<p>hi</p>", content_type="text/html")
    )
    attacker.goto(rebound + "evil")
    got = attacker.evaluate(
        """async (path) => {
            try { const r = await fetch(path); return [r.status, await r.text()]; }
            catch (e) { return "failed"; } }""",
        run_url.split(port, 1)[1] + "api/runs",
    )
    # The server answers 421 with no body; Chromium turns a 421 into a failed fetch.
    assert got in ("failed", [421, ""])

    # Deny with a reason.
    second.locator("input.reason").fill(REASON)
    second.locator("button.deny").click()
    expect(second.locator(".note")).to_have_text("answered by web:alice")

    # Always: the rule and its file are shown; nothing is written before confirming.
    third = _question(page, "touch always.txt")
    always = third.locator("button.allow-always")
    expect(always).to_have_text(f"Always allow: add Bash(touch always.txt) to {settings_file}…")
    always.click()
    assert not settings_file.exists()
    third.locator("button.confirm-always").click()
    expect(third.locator(".note")).to_have_text("answered by web:alice")

    # The audit shows each decision with who made it; filters narrow it.
    page.select_option("#f-final", "deny")
    expect(page.locator("#audit tbody tr")).to_have_count(1)
    expect(page.locator("#audit tbody tr")).to_contain_text("web:alice")
    assert dialogs == [] and page.evaluate("window.__pwned") is None
