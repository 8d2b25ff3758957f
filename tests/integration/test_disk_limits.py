"""A sandbox cannot fill the host's disk: a subagent (or `warden exec`) that writes past
its write limit, in one file or many, or drives the workspace's free space below the
floor, is killed with status `disk_limit` and a message naming the limit and how to
change it; the run goes on, and the other workspace files are intact."""

# ruff: noqa: F811 - pytest fixtures are imported, then named as parameters

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backend.contract import DiskLimits
from orchestrator.config import Settings
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.conftest import UNPRIVILEGED, warden_argv, warden_env
from tests.integration.harness import PARENT_MATCH, convo, scripted_run, task, text, tool
from tests.integration.sandbox_fixtures import (  # noqa: F401
    docker_client,
    label_args,
    no_leftovers,
    sandbox_image,
)

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
CAP = 20 * MIB
MANY_FILES = (
    'python3 -c "import time\n'
    "for i in range(12):\n"
    "    open(f'part{i}', 'wb').write(b'x' * (4 << 20)); time.sleep(0.05)\n"
    'time.sleep(30)"; touch finished.txt'
)
"""48 MiB in 4 MiB files: no single file reaches the 20 MiB cap, the sum does."""


async def test_many_small_files_past_the_cap_kill_the_subagent_and_the_run_goes_on(
    settings: Settings, workspace: Path
) -> None:
    (workspace / "keep.txt").write_text("precious\n")
    script = [
        convo(
            "parent",
            PARENT_MATCH,
            [task("WRITER fill the disk", "bash")],
            [text("parent saw: {last_tool_result}")],
        ),
        convo(
            "writer",
            {"prompt_contains": "WRITER"},
            [tool("Bash", command="echo mine > mine.txt; " + MANY_FILES)],
            [text("writer finished")],
        ),
    ]
    config = TaskManagerConfig(disk=DiskLimits(write_limit_bytes=CAP, free_floor_bytes=0))
    async with scripted_run(settings, workspace, script, config=config) as (run, _):
        result = await run.parent.run("go")
        [child] = run.manager.results.values()
        record = run.store.get_task(child.task_id)

    assert child.status is TaskStatus.DISK_LIMIT
    assert child.error is not None
    assert "write limit of 20.0 MiB" in child.error and "--disk-write-limit" in child.error
    assert record.status == "disk_limit" and record.error == child.error
    assert "parent saw: Task failed. Error: disk limit" in result.text  # the run went on
    assert (workspace / "keep.txt").read_text() == "precious\n"
    assert (workspace / "mine.txt").read_text() == "mine\n"
    written = sum(p.stat().st_size for p in workspace.glob("part*"))
    assert CAP <= written < 48 * MIB  # stopped well before it was done
    assert not (workspace / "finished.txt").exists()


def _tmpfs(mount_point: Path, options: str) -> Iterator[Path]:
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"{options},uid={UNPRIVILEGED},gid={UNPRIVILEGED}",
         "warden-test-smallfs", str(mount_point)],
        check=True,
    )  # fmt: skip
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs of the test's own, as a workspace whose free space the test controls."""
    yield from _tmpfs(tmp_path / "smallfs", "size=64m")


@pytest.fixture
def few_inodes_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs with room for 20,000 inodes (and plenty of bytes)."""
    yield from _tmpfs(tmp_path / "fewinodes", "size=64m,nr_inodes=20000")


async def test_falling_below_the_free_space_floor_kills_the_subagent(
    settings: Settings, small_fs: Path
) -> None:
    (small_fs / "keep.txt").write_text("precious\n")
    os.chown(small_fs / "keep.txt", UNPRIVILEGED, UNPRIVILEGED)
    script = [
        convo(
            "filler",
            {"prompt_contains": "FILLER"},
            [tool("Bash", command="head -c 40m /dev/zero > fill; sleep 30; touch finished.txt")],
            [text("filler finished")],
        )
    ]
    config = TaskManagerConfig(disk=DiskLimits(write_limit_bytes=0, free_floor_bytes=32 * MIB))
    async with scripted_run(settings, small_fs, script, config=config) as (run, _):
        result = await run.manager.run_task(
            TaskInput(description="fill", prompt="FILLER", subagent_type="bash")
        )
    assert result.status is TaskStatus.DISK_LIMIT
    assert result.error is not None
    assert f"free space on the workspace's file system ({small_fs})" in result.error
    assert "below the floor of 32.0 MiB" in result.error and "--disk-free-floor" in result.error
    assert not (small_fs / "finished.txt").exists()  # killed, not left to sleep
    assert (small_fs / "keep.txt").read_text() == "precious\n"


def test_exec_one_huge_file_stops_at_the_cap_and_exits_122(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    (workspace / "keep.txt").write_text("precious\n")
    proc = subprocess.run(
        warden_argv(
            "exec", "--workspace", str(workspace), "--image", sandbox_image,
            *label_args(no_leftovers), "--disk-write-limit", "20m", "--disk-free-floor", "0",
            "--json", "--", "bash", "-c",
            "dd if=/dev/zero of=big bs=1M count=200 status=none; sleep 30; touch finished.txt",
        ),
        capture_output=True, text=True, env=warden_env(), timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 122, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "disk_limit" and out["exit_code"] == 122
    assert "write limit of 20.0 MiB" in out["reason"]
    assert not (workspace / "finished.txt").exists()
    # RLIMIT_FSIZE stopped the file exactly at the cap, whatever the watcher's timing.
    assert (workspace / "big").stat().st_size == CAP
    assert (workspace / "keep.txt").read_text() == "precious\n"


EMPTY_FILES = (
    'python3 -c "import time\n'
    "for i in range(20000):\n"
    "    open(f'empty{i}', 'w').close()\n"
    "    if i % 100 == 0: time.sleep(0.01)\n"
    '"; sleep 5; touch finished.txt'
)
"""20,000 empty files: no bytes written, every inode of the test's file system used."""


async def test_empty_files_exhausting_inodes_kill_the_subagent_at_the_inode_floor(
    settings: Settings, few_inodes_fs: Path
) -> None:
    ws = few_inodes_fs
    (ws / "keep.txt").write_text("precious\n")
    os.chown(ws / "keep.txt", UNPRIVILEGED, UNPRIVILEGED)
    script = [
        convo(
            "inodes",
            {"prompt_contains": "INODES"},
            [tool("Bash", command="echo mine > mine.txt; " + EMPTY_FILES)],
            [text("inodes finished")],
        )
    ]
    limits = DiskLimits(write_limit_bytes=0, free_floor_bytes=0)  # the default inode floor
    assert limits.free_inode_floor == 10_000
    config = TaskManagerConfig(disk=limits)
    async with scripted_run(settings, ws, script, config=config) as (run, _):
        result = await run.manager.run_task(
            TaskInput(description="inodes", prompt="INODES", subagent_type="bash")
        )
        record = run.store.get_task(result.task_id)
    assert result.status is TaskStatus.DISK_LIMIT, result
    assert result.error is not None and record.error == result.error
    assert f"free inodes on the workspace's file system ({ws}) fell to " in result.error
    assert "below the floor of 10000" in result.error
    assert "WARDEN_DISK_FREE_INODES" in result.error
    # Killed at the floor, long before the last inode: the host can still make files.
    assert os.statvfs(ws).f_favail > 5_000
    assert not (ws / "finished.txt").exists()
    assert (ws / "keep.txt").read_text() == "precious\n"
    assert (ws / "mine.txt").read_text() == "mine\n"


HIDDEN_WRITERS = (
    'python3 -c "import os, signal, time\n'
    "signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children\n"
    "for i in range(12):\n"
    "    if os.fork() == 0:\n"
    "        open(f'part{i}', 'wb').write(b'x' * (4 << 20)); os._exit(0)\n"
    "    time.sleep(0.1)\n"
    'time.sleep(5)"; touch finished.txt'
)
"""48 MiB in 4 MiB files, each written by a short-lived child nobody waits for: their
bytes never reach a parent's /proc/PID/io."""


async def test_children_reaped_by_the_kernel_cannot_hide_their_writes(
    settings: Settings, workspace: Path
) -> None:
    (workspace / "keep.txt").write_text("precious\n")
    script = [
        convo(
            "hider",
            {"prompt_contains": "HIDER"},
            [tool("Bash", command="echo mine > mine.txt; " + HIDDEN_WRITERS)],
            [text("hider finished")],
        )
    ]
    config = TaskManagerConfig(disk=DiskLimits(write_limit_bytes=CAP, free_floor_bytes=0))
    async with scripted_run(settings, workspace, script, config=config) as (run, _):
        result = await run.manager.run_task(
            TaskInput(description="hide", prompt="HIDER", subagent_type="bash")
        )
        record = run.store.get_task(result.task_id)
    assert result.status is TaskStatus.DISK_LIMIT, result
    assert result.error is not None and record.error == result.error
    assert "write limit of 20.0 MiB" in result.error
    written = sum(p.stat().st_size for p in workspace.glob("part*"))
    assert CAP <= written < 48 * MIB  # stopped well before it was done
    assert not (workspace / "finished.txt").exists()
    assert (workspace / "keep.txt").read_text() == "precious\n"
    assert (workspace / "mine.txt").read_text() == "mine\n"


RESERVE = (
    "fallocate --keep-size -l 40m reserved; echo keep-size=$?; "
    "fallocate -l 40m grown; echo grow=$?; "
    "python3 -c \"import ctypes, os\n"
    "fd = os.open('raw', os.O_CREAT | os.O_WRONLY)\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "print('raw', libc.fallocate(fd, 1, 0, 40 << 20), os.strerror(ctypes.get_errno()))\""
)
"""40 MiB reserved without writing a byte, three ways, on a 64 MiB file system whose
floor is 32 MiB."""


async def test_fallocate_cannot_take_free_space_below_the_floor(
    settings: Settings, small_fs: Path
) -> None:
    (small_fs / "keep.txt").write_text("precious\n")
    os.chown(small_fs / "keep.txt", UNPRIVILEGED, UNPRIVILEGED)
    script = [
        convo(
            "reserver",
            {"prompt_contains": "RESERVER"},
            [tool("Bash", command=RESERVE)],
            [text("reserver saw: {last_tool_result}")],
        )
    ]
    config = TaskManagerConfig(disk=DiskLimits(write_limit_bytes=0, free_floor_bytes=32 * MIB))
    async with scripted_run(settings, small_fs, script, config=config) as (run, _):
        result = await run.manager.run_task(
            TaskInput(description="reserve", prompt="RESERVER", subagent_type="bash")
        )
    assert result.status is TaskStatus.COMPLETED, result  # refused, so never over the floor
    out = result.text
    assert "keep-size=1" in out and "grow=1" in out
    assert "raw -1 Operation not supported" in out
    assert "fallocate failed: Operation not supported" in out
    st = os.statvfs(small_fs)
    assert st.f_bavail * st.f_frsize > 60 * MIB  # nothing was reserved
    assert (small_fs / "keep.txt").read_text() == "precious\n"


def test_exec_cannot_reserve_space_with_fallocate_and_still_runs_as_itself(
    small_fs: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    """`warden exec` has no runner, yet fallocate is refused all the same (warden's
    seccomp profile, the engine's wall): nothing is reserved, posix_fallocate falls
    back to counted writes, and the command is otherwise itself (its exit status,
    SIGPIPE, its own process)."""
    os.chown(small_fs, UNPRIVILEGED, UNPRIVILEGED)
    script = (
        RESERVE + "\n"
        "python3 -c \"import os\nfd = os.open('fallback', os.O_CREAT | os.O_WRONLY)\n"
        "os.posix_fallocate(fd, 0, 1 << 20)\nprint('fallback', os.fstat(fd).st_size)\"\n"
        "yes | head -1 >/dev/null; echo pipe=${PIPESTATUS[0]}\n"
        "echo comm=$(cat /proc/$$/comm); exit 7"
    )
    proc = subprocess.run(
        warden_argv(
            "exec", "--workspace", str(small_fs), "--image", sandbox_image,
            *label_args(no_leftovers), "--disk-write-limit", "0", "--disk-free-floor", "32m",
            "--user", f"{UNPRIVILEGED}:{UNPRIVILEGED}", "--json", "--", "bash", "-c", script,
        ),
        capture_output=True, text=True, env=warden_env(), timeout=120, check=False,
    )  # fmt: skip
    out = json.loads(proc.stdout)
    assert proc.returncode == 7 and out["exit_code"] == 7, (proc.stderr, out)
    assert "keep-size=1" in out["stdout"] and "grow=1" in out["stdout"], out
    assert "raw -1 Operation not supported" in out["stdout"]
    assert "fallocate failed: Operation not supported" in out["stderr"]
    assert "fallback 1048576" in out["stdout"]  # the write fallback still works
    assert "pipe=141" in out["stdout"]  # SIGPIPE is the default again, as in docker run
    assert "comm=bash" in out["stdout"]  # the command itself, not a wrapper around it
    st = os.statvfs(small_fs)
    assert st.f_bavail * st.f_frsize > 60 * MIB  # nothing was reserved


I386_FALLOCATE = """
import ctypes, mmap, os
# x86-64 code calling fallocate(fd, 0, 0, 1 MiB) through the i386 ABI (int 0x80, call 324):
# push rbx; push rbp; mov eax,324; mov ebx,edi; xor ecx,ecx; xor edx,edx; xor esi,esi;
# mov edi,0x100000; xor ebp,ebp; int 0x80; pop rbp; pop rbx; ret
code = bytes.fromhex("5355b844010000" "89fb31c931d231f6bf0000100031ed" "cd805d5bc3")
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
fd = os.open("reserved", os.O_CREAT | os.O_WRONLY)
print("answer", call(fd), flush=True)
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 machine code")
def test_exec_cannot_reserve_space_through_the_32_bit_abi(
    small_fs: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    """The seccomp profile allows only the machine's own ABI: a fallocate through
    `int 0x80` (i386, where a filter for x86-64 numbers would not look) never runs.
    The same code reserves 1 MiB on the host first, so the test can fail."""
    host = small_fs / "host"
    host.mkdir()
    on_host = subprocess.run([sys.executable, "-c", I386_FALLOCATE], cwd=host, capture_output=True,
                             text=True, timeout=60, check=False)  # fmt: skip
    if on_host.returncode != 0:  # a kernel without the i386 ABI: there is nothing to refuse
        pytest.skip(f"the host kernel does not run i386 system calls: {on_host.returncode}")
    assert "answer 0" in on_host.stdout and os.stat(host / "reserved").st_blocks > 0
    (host / "reserved").unlink()
    os.chown(small_fs, UNPRIVILEGED, UNPRIVILEGED)
    proc = subprocess.run(
        warden_argv(
            "exec", "--workspace", str(small_fs), "--image", sandbox_image,
            *label_args(no_leftovers), "--disk-write-limit", "0", "--disk-free-floor", "32m",
            "--user", f"{UNPRIVILEGED}:{UNPRIVILEGED}", "--", "python3", "-c", I386_FALLOCATE,
        ),
        capture_output=True, text=True, env=warden_env(), timeout=120, check=False,
    )  # fmt: skip
    assert (small_fs / "reserved").exists(), (proc.returncode, proc.stdout, proc.stderr)
    assert "answer 0" not in proc.stdout, proc.stdout
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert os.stat(small_fs / "reserved").st_blocks == 0  # nothing reserved


@pytest.mark.parametrize(
    ("command", "status", "said"),
    [(["no-such-command"], 127, "No such file or directory"), (["/etc/passwd"], 126, "Permission denied")],
)
def test_exec_of_a_command_that_cannot_run_says_so_with_the_shells_status(
    workspace: Path, sandbox_image: str, no_leftovers: Any, command: list[str], status: int, said: str
) -> None:
    proc = subprocess.run(
        warden_argv(
            "exec", "--workspace", str(workspace), "--image", sandbox_image,
            *label_args(no_leftovers), "--", *command,
        ),
        capture_output=True, text=True, env=warden_env(), timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == status, proc.stderr
    # The engine's init says it, as in `docker run --init` (no Python of warden's runs first).
    assert f"exec {command[0]} failed: {said}" in proc.stderr, proc.stderr
