"""A warden without root says which host-side guards its sandboxes lack and the fix:
the kernel's exit records (only when a write limit is set) and pinned mount sources."""

from __future__ import annotations

import pytest

from orchestrator.backend import exits, weakened
from orchestrator.backend.contract import DiskLimits


@pytest.fixture
def no_exit_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exits.ExitRecords, "_shared", None)
    monkeypatch.setattr(exits.ExitRecords, "_shared_error", "[Errno 1] Operation not permitted")


def test_without_root_both_fallbacks_are_named_with_their_fix(
    monkeypatch: pytest.MonkeyPatch, no_exit_records: None
) -> None:
    monkeypatch.setattr(weakened.os, "geteuid", lambda: 1000)
    records, mounts = weakened.weakened_guards(DiskLimits())
    assert "exit records cannot be read ([Errno 1] Operation not permitted)" in records
    assert "ignores SIGCHLD" in records and "run warden as root" in records
    assert "checked but not pinned" in mounts and "run warden as root" in mounts


def test_no_write_limit_needs_no_exit_records(
    monkeypatch: pytest.MonkeyPatch, no_exit_records: None
) -> None:
    monkeypatch.setattr(weakened.os, "geteuid", lambda: 1000)
    assert weakened.weakened_guards(DiskLimits(write_limit_bytes=0)) == [
        weakened.MOUNTS_NOT_PINNED
    ]


def test_root_with_exit_records_lacks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weakened.os, "geteuid", lambda: 0)
    monkeypatch.setattr(exits.ExitRecords, "shared", classmethod(lambda cls: object()))
    assert weakened.weakened_guards(DiskLimits()) == []
