"""MCP servers per subagent, end to end in real sandboxes with the scripted model: a
stdio server from the workspace's `.mcp.json` (and one an agent file defines) is
started inside the subagent's own container, never on the host; its tools reach the
model as `mcp__<server>__<tool>` with their schemas; every call is decided on the
host (a deny rule on one tool blocks it there); an untrusted workspace starts
none; a server that hangs at `initialize`, exits at start or dies mid-call is a
clear warning or tool error naming it, and the subagent goes on. A remote (HTTP)
server is reached only through the subagent's egress proxy, by the egress rules,
its resources too."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from orchestrator.config import Settings
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.integration.harness import convo, requests_of, scripted_run, text, tool, write_agent
from tests.json_shapes import obj

pytestmark = pytest.mark.integration

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_probe_server.py"


def _own(workspace: Path, *paths: Path) -> None:
    owner = workspace.stat()
    for path in paths:
        os.chown(path, owner.st_uid, owner.st_gid)


def probe_in(workspace: Path) -> str:
    """Copy the probe server into the workspace; its path as the sandbox sees it."""
    tools = workspace / "tools"
    tools.mkdir(exist_ok=True)
    shutil.copy(PROBE, tools / "probe.py")
    _own(workspace, tools, tools / "probe.py")
    return "/workspace/tools/probe.py"


def server(marker: str, *args: str) -> dict[str, Any]:
    """A probe server whose start leaves `/workspace/started-<marker>` behind."""
    script = f"touch /workspace/started-{marker}; exec python3 /workspace/tools/probe.py"
    return {
        "command": "bash",
        "args": ["-c", " ".join([script, *args])],
        "env": {"PROBE_MARKER": marker},
    }


def write_mcp_json(workspace: Path, servers: dict[str, Any]) -> None:
    path = workspace / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    _own(workspace, path)


def task(prompt: str, agent: str = "general-purpose") -> TaskInput:
    return TaskInput(description="mcp", prompt=prompt, subagent_type=agent)


def tool_results(model: Any, conversation: str) -> list[str]:
    last = requests_of(model, conversation)[-1].body
    return [
        block["content"]
        for message in last["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def offered(model: Any, conversation: str) -> dict[str, Any]:
    first = requests_of(model, conversation)[0].body
    return {t["name"]: t for t in first.get("tools", []) if t["name"].startswith("mcp__")}


def logged(run: Any) -> list[str]:
    """The runner's log events of the run (warnings about servers among them)."""
    found = [e.data.get("data") for e in run.store.events(run_id=run.run_id)]
    return [str(d.get("detail")) for d in found if isinstance(d, dict) and d.get("event") == "log"]


async def test_a_stdio_server_runs_in_the_sandbox_and_its_calls_are_decided_on_the_host(
    settings: Settings, workspace: Path
) -> None:
    marker = uuid.uuid4().hex[:10]
    probe_in(workspace)
    write_mcp_json(workspace, {"x": server(marker)})
    # An agent file's own server, and a `tools` list that names one tool of `x`.
    write_agent(workspace, "prober", (
        "---\nname: prober\ndescription: d\ntools: Read, mcp__x__where\nmcpServers:\n"
        f"  - y:\n      command: python3\n      args: [{json.dumps('/workspace/tools/probe.py')}]\n"
        "---\nx\n"
    ))  # fmt: skip
    script = [
        convo("general", {"prompt_contains": "MCP-GENERAL"},
              [tool("mcp__x__where")],
              [tool("mcp__x__echo", text="never sent")],
              [tool("mcp__x__crash")],
              [tool("mcp__x__where")],
              [text("done")]),
        convo("prober", {"prompt_contains": "MCP-PROBER"},
              [tool("mcp__y__echo", text="ab", times=2)],
              [tool("mcp__x__echo", text="not offered")],
              [text("done")]),
    ]  # fmt: skip
    async with scripted_run(settings, workspace, script, deny=("mcp__x__echo",)) as (run, model):
        general = await run.manager.run_task(task("MCP-GENERAL"))
        prober = await run.manager.run_task(task("MCP-PROBER", "prober"))
        setups = {
            e.task_id: obj(obj(e.data["data"])["setup"])["mcp_servers"]
            for e in run.store.events(run_id=run.run_id)
            if e.kind == "task_started"
        }

    assert general.status is TaskStatus.COMPLETED, general
    assert prober.status is TaskStatus.COMPLETED, prober
    # Offered under Claude Code's names, with the server's own input schema; as in
    # Claude Code, the tool a whole-tool deny rule names is not offered at all.
    tools = offered(model, "general")
    assert set(tools) == {"mcp__x__where", "mcp__x__crash"}
    assert offered(model, "prober")["mcp__y__echo"]["input_schema"]["required"] == ["text"]
    # It ran inside the sandbox: the container's hostname and cgroup, only `lo`, the
    # workspace as the sandbox mounts it; the file it made at start is in the workspace.
    results = tool_results(model, "general")
    where = json.loads(results[0])
    assert where["marker"] == marker
    assert where["interfaces"] == ["lo"], where
    assert where["hostname"] != socket.gethostname()
    assert "docker" in where["cgroup"], where
    assert where["uid"] != 0 and where["cwd"] == where["project_dir"] == "/workspace"
    assert where["oom_score_adj"] == "1000"  # the kernel's first pick, never the runner
    assert (workspace / f"started-{marker}").exists()
    # Called anyway, the removed tool is refused on the host: it never reached the server.
    assert "not available to this agent" in results[1] and "mcp__x__echo" in results[1]
    # A server that dies mid-call is a tool error naming it; later calls say it is gone.
    assert results[2].startswith("Error: MCP server 'x': it exited (exit code 7)"), results[2]
    assert "crashing as asked" in results[2]
    assert results[3].startswith("Error: MCP server 'x'"), results[3]
    # The agent file's server starts for its subagents; of `x` only the listed tool.
    assert set(offered(model, "prober")) == {
        "mcp__x__where", "mcp__y__where", "mcp__y__echo", "mcp__y__crash",
    }  # fmt: skip
    by_prober = tool_results(model, "prober")
    assert by_prober[0] == "abab"
    assert "not available to this agent" in by_prober[1], by_prober[1]
    # `warden logs TASK` shows which servers each subagent got.
    assert setups[general.task_id] == [
        {"name": "x", "transport": "stdio", "tools": None, "denied": ["mcp__x__echo"]}
    ]
    assert setups[prober.task_id] == [
        {"name": "y", "transport": "stdio", "tools": None},
        {"name": "x", "transport": "stdio", "tools": ["mcp__x__where"]},
    ]


async def test_disallowed_tools_and_plan_mode_treat_mcp_tools_as_claude_code_does(
    settings: Settings, workspace: Path
) -> None:
    """Measured with the pinned Claude Code: an agent file that lists only
    `disallowedTools` still gets the session's MCP servers less what it names
    (`mcp__x__crash` one tool, `mcp__y` a whole server, which then never starts); in
    plan mode an MCP call an allow rule names runs and any other asks (the run's
    approver here says no), whatever the tool's read-only hint."""
    marker = uuid.uuid4().hex[:10]
    probe_in(workspace)
    write_mcp_json(workspace, {"x": server(f"x{marker}"), "y": server(f"y{marker}")})
    write_agent(workspace, "planner", (
        "---\nname: planner\ndescription: d\ndisallowedTools: Bash, mcp__x__crash, mcp__y\n"
        "---\nx\n"
    ))  # fmt: skip
    script = [
        convo("planner", {"prompt_contains": "MCP-PLAN"},
              [tool("mcp__x__echo", text="planned")],
              [tool("mcp__x__where")],
              [tool("mcp__x__crash")],
              [tool("mcp__y__where")],
              [text("done")]),
    ]  # fmt: skip
    async with scripted_run(settings, workspace, script, mode="plan", allow=("mcp__x__echo",)) as (
        run,
        model,
    ):
        result = await run.manager.run_task(task("MCP-PLAN", "planner"))
        denied = [
            obj(e.data.get("data") or {}).get("tool_name")
            for e in run.store.events(run_id=run.run_id)
            if e.kind == "permission_denied"
        ]

    assert result.status is TaskStatus.COMPLETED, result
    assert set(offered(model, "planner")) == {"mcp__x__where", "mcp__x__echo"}
    first = requests_of(model, "planner")[0].body
    assert "Bash" not in {t["name"] for t in first["tools"]}
    assert (workspace / f"started-x{marker}").exists()
    assert not (workspace / f"started-y{marker}").exists()  # removed whole: never started
    echo, where, crash, other = tool_results(model, "planner")
    assert echo == "planned"  # the allow rule holds in plan mode
    assert where.startswith("Permission denied") and "mcp__x__where" in denied, where
    assert "not available to this agent" in crash and "not available to this agent" in other


async def test_an_untrusted_workspace_starts_no_mcp_server(
    settings: Settings, workspace: Path
) -> None:
    marker = uuid.uuid4().hex[:10]
    probe_in(workspace)
    write_mcp_json(workspace, {"x": server(marker)})
    script = [convo("child", {"prompt_contains": "UNTRUSTED"}, [text("done")])]
    async with scripted_run(settings, workspace, script, trusted=False) as (run, model):
        result = await run.manager.run_task(task("UNTRUSTED"))

    assert result.status is TaskStatus.COMPLETED, result
    assert offered(model, "child") == {}
    assert not (workspace / f"started-{marker}").exists()


async def test_servers_that_hang_or_exit_at_start_are_named_and_the_subagent_goes_on(
    settings: Settings, workspace: Path
) -> None:
    probe_in(workspace)
    write_mcp_json(workspace, {
        "slow": {"command": "python3", "args": ["/workspace/tools/probe.py", "hang"]},
        "gone": {"command": "python3", "args": ["/workspace/tools/probe.py", "exit"]},
        "missing": {"command": "no-such-mcp-server"},
    })  # fmt: skip
    quick = replace(settings, mcp_timeout_s=3.0)
    script = [convo("child", {"prompt_contains": "BROKEN"}, [text("carried on")])]
    async with scripted_run(quick, workspace, script) as (run, model):
        result = await run.manager.run_task(task("BROKEN"))
        said = "\n".join(logged(run))

    assert result.status is TaskStatus.COMPLETED and result.text == "carried on", result
    assert offered(model, "child") == {}
    assert "MCP server 'slow': it did not answer initialize within 3 s" in said, said
    assert "MCP server 'gone': it exited (exit code 3)" in said and "exiting at start" in said
    assert "MCP server 'missing' did not start: 'no-such-mcp-server'" in said, said


class _RemoteMcp(http.server.BaseHTTPRequestHandler):
    """A Streamable HTTP MCP server on 127.0.0.1 (reached as mcp.test through the
    egress proxy); remembers each request's Host, session and method."""

    seen: ClassVar[list[tuple[str, str, str]]] = []

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method = message.get("method", "")
        self.seen.append((str(self.headers.get("Host")), str(self.headers.get("Mcp-Session-Id")),
                          method))  # fmt: skip
        if "id" not in message:
            self._send(202, b"", "application/json")
            return
        if method == "initialize":
            result: dict[str, Any] = {"protocolVersion": "2025-06-18",
                                      "capabilities": {"resources": {}},
                                      "serverInfo": {"name": "remote", "version": "1"}}  # fmt: skip
        elif method == "tools/list":
            result = {"tools": [{"name": "lookup", "description": "Look a word up.",
                                 "inputSchema": {"type": "object"}}]}  # fmt: skip
        elif method == "resources/list":
            result = {"resources": [{"uri": "words://all", "name": "words"}]}
        elif method == "resources/read":
            uri = message["params"]["uri"]
            result = {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "remote words"}]}
        else:
            word = message["params"]["arguments"].get("word")
            result = {"content": [{"type": "text", "text": f"remote says: {word}"}]}
        answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
        # As a stream, the way Streamable HTTP servers often answer.
        self._send(200, f"event: message\ndata: {answer}\n\n".encode(), "text/event-stream",
                   session="sess-1")  # fmt: skip

    def _send(self, code: int, body: bytes, kind: str, session: str | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        if session:
            self.send_header("Mcp-Session-Id", session)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


async def test_a_remote_server_is_reached_only_through_the_subagent_egress(
    settings: Settings, workspace: Path
) -> None:
    from orchestrator.egress.resolver import StaticResolver
    from orchestrator.egress.setup import EgressRequest

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RemoteMcp)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    port = site.server_address[1]
    _RemoteMcp.seen.clear()
    write_mcp_json(workspace, {
        "remote": {"type": "http", "url": f"http://mcp.test:{port}/mcp"},
        "blocked": {"type": "http", "url": f"http://blocked.test:{port}/mcp"},
    })  # fmt: skip
    write_agent(workspace, "offline", (
        "---\nname: offline\ndescription: d\nwarden:\n  network: none\n---\nx\n"
    ))  # fmt: skip
    egress = EgressRequest(
        allow_domains=("mcp.test",), deny_domains=("blocked.test",),
        resolver=StaticResolver({"mcp.test": "127.0.0.1", "blocked.test": "127.0.0.1"}),
    )  # fmt: skip
    script = [
        convo("online", {"prompt_contains": "REMOTE-ON"},
              [tool("mcp__remote__lookup", word="sandbox")],
              [tool("ListMcpResourcesTool")],
              [tool("ReadMcpResourceTool", server="remote", uri="words://all")],
              [text("done")]),
        convo("offline", {"prompt_contains": "REMOTE-OFF"}, [text("done")]),
    ]  # fmt: skip
    try:
        async with scripted_run(settings, workspace, script, egress=egress) as (run, model):
            online = await run.manager.run_task(task("REMOTE-ON"))
            offline = await run.manager.run_task(task("REMOTE-OFF", "offline"))
            said = "\n".join(logged(run))
            transcript = json.dumps(run.store.get_session_transcript(online.task_id))
            audited = [(a.tool_name, a.tool_input, a.final) for a in run.store.audit(run.run_id)]
    finally:
        site.shutdown()
        site.server_close()

    assert online.status is TaskStatus.COMPLETED and offline.status is TaskStatus.COMPLETED
    assert set(offered(model, "online")) == {"mcp__remote__lookup"}
    looked_up, listed, read = tool_results(model, "online")
    assert looked_up == "remote says: sandbox"
    # Its resources too, through the same session and proxy (ListMcpResourcesTool,
    # ReadMcpResourceTool: the server declares `resources`).
    assert json.loads(listed) == [{"uri": "words://all", "name": "words", "server": "remote"}]
    assert json.loads(read) == {
        "contents": [{"uri": "words://all", "mimeType": "text/plain", "text": "remote words"}]
    }
    assert {m for _, _, m in _RemoteMcp.seen} >= {"resources/list", "resources/read"}
    # The call was decided and audited on the host; its result is in the transcript.
    assert ("mcp__remote__lookup", {"word": "sandbox"}, "allow") in audited
    assert "remote says: sandbox" in transcript
    # Through the proxy, by its name; the session the server gave is sent back.
    hosts = {host for host, _, _ in _RemoteMcp.seen}
    assert hosts == {f"mcp.test:{port}"}, _RemoteMcp.seen
    assert _RemoteMcp.seen[0][1:] == ("None", "initialize")
    assert all(session == "sess-1" for _, session, _ in _RemoteMcp.seen[1:])
    # A host the egress rules deny is never reached; no egress, no remote server.
    assert "MCP server 'blocked'" in said and "HTTP 403" in said, said
    assert "MCP server 'remote' not started: this subagent has no network egress" in said
    assert offered(model, "offline") == {}
