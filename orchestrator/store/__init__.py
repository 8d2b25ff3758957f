"""warden's state store: one SQLite file (WAL) at `Settings.state_dir / "warden.db"`.

store = Store.open(settings.state_dir / DB_FILENAME)
await asyncio.to_thread(store.append_event, run_id, task_id, "tool_started", {...})

May import: `errors`, `behavior` (what the audit records). Whether a run's owner is
alive is `owner`'s to say (`Store.stale_runs(owner_dead)`): the store knows rows, not processes.
"""

from orchestrator.store.connection import (
    DB_FILENAME,
    RunNotFoundError,
    TranscriptTooLargeError,
)
from orchestrator.store.core import Store
from orchestrator.store.records import (
    ACTIVE_TASK_STATUSES,
    MAX_AUDIT_INPUT_CHARS,
    MAX_EVENT_DATA_CHARS,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    MAX_TRANSCRIPT_CHARS,
    RUN_STATUSES,
    TASK_STATUSES,
    TERMINAL_TASK_STATUSES,
    TRUNCATED_KEY,
    AuditRecord,
    EventRecord,
    FinishedRunStatus,
    RunRecord,
    RunStatus,
    TaskRecord,
    TaskStatus,
    TaskUpdate,
    audit_record,
)
from orchestrator.store.schema import (
    BUSY_TIMEOUT_S,
    DEFAULT_SYNCHRONOUS,
    SCHEMA_VERSION,
    Synchronous,
)

__all__ = [
    "ACTIVE_TASK_STATUSES",
    "BUSY_TIMEOUT_S",
    "DB_FILENAME",
    "DEFAULT_SYNCHRONOUS",
    "MAX_AUDIT_INPUT_CHARS",
    "MAX_EVENT_DATA_CHARS",
    "MAX_NAME_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_TRANSCRIPT_CHARS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "TASK_STATUSES",
    "TERMINAL_TASK_STATUSES",
    "TRUNCATED_KEY",
    "AuditRecord",
    "EventRecord",
    "FinishedRunStatus",
    "RunNotFoundError",
    "RunRecord",
    "RunStatus",
    "Store",
    "Synchronous",
    "TaskRecord",
    "TaskStatus",
    "TaskUpdate",
    "TranscriptTooLargeError",
    "audit_record",
]
