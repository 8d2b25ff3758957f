"""An audit record (and with it its run and task) is on disk before `record_audit`
returns, so an "allow" is never answered for a record a machine crash could lose;
concurrent records share one fsync (group commit); a disk that refuses the sync is a
StoreError that says what to do, never a silent success."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.errors import StoreError
from orchestrator.store import AuditRecord, Store, TaskRecord, TaskStatus


def _audit(run_id: str, n: int) -> AuditRecord:
    return AuditRecord(
        run_id=run_id,
        task_id="sa_t1",
        agent_type="general-purpose",
        tool_name="Bash",
        tool_use_id=f"toolu_{n}",
        input_hash="h",
        tool_input={"command": f"echo {n}"},
        decision="allow",
        final="allow",
        decided_by="rule: Bash(echo:*)",
        source="cli",
        reason="",
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "warden.db")
    s.create_run("r1", prompt="p", workspace="/w", model="m", pid=os.getpid())
    s.create_task(
        TaskRecord(
            task_id="sa_t1",
            run_id="r1",
            parent_id=None,
            session_id="sa_t1",
            agent_type="general-purpose",
            description="d",
            prompt="p",
            status=TaskStatus.RUNNING,
            depth=1,
            trace_id="0" * 32,
        )
    )
    return s


class _SyncLog:
    """Records which files were synced (fsync or fdatasync: both make a file's data
    durable), and what the WAL held at that moment."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, wal: Path, delay_s: float = 0.0) -> None:
        self.wal_syncs: list[int] = []
        self._wal = wal
        self._delay = delay_s
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._watching(getattr(os, name)))

    def _watching(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            if os.path.samestat(os.fstat(fd), os.stat(self._wal)):
                time.sleep(self._delay)  # a slow disk, so concurrent writers overlap
                self.wal_syncs.append(os.fstat(fd).st_size)
            real(fd)

        return sync


def test_record_audit_returns_after_the_wal_holding_it_is_fsynced(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = Path(f"{store.path}-wal")
    log = _SyncLog(monkeypatch, wal)
    store.record_audit(_audit("r1", 1))
    assert log.wal_syncs, "the audit record was committed without an fsync"
    assert log.wal_syncs[-1] == wal.stat().st_size  # the sync covered the record's frames


def test_concurrent_records_share_fsyncs(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _SyncLog(monkeypatch, Path(f"{store.path}-wal"), delay_s=0.02)
    threads = [
        threading.Thread(target=store.record_audit, args=(_audit("r1", n),)) for n in range(20)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.audit("r1")) == 20
    assert 1 <= len(log.wal_syncs) < 20


def test_a_disk_that_refuses_the_sync_is_an_error_not_a_silent_allow(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(StoreError, match=r"cannot make the state store .* durable.*free space"):
        store.record_audit(_audit("r1", 1))


def test_a_nearly_full_state_disk_is_refused_at_open_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.statvfs

    def full(path: object) -> os.statvfs_result:
        st = real(str(path))
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, 0, 3, *st[5:]))

    monkeypatch.setattr(os, "statvfs", full)
    with pytest.raises(StoreError, match=r"has \d+ KiB free.*free disk space") as refused:
        Store.open(tmp_path / "state" / "warden.db")
    assert "damaged" not in str(refused.value)
    assert not (tmp_path / "state" / "warden.db").exists()  # nothing half-created
