"""The state store in one process: schema creation and reopen, the task tree, transcript
checkpoints that never go backwards, events in commit order, the audit trail, hostile
data stored as data, clear errors for damaged, foreign or newer files, and thread safety."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.errors import StoreError, TaskNotFoundError
from orchestrator.jsontypes import JSONObject
from orchestrator.store import (
    DB_FILENAME,
    MAX_AUDIT_INPUT_CHARS,
    MAX_TEXT_CHARS,
    SCHEMA_VERSION,
    TRUNCATED_KEY,
    AuditRecord,
    RunNotFoundError,
    Store,
    TaskRecord,
    TaskStatus,
    TranscriptTooLargeError,
)
from orchestrator.store import records as records_module

HOSTILE = [
    "'); DROP TABLE tasks; --",
    "\x00nul\x00inside",
    "\x1b[2J\x1b[31mAPPROVED\x1b[0m\r\n",
    "emoji 🧨 and RTL \u202eevil\u202c and CJK 漢字",
    '{"json": "lookalike"} \\" \\\\',
]


def _task(
    task_id: str,
    run_id: str = "run1",
    parent_id: str | None = None,
    depth: int = 1,
    **extra: object,
) -> TaskRecord:
    return TaskRecord.model_validate(
        {
            "task_id": task_id,
            "run_id": run_id,
            "parent_id": parent_id,
            "depth": depth,
            "agent_type": "general-purpose",
            "prompt": f"do {task_id}",
        }
        | extra
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "deep" / DB_FILENAME


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store.open(db_path) as s:
        s.create_run("run1", prompt="hello", workspace="/ws", model="m", pid=os.getpid())
        yield s


def test_first_open_creates_schema_with_private_modes(db_path: Path) -> None:
    with Store.open(db_path) as s:
        s.create_run("r", prompt="p", workspace="/w", model="m", pid=1)
        wal = db_path.with_name(db_path.name + "-wal")
        assert stat.S_IMODE(wal.stat().st_mode) == 0o600
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(db_path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(db_path.parent.parent.stat().st_mode) == 0o700
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    assert {"runs", "tasks", "transcripts", "events", "audit"} <= tables


def test_synchronous_normal_by_default_full_on_request(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a.db") as s:
        assert s.synchronous == "NORMAL"
    with Store.open(tmp_path / "b.db", synchronous="FULL") as s:
        assert s.synchronous == "FULL"
    with pytest.raises(ValueError, match="NORMAL"):
        Store.open(tmp_path / "c.db", synchronous="OFF; DROP TABLE runs")  # type: ignore[arg-type]


def test_reopen_keeps_everything(db_path: Path) -> None:
    with Store.open(db_path) as s:
        s.create_run("r", prompt="p", workspace="/w", model="m", pid=1)
        s.create_task(_task("sa_a", run_id="r"))
        s.checkpoint_transcript("sa_a", [{"role": "user", "content": "hi"}], 1)
        s.finish_run("r", "completed", "done")
    with Store.open(db_path) as s:
        run = s.get_run("r")
        assert (run.status, run.result) == ("completed", "done")
        assert run.ended_at is not None
        assert s.get_transcript("sa_a") == [{"role": "user", "content": "hi"}]
        assert [r.run_id for r in s.list_runs()] == ["r"]


def test_runs_listing_newest_first_and_unknown_run(store: Store) -> None:
    store.create_run("run2", prompt="p", workspace="/w", model="m", pid=1)
    assert [r.run_id for r in store.list_runs()] == ["run2", "run1"]
    assert [r.run_id for r in store.list_runs(limit=1)] == ["run2"]
    with pytest.raises(RunNotFoundError, match="warden ps"):
        store.get_run("nope")
    with pytest.raises(StoreError, match="already exists"):
        store.create_run("run1", prompt="p", workspace="/w", model="m", pid=1)
    with pytest.raises(ValueError, match="final status"):
        store.finish_run("run1", "running", None)


def test_stale_runs_are_those_whose_process_is_gone(store: Store) -> None:
    store.create_run("dead", prompt="p", workspace="/w", model="m", pid=424242)
    store.create_run("done", prompt="p", workspace="/w", model="m", pid=424243)
    store.finish_run("done", "completed", None)
    stale = store.stale_runs(lambda run: run.pid == 424242)
    assert [r.run_id for r in stale] == ["dead"]


def test_tree_children_and_descendants(store: Store) -> None:
    store.create_task(_task("sa_root"))
    store.create_task(_task("sa_b", parent_id="sa_root", depth=2))
    store.create_task(_task("sa_c", parent_id="sa_root", depth=2))
    store.create_task(_task("sa_d", parent_id="sa_b", depth=3))
    store.create_task(_task("sa_other"))
    assert [t.task_id for t in store.children("sa_root")] == ["sa_b", "sa_c"]
    assert [t.task_id for t in store.descendants("sa_root")] == ["sa_b", "sa_c", "sa_d"]
    assert [t.task_id for t in store.descendants("sa_b")] == ["sa_d"]
    assert store.descendants("sa_d") == []
    assert [t.task_id for t in store.list_tasks(run_id="run1")] == [
        "sa_root",
        "sa_b",
        "sa_c",
        "sa_d",
        "sa_other",
    ]
    with pytest.raises(TaskNotFoundError, match=r"sa_nope.*warden ps"):
        store.descendants("sa_nope")


def test_tree_refuses_inconsistent_parents(store: Store) -> None:
    store.create_run("run2", prompt="p", workspace="/w", model="m", pid=1)
    store.create_task(_task("sa_p"))
    with pytest.raises(ValueError, match="depth"):
        store.create_task(_task("sa_x", parent_id="sa_p", depth=5))
    with pytest.raises(ValueError, match="same run"):
        store.create_task(_task("sa_y", run_id="run2", parent_id="sa_p", depth=2))
    with pytest.raises(TaskNotFoundError, match="sa_ghost"):
        store.create_task(_task("sa_z", parent_id="sa_ghost", depth=2))
    with pytest.raises(RunNotFoundError):
        store.create_task(_task("sa_w", run_id="no-run"))
    with pytest.raises(StoreError, match="already exists"):
        store.create_task(_task("sa_p"))
    assert [t.task_id for t in store.list_tasks()] == ["sa_p"]


def test_task_lifecycle_updates(store: Store) -> None:
    store.create_task(_task("sa_t"))
    assert store.get_task("sa_t").session_id == "sa_t"  # a new session is named after it
    updated = store.update_task("sa_t", status="running", container_id="c0ffee", started_at=1.5)
    assert (updated.status, updated.container_id) == ("running", "c0ffee")
    assert store.get_task("sa_t") == updated
    with pytest.raises(TypeError, match="bogus"):
        store.update_task("sa_t", bogus=1)  # type: ignore[call-arg]  # the refusal tested
    with pytest.raises(ValueError, match="run_id"):
        store.update_task("sa_t", run_id="other")  # type: ignore[call-arg]  # the refusal tested
    with pytest.raises(ValidationError):
        store.update_task("sa_t", status="exploded")
    with pytest.raises(TaskNotFoundError):
        store.update_task("sa_missing", status="running")
    assert store.finish_task("sa_t", TaskStatus.STOPPED, error="TaskStop") is True
    # A result arriving after the stop does not undo it.
    assert store.finish_task("sa_t", TaskStatus.COMPLETED, result_text="late") is False
    task = store.get_task("sa_t")
    assert (task.status, task.result_text, task.error) == ("stopped", None, "TaskStop")
    assert task.ended_at is not None


def test_running_tasks_and_mark_interrupted(store: Store) -> None:
    store.create_task(_task("sa_1", status="running"))
    store.create_task(_task("sa_2"))
    store.create_task(_task("sa_3", status="completed"))
    assert {t.task_id for t in store.running_tasks()} == {"sa_1", "sa_2"}
    assert store.mark_interrupted(["sa_1", "sa_2", "sa_3", "sa_1"]) == 2
    assert store.running_tasks() == []
    assert store.get_task("sa_3").status == "completed"
    assert store.get_task("sa_1").status == "interrupted"
    assert store.list_tasks(status=TaskStatus.INTERRUPTED)[0].error
    assert store.mark_interrupted(["sa_1"]) == 0


def test_lower_turn_checkpoint_does_not_overwrite(store: Store) -> None:
    store.create_task(_task("sa_t"))
    five: list[JSONObject] = [{"role": "user", "content": str(i)} for i in range(5)]
    assert store.checkpoint_transcript("sa_t", five, 3) is True
    assert store.checkpoint_transcript("sa_t", five[:1], 2) is False  # late / replayed
    assert store.checkpoint_transcript("sa_t", five[:4], 3) is False  # same turn, shorter
    assert store.get_transcript("sa_t") == five
    six: list[JSONObject] = [*five, {"role": "assistant", "content": "5"}]
    assert store.checkpoint_transcript("sa_t", six, 3) is True
    assert store.checkpoint_transcript("sa_t", six[:2], 4) is True  # a newer turn wins
    assert store.get_transcript("sa_t") == six[:2]
    with pytest.raises(TaskNotFoundError):
        store.checkpoint_transcript("sa_nope", five, 1)


def test_oversized_transcript_is_refused_and_previous_kept(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.store import core

    store.create_task(_task("sa_t"))
    store.checkpoint_transcript("sa_t", [{"content": "small"}], 1)
    monkeypatch.setattr(core, "MAX_TRANSCRIPT_CHARS", 1000)
    with pytest.raises(TranscriptTooLargeError, match="previous checkpoint is kept"):
        store.checkpoint_transcript("sa_t", [{"content": "x" * 2000}], 2)
    assert store.get_transcript("sa_t") == [{"content": "small"}]


def test_session_transcript_follows_the_latest_task_with_a_checkpoint(store: Store) -> None:
    store.create_task(_task("sa_first"))
    store.checkpoint_transcript("sa_first", [{"role": "user", "content": "one"}], 1)
    store.create_task(_task("sa_resumed", session_id="sa_first"))
    # The resumed task has not checkpointed yet: resume from the first one's history.
    assert store.get_session_transcript("sa_first") == [{"role": "user", "content": "one"}]
    longer: list[JSONObject] = [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ]
    store.checkpoint_transcript("sa_resumed", longer, 1)
    assert store.get_session_transcript("sa_first") == longer
    assert store.get_transcript("sa_first") == [{"role": "user", "content": "one"}]
    store.create_task(_task("sa_fresh"))
    assert store.get_session_transcript("sa_fresh") == []
    with pytest.raises(TaskNotFoundError, match="session"):
        store.get_session_transcript("sa_unknown")


def test_events_follow_by_id(store: Store) -> None:
    store.create_task(_task("sa_t"))
    first = store.append_event("run1", None, "run_started", {"n": 1})
    second = store.append_event("run1", "sa_t", "tool_started", {"tool": "Bash"})
    assert second > first
    assert [e.event_id for e in store.events(run_id="run1")] == [first, second]
    assert [e.kind for e in store.events(task_id="sa_t")] == ["tool_started"]
    after = store.events(after_id=first)
    assert [(e.event_id, e.data) for e in after] == [(second, {"tool": "Bash"})]
    assert store.events(after_id=second) == []
    assert len(store.events(limit=1)) == 1
    with pytest.raises(RunNotFoundError):
        store.append_event("nope", None, "log", {})
    with pytest.raises(TaskNotFoundError):
        store.append_event("run1", "sa_nope", "log", {})


def test_large_event_data_is_replaced_by_an_announced_preview(store: Store) -> None:
    store.append_event("run1", None, "log", {"out": "y" * 500_000})
    (event,) = store.events()
    assert event.data[TRUNCATED_KEY] is True
    chars, preview = event.data["original_chars"], event.data["preview"]
    assert isinstance(chars, int) and chars > 500_000
    assert isinstance(preview, str) and preview.startswith('{"out":"yyy')
    assert len(json.dumps(event.data)) <= records_module.MAX_EVENT_DATA_CHARS


def _audit(**extra: object) -> AuditRecord:
    return AuditRecord.model_validate(
        {
            "run_id": "run1",
            "task_id": None,
            "agent_type": "general-purpose",
            "tool_name": "Bash",
            "input_hash": "sha256:abc",
            "tool_input": {"command": "ls"},
            "decision": "ask",
            "final": "deny",
            "decided_by": "Bash(rm:*)",
            "source": "workspace settings",
            "reason": "user said no",
        }
        | extra
    )


def test_audit_round_trip_and_bounded_input(store: Store) -> None:
    store.create_run("run2", prompt="p", workspace="/w", model="m", pid=1)
    first = store.record_audit(_audit())
    big = {"command": "echo " + "z" * (MAX_AUDIT_INPUT_CHARS * 2)}
    second = store.record_audit(_audit(run_id="run2", tool_input=big, input_hash="sha256:big"))
    assert second > first
    (rec,) = store.audit("run1")
    assert rec.model_dump(exclude={"audit_id", "time"}) == _audit().model_dump(
        exclude={"audit_id", "time"}
    )
    assert rec.audit_id == first
    (clipped,) = store.audit("run2")
    assert clipped.tool_input[TRUNCATED_KEY] is True
    assert clipped.input_hash == "sha256:big"  # still bound to the full input
    assert len(store.audit()) == 2
    with pytest.raises(ValidationError):
        _audit(final="ask")
    with pytest.raises(RunNotFoundError):
        store.record_audit(_audit(run_id="no-such-run"))
    with pytest.raises(TaskNotFoundError):
        store.record_audit(_audit(task_id="sa_ghost"))
    assert len(store.audit()) == 2


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_round_trip_as_data(store: Store, text: str) -> None:
    store.create_task(_task("sa_h", description=text, prompt=text))
    store.update_task("sa_h", error=text, result_text=text)
    messages: list[JSONObject] = [{"role": "user", "content": text, text: [text, {"k": text}]}]
    store.checkpoint_transcript("sa_h", messages, 1)
    store.append_event("run1", "sa_h", text, {text: text})
    store.record_audit(_audit(reason=text, decided_by=text, tool_input={text: text}))
    task = store.get_task("sa_h")
    assert (task.prompt, task.description, task.error, task.result_text) == (text,) * 4
    assert store.get_transcript("sa_h") == messages
    (event,) = store.events()
    assert (event.kind, event.data) == (text, {text: text})
    (rec,) = store.audit()
    assert (rec.reason, rec.decided_by, rec.tool_input) == (text, text, {text: text})
    assert len(store.list_tasks()) == 1  # the tables are still there


def test_lone_surrogates_are_exact_in_json_and_replaced_in_text(store: Store) -> None:
    store.create_task(_task("sa_s", prompt="a\ud800b"))
    assert store.get_task("sa_s").prompt == "a\ufffdb"
    messages: list[JSONObject] = [{"content": "lone \ud800 and \udfff", "pair": "😀"}]
    store.checkpoint_transcript("sa_s", messages, 1)
    assert store.get_transcript("sa_s") == messages


def test_overlong_text_is_clipped_with_a_marker(store: Store) -> None:
    store.create_task(_task("sa_long", prompt="p" * (MAX_TEXT_CHARS + 10)))
    prompt = store.get_task("sa_long").prompt
    assert len(prompt) == MAX_TEXT_CHARS
    assert prompt.endswith("more characters]")


def test_random_bytes_file_is_reported_with_the_fix(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError) as info:
        Store.open(db_path)
    message = str(info.value)
    assert str(db_path) in message
    assert "Move it aside" in message and "-wal" in message


def test_damaged_pages_are_reported_with_the_fix(db_path: Path) -> None:
    with Store.open(db_path) as s:
        s.create_run("r", prompt="p", workspace="/w", model="m", pid=1)
        for i in range(200):
            s.create_task(_task(f"sa_{i}", run_id="r", prompt="x" * 500))
    size = db_path.stat().st_size
    with db_path.open("r+b") as f:  # keep page 1 (header, schema); wreck the rest
        f.seek(4096)
        f.write(b"\xa5" * (size - 4096))
    with pytest.raises(StoreError, match="Move it aside"), Store.open(db_path) as s:
        s.list_tasks()


def test_quick_check_passes_on_a_healthy_store(store: Store) -> None:
    store.check()


def test_newer_schema_version_is_refused(db_path: Path) -> None:
    Store.open(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match=r"newer warden.*Upgrade warden"):
        Store.open(db_path)


def test_foreign_database_is_refused(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a warden state store"):
        Store.open(db_path)


def test_closed_store_says_so(db_path: Path) -> None:
    s = Store.open(db_path)
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        s.list_runs()


def test_threads_share_one_store(store: Store) -> None:
    store.create_task(_task("sa_t"))
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(100):
                store.append_event("run1", "sa_t", "log", {"writer": n, "i": i})
                store.checkpoint_transcript("sa_t", [{"w": n, "i": i}], n * 1000 + i)
                store.update_task("sa_t", container_id=f"{n}-{i}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    events = store.events()
    assert len(events) == 800
    assert len({e.event_id for e in events}) == 800
    assert {(e.data["writer"], e.data["i"]) for e in events} == {
        (n, i) for n in range(8) for i in range(100)
    }
    assert store.get_transcript("sa_t") == [{"w": 7, "i": 99}]  # highest turn won


async def test_async_callers_use_worker_threads(store: Store) -> None:
    ids = await asyncio.gather(
        *(asyncio.to_thread(store.append_event, "run1", None, "log", {"i": i}) for i in range(50))
    )
    assert sorted(ids) == [e.event_id for e in store.events()]
