"""Locks in deny rules as walls: in a real sandbox started by the real engine with the
run guard's mounts, a file a `Read` deny matches reads as nothing by every route the
Bash analyser once missed (git options, /proc paths, `~+`, a directory descriptor,
links, program options), and a path an `Edit` deny matches cannot be written by any
of them. The commands are run directly: the walls must hold whatever the analyser
would have said. One test goes through a whole run (scripted model, real broker)."""

# ruff: noqa: F811 - pytest fixtures are imported, then named as parameters

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker import DockerClient

from orchestrator import labels as wl
from orchestrator.backend.contract import SandboxSpec
from orchestrator.backend.docker import DockerBackend
from orchestrator.config import Settings
from orchestrator.images import resolve_image
from orchestrator.permissions import load_policy
from orchestrator.permissions.approvers import NonInteractiveApprover
from orchestrator.runtime.session import prepare_guard
from orchestrator.runtime.tasks import TaskInput
from orchestrator.workspace import WorkspaceGuard
from orchestrator.workspace.walls import MAX_WALL_MOUNTS, WallError
from tests.conftest import UNPRIVILEGED
from tests.integration.harness import convo, scripted_run, text, tool
from tests.integration.sandbox_fixtures import (  # noqa: F401
    docker_client,
    no_leftovers,
    sandbox_image,
)

pytestmark = pytest.mark.integration

SECRET = "TOPSECRET"
DENY = ("Read(./.env)", "Read(./secrets/**)", "Edit(./protected/**)", "Read(**/*.pem)")

READ_ROUTES = r"""
cd /workspace
git diff --no-index /dev/null .env
git diff --no-index /dev/null secrets/key.txt
cat /proc/self/cwd/.env /proc/self/root/workspace/.env /proc/1/cwd/.env
cat ~+/.env ~+/secrets/key.txt
exec 3<.; cat /dev/fd/3/.env /dev/fd/3/secrets/key.txt /dev/fd/3/sub/b.pem; exec 3<&-
exec 4<secrets; ls -a /dev/fd/4/; exec 4<&-
ln -s .env l1 && cat l1
ln -s secrets l2 && cat l2/key.txt
ln .env h1; cat h1
ln secrets/key.txt h2; cat h2
ln a.pem h3; cat h3
cat env-hardlink
echo x > x.txt; sed '1r .env' x.txt; sed '1r secrets/key.txt' x.txt
tar -cf - .env secrets a.pem | tar -xOf -
wc --files0-from=.env; du --files0-from=.env
wc --files0-from=secrets/key.txt
grep -r TOPSECRET . ; grep -r TOPSECRET /proc/self/root/workspace
find / -xdev -name '*.pem' -exec cat {} + 2>/dev/null
python3 -c 'print(open(".env").read(), open("/proc/self/cwd/sub/b.pem").read())'
ls -la secrets
echo routes-done
"""

WRITE_ROUTES = r"""
cd /workspace
echo pwned > x.txt
sort -o protected/p.txt x.txt
sed -n 'w protected/p.txt' x.txt
find protected -delete
find protected -name p.txt -exec sh -c 'echo pwned > {}' \;
echo pwned > protected/p.txt; echo pwned >> /proc/self/cwd/protected/p.txt
cp x.txt protected/new.txt; mv protected/p.txt gone.txt; rm -rf protected
ln protected/p.txt hp; echo pwned >> hp
tar -C protected -xf /dev/null; awk 'BEGIN{print "pwned" > "protected/p.txt"}'
git log -1 --output=protected/p.txt 2>/dev/null
: > .env; echo pwned > secrets/key.txt; touch secrets/new; rm -f .env
echo writes-done
"""


@pytest.fixture
def agent_image(docker_client: DockerClient) -> str:
    """The general-purpose image: it has git, sed, tar, awk and python3."""
    return resolve_image(docker_client, "agent")


@pytest.fixture
def walled(settings: Settings, workspace: Path) -> Iterator[WorkspaceGuard]:
    """A workspace with secrets, a protected directory, and the guard of a run
    whose policy denies them."""
    files = {
        ".env": f"{SECRET}-ENV\n",
        "secrets/key.txt": f"{SECRET}-KEY\n",
        "a.pem": f"{SECRET}-PEM-A\n",
        "sub/b.pem": f"{SECRET}-PEM-B\n",
        "sub/.env": f"{SECRET}-SUBENV\n",
        "protected/p.txt": "ORIGINAL\n",
        "notes.txt": "ordinary\n",
    }
    for name, content in files.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    os.link(workspace / ".env", workspace / "env-hardlink")  # made before the run
    for root, dirs, names in os.walk(workspace):
        for name in [*dirs, *names]:
            os.chown(os.path.join(root, name), UNPRIVILEGED, UNPRIVILEGED)
    policy = load_policy(settings, workspace, deny=DENY, allow=("Bash",))
    guard = prepare_guard(settings, workspace, (), rules=policy)
    yield guard
    guard.release()


def _run(
    settings: Settings,
    docker_client: DockerClient,
    image: str,
    guard: WorkspaceGuard,
    labels: dict[str, str],
    script: str,
) -> str:
    backend = DockerBackend(
        docker_client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    session = f"test-walls-{os.urandom(4).hex()}"
    spec = SandboxSpec(
        image=image,
        command=["bash", "-c", script],
        workspace=guard.workspace,
        mounts=guard.mounts(),
        user=f"{UNPRIVILEGED}:{UNPRIVILEGED}",
        labels=labels,
        warden_labels=wl.warden_labels(session, task="walls"),
        timeout_s=120,
    )
    try:
        result = backend.run(spec)
    finally:
        backend.cleanup({wl.SESSION: session})
    return result.stdout + result.stderr


def test_a_read_denied_file_reads_as_nothing_by_every_route(
    settings: Settings,
    walled: WorkspaceGuard,
    agent_image: str,
    docker_client: DockerClient,
    no_leftovers: dict[str, str],
) -> None:
    shown = _run(settings, docker_client, agent_image, walled, no_leftovers, READ_ROUTES)
    assert "routes-done" in shown, shown
    assert SECRET not in shown, shown
    # The host's files are untouched, and an ordinary file stays readable.
    assert (walled.workspace / ".env").read_text() == f"{SECRET}-ENV\n"
    probe = _run(settings, docker_client, agent_image, walled, no_leftovers, "cat notes.txt")
    assert probe.strip() == "ordinary"


def test_an_edit_denied_path_is_not_written_by_any_route(
    settings: Settings,
    walled: WorkspaceGuard,
    agent_image: str,
    docker_client: DockerClient,
    no_leftovers: dict[str, str],
) -> None:
    shown = _run(settings, docker_client, agent_image, walled, no_leftovers, WRITE_ROUTES)
    assert "writes-done" in shown, shown
    ws = walled.workspace
    assert (ws / "protected" / "p.txt").read_text() == "ORIGINAL\n"
    assert sorted(os.listdir(ws / "protected")) == ["p.txt"]
    # (`mv` out of a read-only mount copies, then fails to remove: reading is allowed.)
    assert (ws / ".env").read_text() == f"{SECRET}-ENV\n"
    assert sorted(os.listdir(ws / "secrets")) == ["key.txt"]
    assert (ws / "secrets" / "key.txt").read_text() == f"{SECRET}-KEY\n"
    assert (ws / "x.txt").read_text() == "pwned\n"  # the workspace itself stays writable


def test_files_a_rule_matches_later_are_masked_in_the_next_sandbox(
    settings: Settings,
    walled: WorkspaceGuard,
    agent_image: str,
    docker_client: DockerClient,
    no_leftovers: dict[str, str],
) -> None:
    # Made during the run: the sandbox that makes it can read it (documented), the
    # next one cannot; a file made inside a masked directory is refused at once.
    first = _run(
        settings, docker_client, agent_image, walled, no_leftovers,
        f"echo {SECRET}-NEW > new.pem; cat new.pem; echo {SECRET} > secrets/late 2>&1",
    )  # fmt: skip
    assert f"{SECRET}-NEW" in first
    assert not (walled.workspace / "secrets" / "late").exists()
    second = _run(
        settings, docker_client, agent_image, walled, no_leftovers, "cat new.pem; echo seen"
    )
    assert "seen" in second and SECRET not in second, second


def test_hundreds_of_matches_made_in_a_sandbox_do_not_stop_the_next_one(
    settings: Settings,
    walled: WorkspaceGuard,
    agent_image: str,
    docker_client: DockerClient,
    no_leftovers: dict[str, str],
) -> None:
    # The attack: a sandbox makes more files a Read deny matches than a sandbox holds
    # as mounts, so that later sandboxes of the run would refuse to start.
    many = MAX_WALL_MOUNTS + 72
    made = _run(
        settings, docker_client, agent_image, walled, no_leftovers,
        f"for i in $(seq {many}); do mkdir -p junk/a$i && echo {SECRET}-$i > junk/a$i/.env;"
        " done; echo made",
    )  # fmt: skip
    assert "made" in made, made
    assert len(list((walled.workspace / "junk").iterdir())) == many
    # The next sandbox starts, their directory masked whole: none of them reads.
    after = _run(
        settings, docker_client, agent_image, walled, no_leftovers,
        "cd /workspace; cat junk/a7/.env; ls -A junk; grep -r TOPSECRET . ;"
        " cat /proc/self/cwd/junk/a1/.env; cat notes.txt; echo seen",
    )  # fmt: skip
    assert "seen" in after and "ordinary" in after, after
    assert SECRET not in after, after


def test_more_matches_than_a_sandbox_holds_refuse_to_start_naming_the_rule(
    settings: Settings, workspace: Path
) -> None:
    for i in range(MAX_WALL_MOUNTS + 1):
        (workspace / f"k{i}.pem").write_text("x")
    policy = load_policy(settings, workspace, deny=("Read(**/*.pem)",))
    with pytest.raises(WallError, match=r"Read\(\*\*/\*\.pem\)"):
        prepare_guard(settings, workspace, (), rules=policy)


async def test_a_whole_run_reads_nothing_of_a_masked_file(
    settings: Settings, workspace: Path
) -> None:
    (workspace / ".env").write_text(f"{SECRET}-ENV\n")
    os.chown(workspace / ".env", UNPRIVILEGED, UNPRIVILEGED)
    # The policy lets python3 run; what it reads is invisible to the analyser.
    command = "python3 -c \"print('got', open('/proc/self/cwd/.e' + 'nv').read())\""
    script = [
        convo(
            "reader", {"prompt_contains": "READ"}, [tool("Bash", command=command)], [text("done")]
        )
    ]
    async with scripted_run(
        settings, workspace, script, approver=NonInteractiveApprover(), mode="default",
        allow=("Bash(python3:*)",), deny=("Read(./.env)",),
    ) as (run, server):  # fmt: skip
        await asyncio.wait_for(
            run.manager.run_task(
                TaskInput(description="t", prompt="READ", subagent_type="general-purpose")
            ),
            timeout=120,
        )
    results = [str(r.body) for r in server.requests]
    assert any("got" in r for r in results), results[-1][:2000]
    assert not any(SECRET in r for r in results)
