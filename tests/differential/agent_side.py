"""Claude Code's subagent's first model request for one agent case.

Run as root inside `unshare -n -m` (as `claude_side`): `python3 -m
tests.differential.agent_side CASE.json OUT.json CLAUDE [WORKDIR]`. It lays out the
case's workspace and home (agent files, CLAUDE.md files, skills, memory), starts
warden's scripted model on 127.0.0.1 in the same namespace, and runs `claude -p`
as an unprivileged user; the scripted parent makes one Agent call with the case's
input, and every request the server saw is written out (the subagent's first one
is the first request whose first user message holds the case's prompt marker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.scripted import Script, ScriptedModelServer
from tests.differential.claude_side import (
    CLAUDE_TIMEOUT_S,
    QUIET_ENV,
    RUN_AS,
    chown_tree,
    fill,
    private_etc,
    python_for_everyone,
)

PARENT_MARK = "AGENTDIFF-PARENT"
CHILD_MARK = "AGENTDIFF-CHILD"


def lay_out(case: dict[str, Any], ws: Path, home: Path) -> None:
    """The case's files in the workspace and the home (`{ws}`/`{home}` filled)."""
    for root, key in ((ws, "files"), (home, "home_files")):
        for rel, content in case.get(key, {}).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(content)
    if case.get("git"):
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
        for argv in (
            ["git", "init", "-q", "-b", "main"],
            ["git", "add", "-A"],
            ["git", "-c", "user.name=d", "-c", "user.email=d@e", "commit", "-qm", "initial commit"],
        ):
            subprocess.run(argv, cwd=ws, env=env, check=True, capture_output=True)
        for rel, content in case.get("dirty_files", {}).items():
            (ws / rel).write_text(content)


def run_case(case: dict[str, Any], claude: str, work_root: Path | None = None) -> dict[str, Any]:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = Path(tempfile.mkdtemp(prefix="warden-adiff-", dir=work_root))
    private_etc(work)
    python_for_everyone(work)
    home, ws = work / "home", work / "ws"
    ws.mkdir(parents=True)
    (home / ".claude").mkdir(parents=True)
    case = fill(case, str(ws), str(home))
    lay_out(case, ws, home)
    projects = {str(ws): {"hasTrustDialogAccepted": True}}
    (home / ".claude.json").write_text(json.dumps({"projects": projects}))
    chown_tree(work)
    task_input = {**case["task"], "prompt": f"{CHILD_MARK} {case['task']['prompt']}"}
    script = Script.model_validate(
        {
            "conversations": [
                {
                    "name": "child",
                    "match": {"prompt_contains": CHILD_MARK},
                    "turns": case.get("child_turns")
                    or [{"content": [{"type": "text", "text": "child done"}]}],
                },
                {
                    "name": "parent",
                    "match": {"prompt_contains": PARENT_MARK},
                    "turns": [
                        {"content": [{"type": "tool_use", "name": "Agent", "input": task_input}]},
                        {"content": [{"type": "text", "text": "parent done"}]},
                    ],
                },
                {"name": "other", "turns": [{"content": [{"type": "text", "text": "ok"}]}]},
            ]
        }
    )
    argv = [claude, "-p", f"{PARENT_MARK} {case['id']}", "--output-format", "json",
            "--permission-mode", "bypassPermissions"]  # fmt: skip
    if case.get("parent_model"):
        argv += ["--model", case["parent_model"]]
    with ScriptedModelServer(script).in_thread() as server:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "USER": "diff",
            "ANTHROPIC_BASE_URL": server.base_url,
            **QUIET_ENV,
        }
        proc = subprocess.run(
            ["setpriv", f"--reuid={RUN_AS}", f"--regid={RUN_AS}", "--clear-groups", "--", *argv],
            cwd=ws, env=env, capture_output=True, text=True, timeout=CLAUDE_TIMEOUT_S,
            check=False,
        )  # fmt: skip
        requests = [r.model_dump(mode="json") for r in server.requests]
    children = [r["body"] for r in requests if r.get("conversation") == "child"]
    child = next((r for r in requests if r.get("conversation") == "child"), None)
    parent = next((r for r in requests if r.get("conversation") == "parent"), None)
    return {
        "id": case["id"],
        "exit": proc.returncode,
        "stderr": proc.stderr[-2000:],
        "stdout": proc.stdout[-2000:],
        "child": child["body"] if child else None,
        "children": children,
        "parent": parent["body"] if parent else None,
        "workspace": str(ws),
        "home": str(home),
    }


def main() -> None:
    case_file, out_file, claude = sys.argv[1], sys.argv[2], sys.argv[3]
    work_root = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    case = json.loads(Path(case_file).read_text())
    Path(out_file).write_text(json.dumps(run_case(case, claude, work_root), indent=1))


if __name__ == "__main__":
    os.umask(0o022)
    main()
