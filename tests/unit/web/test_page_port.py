"""A page whose port another process holds (another `warden ui`, a `warden run
--ui` on a fixed port) fails with one clear error naming the port and the fix, not
a traceback."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from orchestrator.store import DB_FILENAME, Store
from tests.conftest import warden_argv, warden_env

CHILD_TIMEOUT_S = 120


def test_warden_ui_on_a_port_another_process_holds_says_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    Store.open(state / DB_FILENAME).close()
    with socket.create_server(("127.0.0.1", 0)) as taken:  # the other process's page
        port = taken.getsockname()[1]
        done = subprocess.run(
            warden_argv("ui", "--ui-listen", f"127.0.0.1:{port}"),
            env=warden_env(WARDEN_STATE_DIR=str(state)),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    said = done.stderr.strip()
    assert said.startswith("warden: error: the page cannot listen on 127.0.0.1:"), said
    assert f":{port} " in said and "another process" in said and "port 0" in said, said
