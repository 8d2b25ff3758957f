"""Claude Code's MCP resource tools, end to end in real sandboxes with the scripted
model and a server built with the official `mcp` SDK, running inside the subagent's
container: ListMcpResourcesTool and ReadMcpResourceTool are offered (with Claude
Code's input schemas) only to a subagent that inherits its tools or lists them (one
that lists a resource tool reads every server's resources, as in Claude Code), and
only when a started server declares `resources`; every call is decided on the host
(the default mode runs them unasked, as Claude Code does; a PreToolUse hook on the
tool's name blocks one); a list is JSON with a `server` field, a read is
`{"contents": [...]}` with its text capped, a binary blob saved in the sandbox (not
the workspace) and named by path; a server that errors, has no resources or does
not exist is a clear tool error; attacker text comes back escaped, never raw."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.runtime.tasks import TaskStatus
from sandbox_tools import wire
from tests.integration.harness import (
    convo,
    requests_of,
    scripted_run,
    text,
    tool,
    trust_hooks,
    write_agent,
)
from tests.integration.test_mcp_servers import probe_in, server, task, write_mcp_json

pytestmark = pytest.mark.integration

NOTES = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_sdk_resource_server.py"
SDK_PACKAGES = (
    "mcp", "mcp_types", "pydantic", "pydantic_core", "annotated_types", "typing_inspection",
    "typing_extensions.py", "anyio", "sniffio", "idna", "starlette", "sse_starlette",
    "python_multipart", "uvicorn", "click", "httpx2", "rich", "opentelemetry",
    "cryptography", "_cffi_backend.cpython-311-x86_64-linux-gnu.so", "pygments", "attr",
)  # fmt: skip
"""What `mcp_sdk_resource_server.py` imports from the host's environment."""
RESOURCE_TOOLS = set(wire.MCP_RESOURCE_TOOL_NAMES)
HOOK = (
    "python3 -c \"import json, sys; d = json.load(sys.stdin); "
    "bad = 'secret' in d['tool_input'].get('uri', ''); "
    "sys.stderr.write('hook refused ' + d['tool_name'] if bad else ''); "
    "sys.exit(2 if bad else 0)\""
)


def sdk_server_in(workspace: Path) -> dict[str, Any]:
    """Copy the SDK server and the SDK it imports into the workspace (the sandbox's
    python3 has no `mcp`); its `.mcp.json` entry."""
    site = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p, "mcp").is_dir())
    sdk = workspace / "sdk"
    sdk.mkdir()
    for name in SDK_PACKAGES:
        source = site / name
        if source.is_dir():
            shutil.copytree(source, sdk / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, sdk / name)
    for metadata in site.glob("*.dist-info"):  # read by importlib.metadata at import
        shutil.copytree(metadata, sdk / metadata.name)
    tools = workspace / "tools"
    tools.mkdir(exist_ok=True)
    shutil.copy(NOTES, tools / "notes.py")
    for root, dirs, files in os.walk(workspace):
        for entry in (*dirs, *files):
            os.chmod(Path(root, entry), 0o755 if entry in dirs else 0o644)
    return {"command": "python3", "args": ["/workspace/tools/notes.py", "/workspace/sdk"],
            "env": {"PYTHONDONTWRITEBYTECODE": "1"}}  # fmt: skip


def results_of(model: Any, conversation: str) -> list[dict[str, Any]]:
    last = requests_of(model, conversation)[-1].body
    return [
        block
        for message in last["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def content(block: dict[str, Any]) -> str:
    value = block["content"]
    return value if isinstance(value, str) else "".join(b.get("text", "") for b in value)


def offered(model: Any, conversation: str) -> dict[str, Any]:
    first = requests_of(model, conversation)[0].body
    return {t["name"]: t for t in first.get("tools", [])}


async def test_resources_are_listed_and_read_from_an_sdk_server_inside_the_sandbox(
    settings: Settings, workspace: Path
) -> None:
    probe_in(workspace)
    write_mcp_json(workspace, {"notes": sdk_server_in(workspace), "x": server("x")})
    # Lists one MCP tool and no resource tool: Claude Code offers it none of them.
    write_agent(workspace, "narrow", (
        "---\nname: narrow\ndescription: d\ntools: Read, mcp__notes__ping\n---\nx\n"
    ))  # fmt: skip
    # Lists one resource tool and no server: as in Claude Code, it lists every server's
    # resources, and is offered neither the other resource tool nor any server's tools.
    write_agent(workspace, "lister", (
        "---\nname: lister\ndescription: d\ntools: Read, ListMcpResourcesTool\n---\nx\n"
    ))  # fmt: skip
    settings.config_dir.mkdir(parents=True, exist_ok=True)
    (settings.config_dir / "settings.json").write_text(json.dumps({"hooks": {"PreToolUse": [
        {"matcher": "ReadMcpResourceTool", "hooks": [{"type": "command", "command": HOOK}]},
    ]}}))  # fmt: skip
    trust_hooks(settings, HOOK)
    read = "ReadMcpResourceTool"
    script = [
        convo("reader", {"prompt_contains": "MCP-RESOURCES"},
              [tool("ListMcpResourcesTool")],
              [tool(read, server="notes", uri="notes://readme")],
              [tool(read, server="notes", uri="notes://big")],
              [tool(read, server="notes", uri="blob://pixel.png")],
              [tool("Bash", command="head -c 8 /tmp/warden-mcp-resources/*.png | od -An -tx1")],
              [tool(read, server="notes", uri="notes://markup")],
              [tool(read, server="notes", uri="notes://broken")],
              [tool(read, server="notes", uri="notes://nope")],
              [tool(read, server="x", uri="notes://readme")],
              [tool(read, server="ghost", uri="notes://readme")],
              [tool("ListMcpResourcesTool", server="ghost")],
              [tool(read, server="notes", uri="notes://secret")],
              [text("done")]),
        convo("narrow", {"prompt_contains": "MCP-NARROW"},
              [tool("ListMcpResourcesTool")],
              [text("done")]),
        convo("lister", {"prompt_contains": "MCP-LISTER"},
              [tool("ListMcpResourcesTool", server="notes")],
              [text("done")]),
    ]  # fmt: skip
    async with scripted_run(settings, workspace, script, mode="default", allow=("Bash",)) as (
        run,
        model,
    ):
        reader = await run.manager.run_task(task("MCP-RESOURCES"))
        narrow = await run.manager.run_task(task("MCP-NARROW", "narrow"))
        lister = await run.manager.run_task(task("MCP-LISTER", "lister"))
        kinds = [(e.kind, str(e.data)) for e in run.store.events(run_id=run.run_id)]

    assert reader.status is TaskStatus.COMPLETED, reader
    assert narrow.status is TaskStatus.COMPLETED, narrow
    tools = offered(model, "reader")
    # Offered with Claude Code's input schemas (its sdk-tools.d.ts), once.
    assert tools["ListMcpResourcesTool"]["input_schema"]["properties"] == {
        "server": {"type": "string", "description": "Optional server name to filter resources by"}
    }
    assert "required" not in tools["ListMcpResourcesTool"]["input_schema"]
    assert tools[read]["input_schema"]["required"] == ["server", "uri"]
    assert set(tools) >= RESOURCE_TOOLS and "mcp__notes__ping" in tools
    # An agent that lists its tools and names neither resource tool gets none.
    assert not RESOURCE_TOOLS & set(offered(model, "narrow")), offered(model, "narrow")
    narrowed = content(results_of(model, "narrow")[0])
    assert "not available" in narrowed, narrowed
    assert lister.status is TaskStatus.COMPLETED, lister
    assert set(offered(model, "lister")) == {"Read", "ListMcpResourcesTool"}
    listed_by_lister = json.loads(content(results_of(model, "lister")[0]))
    assert {r["server"] for r in listed_by_lister} == {"notes"} and len(listed_by_lister) == 5

    (listed, readme, big, pixel, bytes_, markup, broken, nope, no_resources, ghost,
     ghost_list, hooked) = results_of(model, "reader")  # fmt: skip
    # The list: JSON, each resource with its server; `x` declares no resources.
    resources = json.loads(content(listed))
    assert {r["uri"] for r in resources} == {
        "notes://readme", "notes://big", "blob://pixel.png", "notes://markup", "notes://broken",
    }  # fmt: skip
    assert all(r["server"] == "notes" for r in resources)
    assert not listed.get("is_error")
    # A read is {"contents": [...]}; the server ran in the sandbox (only `lo`).
    where = json.loads(json.loads(content(readme))["contents"][0]["text"])
    assert where["interfaces"] == ["lo"] and where["hostname"] != socket.gethostname()
    # Text over the cap is cut inside its text, announced, and the result stays JSON.
    cut = content(big)
    assert len(cut) <= wire.MAX_MCP_RESOURCE_RESULT_CHARS
    text_ = json.loads(cut)["contents"][0]["text"]
    assert text_.startswith("bbbb") and "[resource text cut: showing" in text_
    assert "of 150000 characters]" in text_
    # A blob is saved inside the sandbox and named; its bytes never reach the model.
    saved = json.loads(content(pixel))["contents"][0]
    assert saved["blobSavedTo"].startswith(wire.MCP_RESOURCE_BLOB_DIR + "/")
    assert saved["blobSavedTo"].endswith(".png") and "8 bytes" in saved["text"]
    assert "iVBORw0KGgo" not in content(pixel)
    assert content(bytes_).split()[:8] == ["89", "50", "4e", "47", "0d", "0a", "1a", "0a"]
    assert not list(workspace.rglob("mcp-resource-*"))  # nothing saved in the workspace
    # Attacker text comes back as JSON text: its escapes escaped, never raw.
    assert "\x1b" not in content(markup) and "\x07" not in content(markup)
    assert json.loads(content(markup))["contents"][0]["text"].startswith("\x1b[31m")
    assert "\x1b" not in content(listed)
    # Errors name the server and say what to do.
    assert broken.get("is_error") and "MCP server 'notes' refused resources/read" in content(broken)
    assert not nope.get("is_error") and content(nope).startswith("Resource not found: notes://nope")
    assert "ListMcpResourcesTool" in content(nope)
    assert "MCP server 'x' does not offer resources" in content(no_resources)
    assert "'ghost' is not one of this agent's servers (its servers: notes, x)" in content(ghost)
    assert ghost_list.get("is_error") and "'ghost'" in content(ghost_list)
    # Decided on the host: the default mode asked nobody; the hook blocked one read.
    assert "hook refused ReadMcpResourceTool" in content(hooked), content(hooked)
    assert not any(kind == "approval_requested" for kind, _ in kinds)
    assert any(kind == "permission_denied" and read in data for kind, data in kinds)
