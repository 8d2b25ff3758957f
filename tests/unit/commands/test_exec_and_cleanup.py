"""Locks in the logic of `warden exec` and `warden cleanup` against the fake backend:
exit-status mapping, size parsing, SIGTERM/Ctrl-C removing the container, and
cleanup finding orphans by label (all of warden's, or one session's) and removing only
those whose owner is provably dead unless told --all."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import click
import pytest

from orchestrator import labels as wl
from orchestrator.backend.contract import SandboxResult, SandboxSpec, SandboxStatus
from orchestrator.backend.fake import FakeBackend, FakeOutcome
from orchestrator.commands.cleanup import remove_orphans
from orchestrator.commands.exec import Interrupted, SizeType, exit_status, run_interruptible


def spec(session: str = "s1", *command: str, **extra: str) -> SandboxSpec:
    return SandboxSpec(
        image="img",
        command=list(command) or ["sleep", "30"],
        warden_labels=wl.warden_labels(session, **extra),
    )


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [("ok", 0, 0), ("error", 7, 7), ("timed_out", 137, 124), ("oom_killed", 137, 137),
     ("killed", 137, 137)],
)  # fmt: skip
def test_exit_status(status: str, code: int, expected: int) -> None:
    result = SandboxResult(
        status=SandboxStatus(status), exit_code=code, stdout="", stderr="",
        truncated=False, duration_s=0.1,
    )  # fmt: skip
    assert exit_status(result) == expected


@pytest.mark.parametrize(
    ("text", "size"),
    [("512m", 512 * 2**20), ("1g", 2**30), ("1G", 2**30), ("64k", 65536), ("1000", 1000),
     ("1.5g", 3 * 2**29), ("256MiB", 256 * 2**20), ("256mb", 256 * 2**20)],
)  # fmt: skip
def test_sizes(text: str, size: int) -> None:
    assert SizeType().convert(text, None, None) == size


@pytest.mark.parametrize("text", ["lots", "", "-1m", "0", "12x"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(click.BadParameter):
        SizeType().convert(text, None, None)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_kills_and_removes(sig: int) -> None:
    backend = FakeBackend(lambda _spec: FakeOutcome(run_s=float("inf")))
    before = signal.getsignal(signal.SIGTERM)

    def signal_once_it_runs() -> None:  # a condition, not a time: any machine load
        while not backend.list({wl.SESSION: "s1"}):
            threading.Event().wait(0.01)
        os.kill(os.getpid(), sig)

    threading.Thread(target=signal_once_it_runs, daemon=True).start()
    assert run_interruptible(backend, spec()) == Interrupted(sig)
    assert backend.list({wl.SESSION: None}) == []
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored


def test_run_interruptible_returns_the_result() -> None:
    result = run_interruptible(FakeBackend(), spec("s1", "echo", "hi"))
    assert result is not None and result.stdout == "hi\n"


def _dead_owner() -> dict[str, str]:
    """Owner labels of a process that has exited (its pid is gone)."""
    import subprocess

    from orchestrator import owner

    child = subprocess.Popen(["sleep", "0"])
    start = owner.process_start(child.pid) or 1
    child.wait()
    return owner.Owner(owner.host_id(), owner.boot_id(), child.pid, start, "st_x").labels()


def owned(session: str, owner_labels: dict[str, str], **extra: str) -> SandboxSpec:
    return SandboxSpec(
        image="img",
        command=["sleep", "30"],
        warden_labels={**wl.warden_labels(session, **extra), **owner_labels},
    )


def test_cleanup_all_or_one_session(workspace: Path) -> None:
    backend = FakeBackend()
    dead = _dead_owner()
    for session in ("a", "a", "b"):
        backend.start(owned(session, dead))
    assert len(remove_orphans(backend, session="a")) == 2
    assert [i.labels[wl.SESSION] for i in backend.list({wl.SESSION: None})] == ["b"]
    backend.start(owned("c", dead, exec="e1"))
    assert len(remove_orphans(backend)) == 2
    assert backend.list({}) == []


def test_cleanup_keeps_live_and_uncheckable_owners_unless_all(tmp_path: Path) -> None:
    from orchestrator import owner

    backend = FakeBackend()
    me = owner.current(tmp_path).labels()
    elsewhere = {**me, wl.OWNER_HOST: "another-machine/1"}
    rebooted = {**me, wl.OWNER_BOOT: "an-earlier-boot"}
    reused_pid = {**me, wl.OWNER_START: str(int(me[wl.OWNER_START]) + 1)}
    for labels_ in (me, elsewhere, {}, rebooted, reused_pid):
        backend.start(owned("s", labels_))
    assert len(remove_orphans(backend)) == 2  # the rebooted and the reused-pid owner
    left = {i.labels.get(wl.OWNER_HOST) for i in backend.list({})}
    assert left == {me[wl.OWNER_HOST], "another-machine/1", None}
    assert len(remove_orphans(backend, include_live=True)) == 3
