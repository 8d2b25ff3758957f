"""A CI job (CI=true, no terminal) whose questions a webhook answers: `warden run
--approver webhook:URL` with the documented receiver (docs/webhook_receiver.py) on
127.0.0.1. The command the receiver allows runs in the subagent's container, the one
it denies does not and the model reads its reason, and the audit names the channel
and the person who answered (`webhook:NAME`)."""

from __future__ import annotations

import getpass
import json
import os
import queue
import re
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from orchestrator.config import Settings
from tests.conftest import REPO_ROOT, run_warden, warden_argv, warden_env, write_script
from tests.integration.harness import PARENT_MATCH, convo, task, text, tool
from tests.integration.terminal import run_on_a_terminal

pytestmark = pytest.mark.integration

RECEIVER = REPO_ROOT / "docs" / "webhook_receiver.py"
SECRET = "webhook-test-secret"


def next_line(stream: IO[str], timeout_s: float, still: Callable[[], bool]) -> str:
    """The stream's next line; "" once `still()` turns false or `timeout_s` passes
    first, so a run that died early fails the test instead of hanging it."""
    box: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: box.put(stream.readline()), daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return box.get(timeout=0.5)
        except queue.Empty:
            if not still():
                break
    return ""


def test_a_webhook_answers_a_ci_runs_questions(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    workspace.chmod(0o777)  # the sandbox runs as another unprivileged user (--user)
    script = write_script(
        tmp_path / "script.yaml",
        [
            convo("parent", PARENT_MATCH, [task("ASKER go", "general-purpose")], [text("done")]),
            convo(
                "asker",
                {"prompt_contains": "ASKER"},
                [tool("Bash", command="touch hooked.txt")],
                [tool("Bash", command="touch refused.txt")],
                [text("asked twice")],
            ),
        ],
    )
    receiver = subprocess.Popen(
        [sys.executable, str(RECEIVER), "--port", "0", "--allow", "touch hooked.txt",
         "--person", "release-bot"],
        env={"WARDEN_WEBHOOK_SECRET": SECRET, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert receiver.stdout is not None
        url = receiver.stdout.readline().removeprefix("listening on ").strip()
        proc = run_warden(
            settings,
            "run", "go", "--replay", str(script), "--workspace", str(workspace),
            "--permission-mode", "default", "--user", "1234:1234",
            "--approver", f"webhook:{url}", "--audit-out", str(tmp_path / "audit.json"),
            WARDEN_WEBHOOK_SECRET=SECRET,
        )  # fmt: skip
    finally:
        receiver.terminate()
        out, _ = receiver.communicate(timeout=10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workspace / "hooked.txt").exists()
    assert not (workspace / "refused.txt").exists()

    audit = json.loads((tmp_path / "audit.json").read_text())
    records = audit if isinstance(audit, list) else audit["records"]
    asked = {r["tool_input"]["command"]: r for r in records if r["decision"] == "ask"}
    assert asked["touch hooked.txt"]["final"] == "allow"
    assert asked["touch hooked.txt"]["decided_by"] == "webhook:release-bot"
    assert asked["touch refused.txt"]["final"] == "deny"
    assert asked["touch refused.txt"]["decided_by"] == "webhook:release-bot"
    assert asked["touch refused.txt"]["reason"] == "release-bot allows only: touch hooked.txt"
    assert {(r["channel"], r["person"]) for r in asked.values()} == {("webhook", "release-bot")}
    # The receiver saw each question once, checked its signature, and answered it.
    assert out.count("(new)") == 2 and "bad signature" not in out, out
    assert out.count("-> 200") == 2, out


def test_a_receiver_that_fails_first_gets_the_question_again_under_the_cli(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """The CLI's own event loop retries a delivery: a receiver answering 503 twice
    (briefly down, restarting) gets the question again with back-off and answers it;
    the command runs well before the question's timeout would deny it."""
    workspace.chmod(0o777)
    script = write_script(
        tmp_path / "script.yaml",
        [
            convo("parent", PARENT_MATCH, [task("ASKER go", "general-purpose")], [text("done")]),
            convo(
                "asker",
                {"prompt_contains": "ASKER"},
                [tool("Bash", command="touch retried.txt")],
                [text("asked once")],
            ),
        ],
    )
    receiver = subprocess.Popen(
        [sys.executable, str(RECEIVER), "--port", "0", "--allow", "touch retried.txt",
         "--person", "flaky-bot", "--fail-first", "2"],
        env={"WARDEN_WEBHOOK_SECRET": SECRET, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert receiver.stdout is not None
        url = receiver.stdout.readline().removeprefix("listening on ").strip()
        proc = run_warden(
            settings,
            "run", "go", "--replay", str(script), "--workspace", str(workspace),
            "--permission-mode", "default", "--user", "1234:1234",
            "--approver", f"webhook:{url}", "--audit-out", str(tmp_path / "audit.json"),
            WARDEN_WEBHOOK_SECRET=SECRET, WARDEN_WEBHOOK_TIMEOUT_S="60",
        )  # fmt: skip
    finally:
        receiver.terminate()
        out, _ = receiver.communicate(timeout=10)
    assert "Traceback" not in proc.stderr and "trio" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workspace / "retried.txt").exists()
    # Two 503s, then the question arrived (new) and was answered.
    assert out.count("(new)") == 1 and out.count("-> 200") == 1, out
    audit = json.loads((tmp_path / "audit.json").read_text())
    records = audit if isinstance(audit, list) else audit["records"]
    (asked,) = [r for r in records if r["decision"] == "ask"]
    assert asked["final"] == "allow" and asked["decided_by"] == "webhook:flaky-bot"


def test_a_webhook_approver_without_its_secret_is_refused_before_anything_runs(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.yaml", [convo("p", PARENT_MATCH, [text("done")])])
    proc = run_warden(
        settings, "run", "go", "--workspace", str(workspace), "--replay", str(script),
        "--approver", "webhook:http://127.0.0.1:9/hook",
    )  # fmt: skip
    assert proc.returncode != 0
    assert "set WARDEN_WEBHOOK_SECRET" in proc.stderr, proc.stderr
    bad = run_warden(settings, "run", "go", "--workspace", str(workspace), "--approver", "slack")
    assert bad.returncode == 2 and "unknown approver 'slack'" in bad.stderr, bad.stderr


def test_the_terminal_and_a_webhook_at_once_first_answer_wins(
    workspace: Path, tmp_path: Path
) -> None:
    """On a real terminal with a webhook beside it: the question the webhook answers
    is withdrawn from the terminal saying who answered; the one it leaves is answered
    at the terminal and the receiver is told; the terminal is left as it was."""
    workspace.chmod(0o777)
    script = write_script(
        tmp_path / "script.yaml",
        [
            convo("parent", PARENT_MATCH, [task("ASKER go", "general-purpose")], [text("done")]),
            convo(
                "asker",
                {"prompt_contains": "ASKER"},
                [tool("Bash", command="touch hooked.txt")],
                [tool("Bash", command="touch mine.txt")],
                [text("asked twice")],
            ),
        ],
    )
    receiver = subprocess.Popen(
        [sys.executable, str(RECEIVER), "--port", "0", "--allow", "touch hooked.txt",
         "--leave-others", "--person", "release-bot"],
        env={"WARDEN_WEBHOOK_SECRET": SECRET, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    state = tmp_path / "state"
    typed: list[bytes] = []

    def person(fd: int, _chunk: bytes, seen: list[bytes] = []) -> None:  # noqa: B006
        seen.append(_chunk)
        out = b"".join(seen)
        start = out.rfind(b"approval needed")
        panel = out[start : out.find(b"llow once  [s]", start)] if start >= 0 else b""
        if b"touch mine.txt" in panel and b"llow once  [s]" in out[start:] and not typed:
            typed.append(b"a")
            os.write(fd, b"a\n")

    try:
        assert receiver.stdout is not None
        url = receiver.stdout.readline().removeprefix("listening on ").strip()
        env = warden_env(
            WARDEN_STATE_DIR=str(state), WARDEN_WEBHOOK_SECRET=SECRET, COLUMNS="200", LINES="50"
        )
        env.pop("CI", None)
        argv = warden_argv(
            "run", "go", "--replay", str(script), "--workspace", str(workspace),
            "--permission-mode", "default", "--user", "1234:1234",
            "--approver", "terminal", "--approver", f"webhook:{url}",
        )  # fmt: skip
        modes: list[list[Any]] = []
        code, raw = run_on_a_terminal(argv, env, tmp_path, person, 300, modes_after=modes)
    finally:
        receiver.terminate()
        out, _ = receiver.communicate(timeout=10)
    shown = raw.decode(errors="replace")
    assert code == 0, shown[-3000:]
    assert (workspace / "hooked.txt").exists() and (workspace / "mine.txt").exists()
    assert "warden: answered on webhook by release-bot: allowed" in shown, shown[-3000:]
    user = getpass.getuser()
    assert re.search(rf"withdrawn q_\w+: allow by terminal:{user}", out), out
    # The prompt's cbreak mode did not outlive it: the terminal echoes and edits lines.
    assert modes[0][3] & termios.ICANON and modes[0][3] & termios.ECHO

    audit = json.loads(
        subprocess.run(
            warden_argv("audit", "--json"),
            env=warden_env(WARDEN_STATE_DIR=str(state)),
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
    )  # fmt: skip
    by = {r["tool_input"]["command"]: r["decided_by"] for r in audit if r["decision"] == "ask"}
    assert by == {"touch hooked.txt": "webhook:release-bot", "touch mine.txt": f"terminal:{user}"}


def test_stopping_a_run_while_a_question_waits_denies_it_and_stops_promptly(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """SIGTERM while the webhook has not answered: the waiting call is denied as
    stopped (audited), and the run stops in its ordinary way, not at the stop grace."""
    workspace.chmod(0o777)
    script = write_script(
        tmp_path / "script.yaml",
        [
            convo("parent", PARENT_MATCH, [task("ASKER go", "general-purpose")], [text("done")]),
            convo(
                "asker",
                {"prompt_contains": "ASKER"},
                [tool("Bash", command="touch never.txt")],
                [text("asked")],
            ),
        ],
    )
    receiver = subprocess.Popen(
        [sys.executable, str(RECEIVER), "--port", "0", "--silent"],
        env={"WARDEN_WEBHOOK_SECRET": SECRET, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        url = receiver.stdout.readline().removeprefix("listening on ").strip()
        run = subprocess.Popen(
            warden_argv(
                "run", "go", "--replay", str(script), "--workspace", str(workspace),
                "--permission-mode", "default", "--user", "1234:1234",
                "--approver", f"webhook:{url}",
            ),
            env=warden_env(
                WARDEN_STATE_DIR=str(settings.state_dir), CI="true", WARDEN_WEBHOOK_SECRET=SECRET
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        # The question reached the receiver (or the run ended without asking: say so).
        asked = next_line(receiver.stdout, 180, still=lambda: run.poll() is None)
        assert "(new): Bash" in asked, (asked, run.poll())
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=120)
    finally:
        receiver.terminate()
        receiver.communicate(timeout=10)
    assert run.returncode == 143, err[-3000:]
    assert "took longer" not in err, err[-3000:]
    assert not (workspace / "never.txt").exists()
    audit = json.loads(
        subprocess.run(
            warden_argv("audit", "--json"),
            env=warden_env(WARDEN_STATE_DIR=str(settings.state_dir)),
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
    )  # fmt: skip
    asked_records = [r for r in audit if r["decision"] == "ask"]
    assert [(r["final"], r["decided_by"]) for r in asked_records] == [("deny", "stopped")]
