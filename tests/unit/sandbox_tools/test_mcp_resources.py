"""The runner's MCP resource tools against a real server built with the `mcp` SDK (run
here as a local process): offered only when the spec gives them and a started server
declares `resources`; a list is JSON with each resource's `server`; a read's text is
cut to the limit with an announcement and stays one JSON document; a blob is saved
(private, never overwriting) and named by path; errors name the server, and an
unknown resource is a plain answer (as in Claude Code). (Where the
server runs, the host's decisions and the real image are the integration test's:
`tests/integration/test_mcp_resources.py`.)"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from sandbox_tools import wire, wire_answers
from sandbox_tools.tools.mcp import McpTools

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NOTES = str(FIXTURES / "mcp_sdk_resource_server.py")
PROBE = str(FIXTURES / "mcp_probe_server.py")
BOTH = list(wire.MCP_RESOURCE_TOOL_NAMES)


def spec(tools: list[str], *scripts: tuple[str, str]) -> wire_answers.TaskSpec:
    servers = tuple(
        wire_answers.McpServer(name=name, command=sys.executable, args=(script,))
        for name, script in scripts
    )
    return wire_answers.TaskSpec(
        task_id="t", model="m", system_prompt="s", prompt="p", tools=tools, max_turns=1,
        mcp_servers=servers, mcp_startup_timeout_s=30.0, mcp_tool_timeout_s=30.0,
    )  # fmt: skip


def started(tools: list[str], *scripts: tuple[str, str], root: Path) -> McpTools:
    mcp = McpTools(spec(tools, *scripts), root)
    assert mcp.start() == []
    return mcp


def test_offered_only_when_given_and_a_server_declares_resources(tmp_path: Path) -> None:
    cases = [
        ([], [("notes", NOTES)], ()),  # the agent was not given them
        (BOTH, [("x", PROBE)], ()),  # no server declares resources
        (["ListMcpResourcesTool"], [("notes", NOTES)], ("ListMcpResourcesTool",)),
        (BOTH, [("x", PROBE), ("notes", NOTES)], tuple(BOTH)),
    ]
    for tools, scripts, expected in cases:
        mcp = started(tools, *scripts, root=tmp_path)
        try:
            assert mcp.resource_tools == expected, (tools, scripts)
            names = [d["name"] for d in mcp.definitions]
            assert [n for n in names if n in BOTH] == list(expected)
            assert all(mcp.offers(n) for n in expected)
        finally:
            mcp.close()


def test_list_and_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blobs = tmp_path / "blobs"
    monkeypatch.setattr(wire, "MCP_RESOURCE_BLOB_DIR", str(blobs))
    mcp = started(BOTH, ("x", PROBE), ("notes", NOTES), root=tmp_path)
    try:
        listed = mcp.call("ListMcpResourcesTool", {})
        resources = json.loads(listed.text)
        assert len(resources) == 5 and {r["server"] for r in resources} == {"notes"}
        assert resources[0] == {"uri": "notes://readme", "name": "readme",
                                "description": "Where this server runs",
                                "mimeType": "text/plain", "server": "notes"}  # fmt: skip
        assert json.loads(mcp.call("ListMcpResourcesTool", {"server": "notes"}).text) == resources

        big = mcp.call("ReadMcpResourceTool", {"server": "notes", "uri": "notes://big"})
        assert not big.is_error and len(big.text) <= wire.MAX_MCP_RESOURCE_RESULT_CHARS
        (entry,) = json.loads(big.text)["contents"]
        assert entry["uri"] == "notes://big" and entry["mimeType"] == "text/plain"
        assert entry["text"].endswith(" of 150000 characters]")

        pixel = mcp.call("ReadMcpResourceTool", {"server": "notes", "uri": "blob://pixel.png"})
        (entry,) = json.loads(pixel.text)["contents"]
        saved = Path(entry["blobSavedTo"])
        assert saved.parent == blobs and saved.suffix == ".png"
        assert saved.read_bytes() == b"\x89PNG\r\n\x1a\n"
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        assert entry["text"] == (f"[Resource from notes at blob://pixel.png] Binary content "
                                 f"(image/png, 8 bytes) saved to {saved}")  # fmt: skip
        again = mcp.call("ReadMcpResourceTool", {"server": "notes", "uri": "blob://pixel.png"})
        assert json.loads(again.text)["contents"][0]["blobSavedTo"] != str(saved)

        markup = mcp.call("ReadMcpResourceTool", {"server": "notes", "uri": "notes://markup"})
        assert "\x1b" not in markup.text and "\\u001b[31mred" in markup.text
    finally:
        mcp.close()


def test_errors_name_the_server_and_the_fix(tmp_path: Path) -> None:
    mcp = started(BOTH, ("x", PROBE), ("notes", NOTES), root=tmp_path)
    try:
        def read(server: str, uri: str) -> str:
            output = mcp.call("ReadMcpResourceTool", {"server": server, "uri": uri})
            assert output.is_error, output
            return output.text

        assert "MCP server 'notes' refused resources/read" in read("notes", "notes://broken")
        # As Claude Code: an unknown resource is an answer, not a failed call.
        nope = mcp.call("ReadMcpResourceTool", {"server": "notes", "uri": "notes://nope"})
        assert not nope.is_error and nope.text.startswith("Resource not found: notes://nope")
        assert "ListMcpResourcesTool" in nope.text
        assert "MCP server 'x' does not offer resources" in read("x", "a://b")
        assert "its servers: x, notes" in read("ghost", "a://b")
        missing = mcp.call("ReadMcpResourceTool", {"server": "notes"})
        assert missing.is_error and "uri" in missing.text
        listed = mcp.call("ListMcpResourcesTool", {"server": "x"})
        assert listed.is_error and "does not offer resources" in listed.text
        # A server that goes away is named; the list of the others goes on.
        assert mcp.call("mcp__x__crash", {}).is_error
        assert len(json.loads(mcp.call("ListMcpResourcesTool", {}).text)) == 5
    finally:
        mcp.close()


def test_a_long_list_keeps_the_resources_that_fit_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "MAX_MCP_RESOURCE_RESULT_CHARS", 400)
    mcp = started(BOTH, ("notes", NOTES), root=tmp_path)
    try:
        output = mcp.call("ListMcpResourcesTool", {})
        listing, note = output.text.split("\n")
        kept = json.loads(listing)
        assert len(listing) <= 400 and 0 < len(kept) < 5
        assert [r["uri"] for r in kept] == ["notes://readme", "notes://big", "blob://pixel.png"][
            : len(kept)
        ]
        assert note == (f"[output truncated: showing {len(kept)} of 5 resources; give server "
                        "to list one server's]")  # fmt: skip
        assert output.summary == f"{len(kept)} resources"
    finally:
        mcp.close()
