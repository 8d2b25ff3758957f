"""The store's plumbing: one connection per process behind a lock, short transactions,
sqlite3 errors turned into StoreErrors, and the lookups every table needs.

Every public method of `Store` is one short transaction (writes take the write lock up
front with `BEGIN IMMEDIATE`), so a crash leaves the previous state or the new one,
never a mix. The connection is shared by all threads of a process behind a lock; async
code calls the store through `asyncio.to_thread`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from orchestrator.errors import StoreError, TaskNotFoundError, WardenError
from orchestrator.store import schema
from orchestrator.store.records import TaskRecord
from orchestrator.store.sync import WalSync

DB_FILENAME = "warden.db"
"""The store's file name inside `Settings.state_dir`."""


class RunNotFoundError(WardenError, LookupError):
    """A run id that the store does not know."""


class TranscriptTooLargeError(WardenError, ValueError):
    """A transcript checkpoint larger than MAX_TRANSCRIPT_CHARS."""


def sql_filter(**filters: str | None) -> tuple[str, list[str]]:
    """An SQL condition over the given columns (fixed names from this module, never from
    callers) with one `?` per value; None means no filter on that column."""
    used = {column: value for column, value in filters.items() if value is not None}
    where = " AND ".join(f"{column} = ?" for column in used) or "1"
    return where, list(used.values())


def task_not_found(task_id: str) -> TaskNotFoundError:
    return TaskNotFoundError(
        f"no task {task_id!r} in the state store; `warden ps` lists the tasks it knows"
    )


def run_not_found(run_id: str) -> RunNotFoundError:
    return RunNotFoundError(
        f"no run {run_id!r} in the state store; `warden ps` lists the runs it knows"
    )


class StoreBase:
    """The connection, its transactions and the lookups `Store`'s methods share."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._lock = threading.RLock()
        self._wal_sync = WalSync(path)
        conn.row_factory = sqlite3.Row

    @classmethod
    def open(
        cls, path: Path, *, synchronous: schema.Synchronous = schema.DEFAULT_SYNCHRONOUS
    ) -> Self:
        """Open or create the store; missing parent directories are created with 0700.
        `synchronous="FULL"` fsyncs every commit (see `schema` for the trade-off).

        Raises StoreError when the file is damaged, foreign, newer, or not writable.
        """
        return cls(schema.connect(path, synchronous), path)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def synchronous(self) -> str:
        """The `PRAGMA synchronous` in effect, as a name."""
        with self._read() as conn:
            level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
        return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[level]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self, begin: str) -> Iterator[sqlite3.Connection]:
        with self._lock, schema.translated(self._path):
            conn = self._conn
            if conn is None:
                raise StoreError(f"the state store {self._path} is closed; open it again")
            conn.execute(begin)
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # SQLite may already have rolled it back
                    conn.execute("ROLLBACK")
                raise

    def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self._tx("BEGIN IMMEDIATE")

    def _durable(self) -> None:
        """Return once every transaction this process committed is on disk (group
        commit, see `sync`). Call after the commit of a record that must survive a
        machine crash; the store's lock is not held meanwhile."""
        ticket = self._wal_sync.committed()
        try:
            self._wal_sync.sync(ticket)
        except OSError as exc:
            raise StoreError(
                f"cannot make the state store {self._path} durable ({exc.strerror}); the "
                "disk may be full, read-only or failing: free space or fix the disk, "
                "then `warden ps`"
            ) from exc

    def _read(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self._tx("BEGIN")  # one consistent snapshot for multi-statement reads

    def check(self) -> None:
        """Run SQLite's quick integrity check; raises StoreError (with the fix) on damage."""
        with self._read() as conn:
            rows = [r[0] for r in conn.execute("PRAGMA quick_check")]
        if rows != ["ok"]:
            raise schema.corrupt_error(self._path, "; ".join(map(str, rows[:5])))

    def _require_run(self, conn: sqlite3.Connection, run_id: str) -> None:
        if not conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
            raise run_not_found(run_id)

    @staticmethod
    def _require_task(conn: sqlite3.Connection, task_id: str) -> None:
        """Raises TaskNotFoundError unless the task exists (no row is read or validated)."""
        if not conn.execute("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)).fetchone():
            raise task_not_found(task_id)

    @staticmethod
    def _fetch_task(conn: sqlite3.Connection, task_id: str) -> TaskRecord:
        row = conn.execute("SELECT * FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        if row is None:
            raise task_not_found(task_id)
        return TaskRecord.model_validate(dict(row))
