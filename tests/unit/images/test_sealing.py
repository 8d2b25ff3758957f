"""A sealed program (a hook sandbox's shim), run here as a child process: the seal
comes first, and what it runs next, and every process that starts, is under the
fallocate filter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.images.sealing import seal_source, sealed_program

CHILD = """
import ctypes, os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY)
libc = ctypes.CDLL(None, use_errno=True)
print(libc.fallocate(fd, 0, 0, 1 << 20), os.strerror(ctypes.get_errno()))
"""

TAIL = """
import subprocess, sys
_problem = refuse_fallocate()
print("sealed" if _problem is None else _problem, flush=True)
subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], check=True)
"""


def test_what_a_sealed_program_starts_cannot_reserve_space(tmp_path: Path) -> None:
    target = tmp_path / "f"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", sealed_program(TAIL), CHILD, str(target)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["sealed", "-1 Operation not supported"]
    assert target.stat().st_size == 0 and target.stat().st_blocks == 0


def test_the_command_line_carries_code_not_documentation() -> None:
    source = seal_source()
    compile(source, "seal", "exec")
    assert '"""' not in source and "#" not in source
    assert "def refuse_fallocate" in source
