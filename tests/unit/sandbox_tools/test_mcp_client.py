"""The runner's MCP client against a real stdio server process (the tests' probe
server): tools listed under `mcp__<server>__<tool>` with their schemas and filtered
by the spec, calls forwarded and their text returned, results cut and non-text
content named; a remote server needs the sandbox's egress proxy; a server that hangs at initialize, exits at start, is missing, or
dies mid-call becomes a warning or a tool error naming it. (Where the server runs is
the integration test's: `tests/integration/test_mcp_servers.py`.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sandbox_tools import wire, wire_answers
from sandbox_tools.tools.mcp import McpTools, render_result

PROBE = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp_probe_server.py")


def probe(
    name: str, *args: str, tools: tuple[str, ...] | None = None, denied: tuple[str, ...] = ()
) -> wire_answers.McpServer:
    return wire_answers.McpServer(
        name=name, command=sys.executable, args=(PROBE, *args), tools=tools, denied=denied
    )


def spec(*servers: wire_answers.McpServer, startup_s: float = 20.0) -> wire_answers.TaskSpec:
    return wire_answers.TaskSpec(
        task_id="t", model="m", system_prompt="s", prompt="p", tools=[], max_turns=1,
        mcp_servers=servers, mcp_startup_timeout_s=startup_s,
    )  # fmt: skip


def test_tools_are_offered_called_and_filtered(tmp_path: Path) -> None:
    mcp = McpTools(spec(probe("x.y"), probe("z", tools=("mcp__z__echo",))), tmp_path)
    try:
        assert mcp.start() == []
        assert mcp.names == ("mcp__x_y__where", "mcp__x_y__echo", "mcp__x_y__crash", "mcp__z__echo")
        echo = next(d for d in mcp.definitions if d["name"] == "mcp__z__echo")
        assert echo["input_schema"]["required"] == ["text"]  # type: ignore[index]
        assert mcp.call("mcp__z__echo", {"text": "ab", "times": 2}).text == "abab"
        crashed = mcp.call("mcp__x_y__crash", {})
        assert crashed.is_error and "MCP server 'x.y': it exited (exit code 7)" in crashed.text
        assert "crashing as asked" in crashed.text
        again = mcp.call("mcp__x_y__echo", {"text": "a"})
        assert again.is_error and "MCP server 'x.y'" in again.text
        assert mcp.call("mcp__z__echo", {"text": "still"}).text == "still"  # the other goes on
    finally:
        mcp.close()


def test_removed_tools_are_not_offered(tmp_path: Path) -> None:
    """A deny rule or `disallowedTools` naming some of a server's tools leaves them out
    of what the model is offered (the others stay), as the pinned Claude Code does."""
    mcp = McpTools(spec(probe("w", denied=("mcp__w__ec*", "mcp__w__crash"))), tmp_path)
    try:
        assert mcp.start() == []
        assert mcp.names == ("mcp__w__where",)
        assert mcp.call("mcp__w__echo", {"text": "a"}).is_error
    finally:
        mcp.close()


def test_servers_that_do_not_start_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)  # a sandbox without egress
    mcp = McpTools(spec(
        probe("slow", "hang"), probe("gone", "exit"),
        wire_answers.McpServer(name="missing", command="/no/such/server"),
        wire_answers.McpServer(name="remote", transport="http", url="http://127.0.0.1:9/mcp"),
        wire_answers.McpServer(name="tls", transport="http", url="https://mcp.example.test/mcp"),
        wire_answers.McpServer(name="ftp", transport="http", url="ftp://mcp.example.test/"),
        wire_answers.McpServer(name="old", transport="sse", url="http://127.0.0.1:9/sse"),
        startup_s=1.0,
    ), tmp_path)  # fmt: skip
    try:
        said = "\n".join(mcp.start())
    finally:
        mcp.close()
    assert mcp.names == ()
    assert "MCP server 'slow': it did not answer initialize within 1 s" in said
    assert "MCP server 'gone': it exited (exit code 3)" in said and "exiting at start" in said
    assert "MCP server 'missing' did not start" in said
    assert "MCP server 'remote' not started: this subagent has no network egress" in said
    assert "MCP server 'tls' not started: this subagent has no network egress" in said
    assert "MCP server 'ftp' not started: 'ftp://mcp.example.test/' is not an http://" in said
    assert "MCP server 'old' not started: the SSE transport" in said


def test_results_are_text_only_and_cut() -> None:
    long = "x" * (wire.MAX_MCP_RESULT_CHARS + 10)
    text = render_result({"content": [{"type": "text", "text": long}]})
    assert text.startswith("x" * 100) and text.endswith("characters of the MCP tool's result]")
    shown = render_result({"content": [
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
        {"type": "resource_link", "uri": "file:///b"},
    ]})  # fmt: skip
    assert "AAAA" not in shown and "image (image/png) not shown" in shown
    assert "inside" in shown and "[resource link: file:///b]" in shown
    assert render_result({"structuredContent": {"a": 1}}) == '{"a": 1}'
    assert render_result({}) == "(the MCP tool returned no content)"


def test_the_host_refuses_names_outside_the_spec_servers() -> None:
    servers = [("db", None, ("mcp__db__drop", "mcp__*__ad*")), ("web", ("mcp__web__get",), ())]
    assert wire.mcp_tool_offered("mcp__db__anything", servers)
    assert not wire.mcp_tool_offered("mcp__db__drop", servers)  # removed by a deny rule
    assert not wire.mcp_tool_offered("mcp__db__admin", servers)
    assert wire.mcp_tool_offered("mcp__web__get", servers)
    assert not wire.mcp_tool_offered("mcp__web__post", servers)
    assert not wire.mcp_tool_offered("mcp__other__x", servers)
    assert not wire.mcp_tool_offered("mcp__db__", servers)


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("mcp__x__poke", ["mcp__x__poke"], ["mcp__x__poke2", "mcp__x__pok"]),
        ("mcp__x*", ["mcp__x__a", "mcp__xy__a"], ["mcp__y__x"]),
        ("mcp__*__zap", ["mcp__a__zap", "mcp__b_c__zap"], ["mcp__a__zap2"]),
        ("mcp__y__*o*", ["mcp__y__look", "mcp__y__poke"], ["mcp__y__zap"]),
        ("mcp__*", ["mcp__a__b"], ["Bash"]),
        ("mcp__a*a__b", ["mcp__aa__b", "mcp__axa__b"], ["mcp__a__b"]),
    ],
)
def test_removed_tool_patterns_take_a_star_as_any_text(
    pattern: str, matches: list[str], misses: list[str]
) -> None:
    """As the pinned Claude Code removes MCP tools by deny rules (`mcp__x*` removed the
    tools of `x` and `xy`; `mcp__y__*o*` look and poke, not zap)."""
    assert all(wire.mcp_name_glob(pattern, n) for n in matches)
    assert not any(wire.mcp_name_glob(pattern, n) for n in misses)
