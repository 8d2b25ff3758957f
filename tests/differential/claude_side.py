"""Claude Code's decisions for one group of calls that share their settings.

Run as root inside `unshare -n -m` (a network namespace with only `lo` and a
private mount namespace): `python3 -m tests.differential.claude_side GROUP.json
OUT.json`. It brings `lo` up, lays a private overlay over `/etc` so the group's
managed settings sit at Claude Code's Linux path without touching the host, writes
the user/project/local settings into a private HOME and workspace, starts
warden's scripted model on 127.0.0.1 in the same namespace, and runs
`claude -p` as an unprivileged user. The scripted model answers with one call
per turn; the next request carries Claude Code's decision as the call's
tool_result, and the `--permission-prompt-tool` (`prompt_server`) records every
ask and refuses it.
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

MANAGED_DIR = Path("/etc/claude-code")
RUN_AS = 1000
"""Claude Code refuses bypassPermissions as root, and a call it allows really runs."""
CLAUDE_TIMEOUT_S = 300
MARK = "DIFFCASE"
ASKED = "DIFFERENTIAL-ASKED"
"""The prompt tool's refusal message: a tool result carrying it was an ask."""
DENIED_MARKERS = (
    "has been denied",
    "denied by your permission settings",
    "Permission to use",
    "permission to use",
    "was blocked",
)
"""Phrases of Claude Code's refusals in a tool_result."""
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "ANTHROPIC_API_KEY": "sk-ant-differential-dummy",
    # the prompt server starts slowly on a busy machine: wait for it
    "MCP_TIMEOUT": "60000",
    "MCP_CONNECT_TIMEOUT_MS": "60000",
    "MCP_CONNECTION_NONBLOCKING": "false",
}


def fill(value: Any, ws: str, home: str) -> Any:
    if isinstance(value, str):
        return value.replace("{ws}", ws).replace("{home}", home)
    if isinstance(value, dict):
        return {k: fill(v, ws, home) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, ws, home) for v in value]
    return value


def private_etc(work: Path) -> None:
    """An overlay over /etc visible only in this mount namespace."""
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    upper, lower_work = work / "etc-upper", work / "etc-work"
    upper.mkdir()
    lower_work.mkdir()
    subprocess.run(
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir=/etc,upperdir={upper},workdir={lower_work}",
            "/etc",
        ],
        check=True,
    )
    MANAGED_DIR.mkdir(exist_ok=True)


def python_for_everyone(work: Path) -> None:
    """When this Python (the interpreter behind a virtual environment included), the
    environment or the checkout lives under root's private home (pyenv, a clone in
    ~), show only those directories under /root in this mount namespace, so the
    unprivileged Claude Code can start the prompt server with the same interpreter
    and packages."""
    tops = sorted(
        {
            Path("/root") / Path(where).relative_to("/root").parts[0]
            for where in (sys.prefix, sys.base_prefix, os.getcwd())
            if where.startswith("/root/")
        }
    )
    if not tops:
        return
    kept = []
    for i, top in enumerate(tops):
        keep = work / f"python{i}"
        keep.mkdir()
        subprocess.run(["mount", "--bind", str(top), str(keep)], check=True)
        kept.append((top, keep))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/root"], check=True)
    for top, keep in kept:
        top.mkdir()
        subprocess.run(["mount", "--bind", str(keep), str(top)], check=True)


def write(path: Path, doc: dict[str, Any] | None) -> None:
    if doc is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


def chown_tree(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, RUN_AS, RUN_AS)


def classify(result: dict[str, Any] | None, asked: bool, denied: set[str]) -> tuple[str, str]:
    """(decision, the tool_result text) for one call; `denied` holds the tool_use ids
    Claude Code reports in `permission_denials`."""
    if result is None:
        return "none", ""
    content = result.get("content")
    if isinstance(content, list):
        text = " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    else:
        text = str(content or "")
    if asked or ASKED in text:
        return "ask", text
    if result.get("tool_use_id") in denied:
        return "deny", text
    if result.get("is_error") and any(m in text for m in DENIED_MARKERS):
        return "deny", text
    if result.get("is_error") and "InputValidationError" in text:
        return "invalid", text
    return "allow", text


def tool_results(body: Any) -> list[dict[str, Any]]:
    messages = body.get("messages", []) if isinstance(body, dict) else []
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), list):
            found = [b for b in message["content"] if b.get("type") == "tool_result"]
            if found:
                return found
            return []
    return []


def run_group(group: dict[str, Any], claude: str, work_root: Path | None = None) -> dict[str, Any]:
    """`work_root`: where the group's files go; the caller removes it once this
    process (and its mount namespace, whose binds reach real directories) is gone."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = Path(tempfile.mkdtemp(prefix="warden-diff-", dir=work_root))
    private_etc(work)
    python_for_everyone(work)
    home, ws = work / "home", work / "ws"
    ws.mkdir(parents=True)
    (home / ".claude").mkdir(parents=True)
    group = fill(group, str(ws), str(home))
    if group.get("managed") is not None:
        (MANAGED_DIR / "managed-settings.json").write_text(json.dumps(group["managed"]))
    write(home / ".claude" / "settings.json", group.get("user"))
    write(ws / ".claude" / "settings.json", group.get("project"))
    write(ws / ".claude" / "settings.local.json", group.get("local"))
    for root, key in ((ws, "files"), (home, "home_files")):
        for rel, content in group.get(key, {}).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(content)
    if "trust_record" in group:  # a record for these places only (`cases.trust_record_groups`)
        places = {"ws": str(ws), "parent": str(ws.parent), "root": "/"}
        projects = {places[p]: {"hasTrustDialogAccepted": True} for p in group["trust_record"]}
        (home / ".claude.json").write_text(json.dumps({"projects": projects}))
    elif group.get("trusted", True):  # as after the person accepted the trust dialog
        projects = {str(ws): {"hasTrustDialogAccepted": True}}
        (home / ".claude.json").write_text(json.dumps({"projects": projects}))
    chown_tree(work)
    ask_log = work / "asked.jsonl"
    ask_log.touch()
    os.chown(ask_log, RUN_AS, RUN_AS)
    calls = group["calls"]
    turns = [
        {"content": [{"type": "tool_use", "name": c["tool"], "input": c["input"]}]} for c in calls
    ]
    turns.append({"content": [{"type": "text", "text": "done"}]})
    script = Script.model_validate(
        {
            "conversations": [
                {"name": "case", "match": {"prompt_contains": MARK}, "turns": turns},
                {"name": "other", "turns": [{"content": [{"type": "text", "text": "ok"}]}]},
            ]
        }
    )
    mcp = {
        "mcpServers": {
            "warden-diff": {
                "command": sys.executable,
                "args": ["-m", "tests.differential.prompt_server"],
                "env": {"DIFF_ASK_LOG": str(ask_log), "PYTHONPATH": os.getcwd()},
            }
        }
    }
    argv = [
        claude,
        "-p",
        f"{MARK} {group['id']}: make the calls",
        "--output-format",
        "json",
        "--mcp-config",
        json.dumps(mcp),
        "--permission-prompt-tool",
        "mcp__warden-diff__approve",
    ]
    if group.get("mode"):
        argv += ["--permission-mode", group["mode"]]
    if group.get("cli_allow"):
        argv += ["--allowedTools", *group["cli_allow"]]
    if group.get("cli_deny"):
        argv += ["--disallowedTools", *group["cli_deny"]]
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
            cwd=ws,
            env=env,
            capture_output=True,
            text=True,
            timeout=CLAUDE_TIMEOUT_S,
            check=False,
        )
        if os.environ.get("DIFF_DEBUG"):
            Path(os.environ["DIFF_DEBUG"]).write_text(
                json.dumps([r.model_dump(mode="json") for r in server.requests], indent=1)
            )
        requests = [r for r in server.requests if r.conversation == "case"]
        rejected = [r.body_error or r.path for r in server.requests if r.conversation is None]
    asked = [json.loads(line) for line in ask_log.read_text().splitlines() if line.strip()]
    by_turn = {r.turn: r for r in requests}
    try:
        report = json.loads(proc.stdout)
        denied = {str(d.get("tool_use_id")) for d in report.get("permission_denials", [])}
    except (json.JSONDecodeError, AttributeError):
        denied = set()
    outcomes = []
    for i, call in enumerate(calls):
        nxt = by_turn.get(i + 1)
        results = tool_results(nxt.body) if nxt is not None else []
        result = results[0] if results else None
        was_asked = any(
            a.get("tool_name") == call["tool"] and a.get("input") == call["input"] for a in asked
        )
        decision, text = classify(result, was_asked, denied)
        outcomes.append({"id": group["calls"][i]["id"], "claude": decision, "text": text[:400]})
    return {
        "id": group["id"],
        "outcomes": outcomes,
        "exit": proc.returncode,
        "stderr": proc.stderr[-2000:],
        "stdout": proc.stdout[-2000:],
        "unmatched_requests": rejected,
        "workspace": str(ws),
        "home": str(home),
    }


def main() -> None:
    group_file, out_file, claude = sys.argv[1], sys.argv[2], sys.argv[3]
    work_root = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    group = json.loads(Path(group_file).read_text())
    Path(out_file).write_text(json.dumps(run_group(group, claude, work_root), indent=1))


if __name__ == "__main__":
    main()
