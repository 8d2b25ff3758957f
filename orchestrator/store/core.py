"""`Store`: runs, the task tree, transcripts, events and the audit trail in one SQLite
file. Values from containers are bound as SQL parameters, never spliced into SQL.

One idea a little over 400 lines: the store's API, one short method per query;
the schema and migrations are `schema`, the rows and limits `records`, the
connection handling `connection`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Unpack

from orchestrator.errors import SessionBusyError, StoreError, TaskNotFoundError
from orchestrator.jsontypes import JSONObject
from orchestrator.store.connection import (
    StoreBase,
    TranscriptTooLargeError,
    run_not_found,
    sql_filter,
    task_not_found,
)
from orchestrator.store.records import (
    ACTIVE_TASK_STATUSES,
    MAX_AUDIT_INPUT_CHARS,
    MAX_EVENT_DATA_CHARS,
    MAX_NAME_CHARS,
    MAX_TRANSCRIPT_CHARS,
    RUN_STATUSES,
    TERMINAL_TASK_STATUSES,
    AuditRecord,
    EventRecord,
    RunRecord,
    RunStatus,
    TaskRecord,
    TaskStatus,
    TaskUpdate,
    bounded_json,
    clip_text,
    dumps,
)

_TASK_COLUMNS = tuple(TaskRecord.model_fields)
_RUN_COLUMNS = tuple(RunRecord.model_fields)
_AUDIT_COLUMNS = tuple(c for c in AuditRecord.model_fields if c != "audit_id")
_IMMUTABLE_TASK_FIELDS = frozenset(
    {"task_id", "run_id", "parent_id", "session_id", "depth", "created_at"}
)
_ACTIVE = tuple(sorted(ACTIVE_TASK_STATUSES))
_INTERRUPTED_ERROR = "the orchestrator stopped before this task ended"


class Store(StoreBase):
    """The state store. Open with `Store.open(path)`; close with `close()` or `with`."""

    # ---- runs -------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        prompt: str,
        workspace: str,
        model: str,
        pid: int,
        owner: str | None = None,
    ) -> None:
        run = RunRecord(
            run_id=run_id, prompt=prompt, workspace=workspace, model=model, pid=pid, owner=owner
        )
        values = run.model_dump()
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                raise StoreError(f"a run {run_id!r} already exists; run ids must be unique")
            conn.execute(
                f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_RUN_COLUMNS))})",
                [values[c] for c in _RUN_COLUMNS],
            )

    def finish_run(self, run_id: str, status: RunStatus, result: str | None) -> None:
        """Record how a run ended (any status but `running`), durably: with it every
        task status and transcript committed before."""
        if status not in RUN_STATUSES or status == "running":
            raise ValueError(f"finish_run needs a final status, not {status!r}")
        result = None if result is None else clip_text(result)
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = ?, result = ?, ended_at = ? WHERE run_id = ?",
                (status, result, time.time(), run_id),
            )
            if cursor.rowcount == 0:
                raise run_not_found(run_id)
        self._durable()

    def get_run(self, run_id: str) -> RunRecord:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise run_not_found(run_id)
        return RunRecord.model_validate(dict(row))

    def list_runs(self, limit: int = 50) -> list[RunRecord]:
        """The most recent runs first."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM runs ORDER BY created_at DESC, rowid DESC LIMIT ?", (limit,)
            ).fetchall()
        return [RunRecord.model_validate(dict(r)) for r in rows]

    def stale_runs(self, owner_dead: Callable[[RunRecord], bool]) -> list[RunRecord]:
        """Runs still marked `running` whose orchestrator is gone (crash recovery), as
        `owner_dead` judges it (`owner.run_owner_dead`: the store does not
        know processes)."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM runs WHERE status = 'running'").fetchall()
        runs = [RunRecord.model_validate(dict(r)) for r in rows]
        return [r for r in runs if owner_dead(r)]

    def ended_runs_with_live_tasks(
        self, owner_dead: Callable[[RunRecord], bool]
    ) -> list[RunRecord]:
        """Runs that have ended, whose orchestrator is gone, but that still have tasks
        `pending` or `running` (it died, or could not write, between the two)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM runs WHERE status != 'running' AND run_id IN"
                " (SELECT run_id FROM tasks WHERE status IN (?, ?))",
                _ACTIVE,
            ).fetchall()
        runs = [RunRecord.model_validate(dict(r)) for r in rows]
        return [r for r in runs if owner_dead(r)]

    # ---- tasks ------------------------------------------------------------------------

    def create_task(self, task: TaskRecord) -> None:
        """Insert a task. Its run and parent must exist, the parent in the same run and
        one level up. Raises RunNotFoundError, TaskNotFoundError, StoreError (duplicate id)
        or ValueError (inconsistent tree)."""
        values = task.model_dump()
        with self._write() as conn:
            self._require_run(conn, task.run_id)
            if conn.execute("SELECT 1 FROM tasks WHERE task_id = ?", (task.task_id,)).fetchone():
                raise StoreError(f"a task {task.task_id!r} already exists; task ids must be unique")
            if task.parent_id is not None:
                parent = conn.execute(
                    "SELECT run_id, depth FROM tasks WHERE task_id = ?", (task.parent_id,)
                ).fetchone()
                if parent is None:
                    raise task_not_found(task.parent_id)
                if parent["run_id"] != task.run_id or parent["depth"] + 1 != task.depth:
                    raise ValueError(
                        f"task {task.task_id!r} (run {task.run_id!r}, depth {task.depth}) "
                        f"cannot be a child of {task.parent_id!r} (run {parent['run_id']!r}, "
                        f"depth {parent['depth']}): same run and depth + 1 required"
                    )
            conn.execute(
                f"INSERT INTO tasks ({', '.join(_TASK_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_TASK_COLUMNS))})",
                [values[c] for c in _TASK_COLUMNS],
            )

    def update_task(self, task_id: str, **fields: Unpack[TaskUpdate]) -> TaskRecord:
        """Change mutable fields of a task (validated like a TaskRecord); returns the
        updated record. The identity and tree fields cannot change."""
        unknown = set(fields) - set(_TASK_COLUMNS)
        if unknown:
            raise TypeError(f"update_task got unknown fields: {', '.join(sorted(unknown))}")
        frozen = set(fields) & _IMMUTABLE_TASK_FIELDS
        if frozen:
            raise ValueError(f"update_task cannot change {', '.join(sorted(frozen))}")
        with self._write() as conn:
            current = self._fetch_task(conn, task_id)
            updated = TaskRecord.model_validate({**current.model_dump(), **fields})
            values = updated.model_dump()
            columns = sorted(fields)  # names checked against _TASK_COLUMNS above
            if columns:
                conn.execute(
                    f"UPDATE tasks SET {', '.join(f'{c} = ?' for c in columns)} WHERE task_id = ?",
                    [*(values[c] for c in columns), task_id],
                )
        return updated

    def finish_task(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        result_text: str | None = None,
        error: str | None = None,
    ) -> bool:
        """Give a task its terminal status unless it already has one (first end wins, so a
        late result cannot undo a stop). Returns whether this call ended the task."""
        if status not in TERMINAL_TASK_STATUSES:
            raise ValueError(f"finish_task needs a terminal status, not {status!r}")
        with self._write() as conn:
            current = self._fetch_task(conn, task_id)
            if current.status in TERMINAL_TASK_STATUSES:
                return False
            done = TaskRecord.model_validate(
                current.model_dump()
                | {"status": status, "result_text": result_text, "error": error}
                | {"ended_at": time.time()}
            )
            conn.execute(
                "UPDATE tasks SET status = ?, result_text = ?, error = ?, ended_at = ? "
                "WHERE task_id = ?",
                (done.status, done.result_text, done.error, done.ended_at, task_id),
            )
        return True

    def get_task(self, task_id: str) -> TaskRecord:
        """Raises TaskNotFoundError (naming the id) for an unknown task."""
        with self._read() as conn:
            return self._fetch_task(conn, task_id)

    def list_tasks(
        self,
        run_id: str | None = None,
        status: TaskStatus | None = None,
        session_id: str | None = None,
    ) -> list[TaskRecord]:
        """Tasks in creation order, optionally of one run, status and/or session."""
        with self._read() as conn:
            where, params = sql_filter(run_id=run_id, status=status, session_id=session_id)
            rows = conn.execute(
                f"SELECT * FROM tasks WHERE {where} ORDER BY created_at, rowid", params
            ).fetchall()
        return [TaskRecord.model_validate(dict(r)) for r in rows]

    def children(self, task_id: str) -> list[TaskRecord]:
        """The direct children of a task, in creation order."""
        with self._read() as conn:
            self._require_task(conn, task_id)
            rows = conn.execute(
                "SELECT * FROM tasks WHERE parent_id = ? ORDER BY created_at, rowid", (task_id,)
            ).fetchall()
        return [TaskRecord.model_validate(dict(r)) for r in rows]

    def descendants(self, task_id: str) -> list[TaskRecord]:
        """Every task below `task_id` (not itself), shallowest first."""
        with self._read() as conn:
            self._require_task(conn, task_id)
            rows = conn.execute(
                "WITH RECURSIVE below(id) AS ("
                " SELECT task_id FROM tasks WHERE parent_id = ?"
                " UNION SELECT t.task_id FROM tasks t JOIN below b ON t.parent_id = b.id)"
                " SELECT tasks.* FROM tasks JOIN below ON tasks.task_id = below.id"
                " ORDER BY tasks.depth, tasks.created_at, tasks.rowid",
                (task_id,),
            ).fetchall()
        return [TaskRecord.model_validate(dict(r)) for r in rows]

    def running_tasks(self) -> list[TaskRecord]:
        """Tasks that have not ended (`pending` or `running`), for crash recovery."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM tasks WHERE status IN (?, ?) ORDER BY created_at, rowid", _ACTIVE
            ).fetchall()
        return [TaskRecord.model_validate(dict(r)) for r in rows]

    def mark_interrupted(self, task_ids: Iterable[str], error: str = _INTERRUPTED_ERROR) -> int:
        """Mark the given tasks that have not ended as `interrupted`; returns how many."""
        ids = list(dict.fromkeys(task_ids))
        now = time.time()
        count = 0
        with self._write() as conn:
            for task_id in ids:
                count += conn.execute(
                    "UPDATE tasks SET status = 'interrupted', error = ?, ended_at = ? "
                    "WHERE task_id = ? AND status IN (?, ?)",
                    (clip_text(error), now, task_id, *_ACTIVE),
                ).rowcount
        return count

    # ---- sessions ----------------------------------------------------------------------

    def claim_session(
        self,
        session_id: str,
        run_id: str,
        task_id: str,
        owner_dead: Callable[[RunRecord], bool],
    ) -> None:
        """Make `task_id` of `run_id` the one live continuation of `session_id`, across
        processes. A claim held by another run whose orchestrator is alive is refused
        with SessionBusyError naming it; a dead owner's claim (as `owner_dead` judges
        it, `owner.run_owner_dead`) is taken over."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT run_id, task_id, claimed_at FROM session_claims WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if row is not None and row["run_id"] != run_id:
                held = conn.execute("SELECT * FROM runs WHERE run_id = ?", (row["run_id"],))
                holder = RunRecord.model_validate(dict(held.fetchone()))
                if holder.status == "running" and not owner_dead(holder):
                    since = time.strftime("%H:%M:%S", time.localtime(row["claimed_at"]))
                    raise SessionBusyError(
                        f"session {session_id} is already being continued by task "
                        f"{row['task_id']} of run {row['run_id']} (warden pid {holder.pid}, "
                        f"since {since}); wait for it to end or stop it "
                        f"(`warden stop {row['task_id']}`), then resume again"
                    )
            conn.execute(
                "INSERT INTO session_claims (session_id, run_id, task_id, claimed_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET"
                " run_id = excluded.run_id, task_id = excluded.task_id,"
                " claimed_at = excluded.claimed_at",
                (session_id, run_id, task_id, time.time()),
            )

    def release_session(self, session_id: str, task_id: str) -> None:
        """Drop `task_id`'s claim on `session_id` (no-op when another holds it)."""
        with self._write() as conn:
            conn.execute(
                "DELETE FROM session_claims WHERE session_id = ? AND task_id = ?",
                (session_id, task_id),
            )

    # ---- transcripts -------------------------------------------------------------------

    def checkpoint_transcript(self, task_id: str, messages: list[JSONObject], turn: int) -> bool:
        """Replace the task's transcript with `messages`, atomically, unless the stored one
        is newer: a lower turn (or the same turn with fewer messages) is ignored, so a
        late or replayed checkpoint cannot erase history. Returns whether it was stored.

        Raises TranscriptTooLargeError beyond MAX_TRANSCRIPT_CHARS (never clipped)."""
        if turn < 0:
            raise ValueError(f"turn must be >= 0, got {turn}")
        text = dumps(messages)
        if len(text) > MAX_TRANSCRIPT_CHARS:
            raise TranscriptTooLargeError(
                f"the transcript of task {task_id!r} is {len(text)} characters as JSON, over "
                f"the store's limit of {MAX_TRANSCRIPT_CHARS}; the previous checkpoint is kept"
            )
        with self._write() as conn:
            self._require_task(conn, task_id)
            cursor = conn.execute(
                "INSERT INTO transcripts (task_id, turn, message_count, messages, updated_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET"
                " turn = excluded.turn, message_count = excluded.message_count,"
                " messages = excluded.messages, updated_at = excluded.updated_at"
                " WHERE excluded.turn > transcripts.turn OR (excluded.turn = transcripts.turn"
                " AND excluded.message_count >= transcripts.message_count)",
                (task_id, turn, len(messages), text, time.time()),
            )
            return cursor.rowcount > 0

    def get_transcript(self, task_id: str) -> list[JSONObject]:
        """The task's last checkpoint ([] before the first one)."""
        with self._read() as conn:
            self._require_task(conn, task_id)
            row = conn.execute(
                "SELECT messages FROM transcripts WHERE task_id = ?", (task_id,)
            ).fetchone()
        return [] if row is None else self._messages(row["messages"])

    def get_session_transcript(self, session_id: str) -> list[JSONObject]:
        """The conversation to resume a session from: the last checkpoint of the most
        recent task of that session that has one ([] if none has)."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT tr.messages FROM transcripts tr JOIN tasks t ON t.task_id = tr.task_id"
                " WHERE t.session_id = ? ORDER BY t.created_at DESC, t.rowid DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            known = (
                row is not None
                or conn.execute(
                    "SELECT 1 FROM tasks WHERE session_id = ?", (session_id,)
                ).fetchone()
            )
        if not known:
            raise TaskNotFoundError(
                f"no session {session_id!r} in the state store; `warden ps` lists the "
                "tasks (a session id is the id of the task that started it)"
            )
        return [] if row is None else self._messages(row["messages"])

    @staticmethod
    def _messages(text: str) -> list[JSONObject]:
        messages: list[JSONObject] = json.loads(text)
        return messages

    # ---- events ------------------------------------------------------------------------

    def append_event(self, run_id: str, task_id: str | None, kind: str, data: JSONObject) -> int:
        """Record an event; returns its id. Data beyond MAX_EVENT_DATA_CHARS is replaced by
        an announced preview (TRUNCATED_KEY)."""
        payload = bounded_json(data, MAX_EVENT_DATA_CHARS)
        with self._write() as conn:
            self._require_run(conn, run_id)
            if task_id is not None:
                self._require_task(conn, task_id)
            cursor = conn.execute(
                "INSERT INTO events (run_id, task_id, kind, data, time) VALUES (?, ?, ?, ?, ?)",
                (run_id, task_id, clip_text(kind, MAX_NAME_CHARS), payload, time.time()),
            )
            event_id = cursor.lastrowid
        assert event_id is not None
        return event_id

    def append_events(
        self, run_id: str, events: Sequence[tuple[str | None, str, JSONObject]]
    ) -> list[int]:
        """Record several events of one run, `(task_id, kind, data)` each, in one
        transaction (as `append_event` would one by one); returns their ids in order."""
        now = time.time()
        rows = [
            (run_id, task_id, clip_text(kind, MAX_NAME_CHARS),
             bounded_json(data, MAX_EVENT_DATA_CHARS), now)
            for task_id, kind, data in events
        ]  # fmt: skip
        ids: list[int] = []
        with self._write() as conn:
            self._require_run(conn, run_id)
            for task_id in {task_id for task_id, _, _ in events if task_id is not None}:
                self._require_task(conn, task_id)
            for row in rows:
                cursor = conn.execute(
                    "INSERT INTO events (run_id, task_id, kind, data, time) VALUES (?, ?, ?, ?, ?)",
                    row,
                )
                assert cursor.lastrowid is not None
                ids.append(cursor.lastrowid)
        return ids

    def stop_requested(self, task_id: str) -> bool:
        """Whether `warden stop` (any process) asked for this task to stop: its
        `task_stop_requested` event, written before it kills the container."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT 1 FROM events WHERE task_id = ? AND kind = 'task_stop_requested' LIMIT 1",
                (task_id,),
            ).fetchone()
        return row is not None

    def events(
        self,
        run_id: str | None = None,
        task_id: str | None = None,
        after_id: int = 0,
        limit: int | None = None,
    ) -> list[EventRecord]:
        """Events with id > after_id in id order (poll with the last id seen to follow)."""
        with self._read() as conn:
            where, params = sql_filter(run_id=run_id, task_id=task_id)
            rows = conn.execute(
                f"SELECT * FROM events WHERE event_id > ? AND {where} ORDER BY event_id LIMIT ?",
                [after_id, *params, -1 if limit is None else limit],
            ).fetchall()
        return [EventRecord.model_validate(dict(r) | {"data": json.loads(r["data"])}) for r in rows]

    # ---- audit -------------------------------------------------------------------------

    def record_audit(self, record: AuditRecord) -> int:
        """Append a decision to the audit trail; returns its id once the record (and
        everything committed before it: its run, its task) is on disk. The tool input
        beyond MAX_AUDIT_INPUT_CHARS is replaced by an announced preview; input_hash is
        kept. Raises StoreError when it cannot be made durable."""
        values = record.model_dump()
        values["tool_input"] = bounded_json(record.tool_input, MAX_AUDIT_INPUT_CHARS)
        with self._write() as conn:
            self._require_run(conn, record.run_id)
            if record.task_id is not None:
                self._require_task(conn, record.task_id)
            cursor = conn.execute(
                f"INSERT INTO audit ({', '.join(_AUDIT_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_AUDIT_COLUMNS))})",
                [values[c] for c in _AUDIT_COLUMNS],
            )
            audit_id = cursor.lastrowid
        assert audit_id is not None
        self._durable()  # an allow is answered only once its record is on disk
        return audit_id

    def audit(self, run_id: str | None = None) -> list[AuditRecord]:
        """Audit records in the order they were made, optionally of one run."""
        with self._read() as conn:
            where, params = sql_filter(run_id=run_id)
            rows = conn.execute(
                f"SELECT * FROM audit WHERE {where} ORDER BY audit_id", params
            ).fetchall()
        return [
            AuditRecord.model_validate(dict(r) | {"tool_input": json.loads(r["tool_input"])})
            for r in rows
        ]

    def audit_count(self, run_id: str) -> int:
        """How many audit records the run has (cheap: the live page polls it)."""
        with self._read() as conn:
            row = conn.execute("SELECT COUNT(*) FROM audit WHERE run_id = ?", (run_id,)).fetchone()
        return int(row[0])
