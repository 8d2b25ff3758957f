"""Opening the SQLite file: pragmas, schema creation and upgrade, and error translation.

Choices, and why:
- WAL: readers (`warden ps`, `logs --follow`, `audit`) never block the writer and the
  writer never blocks them; a crash leaves either the old or the new transaction.
- `synchronous=NORMAL` by default: in WAL mode a commit then survives any crash of the
  process (SIGKILL included; tested for real) and the file never corrupts, but the last
  commits may roll back after a power loss or kernel crash, as the workspace's own
  unsynced writes would. FULL (fsync on every commit) closes that gap and is a keyword
  away (`Store.open(path, synchronous="FULL")`), but all writers share one write lock and
  measured on the project's machines FULL costs 0.28 vs 0.04 ms per event on a quiet
  disk and 3.3 vs 0.07 ms when the disk is busy (load 6 on 2 cores), which would throttle
  a fan-out of 50 subagents that commit several times per tool call. What must
  survive a machine crash is synced explicitly instead (`sync.WalSync`, group commit,
  outside the write lock): an audit record before its decision is answered, and a
  run's end; each sync also covers every commit before it (the run, its tasks).
- `BEGIN IMMEDIATE` for every write: the write lock is taken up front, so `busy_timeout`
  applies and two writers never deadlock upgrading a read lock.
- WAL needs shared memory: the state dir must be on a local file system, not NFS.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from orchestrator.errors import StoreError

SCHEMA_VERSION = 6
"""`PRAGMA user_version` of the schema this code writes."""
APPLICATION_ID = 0x5744524E  # "WDRN"
"""`PRAGMA application_id` that marks a file as a warden store."""
Synchronous = Literal["NORMAL", "FULL"]
DEFAULT_SYNCHRONOUS: Synchronous = "NORMAL"
"""`PRAGMA synchronous` unless the caller asks for FULL (see the module docstring)."""
QUICK_CHECK_MAX_BYTES = 64 * 1024 * 1024
"""Stores up to this size get SQLite's `PRAGMA quick_check` on every open (~1 ms per
MiB with a warm page cache); larger ones only the header check, so opening a big
store stays cheap. `warden doctor`-style full checks are `Store.check()`."""
SQLITE_MAGIC = b"SQLite format 3\x00"
MIN_FREE_BYTES = 2 * 1024 * 1024
"""Free space the state dir's file system must have when the store is opened."""
BUSY_TIMEOUT_S = 10.0
"""How long a write waits for another process's write to finish before giving up."""
WAL_SWITCH_PAUSE_S = 0.02
"""Pause between tries to switch a new store to WAL while another process is doing
the same (`_use_wal`)."""
DIR_MODE = 0o700
FILE_MODE = 0o600

_RUN_STATUSES = "'running','completed','failed','interrupted','stopped'"
_TASK_STATUSES = (
    "'pending','running','completed','failed','timed_out','stopped','interrupted','no_output'"
)

# _MIGRATIONS[v] takes a store from schema v to v + 1; creating one applies them all.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"""CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            prompt TEXT NOT NULL,
            workspace TEXT NOT NULL,
            model TEXT NOT NULL,
            pid INTEGER NOT NULL,
            status TEXT NOT NULL CHECK (status IN ({_RUN_STATUSES})),
            result TEXT,
            created_at REAL NOT NULL,
            ended_at REAL
        )""",
        "CREATE INDEX runs_created ON runs (created_at)",
        f"""CREATE TABLE tasks (
            task_id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs (run_id),
            parent_id TEXT REFERENCES tasks (task_id),
            session_id TEXT NOT NULL,
            agent_type TEXT NOT NULL,
            description TEXT NOT NULL,
            prompt TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ({_TASK_STATUSES})),
            container_id TEXT,
            created_at REAL NOT NULL,
            started_at REAL,
            ended_at REAL,
            result_text TEXT,
            error TEXT,
            depth INTEGER NOT NULL,
            trace_id TEXT NOT NULL
        )""",
        "CREATE INDEX tasks_run ON tasks (run_id)",
        "CREATE INDEX tasks_parent ON tasks (parent_id)",
        "CREATE INDEX tasks_session ON tasks (session_id)",
        "CREATE INDEX tasks_status ON tasks (status)",
        """CREATE TABLE transcripts (
            task_id TEXT PRIMARY KEY REFERENCES tasks (task_id),
            turn INTEGER NOT NULL,
            message_count INTEGER NOT NULL,
            messages TEXT NOT NULL,
            updated_at REAL NOT NULL
        )""",
        """CREATE TABLE events (
            event_id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL REFERENCES runs (run_id),
            task_id TEXT REFERENCES tasks (task_id),
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            time REAL NOT NULL
        )""",
        "CREATE INDEX events_run ON events (run_id, event_id)",
        "CREATE INDEX events_task ON events (task_id, event_id)",
        """CREATE TABLE audit (
            audit_id INTEGER PRIMARY KEY AUTOINCREMENT,
            time REAL NOT NULL,
            run_id TEXT NOT NULL REFERENCES runs (run_id),
            task_id TEXT REFERENCES tasks (task_id),
            agent_type TEXT NOT NULL,
            tool_name TEXT NOT NULL,
            tool_use_id TEXT,
            input_hash TEXT NOT NULL,
            tool_input TEXT NOT NULL,
            decision TEXT NOT NULL CHECK (decision IN ('allow','deny','ask')),
            final TEXT NOT NULL CHECK (final IN ('allow','deny')),
            decided_by TEXT NOT NULL,
            source TEXT NOT NULL,
            reason TEXT NOT NULL
        )""",
        "CREATE INDEX audit_run ON audit (run_id, audit_id)",
    ),
    ("ALTER TABLE tasks ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0",),
    # v3: a task may end `disk_limit`. SQLite cannot ALTER a CHECK constraint; it is
    # widened in place (SQLite's documented writable_schema procedure, safe because
    # every existing row satisfies the wider check). CREATE/DROP bumps the schema
    # cookie so other connections reload the schema; RESET reloads this one's.
    (
        "PRAGMA writable_schema=ON",
        "UPDATE sqlite_master SET sql = replace(sql, '''no_output'')', "
        "'''no_output'',''disk_limit'')') WHERE type = 'table' AND name = 'tasks'",
        "CREATE TABLE _warden_schema_bump (x)",
        "DROP TABLE _warden_schema_bump",
        "PRAGMA writable_schema=RESET",
    ),
    # v4: the owning orchestrator's identity (`orchestrator.owner.Owner` as JSON).
    ("ALTER TABLE runs ADD COLUMN owner TEXT",),
    # v5: the one live continuation of each session (`Store.claim_session`).
    (
        """CREATE TABLE session_claims (
            session_id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs (run_id),
            task_id TEXT NOT NULL,
            claimed_at REAL NOT NULL
        )""",
    ),
    # v6: which approval channel, and which person there, answered an ask.
    (
        "ALTER TABLE audit ADD COLUMN channel TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE audit ADD COLUMN person TEXT NOT NULL DEFAULT ''",
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION


def corrupt_error(path: Path, detail: object) -> StoreError:
    """The error for a file SQLite cannot read as a database, with the fix."""
    return StoreError(
        f"the state store {path} is damaged or not a SQLite database ({detail}). "
        f"Move it aside together with its -wal and -shm files, e.g. "
        f"`mv {path} {path}.broken; mv {path}-wal {path}-wal.broken; "
        f"mv {path}-shm {path}-shm.broken` (ignore missing ones); "
        "warden then starts a new, empty store. Past runs stay in the moved file."
    )


def translate(path: Path, exc: sqlite3.Error) -> StoreError:
    """A sqlite3 error as a StoreError that says what to do."""
    message = str(exc)
    lowered = message.lower()
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in lowered or "busy" in lowered):
        return StoreError(
            f"the state store {path} stayed locked by another process for more than "
            f"{BUSY_TIMEOUT_S:g} s; retry, or find a stuck warden process (`warden ps`)"
        )
    if "readonly" in lowered or "unable to open" in lowered:
        return StoreError(
            f"cannot write the state store {path} ({message}); check that the directory "
            "and the file belong to you and are writable, or set WARDEN_STATE_DIR"
        )
    if "disk is full" in lowered or "disk i/o" in lowered:
        return StoreError(f"cannot write the state store {path} ({message}); free disk space")
    if "malformed" in lowered or "not a database" in lowered or "corrupt" in lowered:
        return corrupt_error(path, message)
    return StoreError(f"state store {path}: {message}")


@contextlib.contextmanager
def translated(path: Path) -> Iterator[None]:
    """Run a block with sqlite3 errors turned into StoreErrors."""
    try:
        yield
    except sqlite3.Error as exc:
        raise translate(path, exc) from exc


def _make_dirs(directory: Path) -> None:
    missing: list[Path] = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):
            new.mkdir(mode=DIR_MODE)
            os.chmod(new, DIR_MODE)  # mkdir's mode is filtered by the umask


def connect(path: Path, synchronous: Synchronous = DEFAULT_SYNCHRONOUS) -> sqlite3.Connection:
    """Open (creating if absent) the store at `path`, at SCHEMA_VERSION.

    Raises StoreError when the file is damaged, not a warden store, written by a newer
    warden, or cannot be opened.
    """
    if synchronous not in ("NORMAL", "FULL"):  # it is spliced into a PRAGMA
        raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
    try:
        _make_dirs(path.parent)
    except OSError as exc:
        raise StoreError(
            f"cannot create the state store {path} ({exc.strerror}); check the permissions "
            "of its directory or set WARDEN_STATE_DIR"
        ) from exc
    _check_free_space(path)
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, FILE_MODE)  # before SQLite, for the mode
        os.close(fd)
    except OSError as exc:
        raise StoreError(
            f"cannot create the state store {path} ({exc.strerror}); check the permissions "
            "of its directory or set WARDEN_STATE_DIR"
        ) from exc
    try:
        conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise translate(path, exc) from exc
    try:
        _check_header(path)
        _configure(conn, path, synchronous)
        _migrate(conn, path)
        _quick_check(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def _is_write_failure(exc: sqlite3.Error) -> bool:
    """A full, read-only or failing disk, not a damaged file."""
    lowered = str(exc).lower()
    return any(m in lowered for m in ("disk is full", "readonly", "disk i/o", "locked"))


def _check_free_space(path: Path) -> None:
    """Refuse up front when the state dir's file system is (nearly) full: SQLite's
    shared-memory file is mapped into memory, and a page of it that a full file
    system cannot back kills the process with SIGBUS instead of raising an error."""
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return  # the open below reports what is wrong
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        raise StoreError(
            f"cannot write the state store {path}: its file system has {free // 1024} KiB "
            f"free, less than the {MIN_FREE_BYTES // (1024 * 1024)} MiB warden needs to "
            "record a run; free disk space, or set WARDEN_STATE_DIR to another disk"
        )


def _check_header(path: Path) -> None:
    """A non-empty store must start with SQLite's header and a valid page size."""
    try:
        with path.open("rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise StoreError(f"cannot read the state store {path} ({exc.strerror})") from exc
    if not header:
        return  # new store
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise corrupt_error(path, "the file does not start with a SQLite header")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise corrupt_error(path, f"the header names an invalid page size {page_size}")


def _quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """Run `PRAGMA quick_check` when the store is small enough (QUICK_CHECK_MAX_BYTES)."""
    try:
        if path.stat().st_size > QUICK_CHECK_MAX_BYTES:
            return
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(5)")]
    except sqlite3.DatabaseError as exc:
        if _is_write_failure(exc):
            raise translate(path, exc) from exc
        raise corrupt_error(path, exc) from exc
    if rows != ["ok"]:
        raise corrupt_error(path, "; ".join(rows))


def _configure(conn: sqlite3.Connection, path: Path, synchronous: Synchronous) -> None:
    try:
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            mode = _use_wal(conn)
            if mode != "wal":
                raise StoreError(
                    f"the state store {path} cannot use WAL mode (got {mode!r}); put "
                    "WARDEN_STATE_DIR on a local file system"
                )
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA trusted_schema=OFF")
    except sqlite3.DatabaseError as exc:
        if _is_write_failure(exc):
            raise translate(path, exc) from exc
        raise corrupt_error(path, exc) from exc


def _use_wal(conn: sqlite3.Connection) -> str:
    """Switch a new store to WAL; the journal mode now in effect.

    Several processes may open a new store at once (two CI jobs, `warden run` beside
    `warden ps` on first use). A journal-mode change that meets another connection's
    half-done change (or write) fails at once with "database is locked": SQLite skips
    its busy handler there to avoid a deadlock. So the switch is tried again, for up to
    BUSY_TIMEOUT_S, like any other write that waits for the lock; the other process's
    switch usually makes ours a no-op. (A small loop rather than tenacity: every
    command opens the store, and tenacity's import would cost each of them.)"""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() >= deadline:
                raise
        _pause(WAL_SWITCH_PAUSE_S)


def _pause(seconds: float) -> None:
    time.sleep(seconds)


def _read_version(conn: sqlite3.Connection) -> tuple[int, int]:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    return version, app_id


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    try:
        version, app_id = _read_version(conn)
        if version == SCHEMA_VERSION and app_id == APPLICATION_ID:
            return
        # Everything else is decided under the write lock: read outside it, the
        # version and the tables can come from either side of another process's
        # migration (version 0, yet tables: a fresh store looked foreign).
        conn.execute("BEGIN IMMEDIATE")
        try:
            version, app_id = _read_version(conn)  # another process may have done it
            _check_identity(conn, path, version, app_id)
            for step in _MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise translate(path, exc) from exc


def _has_tables(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])


def _check_identity(conn: sqlite3.Connection, path: Path, version: int, app_id: int) -> None:
    foreign = app_id != APPLICATION_ID if version else app_id != 0 or _has_tables(conn)
    if foreign:
        raise StoreError(
            f"{path} is a SQLite database but not a warden state store; point "
            "WARDEN_STATE_DIR elsewhere or move the file aside"
        )
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the state store {path} has schema version {version}, newer than this warden "
            f"understands ({SCHEMA_VERSION}); it was written by a newer warden. Upgrade "
            "warden, or use a separate WARDEN_STATE_DIR for this version"
        )
