"""A socket of a run is reachable by exactly one sandbox: socket directories live
under a root no workspace may include (`warden exec`/`run` refuse one that does,
saying so), a second sandbox of the same run sees no socket but its own, and a
second host user (a real other uid, also one equal to the old fallback uid 1000)
reaches none of a live run's sockets. Real engine, real runs; only the model is
scripted."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from orchestrator import owner
from orchestrator.config import DEFAULT_FALLBACK_UID, Settings
from orchestrator.lifecycle import socket_dirs
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.conftest import run_warden
from tests.integration.harness import (
    convo,
    hold_command,
    requests_of,
    scripted_run,
    text,
    tool,
    until,
)
from tests.integration.sandbox_fixtures import sandbox_image  # noqa: F401
from tests.json_shapes import obj

pytestmark = pytest.mark.integration

SECOND_USERS = ((1000, 1000), (4242, 4242))
"""Host users who try the sockets: the uid sandboxes used to fall back to, and another."""

PROBE = r"""
import json, os, socket, stat
found = {}
for top, dirs, files in os.walk("/", onerror=lambda e: None):
    if top.startswith(("/proc", "/sys", "/dev")):
        dirs[:] = []
        continue
    for name in files + dirs:
        path = os.path.join(top, name)
        try:
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                continue
        except OSError:
            continue
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            found[path] = "connected"
        except OSError as exc:
            found[path] = type(exc).__name__
        finally:
            s.close()
print("SOCKETS " + json.dumps(found, sort_keys=True))
"""


def bash_task(prompt: str) -> TaskInput:
    return TaskInput(description="probe", prompt=prompt, subagent_type="general-purpose")


def live_sockets() -> list[Path]:
    """Every socket under the socket root whose directory this process made."""
    me = os.getpid()
    out = []
    root = socket_dirs.socket_root()
    for marker in root.glob("*" + socket_dirs.MARKER_SUFFIX):
        identity = owner.Owner.from_json(marker.read_text())
        if identity is None or identity.pid != me:
            continue
        directory = root / marker.name.removesuffix(socket_dirs.MARKER_SUFFIX)
        out += [p for p in directory.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)]
    return out


def try_as(uid: int, gid: int, path: Path) -> str:
    """Connect to `path` as another host user (a forked child that drops to uid:gid)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        verdict = "error"
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(2)
            try:
                s.connect(str(path))
                s.sendall(b"GET /v1/spec HTTP/1.1\r\nHost: x\r\n\r\n")
                data = s.recv(64)
                verdict = "served" if data.startswith(b"HTTP/1.1 200") else "closed"
            except OSError as exc:
                verdict = type(exc).__name__
        finally:
            os.write(write_end, verdict.encode())
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as fh:
        return fh.read().decode()


def test_a_workspace_holding_warden_sockets_or_state_is_refused(settings: Settings) -> None:
    root = socket_dirs.socket_root()
    for workspace in (root, root.parent, settings.state_dir.parent):
        workspace.mkdir(parents=True, exist_ok=True)
        done = run_warden(settings, "exec", "--workspace", str(workspace), "--", "true")
        assert done.returncode != 0, workspace
        assert "contains warden's" in done.stderr and "--workspace" in done.stderr, done.stderr


async def test_no_other_sandbox_or_host_user_reaches_a_live_runs_sockets(
    settings: Settings, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root: it acts as other host users")
    # A root-owned workspace: sandboxes run as the fallback uid (the case where a
    # host user used to share the sandbox's uid).
    workspace = tmp_path / "root-owned"
    workspace.mkdir()
    workspace.chmod(0o777)
    (workspace / "probe.py").write_text(PROBE)
    script = [
        convo("holder", {"prompt_contains": "HOLD"},
              [tool("Bash", command=hold_command("holding"), timeout=600000)], [text("held")]),
        convo("prober", {"prompt_contains": "PROBE"},
              [tool("Bash", command="python3 /workspace/probe.py")], [text("{tool_results}")]),
    ]  # fmt: skip
    async with scripted_run(settings, workspace, script) as (run, server):
        holder = asyncio.create_task(run.manager.run_task(bash_task("HOLD")))
        # The holder's Bash call went through its broker, so its sockets are up.
        await until((workspace / "holding").exists, 180, "the holder's Bash call")
        sockets = live_sockets()
        verdicts = {
            (uid, str(path)): await asyncio.to_thread(try_as, uid, gid, path)
            for uid, gid in SECOND_USERS
            for path in sockets
        }
        probed = await run.manager.run_task(bash_task("PROBE"))
        (workspace / "holding.release").touch()
        held = await holder

    assert held.status is TaskStatus.COMPLETED and probed.status is TaskStatus.COMPLETED
    assert len(sockets) >= 2, sockets  # at least the holder's broker and a warm hold
    assert all(v == "PermissionError" for v in verdicts.values()), verdicts
    # The second sandbox sees only its own socket directory (the holder's is nowhere)
    # and reaches only its own broker there.
    body = json.dumps(requests_of(server, "prober")[1].body)
    seen = json.loads(body[body.index("SOCKETS ") + 8 :].split("\\n")[0].replace('\\"', '"'))
    assert all(path.startswith("/run/warden/") for path in seen), seen
    assert [p for p, v in seen.items() if v == "connected"] == ["/run/warden/broker.sock"]
    assert DEFAULT_FALLBACK_UID not in (1000, 4242)


NEIGHBOUR = r"""
import json, os, socket
out = {}
for name in sorted(os.listdir("/n")):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(3)
    try:
        s.connect("/n/" + name)
        s.sendall(b"GET /v1/spec HTTP/1.1\r\nHost: x\r\n\r\n")
        out[name] = "reached" if s.recv(64) else "closed"
    except socket.timeout:
        out[name] = "reached"  # accepted and held open: it is talking to the host
    except (BrokenPipeError, ConnectionResetError):
        out[name] = "closed"  # connected, then the host closed it before any answer
    except OSError as exc:
        out[name] = type(exc).__name__
    finally:
        s.close()
try:
    os.listdir("/d")
    out["dir"] = "listed"
except OSError as exc:
    out["dir"] = type(exc).__name__
print("NEIGHBOUR " + json.dumps(out, sort_keys=True))
"""
"""Run in a sandbox of the same run's uid and gid that has, somehow, every socket of
the run mounted (`/n/<i>`), and the holder's socket directory (`/d`)."""


def neighbour_sees(run: Any, sockets: list[Path], image: str) -> dict[str, str]:
    from orchestrator import labels
    from orchestrator.backend.contract import Mount, SandboxSpec

    identity = run.manager.identity
    spec = SandboxSpec(
        image=image,
        command=["python3", "-c", NEIGHBOUR],
        mounts=[
            *(Mount(source=p, target=f"/n/{i}-{p.name}") for i, p in enumerate(sockets)),
            Mount(source=sockets[0].parent, target="/d"),
        ],
        user=f"{identity.uid}:{identity.gid}",
        warden_labels=labels.warden_labels(run.session, task="neighbour"),
        timeout_s=60,
    )
    result = run.manager.backend.run(spec)
    line = next(x for x in result.stdout.splitlines() if x.startswith("NEIGHBOUR "))
    verdicts: dict[str, str] = json.loads(line.removeprefix("NEIGHBOUR "))
    return verdicts


async def test_a_neighbour_sandbox_that_reaches_anothers_sockets_is_refused(
    settings: Settings,
    workspace: Path,
    sandbox_image: str,  # noqa: F811 - the fixture imported above
) -> None:
    """Same uid, same gid, the socket files in reach: each socket's own group keeps the
    kernel from connecting it, and when the modes are loosened the host's peer check
    (the group, from SO_PEERGROUPS) refuses it; the holder itself is served all along."""
    script = [
        convo("holder", {"prompt_contains": "HOLD"},
              [tool("Bash", command=hold_command("holding"), timeout=600000)], [text("held")]),
    ]  # fmt: skip
    async with scripted_run(settings, workspace, script) as (run, _server):
        holder = asyncio.create_task(run.manager.run_task(bash_task("HOLD")))
        # The holder's Bash call went through its broker, so its sockets are up.
        await until((workspace / "holding").exists, 180, "the holder's Bash call")
        sockets = sorted(live_sockets(), key=lambda p: p.name != "broker.sock")
        assert sockets[0].name == "broker.sock", sockets
        as_made = await asyncio.to_thread(neighbour_sees, run, sockets, sandbox_image)
        for path in sockets:  # a slip that lets every local process open them
            path.chmod(0o666)
        loosened = await asyncio.to_thread(neighbour_sees, run, sockets, sandbox_image)
        (workspace / "holding.release").touch()
        held = await holder
        notices = [
            str(obj(e.data["data"]).get("message", ""))
            for e in run.store.events(run_id=run.run_id)
            if e.kind == "broker_notice" and obj(e.data["data"]).get("notice") == "peer_refused"
        ]

    assert held.status is TaskStatus.COMPLETED, held
    assert len(sockets) >= 2, sockets
    socket_names = [k for k in as_made if k != "dir"]
    assert len(socket_names) == len(sockets)
    assert all(as_made[k] == "PermissionError" for k in socket_names), as_made
    assert as_made["dir"] == "PermissionError"
    assert all(loosened[k] == "closed" for k in socket_names), loosened
    assert any("without group" in n and "another sandbox" in n for n in notices), notices
