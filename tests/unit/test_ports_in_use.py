"""A port another process holds (another `warden ui` or `warden run --ui` on a fixed
`--ui-listen` port, another `warden mcp --http` on the default 8787) is one clear
error naming the port and the fix, not a traceback."""

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


def test_warden_mcp_http_on_a_port_another_process_holds_says_so(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:  # the other MCP server
        port = taken.getsockname()[1]
        done = subprocess.run(
            warden_argv("mcp", "--http", "--port", str(port), "--workspace", str(tmp_path)),
            env=warden_env(
                WARDEN_STATE_DIR=str(tmp_path / "state"), WARDEN_MCP_TOKEN="t" * 32,
                ANTHROPIC_API_KEY="unused", ANTHROPIC_BASE_URL="http://127.0.0.1:9",
            ),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith(f"warden: error: cannot serve MCP on 127.0.0.1:{port} "), said
    assert "another process" in said and "--port 0" in said, said
