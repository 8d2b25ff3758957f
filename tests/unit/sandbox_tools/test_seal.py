"""The runner's seccomp filter refuses fallocate (EOPNOTSUPP) in its process and
every child, while writes, and posix_fallocate's write fallback, still work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sandbox_tools import seal

CHILD = """
import ctypes, os, subprocess, sys
from sandbox_tools.seal import refuse_fallocate
assert refuse_fallocate() is None
path = sys.argv[1]
fd = os.open(path, os.O_CREAT | os.O_WRONLY)
libc = ctypes.CDLL(None, use_errno=True)
print("keep", libc.fallocate(fd, 1, 0, 1 << 20), ctypes.get_errno())
print("grow", libc.fallocate(fd, 0, 0, 1 << 20), ctypes.get_errno())
os.posix_fallocate(fd, 0, 4096)  # glibc writes the block instead
print("size", os.fstat(fd).st_size)
child = subprocess.run([sys.executable, "-c",
    "import ctypes, os; fd = os.open(%r, os.O_WRONLY); "
    "print(ctypes.CDLL(None, use_errno=True).fallocate(fd, 0, 0, 1 << 20))" % path],
    capture_output=True, text=True)
print("child", child.stdout.strip())
"""


def test_fallocate_is_refused_in_the_process_and_its_children(tmp_path: Path) -> None:
    target = tmp_path / "f"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(target)],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split("\n")  # fmt: skip
    assert out[:4] == ["keep -1 95", "grow -1 95", "size 4096", "child -1"]  # 95: EOPNOTSUPP
    assert target.stat().st_blocks * 512 < 1 << 20  # nothing reserved


def test_the_program_checks_the_architecture_before_the_number() -> None:
    insns = seal.program()
    assert len(insns) == 6 * len(seal.FALLOCATE) + 1
    assert all(len(i) == 8 for i in insns)
