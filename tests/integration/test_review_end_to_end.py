"""A person reviews a subagent's changes end to end: `warden run --isolation worktree`
with the real engine and the scripted model, a subagent that edits a file and
writes one whose name and content are markup, ANSI escapes and a bidi override.
On the run's page in Chromium the review shows them as text (no element made, no
script run) and "yes" applies exactly the reviewed change set; on a real
pseudo-terminal the review is paged, "y" applies it, and a "n" leaves the
workspace untouched with the change set waiting."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.scripted import Script, ScriptedModelServer
from tests.conftest import UNPRIVILEGED, warden_argv, warden_env
from tests.integration.harness import API_KEY, PARENT_MATCH, convo, text, tool
from tests.integration.terminal import PagingPerson, run_on_a_terminal
from tests.integration.test_run_page_browser import STEP_S, _chromium, _Lines

pytestmark = pytest.mark.integration

HOSTILE_NAME = "<img src=x onerror=window.__pwned=1>.txt"
WRITE_HOSTILE = (
    "sed -i s/two/TWO/ app.py && python3 -c \"open('" + HOSTILE_NAME + "', 'w')"
    ".write('see \\x1b]0;pwned\\x07\\u202egnp.exe<script>window.__pwned=2</script>\\n')\""
)
"""What the subagent runs in its working copy."""
HOSTILE_CONTENT = "see \x1b]0;pwned\x07\u202egnp.exe<script>window.__pwned=2</script>\n"
SHOWN_LINE = "+see \\x1b]0;pwned\\x07\\u202egnp.exe<script>window.__pwned=2</script>"
ROWS, COLUMNS = 40, 160


def _script() -> Script:
    return Script.model_validate(
        {
            "conversations": [
                convo(
                    "parent",
                    PARENT_MATCH,
                    [tool("Task", description="edit", prompt="EDIT go", subagent_type="general-purpose")],
                    [text("all done")],
                ),
                convo(
                    "editor",
                    {"prompt_contains": "EDIT go"},
                    [tool("Bash", command=WRITE_HOSTILE)],
                    [text("edited")],
                ),
            ]
        }
    )  # fmt: skip


def _seed(workspace: Path) -> None:
    app = workspace / "app.py"
    app.write_text("one\ntwo\nthree\n")
    if os.geteuid() == 0:
        os.chown(app, UNPRIVILEGED, UNPRIVILEGED)


def _env(tmp_path: Path, model: ScriptedModelServer, **extra: str) -> dict[str, str]:
    return warden_env(
        WARDEN_STATE_DIR=str(tmp_path / "state"), WARDEN_CONFIG_DIR=str(tmp_path / "config"),
        CLAUDE_CONFIG_DIR=str(tmp_path / "claude"), ANTHROPIC_BASE_URL=model.base_url,
        ANTHROPIC_API_KEY=API_KEY, **extra,
    )  # fmt: skip


def _run_args(workspace: Path, *extra: str) -> list[str]:
    return warden_argv(
        "run", "--isolation", "worktree", "--workspace", str(workspace), "--trust-workspace",
        "--permission-mode", "bypassPermissions", *extra, "go",
    )  # fmt: skip


def test_a_yes_on_the_page_applies_the_reviewed_change_set(tmp_path: Path, workspace: Path) -> None:
    _seed(workspace)
    with ScriptedModelServer(_script(), expected_api_key=API_KEY).in_thread() as model:
        run = subprocess.Popen(
            _run_args(workspace, "--ui"), env=_env(tmp_path, model, CI="true"),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        err = _Lines(run)
        try:
            with _chromium(tmp_path) as browser:
                _review_on_the_page(browser, err.url())
            run.communicate(timeout=STEP_S)
        finally:
            if run.poll() is None:
                run.terminate()
                run.communicate(timeout=60)
    assert run.returncode == 0, "".join(err.lines)[-3000:]
    assert (workspace / "app.py").read_text() == "one\nTWO\nthree\n"
    assert (workspace / HOSTILE_NAME).read_text() == HOSTILE_CONTENT


def _review_on_the_page(browser: Any, url: str) -> None:
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    browser.on("dialog", on_dialog)
    page = browser.new_page()
    page.goto(url)
    page.fill("#user", "alice")
    page.locator("#user").dispatch_event("change")
    card = page.locator(".question.review:not(.settled)")
    card.wait_for(timeout=STEP_S * 1000)
    card.locator(".file").nth(1).wait_for(timeout=STEP_S * 1000)
    paths = card.locator(".file-path").all_text_contents()
    assert paths == [f"── {HOSTILE_NAME}", "── app.py"], paths
    lines = card.locator(".line").all_text_contents()
    assert SHOWN_LINE in lines and "-two" in lines and "+TWO" in lines, lines
    assert page.locator("img").count() == 0 and page.locator("script").count() == 1
    assert page.evaluate("window.__pwned") is None
    card.locator("button.apply-yes").click()
    page.locator(".question.review.settled").wait_for(timeout=STEP_S * 1000)
    note = page.locator(".question.review.settled .note").text_content() or ""
    assert "answered by web:alice" in note
    assert dialogs == []


@pytest.mark.parametrize("choice", [b"y", b"n"])
def test_the_review_on_a_terminal(tmp_path: Path, workspace: Path, choice: bytes) -> None:
    _seed(workspace)
    person = PagingPerson(
        [choice, b"not this one"], prompts=(b"[v]iew the diff again > ", b"Reason (told")
    )
    with ScriptedModelServer(_script(), expected_api_key=API_KEY).in_thread() as model:
        env = _env(tmp_path, model, COLUMNS=str(COLUMNS), LINES=str(ROWS), TERM="xterm-256color")
        env.pop("CI", None)
        code, _ = run_on_a_terminal(_run_args(workspace), env, workspace, person.feed, 600)
    shown = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", person.out).decode(errors="replace")
    assert code == 0, shown[-3000:]
    assert f"│{SHOWN_LINE}" in shown and f"── {HOSTILE_NAME}" in shown
    assert b"\x1b]0;pwned" not in person.out and "\u202e".encode() not in person.out
    if choice == b"y":
        assert (workspace / HOSTILE_NAME).read_text() == HOSTILE_CONTENT
        assert (workspace / "app.py").read_text() == "one\nTWO\nthree\n"
    else:
        assert not (workspace / HOSTILE_NAME).exists()
        assert (workspace / "app.py").read_text() == "one\ntwo\nthree\n"
