"""Network egress from inside real sandboxes: only `lo` exists before and after; an
allowed domain works with urllib (HTTP and HTTPS) and with `pip download` from a
local index; a denied domain, an IP literal, a name resolving to a private address
and a CONNECT whose SNI differs are refused with a clear message; an unknown domain
asks the run's approver and its answers hold; the byte cap stops a large download;
every decision is audited; and without egress nothing changes (no socket, no proxy
variables). Every upstream is a test server on 127.0.0.1: test domains reach them
only through the proxy's in-process test resolver."""

from __future__ import annotations

import ensurepip
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.egress.limits import EgressLimits
from orchestrator.egress.resolver import StaticResolver
from orchestrator.egress.setup import EgressRequest
from orchestrator.permissions.approvers import (
    ApprovalAnswer,
    ApprovalQuestion,
    CallbackApprover,
)
from orchestrator.results.build import build_result, stored_event
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.conftest import warden_argv, warden_env
from tests.egress_support import LocalCA, make_ca, publish_wheel, upstream
from tests.integration.harness import convo, requests_of, scripted_run, text, tool, write_agent

pytestmark = pytest.mark.integration

BYTE_CAP = 2_000_000
PROBE = r"""
import json, os, socket, ssl, subprocess, sys, urllib.error, urllib.request

H, S = sys.argv[1], sys.argv[2]
CA = "/workspace/ca.pem"
out = {}


def ifaces():
    lines = open("/proc/net/dev").read().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines)


def get(url, cafile=None, limit=300):
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(url, timeout=30, context=ctx) as resp:
            body = resp.read()
            return [resp.status, body[:limit].decode(errors="replace"), len(body)]
    except urllib.error.HTTPError as exc:
        return [exc.code, exc.read()[:limit].decode(errors="replace"), 0]
    except Exception as exc:
        return ["error", repr(exc)[:limit], 0]


def sni_mismatch():
    host, port = os.environ["HTTPS_PROXY"].removeprefix("http://").rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=30)
    raw.sendall(f"CONNECT allowed.test:{S} HTTP/1.1\r\nHost: allowed.test:{S}\r\n\r\n".encode())
    head = raw.recv(4096).decode(errors="replace").split("\r\n")[0]
    try:
        ssl.create_default_context(cafile=CA).wrap_socket(raw, server_hostname="other.test")
        return [head, "handshake completed"]
    except (ssl.SSLError, OSError) as exc:
        return [head, str(exc)]


def pip_download():
    cmd = [sys.executable, "/workspace/pip.whl/pip", "download", "--no-cache-dir",
           "--disable-pip-version-check", "--no-input", "--index-url",
           f"http://pypi.test:{H}/simple", "--trusted-host", "pypi.test",
           "-d", "/tmp/dl", "wardendemo"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    files = sorted(os.listdir("/tmp/dl")) if os.path.isdir("/tmp/dl") else []
    return [run.returncode, files, run.stderr[-600:]]


out["ifaces_before"] = ifaces()
out["proxy_vars"] = sorted(k for k in os.environ if "proxy" in k.lower())
out["https_allowed"] = get(f"https://allowed.test:{S}/hello", CA)
out["http_allowed"] = get(f"http://allowed.test:{H}/hello")
out["denied"] = get(f"http://denied.test:{H}/hello")
out["ip_literal"] = get("http://169.254.169.254/latest/meta-data/")
out["private"] = get(f"http://private.test:{H}/hello")
out["ask_yes"] = get(f"http://ask-yes.test:{H}/hello")
out["ask_no"] = get(f"http://ask-no.test:{H}/hello")
out["sni_mismatch"] = sni_mismatch()
out["pip"] = pip_download()
out["big"] = get(f"http://allowed.test:{H}/bytes/{5 * 1000 * 1000}")
out["ifaces_after"] = ifaces()
print("PROBE " + json.dumps(out))
"""

NAMES = ("allowed.test", "other.test", "denied.test", "ask-yes.test", "ask-no.test", "pypi.test")


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCA, int, int]]:
    ca = make_ca(tmp_path_factory.mktemp("ca"), ["allowed.test", "other.test"])
    publish_wheel("wardendemo", "1.0")
    with upstream() as http_port, upstream(ca) as https_port:
        yield ca, http_port, https_port


def resolver() -> StaticResolver:
    return StaticResolver({**dict.fromkeys(NAMES, "127.0.0.1"), "private.test": "10.0.0.7"})


def pip_wheel() -> Path:
    bundled = Path(ensurepip.__file__).parent / "_bundled"
    wheels = sorted(bundled.glob("pip-*.whl"))
    assert wheels, f"no pip wheel in {bundled}"
    return wheels[-1]


def prepare(workspace: Path, ca: LocalCA) -> None:
    owner = workspace.stat()
    for name, source in (("ca.pem", ca.ca_file), ("pip.whl", pip_wheel())):
        shutil.copy(source, workspace / name)
    (workspace / "probe.py").write_text(PROBE)
    for name in ("ca.pem", "pip.whl", "probe.py"):
        os.chown(workspace / name, owner.st_uid, owner.st_gid)
        (workspace / name).chmod(0o644)


def probe_output(body: dict[str, Any]) -> dict[str, Any]:
    last = body["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    text_ = json.dumps(results[0]["content"]) if results else ""
    raw = json.loads(text_) if text_.startswith('"') else text_
    line = next((ln for ln in str(raw).splitlines() if ln.startswith("PROBE ")), None)
    assert line is not None, f"no probe output in {raw!r}"
    parsed: dict[str, Any] = json.loads(line.removeprefix("PROBE "))
    return parsed


async def test_egress_from_inside_a_real_sandbox(
    settings: Settings, workspace: Path, local: tuple[LocalCA, int, int]
) -> None:
    ca, http_port, https_port = local
    prepare(workspace, ca)
    questions: list[ApprovalQuestion] = []

    def decide(q: ApprovalQuestion) -> ApprovalAnswer:
        questions.append(q)
        host = q.tool_input.get("host")
        if q.tool_name == "Network" and host == "ask-yes.test":
            return ApprovalAnswer(behavior="allow", decided_by="test-human")
        return ApprovalAnswer(behavior="deny", reason="not that one", decided_by="test-human")

    script = [
        convo(
            "prober",
            {"prompt_contains": "PROBE"},
            [tool("Bash", command=f"python3 probe.py {http_port} {https_port}", timeout=300000)],
            [text("done")],
        )
    ]
    egress = EgressRequest(
        allow_domains=("allowed.test", "pypi.test", "private.test"),
        deny_domains=("denied.test",),
        limits=EgressLimits(max_bytes_down=BYTE_CAP),
        resolver=resolver(),
    )
    async with scripted_run(
        settings,
        workspace,
        script,
        mode="default",
        allow=("Bash",),
        approver=CallbackApprover(decide),
        egress=egress,
    ) as (run, server):
        result = await run.manager.run_task(
            TaskInput(description="probe egress", prompt="PROBE", subagent_type="general-purpose")
        )
        audit = [a for a in run.store.audit(run.run_id) if a.tool_name == "Network"]
        events = [stored_event(e) for e in run.store.events(run_id=run.run_id)]
        result_doc = build_result(
            run.store, run.run_id, base_code=0, status="completed", text="", error=None,
            started=0.0,
        )  # fmt: skip

    assert result.status is TaskStatus.COMPLETED, result.error
    out = probe_output(requests_of(server, "prober")[1].body)
    # Still no network interface but lo, before and after.
    assert out["ifaces_before"] == out["ifaces_after"] == ["lo"], out
    assert "HTTPS_PROXY" in out["proxy_vars"] and "no_proxy" in out["proxy_vars"]
    assert out["https_allowed"][:2] == [200, f"hello from allowed.test:{https_port}\n"], out
    assert out["http_allowed"][:2] == [200, f"hello from allowed.test:{http_port}\n"]
    assert out["denied"][0] == 403 and "denied by the rule denied.test" in out["denied"][1]
    assert out["ip_literal"][0] == 403 and "is an IP address" in out["ip_literal"][1]
    assert out["private"][0] == 403
    assert "resolves to 10.0.0.7, a private address" in out["private"][1]
    assert out["ask_yes"][0] == 200
    assert out["ask_no"][0] == 403 and "not that one" in out["ask_no"][1]
    head, failure = out["sni_mismatch"]
    assert head.startswith("HTTP/1.1 200") and "UNRECOGNIZED_NAME" in failure.upper()
    code, files, stderr = out["pip"]
    assert code == 0 and files == ["wardendemo-1.0-py3-none-any.whl"], stderr
    big_status, _, big_len = out["big"]
    assert big_status == "error" or big_len < BYTE_CAP  # cut at the cap
    # The approver was asked about the unknown hosts only, as for a tool call.
    network_qs = [q for q in questions if q.tool_name == "Network"]
    assert sorted(str(q.tool_input["host"]) for q in network_qs) == ["ask-no.test", "ask-yes.test"]
    assert all(q.task_id == result.task_id and q.asked_by == "egress proxy" for q in network_qs)
    decided = {(str(a.tool_input["host"]), a.final) for a in audit}
    assert {
        ("allowed.test", "allow"),
        ("denied.test", "deny"),
        ("169.254.169.254", "deny"),
        ("private.test", "deny"),
        ("ask-yes.test", "allow"),
        ("ask-no.test", "deny"),
        ("pypi.test", "allow"),
    } <= decided
    assert any("differs from the CONNECT host" in a.reason for a in audit)
    summary = next(e.data for e in events if e.kind == "egress_summary")
    assert summary["cut"] and str(BYTE_CAP) in str(summary["cut"])
    assert isinstance(summary["bytes_down"], int) and summary["bytes_down"] <= BYTE_CAP
    # The --json result lists the destinations the task used.
    (task_summary,) = result_doc.tasks
    uses = {(u.host, u.refused > 0, u.connections > 0) for u in task_summary.egress}
    assert ("allowed.test", False, True) in uses and ("denied.test", True, False) in uses
    assert sum(u.bytes_down for u in task_summary.egress) == summary["bytes_down"]


NO_EGRESS_PROBE = (
    "ls /run/warden; env | grep -ci proxy; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
)


@pytest.mark.parametrize("agent_says_none", [False, True], ids=["egress off", "network: none"])
async def test_without_egress_a_sandbox_gets_no_socket_and_no_variables(
    settings: Settings, workspace: Path, agent_says_none: bool
) -> None:
    """Egress off for the run changes nothing; an agent file's `network: none` takes
    egress away from that agent even when the run has it."""
    agent_type = "general-purpose"
    extra: dict[str, Any] = {}
    if agent_says_none:
        agent_type = "offline"
        write_agent(
            workspace,
            "offline",
            "---\nname: offline\ndescription: no network\ntools: Bash\nnetwork: none\n---\n"
            "You work offline.\n",
        )
        extra["egress"] = EgressRequest(allow_domains=("allowed.test",), resolver=resolver())
    script = [
        convo(
            "plain",
            {"prompt_contains": "PLAIN"},
            [tool("Bash", command=NO_EGRESS_PROBE)],
            [text("done")],
        )
    ]
    async with scripted_run(settings, workspace, script, **extra) as (run, server):
        assert (run.manager.egress is None) is not agent_says_none
        result = await run.manager.run_task(
            TaskInput(description="plain", prompt="PLAIN", subagent_type=agent_type)
        )
    assert result.status is TaskStatus.COMPLETED, result.error
    last = requests_of(server, "plain")[1].body["messages"][-1]["content"]
    output = json.dumps([b.get("content") for b in last if b.get("type") == "tool_result"])
    assert "egress.sock" not in output and "broker.sock" in output
    assert "\\n0\\n" in output  # no variable mentions a proxy
    assert "lo\\n" in output and "eth" not in output


def test_warden_exec_allow_domain(tmp_path: Path, local: tuple[LocalCA, int, int]) -> None:
    """`warden exec --allow-domain` end to end through the CLI. The address rule
    127.0.0.1 is the one way to reach the host's test server without a resolver."""
    _, http_port, _ = local
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    code = (
        "import os, urllib.request, urllib.error\n"
        "def get(u):\n"
        "    try:\n"
        "        return urllib.request.urlopen(u, timeout=30).read().decode()\n"
        "    except urllib.error.HTTPError as e:\n"
        "        return f'{e.code} ' + e.read().decode()\n"
        f"print('A', get('http://127.0.0.1:{http_port}/hello'), end='')\n"
        f"print('B', get('http://denied.test:{http_port}/hello'), end='')\n"
        "print('IF', open('/proc/net/dev').read().count(':'))\n"
    )
    argv = [
        *warden_argv(), "exec", "--image", "agent", "--workspace", str(workspace),
        "--allow-domain", "127.0.0.1", "--timeout", "120",
        "--", "env", "-u", "NO_PROXY", "-u", "no_proxy", "python3", "-c", code,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=warden_env(), timeout=180)
    assert done.returncode == 0, done.stderr
    assert f"A hello from 127.0.0.1:{http_port}" in done.stdout
    assert "B 403 warden egress: denied.test is in no allowedDomains" in done.stdout
    assert "IF 1" in done.stdout  # only lo
    assert "warden: egress refused: denied.test" in done.stderr


def test_warden_exec_managed_domains_only(tmp_path: Path, local: tuple[LocalCA, int, int]) -> None:
    """Managed `sandbox.network.allowManagedDomainsOnly`: the command line's
    `--allow-domain` no longer opens a destination, from inside a real sandbox."""
    _, http_port, _ = local
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    managed = tmp_path / "managed-settings.json"
    only = {"allowManagedDomainsOnly": True, "allowedDomains": ["127.0.0.1:1"]}
    managed.write_text(json.dumps({"sandbox": {"network": only}}))
    code = (
        "import urllib.request, urllib.error\n"
        "def get(u):\n"
        "    try:\n"
        "        return urllib.request.urlopen(u, timeout=30).read().decode()\n"
        "    except urllib.error.HTTPError as e:\n"
        "        return f'{e.code} ' + e.read().decode()\n"
        f"print('A', get('http://127.0.0.1:{http_port}/hello'), end='')\n"
        f"print('B', get('http://named.test:{http_port}/hello'), end='')\n"
    )
    argv = [
        *warden_argv(), "exec", "--image", "agent", "--workspace", str(workspace),
        "--allow-domain", "127.0.0.1", "--timeout", "120",
        "--", "env", "-u", "NO_PROXY", "-u", "no_proxy", "python3", "-c", code,
    ]  # fmt: skip
    env = warden_env(WARDEN_MANAGED_POLICY=str(managed))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
    assert "A 403 warden egress: 127.0.0.1" in done.stdout, (done.stdout, done.stderr)
    assert "B 403 warden egress: named.test is outside the domains allowManagedDomainsOnly" in (
        done.stdout
    )
    assert "allowed domains 127.0.0.1 not applied" in done.stderr
