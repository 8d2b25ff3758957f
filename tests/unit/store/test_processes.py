"""The state store across processes: a reader in another process follows events while
writers in this and another process append (and never misses or reorders one), a
writer waits out another process's write lock, and a process SIGKILLed in the middle
of a stream of transcript checkpoints leaves the last committed one readable and
intact. Also measures what one checkpoint of a 50-turn conversation costs."""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.jsontypes import JSONObject
from orchestrator.store import DB_FILENAME, Store, TaskRecord
from tests.conftest import warden_env
from tests.json_shapes import string

CHILD_TIMEOUT_S = 60


def _python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), *args]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / DB_FILENAME


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store.open(db_path) as s:
        s.create_run("run1", prompt="p", workspace="/ws", model="m", pid=os.getpid())
        s.create_task(
            TaskRecord(task_id="sa_t", run_id="run1", agent_type="general-purpose", prompt="x")
        )
        yield s


READER = """
    import json, sys, time
    from pathlib import Path
    from orchestrator.store import Store
    expected = int(sys.argv[2])
    seen = []
    with Store.open(Path(sys.argv[1])) as store:
        print("ready", flush=True)
        deadline = time.monotonic() + 50
        while len(seen) < expected and time.monotonic() < deadline:
            batch = store.events(run_id="run1", after_id=seen[-1] if seen else 0)
            seen.extend(e.event_id for e in batch)
            if not batch:
                time.sleep(0.002)
    print(json.dumps(seen), flush=True)
"""

WRITER = """
    import sys
    from pathlib import Path
    from orchestrator.store import Store
    with Store.open(Path(sys.argv[1])) as store:
        for i in range(int(sys.argv[2])):
            store.append_event("run1", "sa_t", "proc", {"i": i})
"""


def test_reader_process_follows_writers_in_two_processes(store: Store, db_path: Path) -> None:
    per_writer = 300
    reader = subprocess.Popen(
        _python(READER, str(db_path), str(2 * per_writer)),
        stdout=subprocess.PIPE,
        text=True,
        env=warden_env(),
    )
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "ready"
        writer = subprocess.Popen(_python(WRITER, str(db_path), str(per_writer)), env=warden_env())
        for i in range(per_writer):  # this process writes at the same time
            store.append_event("run1", None, "here", {"i": i})
        assert writer.wait(timeout=CHILD_TIMEOUT_S) == 0
        out, _ = reader.communicate(timeout=CHILD_TIMEOUT_S)
    finally:
        reader.kill()
        reader.wait()
    seen = json.loads(out.strip().splitlines()[-1])
    all_ids = [e.event_id for e in store.events(run_id="run1")]
    assert len(all_ids) == 2 * per_writer
    assert seen == all_ids  # every event, once, in order: following by id misses nothing
    kinds = [e.kind for e in store.events()]
    assert kinds.count("proc") == kinds.count("here") == per_writer


LOCK_HOLDER = """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("COMMIT")
"""


def test_a_write_waits_for_another_process_write_lock(store: Store, db_path: Path) -> None:
    hold_s = 0.5
    holder = subprocess.Popen(
        _python(LOCK_HOLDER, str(db_path), str(hold_s)), stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        store.append_event("run1", None, "after-lock", {})
        waited = time.monotonic() - started
        # Reads are not blocked by the other process's write transaction.
        assert [e.kind for e in store.events()] == ["after-lock"]
    finally:
        holder.communicate(timeout=CHILD_TIMEOUT_S)
    assert waited >= hold_s * 0.6


CHECKPOINTER = """
    import sys
    from pathlib import Path
    from orchestrator.store import Store
    task_id, pad = sys.argv[2], "x" * int(sys.argv[3])
    with Store.open(Path(sys.argv[1])) as store:
        turn = 0
        while True:
            turn += 1
            messages = [
                {"role": ("user", "assistant")[i % 2], "content": f"turn {turn} msg {i} {pad}"}
                for i in range(2 * turn)
            ]
            store.checkpoint_transcript(task_id, messages, turn)
            print(turn, flush=True)
"""


def _expected(turn: int, pad: int) -> list[dict[str, str]]:
    return [
        {"role": ("user", "assistant")[i % 2], "content": f"turn {turn} msg {i} {'x' * pad}"}
        for i in range(2 * turn)
    ]


def test_sigkill_mid_checkpoint_stream_keeps_last_committed_one(
    store: Store, db_path: Path
) -> None:
    pad = 4000  # each checkpoint is hundreds of KiB, so a kill lands mid-write
    rng = random.Random(5)
    for round_ in range(10):
        task_id = f"sa_round{round_}"
        store.create_task(
            TaskRecord(task_id=task_id, run_id="run1", agent_type="general-purpose", prompt="x")
        )
        child = subprocess.Popen(
            _python(CHECKPOINTER, str(db_path), task_id, str(pad)),
            stdout=subprocess.PIPE,
            text=True,
            env=warden_env(),
        )
        assert child.stdout is not None
        last_committed = 0
        target = rng.randint(5, 40)
        try:
            while last_committed < target:
                line = child.stdout.readline()
                assert line, "the checkpointing child died by itself"
                last_committed = int(line)
            time.sleep(rng.uniform(0, 0.01))
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
        assert child.returncode == -signal.SIGKILL
        with Store.open(db_path) as after:  # a new process would do exactly this
            after.check()
            messages = after.get_transcript(task_id)
            assert messages, f"checkpoint {last_committed} was committed, then lost"
            assert after.checkpoint_transcript(task_id, [], 1) is False  # still guarded
        turn = int(string(messages[0]["content"]).split()[1])
        assert turn >= last_committed
        assert messages == _expected(turn, pad)
        store.append_event("run1", task_id, "recovered", {"turn": turn})  # still writable


def _conversation(turns: int) -> list[JSONObject]:
    """A realistic tool-using conversation: text, a tool call and its output per turn."""
    messages: list[JSONObject] = [{"role": "user", "content": "Fix the failing test."}]
    for t in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {t}: " + "reasoning " * 50},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{t:04d}",
                        "name": "Bash",
                        "input": {"command": f"pytest tests/test_{t}.py -q"},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{t:04d}",
                        "content": "output line ünïcødé\n" * 150,
                    }
                ],
            }
        )
    return messages


def test_cost_of_one_checkpoint_of_a_50_turn_conversation(store: Store, tmp_path: Path) -> None:
    messages = _conversation(50)
    size = len(json.dumps(messages, ensure_ascii=False))
    with Store.open(tmp_path / "full.db", synchronous="FULL") as full:
        full.create_run("run1", prompt="p", workspace="/ws", model="m", pid=os.getpid())
        full.create_task(
            TaskRecord(task_id="sa_t", run_id="run1", agent_type="general-purpose", prompt="x")
        )
        timings: dict[str, list[float]] = {"NORMAL": [], "FULL": []}
        for turn in range(1, 41):  # interleaved, so both see the same machine load
            for mode, target in (("NORMAL", store), ("FULL", full)):
                started = time.perf_counter()
                target.checkpoint_transcript("sa_t", messages, turn)
                timings[mode].append(time.perf_counter() - started)
        assert full.get_transcript("sa_t") == messages
    assert store.get_transcript("sa_t") == messages
    print(f"\ncheckpoint of 50 turns ({len(messages)} messages, {size} chars JSON):")
    for mode, values in timings.items():
        values.sort()
        print(
            f"  synchronous={mode}: median {statistics.median(values) * 1000:.2f} ms, "
            f"p95 {values[int(len(values) * 0.95)] * 1000:.2f} ms"
        )
    median_ms = statistics.median(timings["NORMAL"]) * 1000
    assert median_ms < 50, "a checkpoint per turn must stay cheap next to a model call"


OPENER = """
    import sys
    from pathlib import Path
    from orchestrator.store import Store
    with Store.open(Path(sys.argv[1])) as store:
        store.create_run(sys.argv[2], prompt="p", workspace="/w", model="m", pid=0)
"""


def test_processes_opening_a_new_store_at_once_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / DB_FILENAME
    openers = [
        subprocess.Popen(_python(OPENER, str(path), f"run{i}"), env=warden_env()) for i in range(5)
    ]
    assert [p.wait(timeout=CHILD_TIMEOUT_S) for p in openers] == [0] * 5
    with Store.open(path) as store:
        assert sorted(r.run_id for r in store.list_runs()) == [f"run{i}" for i in range(5)]


NEW_STORE_HOLDER = """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")  # a new store, still in rollback mode: as another
    conn.execute("CREATE TABLE half_way (x)")  # opener holds it mid-way through its set-up
    print("locked", flush=True)
    sys.stdin.readline()
    conn.execute("ROLLBACK")
    print("released", flush=True)
    sys.stdin.readline()
"""


def test_a_new_store_opened_by_two_processes_at_once_opens_in_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite fails a switch to WAL that meets another connection's write at once
    ("database is locked", its busy handler skipped): two processes opening a new
    state dir together (two CI jobs, `warden run` and `warden ps` on first use) made
    one fail with "stayed locked for more than 10 s". It now waits its turn."""
    from orchestrator.store import schema

    db = tmp_path / "state" / DB_FILENAME
    db.parent.mkdir()
    holder = subprocess.Popen(
        _python(NEW_STORE_HOLDER, str(db)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert holder.stdin is not None and holder.stdout is not None
    to_holder, from_holder = holder.stdin, holder.stdout
    pauses: list[float] = []

    def let_the_other_finish(seconds: float) -> None:
        """The first wait for the lock is where the other opener finishes."""
        if not pauses:
            to_holder.write("go\n")
            to_holder.flush()
            assert from_holder.readline().strip() == "released"
        pauses.append(seconds)

    monkeypatch.setattr(schema, "_pause", let_the_other_finish, raising=False)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with Store.open(db) as opened:
            opened.create_run("run1", prompt="p", workspace="/ws", model="m", pid=os.getpid())
            assert [r.run_id for r in opened.list_runs()] == ["run1"]
    finally:
        holder.communicate("done\n", timeout=CHILD_TIMEOUT_S)
    assert pauses  # it did meet the other opener's lock
