"""Locks in that the documentation's marked command blocks (`<!-- docs-test: run -->`)
run as written: each line, in a fresh directory, with the `warden` of this environment
on PATH, against the real engine, exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_blocks import documents, shell_lines

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

RUN_LINES = [line for path in documents() for line in shell_lines(path) if line.run]
LINE_TIMEOUT_S = 600


def test_there_are_documented_commands_to_run() -> None:
    assert len(RUN_LINES) >= 5


def test_the_marked_documentation_blocks_run_as_written(tmp_path: Path) -> None:
    """One directory for all of them, in order: a block is a tour a reader types."""
    here = tmp_path / "here"  # the reader's directory; warden's state lives elsewhere
    here.mkdir()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "WARDEN_STATE_DIR": str(tmp_path / "state"),
        "CI": "true",
    }
    env.pop("PYTHONPATH", None)
    for line in RUN_LINES:
        done = subprocess.run(
            ["bash", "-c", line.text], cwd=here, env=env, capture_output=True, text=True,
            stdin=subprocess.DEVNULL, timeout=LINE_TIMEOUT_S, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"{line.where()}: `{line.text}` exited {done.returncode}\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
