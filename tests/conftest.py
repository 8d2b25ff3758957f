"""Shared fixtures. Integration tests use the real engine; they fail (never skip)
when it is missing, with the command that fixes it."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings

UNPRIVILEGED = 1000


ENGINE_TESTS = ("tests/integration/", "tests/e2e/")
"""Test folders whose tests drive the real engine: one xdist worker runs them all."""
ENGINE_FREE = ("tests/integration/test_claude_code_differential.py",)
"""Integration tests that start no container (the real Claude Code CLI against the
scripted model, beside warden's own decisions): they run beside the engine tests."""
ENGINE_APART = ("tests/e2e/test_fresh_debian.py",)
"""Engine tests that may run beside the others, each as its own unit of work: the
fresh-Debian test (the longest in the suite, minutes of apt and pip) works in its own
container under its own label, and the sandboxes its demo starts belong to a process in
another pid namespace, which no `warden cleanup` on this host removes or counts."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under xdist (pyproject's `-n 2`), every engine test is one unit of work, run one
    after another on one worker in their written order, as CI has always run them: each
    sizes its waits for one engine test at a time, and a bare `warden cleanup` in one
    must not meet another's deliberately orphaned containers. The unit tests, one unit
    each, fill the other worker, after the `ENGINE_APART` ones (first in the queue). (A scheduler rather than xdist's `loadgroup`: that one
    renames node ids, which pytest 9 no longer lets a plugin do.)"""
    from xdist.scheduler import LoadScopeScheduling

    class EngineTestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(ENGINE_FREE + ENGINE_APART):
                return nodeid
            return "engine" if nodeid.startswith(ENGINE_TESTS) else nodeid

    return EngineTestsTogether(config, log)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        state_dir=tmp_path / "state",
        config_dir=tmp_path / "config",
        claude_dir=tmp_path / "claude",
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace owned by an unprivileged user, as a real user's would be."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    if os.geteuid() == 0:
        os.chown(ws, UNPRIVILEGED, UNPRIVILEGED)
    return ws


@pytest.fixture
def test_session() -> Iterator[str]:
    """A warden.session label value unique to one test."""
    yield f"test-{uuid.uuid4().hex[:12]}"


REPO_ROOT = Path(__file__).resolve().parent.parent


def warden_argv(*args: str) -> list[str]:
    """argv that runs this tree's `warden` CLI (not whatever is installed)."""
    import sys

    return [sys.executable, "-m", "orchestrator", *args]


def warden_env(**extra: str) -> dict[str, str]:
    """Environment for a CLI subprocess that imports this tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_warden(
    settings: Settings, *args: str, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess[str]:
    """This tree's `warden ARGS` as a CI job runs it: CI=true, stdin closed, the
    test's state and config dirs; output captured as text."""
    return subprocess.run(
        warden_argv(*args),
        env=warden_env(
            WARDEN_STATE_DIR=str(settings.state_dir),
            WARDEN_CONFIG_DIR=str(settings.config_dir),
            CLAUDE_CONFIG_DIR=str(settings.claude_dir),
            CI="true",
            # The tests' own workspaces: their .claude/ settings apply (trust tests say "0").
            **{"WARDEN_TRUST_WORKSPACE": "1", **env},
        ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_script(path: Path, conversations: list[dict[str, Any]]) -> Path:
    """A `--replay` script file holding these scripted conversations."""
    import yaml

    path.write_text(yaml.safe_dump({"conversations": conversations}))
    return path


def result_document(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one result document `--json` ends with (asserting it is the only one)."""
    docs = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    results = [d for d in docs if d.get("type") == "result"]
    assert len(results) == 1 and docs and results[0] is docs[-1], proc.stdout[-2000:]
    final: dict[str, Any] = docs[-1]
    return final


FIFO_PATIENCE_S = 30.0
"""How long `without_waiting_on` lets a call run before it says the call waited."""


def without_waiting_on(fifo: Path, call: Callable[[], object]) -> object:
    """What `call` returned or raised, run on a thread; the test fails if it is still
    running after FIFO_PATIENCE_S, stuck opening `fifo` (which a sandbox may leave
    where a file is expected): the FIFO is then opened for writing to release it."""
    import threading

    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(FIFO_PATIENCE_S)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(FIFO_PATIENCE_S)
        pytest.fail(f"the call waited on the FIFO {fifo}")
    return outcome[0]
