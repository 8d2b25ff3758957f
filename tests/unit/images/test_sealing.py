"""`warden exec`'s sealed start, run here as a child process: the command becomes
the same process under the fallocate filter, with its own exit status and default
SIGPIPE, and a command that cannot run gets the shell's 127/126."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.images.sealing import seal_source, sealed_command

PROBE = """
import ctypes, os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY)
libc = ctypes.CDLL(None, use_errno=True)
print(libc.fallocate(fd, 0, 0, 1 << 20), os.strerror(ctypes.get_errno()))
print(os.getppid() == int(sys.argv[2]))
sys.exit(5)
"""


def run_sealed(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sealed_command([sys.executable], command),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_command_runs_as_itself_under_the_filter(tmp_path: Path) -> None:
    import os

    done = run_sealed(sys.executable, "-c", PROBE, str(tmp_path / "f"), str(os.getpid()))
    assert done.returncode == 5, done.stderr
    # Refused, nothing reserved, and the command is this process's own child (the
    # sealing Python became it, nothing sits in between).
    assert done.stdout.splitlines() == ["-1 Operation not supported", "True"]
    assert (tmp_path / "f").stat().st_size == 0


def test_sigpipe_is_the_default_again_as_a_command_expects() -> None:
    """Python ignores SIGPIPE at start-up; the command must not inherit that."""
    done = run_sealed("bash", "-c", "yes | head -1 >/dev/null; echo ${PIPESTATUS[0]}")
    assert done.stdout.strip() == "141", done.stderr


def test_a_command_that_cannot_run_gets_the_shells_status(tmp_path: Path) -> None:
    missing = run_sealed(str(tmp_path / "nothing-here"))
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program\n")
    not_executable = run_sealed(str(plain))
    assert missing.returncode == 127 and "No such file or directory" in missing.stderr
    assert not_executable.returncode == 126 and "Permission denied" in not_executable.stderr


def test_the_command_line_carries_code_not_documentation() -> None:
    source = seal_source()
    compile(source, "seal", "exec")
    assert '"""' not in source and "#" not in source
    assert "def refuse_fallocate" in source
