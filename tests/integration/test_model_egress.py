"""The model API is egress, tried from inside real sandboxes: a subagent whose agent
file says `network: none` cannot have the model provider fetch for it (web_fetch,
web_search, code_execution, an unknown server tool, an MCP server, a URL source),
even when the run's policy allows every one of those tools: the broker refuses each
with a 400 naming why, the scripted model endpoint never sees it, and the audit
records the refusal. A subagent with egress gets its web tools forwarded with
`allowed_domains` narrowed to its egress allowlist, and an MCP server only at an
allowed host. The requests go through the real anthropic SDK in the broker."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.egress.resolver import StaticResolver
from orchestrator.egress.setup import EgressRequest
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.integration.harness import convo, requests_of, scripted_run, text, tool, write_agent

pytestmark = pytest.mark.integration

PROBE = r"""
import json, socket, sys
SOCK = "/run/warden/broker.sock"

def request(body):
    data = json.dumps(body).encode()
    head = ("POST /v1/messages HTTP/1.1\r\nHost: warden-broker\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
    s = socket.socket(socket.AF_UNIX)
    s.connect(SOCK)
    s.settimeout(120)
    s.sendall(head.encode() + data)
    raw = b""
    while chunk := s.recv(65536):
        raw += chunk
    s.close()
    header, _, payload = raw.partition(b"\r\n\r\n")
    return [int(header.split()[1]), payload.decode(errors="replace")[:300]]

tag = sys.argv[1]
def ask(name, **extra):
    return {"messages": [{"role": "user", "content": f"PROVIDER-{tag}-{name}"}],
            "max_tokens": 50, **extra}

image = {"type": "image", "source": {"type": "url", "url": "https://docs.test/a.png"}}
parts = {
    "web_fetch": {"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]},
    "web_search": {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
    "code_execution": {"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]},
    "unknown_tool": {"tools": [{"type": "brand_new_20990101", "name": "n"}]},
    "mcp_docs": {"mcp_servers": [{"type": "url", "url": "https://docs.test/mcp", "name": "docs"}]},
    "mcp_evil": {"mcp_servers": [{"type": "url", "url": "https://evil.test/mcp", "name": "docs"}]},
    "url_image": {"messages": [{"role": "user", "content": [image, {"type": "text", "text": f"PROVIDER-{tag}-url_image"}]}]},
}
out = {}
for name, extra in parts.items():
    body = ask(name, **extra)
    if "messages" in extra:
        body["messages"] = extra["messages"]
    out[name] = request(body)
print(json.dumps(out))
"""

RULES = [
    "Bash",
    "WebFetch",
    "WebSearch",
    "CodeExecution",
    "ServerTool(brand_new_20990101)",
    "mcp__docs",
]


def report_of(result_text: str) -> dict[str, Any]:
    for line in reversed(result_text.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    raise AssertionError(f"no JSON report in {result_text!r}")


async def test_server_tools_follow_each_subagents_egress(
    settings: Settings, workspace: Path
) -> None:
    claude = workspace / ".claude"
    claude.mkdir(exist_ok=True)
    (claude / "settings.json").write_text(json.dumps({"permissions": {"allow": RULES}}))
    write_agent(
        workspace,
        "offline",
        "---\nname: offline\ndescription: no network\ntools: Bash\nwarden:\n  network: none\n---\n"
        "Go.\n",
    )
    write_agent(
        workspace, "online", "---\nname: online\ndescription: egress\ntools: Bash\n---\nGo.\n"
    )
    probe = workspace / "probe.py"
    probe.write_text(PROBE)
    os.chown(probe, 1000, 1000)
    script = [
        convo(
            f"{who}",
            {"prompt_contains": who.upper()},
            [tool("Bash", command=f"python3 /workspace/probe.py {who}", timeout=300_000)],
            [text("{last_tool_result}")],
        )
        for who in ("offline", "online")
    ] + [convo("provider", {"prompt_contains": "PROVIDER-"}, [text("fetched")])]
    egress = EgressRequest(allow_domains=("docs.test", "pypi.test"), resolver=StaticResolver({}))
    async with scripted_run(settings, workspace, script, egress=egress) as (run, server):
        results = {
            who: await run.manager.run_task(
                TaskInput(description=who, prompt=who.upper(), subagent_type=who)
            )
            for who in ("offline", "online")
        }
        audit = run.store.audit(run.run_id)
        events = list(run.store.events(run_id=run.run_id))

    for result in results.values():
        assert result.status is TaskStatus.COMPLETED, result.error
    offline = report_of(results["offline"].text)
    online = report_of(results["online"].text)
    reached = [r.body for r in requests_of(server, "provider")]
    said = [json.dumps(b["messages"]) for b in reached]

    # network: none: every part refused, saying why; none reached the model endpoint.
    assert set(offline) == {
        "web_fetch", "web_search", "code_execution", "unknown_tool", "mcp_docs", "mcp_evil",
        "url_image",
    }  # fmt: skip
    for name, (status, body) in offline.items():
        assert status == 400, (name, body)
        assert "no network egress" in body, (name, body)
    assert not any("PROVIDER-offline" in s for s in said)
    denied = [a for a in audit if a.source == "broker forwarding" and a.final == "deny"]
    assert any(a.decided_by == "egress: none" for a in denied)
    assert any(e.kind == "broker_rejected" for e in events)

    # With egress: forwarded, web tools narrowed to the egress allowlist; the MCP
    # server at a host outside it refused.
    for name in (
        "web_fetch",
        "web_search",
        "code_execution",
        "unknown_tool",
        "mcp_docs",
        "url_image",
    ):
        assert online[name][0] == 200, (name, online[name])
    assert online["mcp_evil"][0] == 400 and "evil.test" in online["mcp_evil"][1]
    by_name = {
        s.split("PROVIDER-online-")[1].split('"')[0]: b
        for s, b in zip(said, reached, strict=True)
        if "PROVIDER-online-" in s
    }
    assert set(by_name) == {
        "web_fetch", "web_search", "code_execution", "unknown_tool", "mcp_docs", "url_image",
    }  # fmt: skip
    for name in ("web_fetch", "web_search"):
        assert by_name[name]["tools"][0]["allowed_domains"] == ["docs.test", "pypi.test"]
    assert by_name["mcp_docs"]["mcp_servers"][0]["url"] == "https://docs.test/mcp"
