"""Locks in the sandbox's isolation: each attack is tried from inside a container
started by `warden exec` (the CLI, as a user runs it) and must fail safely.

Network isolation is proven by inspection only (interfaces and routes), never by
sending traffic.
"""

# ruff: noqa: F811 - pytest fixtures are imported, then named as parameters

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import DEFAULT_FALLBACK_UID
from tests.conftest import UNPRIVILEGED, warden_argv, warden_env
from tests.integration.sandbox_fixtures import (  # noqa: F401
    docker_client,
    label_args,
    no_leftovers,
    sandbox_image,
)

pytestmark = pytest.mark.integration

FLOOD_BYTES = 100_000_000
RSS_GROWTH_LIMIT_KB = 60 * 1024
"""How much more the CLI may hold at its peak for a 100 MB flood than for `true`."""


def warden_exec(
    workspace: Path,
    image: str,
    labels: dict[str, str],
    *command: str,
    flags: tuple[str, ...] = (),
    timeout_s: float = 60,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run `warden exec --json` and return the process and its parsed JSON."""
    argv = warden_argv(
        "exec", "--json", "--workspace", str(workspace), "--image", image,
        *label_args(labels), *flags, "--", *command,
    )  # fmt: skip
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=warden_env(), timeout=timeout_s, check=False
    )
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"expected one JSON line, got {proc.stdout[:500]!r} {proc.stderr!r}"
    return proc, json.loads(lines[0])


def sh(workspace: Path, image: str, labels: dict[str, str], script: str, *flags: str) -> Any:
    return warden_exec(workspace, image, labels, "sh", "-c", script, flags=flags)


def test_only_loopback_and_no_routes(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    _, out = sh(
        workspace, sandbox_image, no_leftovers, "cat /proc/net/dev; echo @@; cat /proc/net/route"
    )
    dev, route = out["stdout"].split("@@\n")
    interfaces = [line.split(":")[0].strip() for line in dev.splitlines()[2:]]
    assert interfaces == ["lo"]
    assert route.splitlines()[1:] == []  # header only: no route anywhere


def test_root_fs_read_only_and_tmp_capped(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    script = (
        "for p in /etc/evil /usr/bin/evil /evil /home/evil; do "
        "  (echo x > $p) 2>/dev/null && echo WROTE $p; done; "
        "head -c 200000000 /dev/zero > /tmp/fill; echo tmp_rc=$?; wc -c < /tmp/fill; "
        "echo ok > /workspace/made-here && echo ws_ok"
    )
    _, out = sh(workspace, sandbox_image, no_leftovers, script)
    assert "WROTE" not in out["stdout"]
    assert "ws_ok" in out["stdout"]
    assert (workspace / "made-here").read_text() == "ok\n"
    tmp_rc = int(re.search(r"tmp_rc=(\d+)", out["stdout"]).group(1))  # type: ignore[union-attr]
    written = int(out["stdout"].split("tmp_rc=")[1].splitlines()[1])
    assert tmp_rc != 0 and written <= 64 * 1024 * 1024  # the default tmpfs cap holds


def test_no_capabilities_and_no_new_privileges(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    _, out = sh(
        workspace, sandbox_image, no_leftovers,
        "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status; "
        "touch /workspace/f; chown 0:0 /workspace/f 2>/dev/null && echo CHOWNED",
    )  # fmt: skip
    fields = dict(line.split(":\t") for line in out["stdout"].splitlines() if ":\t" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, cap
    assert fields["NoNewPrivs"] == "1"
    assert "CHOWNED" not in out["stdout"]
    assert (workspace / "f").stat().st_uid != 0


_KERNEL_PROBE = """
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(number, *args):
    answer = libc.syscall(number, *args)
    return errno.errorcode.get(ctypes.get_errno(), "?") if answer < 0 else "served"
params = ctypes.create_string_buffer(120)
found = {
    "io_uring_setup": call(425, 8, params),
    "io_uring_register": call(427, -1, 0, 0, 0),
    "userfaultfd": call(323, 0),
    "bpf": call(321, 0, 0, 0),
    "perf_event_open": call(298, 0, 0, -1, -1, 0),
    "keyctl": call(250, 0, 0),
    "unshare_user": call(272, 0x10000000),
    "seccomp": [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0],
}
print(json.dumps(found))
"""


def test_warden_seccomp_profile_refuses_io_uring_and_ordinary_work_goes_on(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    """The kernel itself refuses io_uring and the other calls warden has no use for
    (the engine's default profile serves io_uring_setup), while python, bash and git
    work as before."""
    _, out = warden_exec(workspace, sandbox_image, no_leftovers, "python3", "-c", _KERNEL_PROBE)
    found = json.loads(out["stdout"])
    assert found.pop("seccomp") == "2"  # a filter is on the process
    assert all(answer in ("EPERM", "ENOSYS") for answer in found.values()), found
    script = (
        "set -e; cd /workspace; git init -q r; cd r; echo hi > f; git add f; "
        "git -c user.name=t -c user.email=t@t commit -qm one; git log --oneline | wc -l; "
        "python3 -c 'import subprocess, threading; "
        "t = threading.Thread(target=print, args=(\"thread\",)); t.start(); t.join(); "
        "print(subprocess.run([\"echo\", \"child\"], capture_output=True, text=True).stdout)'"
    )
    # in the general-purpose image, which has git
    _, out = warden_exec(workspace, "agent", no_leftovers, "bash", "-c", script)
    assert out["status"] == "ok", out
    assert out["stdout"].split() == ["1", "thread", "child"]


def test_fork_bomb_is_contained(workspace: Path, sandbox_image: str, no_leftovers: Any) -> None:
    pids = 64
    script = (
        "sleep 4 & s=$!; bomb() { bomb | bomb & }; bomb; wait $s; "
        "n=0; for d in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n"
    )
    _, out = warden_exec(
        workspace, sandbox_image, no_leftovers, "bash", "-c", script,
        flags=("--pids", str(pids), "--timeout", "30"),
    )  # fmt: skip
    procs = int(re.search(r"procs=(\d+)", out["stdout"]).group(1))  # type: ignore[union-attr]
    assert pids // 2 <= procs <= pids  # it filled the limit and the limit held
    assert "Resource temporarily unavailable" in out["stderr"]  # forks were refused
    assert out["status"] != "timed_out"  # it ended by itself, well inside --timeout
    # The host and the engine are fine: the next sandbox runs at once.
    _, after = warden_exec(workspace, sandbox_image, no_leftovers, "true")
    assert after["status"] == "ok"


def test_memory_bomb_is_oom_killed(workspace: Path, sandbox_image: str, no_leftovers: Any) -> None:
    proc, out = warden_exec(
        workspace, sandbox_image, no_leftovers, "bash", "-c", "a=x; while :; do a=$a$a; done",
        flags=("--memory", "64m"),
    )  # fmt: skip
    assert out["status"] == "oom_killed"
    assert out["exit_code"] == 137 and proc.returncode == 137


def test_deadline_kills_within_bounds(
    workspace: Path, sandbox_image: str, no_leftovers: Any, docker_client: Any
) -> None:
    started = time.monotonic()
    proc, out = warden_exec(
        workspace, sandbox_image, no_leftovers, "sleep", "600", flags=("--timeout", "2")
    )
    assert time.monotonic() - started < 20  # killed at 2 s, not run to 600 (room for load)
    assert out["status"] == "timed_out" and proc.returncode == 124
    left = docker_client.api.containers(
        all=True, filters={"label": [f"{k}={v}" for k, v in no_leftovers.items()]}
    )
    assert left == []


def _peak_rss_kb(argv: list[str]) -> tuple[int, str]:
    """Run argv with stdout to a file; return its peak RSS (kB) and its stdout."""
    with tempfile.TemporaryFile("w+") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.DEVNULL, env=warden_env())
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        sink.seek(0)
        return usage.ru_maxrss, sink.read()


def test_output_flood_is_capped_and_announced(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    base = ["exec", "--json", "--workspace", str(workspace), "--image", sandbox_image]
    base += label_args(no_leftovers)
    quiet_rss, _ = _peak_rss_kb(warden_argv(*base, "--", "true"))
    flood = f"head -c {FLOOD_BYTES} /dev/zero | tr '\\0' x; echo done >&2"
    flood_rss, text = _peak_rss_kb(warden_argv(*base, "--", "sh", "-c", flood))
    out = json.loads(text)
    assert out["status"] == "ok" and out["truncated"] is True
    assert "[... warden: 99.0 MB of stdout omitted ...]"  # 100 MB - 1 MiB kept in out["stdout"]
    assert len(out["stdout"]) < 1024 * 1024 + 200
    assert out["stdout"].startswith("x" * 1000) and out["stdout"].endswith("x" * 1000)
    assert out["stderr"] == "done\n"
    assert flood_rss - quiet_rss < RSS_GROWTH_LIMIT_KB, (quiet_rss, flood_rss)


def test_setuid_binary_in_workspace_grants_nothing(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    _, out = sh(
        workspace, sandbox_image, no_leftovers,
        "cp \"$(command -v id)\" /workspace/suid-id && chmod u+s /workspace/suid-id; "
        "/workspace/suid-id -u",
    )  # fmt: skip
    assert out["stdout"].strip().splitlines()[-1] == str(UNPRIVILEGED)
    if os.geteuid() == 0:
        # The real attack: a setuid-ROOT binary planted in the workspace from outside.
        planted = workspace / "suid-id"
        os.chown(planted, 0, 0)
        os.chmod(planted, 0o4755)
        assert planted.stat().st_mode & 0o4000
        _, out = warden_exec(workspace, sandbox_image, no_leftovers, "/workspace/suid-id", "-u")
        assert out["status"] == "ok"
        assert out["stdout"].strip() == str(UNPRIVILEGED)  # euid stays unprivileged


def test_docker_socket_absent(workspace: Path, sandbox_image: str, no_leftovers: Any) -> None:
    _, out = sh(
        workspace, sandbox_image, no_leftovers,
        "for s in /var/run/docker.sock /run/docker.sock /docker.sock; do "
        "  [ -e $s ] && echo PRESENT $s; done; grep -c docker.sock /proc/mounts; true",
    )  # fmt: skip
    assert "PRESENT" not in out["stdout"]
    assert out["stdout"].strip().splitlines()[-1] == "0"


def test_files_belong_to_workspace_owner(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    _, out = sh(
        workspace, sandbox_image, no_leftovers, "mkdir /workspace/d && echo hi > /workspace/d/f"
    )
    assert out["status"] == "ok"
    owner = workspace.stat()
    for made in (workspace / "d", workspace / "d" / "f"):
        assert (made.stat().st_uid, made.stat().st_gid) == (owner.st_uid, owner.st_gid)
    assert owner.st_uid != 0 or os.geteuid() != 0


def test_root_owned_workspace_runs_unprivileged_with_a_warning(
    tmp_path: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root on the host to make a root-owned workspace")
    root_ws = tmp_path / "root-owned"
    root_ws.mkdir()
    proc, out = sh(root_ws, sandbox_image, no_leftovers, "id -u; id -g; touch /workspace/x")
    uid, gid = out["stdout"].split()[:2]
    # settings.fallback_uid: never 0, and no host account's (it could reach the sockets)
    assert (uid, gid) == (str(DEFAULT_FALLBACK_UID),) * 2
    with pytest.raises(KeyError):
        pwd.getpwuid(DEFAULT_FALLBACK_UID)
    assert "Permission denied" in out["stderr"]  # the consequence the warning names
    assert "owned by root" in proc.stderr and "chown" in proc.stderr and "--user" in proc.stderr


def test_uid_zero_is_refused(workspace: Path, sandbox_image: str, test_session: str) -> None:
    marker = f"test.uid0={test_session}"
    for user in ("0", "0:0", "1000:0", "root"):
        proc = subprocess.run(
            warden_argv(
                "exec", "--user", user, "--label", marker, "--image", sandbox_image, "--", "id"
            ),
            capture_output=True, text=True, env=warden_env(), check=False,
        )  # fmt: skip
        assert proc.returncode == 2, (user, proc.stderr)
        assert "--user" in proc.stderr and proc.stdout == ""
    # The refusals happened before any container was made.
    made = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={marker}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert made.stdout.strip() == ""


def test_git_claude_and_devcontainer_stay_read_only_and_leave_no_trace(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    """An untrusted command cannot plant what the host runs later (git hooks and
    config, Claude Code/warden settings and hooks, a dev container warden would
    build), and `warden exec` leaves no directories of its own behind."""
    (workspace / "keep").mkdir()
    (workspace / "keep" / "f").write_text("original\n")
    _own_like_the_workspace(workspace)
    _, out = sh(
        workspace, sandbox_image, no_leftovers,
        "for p in .git/config .git/hooks/pre-commit .claude/settings.json "
        "  .devcontainer/devcontainer.json .devcontainer/Dockerfile keep/f x; do "
        "  (echo '[core] fsmonitor = evil' > /workspace/$p) 2>/dev/null "
        "    && echo WROTE $p || echo REFUSED $p; done; "
        "mv /workspace/.git /workspace/g 2>/dev/null && echo MOVED || echo STUCK; "
        "mv /workspace/.devcontainer /workspace/d 2>/dev/null && echo MOVED || echo STUCK",
        "--protect", "keep",
    )  # fmt: skip
    lines = out["stdout"].split("\n")
    for path in (
        ".git/config",
        ".git/hooks/pre-commit",
        ".claude/settings.json",
        ".devcontainer/devcontainer.json",
        ".devcontainer/Dockerfile",
        "keep/f",
    ):
        assert f"REFUSED {path}" in lines
    assert "WROTE x" in lines and lines.count("STUCK") == 2
    assert (workspace / "keep" / "f").read_text() == "original\n"
    # The empty placeholders warden made for the command are gone again.
    for made in (".git", ".claude", ".devcontainer"):
        assert not (workspace / made).exists(), made


def test_existing_git_directory_is_read_only(
    workspace: Path, sandbox_image: str, no_leftovers: Any
) -> None:
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    _own_like_the_workspace(workspace)
    _, out = sh(
        workspace, sandbox_image, no_leftovers,
        "cat /workspace/.git/config; echo x > /workspace/.git/hooks/post-checkout "
        "|| echo REFUSED",
    )  # fmt: skip
    assert out["stdout"].split("\n")[:2] == ["[core]", "REFUSED"]
    assert not (workspace / ".git" / "hooks" / "post-checkout").exists()
    assert (workspace / ".git").is_dir()  # a real .git is never removed


def _own_like_the_workspace(workspace: Path) -> None:
    """Files a test makes belong to the workspace's owner, as a user's own would: a
    refusal then comes from the read-only mount, not from file ownership."""
    owner = workspace.stat()
    for path in workspace.rglob("*"):
        os.chown(path, owner.st_uid, owner.st_gid)
