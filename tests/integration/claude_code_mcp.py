"""Claude Code as the parent, warden behind it over MCP: run as root inside `unshare -n`
(a network namespace with only `lo`): `python3 -m tests.integration.claude_code_mcp
CLAUDE WORKSPACE STATE OUT.json [stdio|http]`.

It brings `lo` up, starts warden's scripted model on 127.0.0.1 in the namespace (it
answers Claude Code and the subagent alike), registers `warden mcp` with Claude Code
by the README's own lines (stdio: `claude mcp add warden -- … mcp --workspace …`, with
this tree's interpreter for `warden`; http: `warden mcp --http` started here and
`claude mcp add --transport http warden URL --header "Authorization: Bearer …"`),
and runs `claude -p`. Claude Code's scripted model
calls `mcp__warden__Task`; warden runs the subagent in a container; the requests the
scripted server recorded are written to OUT.json.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from orchestrator.scripted import Script, ScriptedModelServer
from tests.differential.claude_side import QUIET_ENV

MARK = "CLAUDE-CODE-PARENT"
SUBAGENT_MARK = "WARDEN-SUBAGENT-BRIEF"
ANSWER = "the sandbox says 7f3a"
CLAUDE_TIMEOUT_S = 240
TOKEN = "claude-code-test-token-0123456789"


def script() -> Script:
    task = {
        "type": "tool_use",
        "name": "mcp__warden__Task",
        "input": {
            "description": "sandboxed check",
            "prompt": f"{SUBAGENT_MARK}: write proof.txt in the workspace and report",
            "subagent_type": "bash",
        },
    }
    return Script.model_validate(
        {
            "conversations": [
                {
                    "name": "parent",
                    "match": {"prompt_contains": MARK},
                    "turns": [
                        {"content": [task]},
                        {"content": [{"type": "text", "text": "Claude Code got it"}]},
                    ],
                },
                {
                    "name": "subagent",
                    "match": {"prompt_contains": SUBAGENT_MARK},
                    "turns": [
                        {
                            "content": [
                                {
                                    "type": "tool_use",
                                    "name": "Bash",
                                    "input": {"command": "hostname > proof.txt"},
                                }
                            ]
                        },
                        {"content": [{"type": "text", "text": ANSWER}]},
                    ],
                },
                {"name": "other", "turns": [{"content": [{"type": "text", "text": "ok"}]}]},
            ]
        }
    )


def main() -> None:
    claude, workspace, state, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    transport = sys.argv[5] if len(sys.argv) > 5 else "stdio"
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with tempfile.TemporaryDirectory(prefix="warden-cc-home-") as made:
        run_claude_code(claude, workspace, state, out, transport, Path(made))


def run_claude_code(
    claude: str, workspace: Path, state: Path, out: str, transport: str, home: Path
) -> None:
    """Claude Code with `home` as its home (removed afterwards by the caller)."""
    (home / ".claude").mkdir()
    projects = {str(workspace): {"hasTrustDialogAccepted": True}}
    (home / ".claude.json").write_text(json.dumps({"projects": projects}))
    with ScriptedModelServer(script()).in_thread() as server:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "USER": "root",
            "ANTHROPIC_BASE_URL": server.base_url,
            **QUIET_ENV,
        }
        warden_env = {
            "ANTHROPIC_BASE_URL": server.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-warden-behind-claude-code",
            "WARDEN_STATE_DIR": str(state / "state"),
            "WARDEN_CONFIG_DIR": str(state / "config"),
            "CLAUDE_CONFIG_DIR": str(state / "claude"),
            "PYTHONPATH": os.getcwd(),
        }
        serve = [sys.executable, "-m", "orchestrator", "mcp", "--workspace", str(workspace),
                 "--permission-mode", "bypassPermissions", "--trust-workspace",
                 "--result-file", str(state / "result.json")]  # fmt: skip
        http: subprocess.Popen[str] | None = None
        if transport == "http":
            # The README's HTTP lines: the server with its token, then the client's.
            http = subprocess.Popen(
                [*serve, "--http", "--port", "0"],
                env={**os.environ, **warden_env, "WARDEN_MCP_TOKEN": TOKEN},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            assert http.stderr is not None
            url = next(
                line.split("serving MCP on ")[1].split()[0]
                for line in http.stderr
                if "serving MCP on " in line
            )
            add = [claude, "mcp", "add", "--transport", "http", "warden", url,
                   "--header", f"Authorization: Bearer {TOKEN}"]  # fmt: skip
        else:
            # The README's line, `warden` being this tree's interpreter and package.
            add = [claude, "mcp", "add", "warden"]
            for key, value in warden_env.items():
                add += ["-e", f"{key}={value}"]
            add += ["--", *serve]
        added = subprocess.run(add, cwd=workspace, env=env, capture_output=True, text=True)
        proc = subprocess.run(
            [claude, "-p", f"{MARK}: delegate the check", "--output-format", "json",
             "--allowedTools", "mcp__warden__Task"],
            cwd=workspace, env=env, capture_output=True, text=True, timeout=CLAUDE_TIMEOUT_S,
            check=False,
        )  # fmt: skip
        if http is not None:  # stopped as a person stops it (Ctrl-C)
            http.send_signal(signal.SIGINT)
            http.wait(timeout=60)
            assert http.stderr is not None
            http.stderr.close()
        requests = [r.model_dump(mode="json") for r in server.requests]
    Path(out).write_text(
        json.dumps(
            {
                "add": {"exit": added.returncode, "stdout": added.stdout, "stderr": added.stderr},
                "exit": proc.returncode,
                "stdout": proc.stdout[-4000:],
                "stderr": proc.stderr[-4000:],
                "requests": requests,
            }
        )
    )


if __name__ == "__main__":
    main()
