"""Locks in the analyser's time bound (issue 32): a hostile command line is decided
as `ask` with a reason, either refused unparsed by the shape limits or killed in its
worker process at the deadline, and meanwhile another sandbox's call is decided.

The worker processes are real (`python -I -c`, the real parsers); a worker is made
"slow" by stopping it (SIGSTOP), so the tests wait on conditions, never on time.
How long decisions take is measured by bench/bench_analyser_bound.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from orchestrator.config import AnalyserBound, Settings
from orchestrator.permissions import EffectivePolicy, ToolCall, evaluate, parse_rule
from orchestrator.permissions import analyser_bound as bound
from orchestrator.permissions.analyser_bound import INLINE_CHARS, AnalyserPool
from orchestrator.permissions.shell import analysis as analysis_module
from orchestrator.permissions.shell import refused_shape
from orchestrator.permissions.shell.shape import (
    MAX_SHAPE_DEPTH,
    MAX_SHAPE_SEPARATORS,
    MAX_SHAPE_WORDS,
    paren_depth,
)

POLICY = EffectivePolicy(
    rules=tuple(
        parse_rule(r, "allow", "test", "test") for r in ("Bash(echo:*)", "Bash(cat:*)", "Bash(:)")
    )
)
PATHOLOGICAL = {
    "deep nesting": ("(" * 5000 + ":" + ")" * 5000, f"nested more than {MAX_SHAPE_DEPTH}"),
    "huge pipeline": (":|" * 10_000 + ":", f"more than {MAX_SHAPE_SEPARATORS} command separators"),
    "long list": (":;" * 9000, f"more than {MAX_SHAPE_SEPARATORS} command separators"),
    "many here-documents": (
        "cat "
        + "".join(f"<<E{i} " for i in range(4700))
        + "\n"
        + "".join(f"E{i}\n" for i in range(4700)),
        "more than 64 here-document operators",
    ),
    "long word list": ("echo " + "a " * 30_000, f"more than {MAX_SHAPE_WORDS} words"),
    "over 64 KiB": ("echo " + "a" * 70_000, "longer than 64 KiB"),
}
SLOW_WITHIN_LIMITS = (
    "cat " + "".join(f"<<E{i} " for i in range(64)) + "\n"
    + "".join("y" * 974 + f"\nE{i}\n" for i in range(64))
)  # fmt: skip
"""Within every shape limit, yet its parse is the slowest found (about 0.1-0.8 s)."""


def _decide(command: str) -> tuple[str, str]:
    decision = evaluate(POLICY, ToolCall(tool_name="Bash", tool_input={"command": command}))
    return decision.decision.behavior, decision.decision.reason


def _no_parse(*args: object, **kwargs: object) -> None:
    raise AssertionError("the command was parsed")


@pytest.fixture
def pool() -> Iterator[AnalyserPool]:
    made = AnalyserPool(AnalyserBound(deadline_ms=600_000, workers=1))
    yield made
    made.close()


def _wait_ready(pool: AnalyserPool) -> None:
    pool.warm()
    assert pool._ever_ready.wait(120), "no analyser worker started"


@pytest.mark.parametrize("shape", sorted(PATHOLOGICAL))
def test_pathological_shapes_ask_unparsed_with_the_reason(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    command, reason = PATHOLOGICAL[shape]
    for name in ("parse", "disagreement", "loose_commands"):
        monkeypatch.setattr(analysis_module, name, _no_parse)
    monkeypatch.setattr(bound, "pool", _no_parse)  # nor sent to a worker
    behavior, why = _decide(command)
    assert behavior == "ask"
    assert reason in why and "not parsed" in why


def test_here_document_bodies_do_not_count_toward_the_limits() -> None:
    body = "a; b; c; d; e;\n" * 2000 + "(" * 1100 + ")" * 1100 + "\n"
    command = f"cat <<'EOF'\n{body}EOF\n"
    assert body.count(";") > MAX_SHAPE_SEPARATORS and len(body.split()) > MAX_SHAPE_WORDS
    assert paren_depth(body) > MAX_SHAPE_DEPTH
    assert refused_shape(command) is None
    assert _decide(command)[0] == "allow"  # parsed (in a worker) and proven


def test_a_line_over_the_deadline_asks_and_its_worker_is_killed() -> None:
    slow = AnalyserPool(AnalyserBound(deadline_ms=1, workers=1))
    try:
        _wait_ready(slow)
        worker = slow._idle.queue[0]
        result = slow.analyse(SLOW_WITHIN_LIMITS)
        assert result.problems == [bound.deadline_problem(slow.bound)]
        assert "too large or complex to analyse within 1 ms" in result.problems[0]
        assert slow.killed == 1
        assert worker.process.poll() is not None  # killed, not left parsing
    finally:
        slow.close()


def test_the_engine_asks_when_the_configured_deadline_passes() -> None:
    bound.configure(Settings(analyser_deadline_ms=1).analyser_bound())
    try:
        assert bound.pool()._ever_ready.wait(120)
        behavior, why = _decide(SLOW_WITHIN_LIMITS)
    finally:
        bound.configure(AnalyserBound())
    assert behavior == "ask"
    assert "too large or complex to analyse within 1 ms" in why


def test_another_sandboxs_call_is_decided_while_a_line_is_analysed(pool: AnalyserPool) -> None:
    _wait_ready(pool)
    worker = pool._idle.queue[0]
    os.kill(worker.process.pid, signal.SIGSTOP)  # its analysis now never ends by itself
    results: list[list[str]] = []
    slow = threading.Thread(
        target=lambda: results.append(pool.analyse(SLOW_WITHIN_LIMITS).problems)
    )
    slow.start()
    try:
        # The slow line is with the stopped worker; every short call is decided meanwhile.
        for command in ("echo hi", "git status", "cat README.md | wc -l", "rm -rf /"):
            behavior, _ = _decide(command)
            assert behavior in ("allow", "ask")
        assert _decide("echo hi")[0] == "allow"
        assert slow.is_alive() and not results
    finally:
        os.kill(worker.process.pid, signal.SIGCONT)
        slow.join()
    assert results and results[0]  # answered once the worker ran again: never an allow


def test_long_ordinary_lines_are_proven_in_a_worker(pool: AnalyserPool) -> None:
    command = "cat > notes.txt <<'EOF'\n" + "a line of notes\n" * 100 + "EOF"
    assert len(command) > INLINE_CHARS
    result = pool.analyse(command)
    assert result.problems == []
    assert [c.words for c in result.commands] == [("cat",)]
    assert result.writes == ["notes.txt"]


def test_a_dead_worker_asks_and_is_replaced(pool: AnalyserPool) -> None:
    _wait_ready(pool)
    worker = pool._idle.queue[0]
    worker.process.kill()
    worker.process.wait()
    result = pool.analyse("echo " + "a" * 1000)
    assert result.problems and "worker" in result.problems[0]
    assert pool.analyse("echo " + "b" * 1000).problems == []  # a new one took its place


def test_the_deadline_setting_is_closed_and_validated() -> None:
    assert Settings.from_env({"WARDEN_ANALYSER_DEADLINE_MS": "250"}).analyser_bound() == (
        AnalyserBound(deadline_ms=250)
    )
    with pytest.raises(Exception, match="analyser_deadline_ms"):
        Settings.from_env({"WARDEN_ANALYSER_DEADLINE_MS": "0"})
    with pytest.raises(TypeError, match="unexpected keyword argument 'other'"):
        AnalyserBound(deadline_ms=5, other=1)  # type: ignore[call-arg]


def test_a_worker_whose_warden_left_while_it_started_ends_quietly() -> None:
    """A run can end while its workers still import the analyser (they start at the
    first tool call): the worker finds the socket closed when it says ready and ends
    without a traceback on the run's stderr."""
    ours, theirs = socket.socketpair()
    worker = subprocess.Popen(
        [sys.executable, "-I", "-c", bound._WORKER_MAIN,
         json.dumps(bound._import_path()), str(theirs.fileno())],
        pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    theirs.close()
    ours.close()  # warden is gone before the worker is ready
    _, err = worker.communicate(timeout=bound.WORKER_START_S)
    assert worker.returncode == 0 and "Traceback" not in err, err
