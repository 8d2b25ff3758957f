"""A subagent runs in the project's own image: any local Linux image with bash,
even one with no Python (warden's runtime is mounted read-only), and the
workspace's dev container without a flag; the sandbox around it is the same as
in warden's own images, proven from inside; unusable images are refused before
any container of the run starts. Real engine, real images built offline from
Debian packages, real anthropic SDK; only the model is scripted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.errors import UnsupportedImageError
from orchestrator.permissions.approvers import ApprovalAnswer, CallbackApprover
from tests.conftest import REPO_ROOT
from tests.integration.harness import (
    PARENT_MATCH,
    containers_of,
    convo,
    scripted_run,
    task,
    text,
    tool,
)
from tests.integration.project_fixtures import (
    FACTS,
    cc_image,
    engine,
    facts,
    foreign_arch_image,
    libc_free_image,
    no_bash_image,
    node_image,
    project_workspace,
    throwaway_images,
)

pytestmark = pytest.mark.integration
__all__ = ["cc_image", "engine", "foreign_arch_image", "libc_free_image", "no_bash_image",
           "node_image", "throwaway_images"]  # fmt: skip

EXPECTED_FACTS = {
    "net": "lo,",
    "routes": "0",
    "CapInh": "0000000000000000",
    "CapPrm": "0000000000000000",
    "CapEff": "0000000000000000",
    "CapBnd": "0000000000000000",
    "CapAmb": "0000000000000000",
    "NoNewPrivs": "1",
    "root": "read-only",
    "memory": str(512 * 1024 * 1024),
    "pids": "256",
    "git": "read-only",
    "claude": "read-only",
    "docker.sock": "absent",
    "home": "/tmp",
}
"""What every warden sandbox shows from inside (the defaults: 512 MiB, 256 pids)."""


PERSON_ALLOWS = CallbackApprover(
    lambda q: ApprovalAnswer(behavior="allow", channel="test", person="tester")
)
"""FACTS tries to write .git and .claude from inside: warden asks before a command that
writes them, and this person says yes, so what stops the write is the sandbox's
read-only mount of both."""


def delegate(*commands: str) -> list[dict[str, Any]]:
    """A parent that delegates once and repeats the result; a child that runs the
    Bash commands and answers with their output."""
    return [
        convo("parent", PARENT_MATCH, [task("RUN-IN-PROJECT-IMAGE")], [text("{tool_results}")]),
        convo(
            "child",
            {"prompt_contains": "RUN-IN-PROJECT-IMAGE"},
            [tool("Bash", command=command) for command in commands],
            [text("{tool_results}")],
        ),
    ]


def node_project(workspace: Path) -> None:
    (workspace / "package.json").write_text(json.dumps(
        {"name": "demo", "version": "1.0.0", "scripts": {"test": "node test.js"}}
    ))  # fmt: skip
    (workspace / "test.js").write_text(
        "const assert = require('assert');\n"
        "assert.strictEqual([1, 2, 3].reduce((a, b) => a + b), 6);\n"
        "console.log('npm-suite: 1 passed, 0 failed');\n"
    )


async def test_npm_test_runs_in_a_node_image_without_python_and_reaches_the_parent(
    settings: Settings, workspace: Path, node_image: str
) -> None:
    node_project(workspace)
    project_workspace(workspace)
    script = delegate("npm test 2>&1; echo EXIT=$?; command -v python3 || echo no-python3")
    async with scripted_run(settings, workspace, script, image=node_image) as (run, _):
        result = await run.parent.run("run the tests")
        session = run.session
    assert "npm-suite: 1 passed, 0 failed" in result.text, result.text
    assert "EXIT=0" in result.text and "no-python3" in result.text
    assert containers_of(session) == []


async def test_make_test_in_a_gcc_image_and_the_sandbox_is_unchanged_inside(
    settings: Settings, workspace: Path, cc_image: str
) -> None:
    (workspace / "hello.c").write_text('#include <stdio.h>\nint main(void){puts("cc-ok");return 0;}\n')
    (workspace / "Makefile").write_text("test: hello\n\t./hello\nhello: hello.c\n\tgcc -o $@ $<\n")
    project_workspace(workspace)
    script = delegate("make test 2>&1; echo EXIT=$?", FACTS + "echo marker=$TOOLCHAIN_MARKER")
    async with scripted_run(settings, workspace, script, image=cc_image, approver=PERSON_ALLOWS) as (run, _):
        result = await run.parent.run("build and test")
    assert "cc-ok" in result.text and "EXIT=0" in result.text, result.text
    found = facts(result.text)
    assert {key: found.get(key) for key in EXPECTED_FACTS} == EXPECTED_FACTS
    assert found["uid"] == f"{workspace.stat().st_uid} gid={workspace.stat().st_gid}"
    assert found["marker"] == "from-the-image", "the image's environment is kept"


async def test_an_image_with_no_c_library_runs_a_subagent_in_the_same_sandbox(
    settings: Settings, workspace: Path, libc_free_image: str
) -> None:
    """warden's runtime brings its own C library and loader: an image with no glibc
    (static bash and busybox only, as an Alpine image has none either) runs the
    runner, and the sandbox inside is the same."""
    project_workspace(workspace)
    probe = "echo libc=$(ls /lib /lib64 /usr/lib 2>/dev/null | wc -l); echo sum=$((6 * 7))"
    script = delegate(probe, FACTS)
    async with scripted_run(settings, workspace, script, image=libc_free_image, approver=PERSON_ALLOWS) as (run, _):
        result = await run.parent.run("check the image")
    assert "libc=0" in result.text and "sum=42" in result.text, result.text
    found = facts(result.text)
    assert {key: found.get(key) for key in EXPECTED_FACTS} == EXPECTED_FACTS, result.text


def warden(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], cwd=cwd, capture_output=True, text=True,
        timeout=180, env=None if env is None else {**os.environ, **env},
    )  # fmt: skip


def test_warden_exec_gives_a_project_image_the_same_sandbox_as_warden_s_own(
    workspace: Path, node_image: str
) -> None:
    project_workspace(workspace)
    outputs = {}
    for image in ("bash", node_image):
        done = warden(
            "exec", "--json", "--workspace", str(workspace), "--image", image,
            "--", "bash", "-c", FACTS, cwd=REPO_ROOT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        outputs[image] = facts(json.loads(done.stdout)["stdout"])
    assert outputs[node_image] == outputs["bash"]
    assert {key: outputs["bash"].get(key) for key in EXPECTED_FACTS} == EXPECTED_FACTS
    # The image has no Python at all: warden's seccomp profile is the wall.
    sealed = warden(
        "exec", "--workspace", str(workspace), "--image", node_image,
        "--", "bash", "-c", "fallocate -l 1m /tmp/f; echo fallocate=$?", cwd=REPO_ROOT,
    )  # fmt: skip
    assert "fallocate=1" in sealed.stdout, sealed.stderr
    assert "Operation not supported" in sealed.stderr


async def test_unusable_images_are_refused_before_any_container_of_the_run_starts(
    settings: Settings, workspace: Path, engine: Any, no_bash_image: str, foreign_arch_image: str
) -> None:
    project_workspace(workspace)
    since = int(time.time()) - 1
    for image, reason in ((no_bash_image, "has no bash on its PATH"),
                          (foreign_arch_image, "built for arm64")):  # fmt: skip
        with pytest.raises(UnsupportedImageError, match=reason) as refused:
            async with scripted_run(settings, workspace, delegate("true"), image=image):
                pytest.fail("the run opened")
        assert "--image agent" in str(refused.value), "the refusal names a fix"
    # The engine's own record: no container of either image was ever started.
    started = engine.api.events(
        since=since, until=int(time.time()) + 1, decode=True,
        filters={"type": "container", "event": "start"},
    )  # fmt: skip
    images = {no_bash_image, foreign_arch_image}
    assert [e for e in started if e.get("from") in images] == []


def dev_container(workspace: Path, config: dict[str, Any], dockerfile: str | None = None) -> None:
    folder = workspace / ".devcontainer"
    folder.mkdir()
    # JSONC, as editors write it: a comment and a trailing comma.
    (folder / "devcontainer.json").write_text(
        "// the project's dev container\n" + json.dumps(config, indent=1)[:-2] + ",\n}\n"
    )
    if dockerfile is not None:
        (folder / "Dockerfile").write_text(dockerfile)
    project_workspace(workspace)


async def test_the_dev_container_image_is_used_without_a_flag(
    settings: Settings, workspace: Path, node_image: str
) -> None:
    dev_container(workspace, {"name": "node tools", "image": node_image})
    # As the run below (trusted) would: an untrusted workspace's dev container is not used.
    listed = warden("agents", "list", "--json", "--trust-workspace", "--workspace", str(workspace),
                    cwd=REPO_ROOT)  # fmt: skip
    by_name = {a["name"]: a for a in json.loads(listed.stdout)["agents"]}
    assert by_name["general-purpose"]["image"] == node_image
    assert "dev container" in by_name["general-purpose"]["image_from"]
    assert by_name["bash"]["image"] == "bash", "the bash type stays restricted"
    script = delegate("node --version; echo marker=$TOOLCHAIN_MARKER")
    async with scripted_run(settings, workspace, script) as (run, _):
        result = await run.parent.run("which node?")
    assert "v18." in result.text and "marker=from-the-image" in result.text, result.text


def test_warden_exec_follows_the_run_s_image_precedence(workspace: Path, node_image: str) -> None:
    """`warden exec` picks its image as `warden run` does, minus the agent file:
    `--image` > the dev container (by default only in a trusted workspace) > bash."""
    dev_container(workspace, {"name": "node tools", "image": node_image})
    probe = ("--", "bash", "-c", "echo marker=${TOOLCHAIN_MARKER:-none}; node --version || true")
    trusted = {"WARDEN_TRUST_WORKSPACE": "1"}
    untrusted = {"WARDEN_TRUST_WORKSPACE": "0"}

    def run(env: dict[str, str], *flags: str) -> tuple[str, str]:
        done = warden("exec", "--workspace", str(workspace), *flags, *probe, cwd=REPO_ROOT,
                      env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout, done.stderr

    out, _ = run(trusted)
    assert "marker=from-the-image" in out and "v18." in out, "the dev container, without a flag"
    out, _ = run(trusted, "--image", "bash")
    assert "marker=none" in out and "v18." not in out, "--image comes first"
    out, _ = run(trusted, "--no-devcontainer")
    assert "marker=none" in out, "--no-devcontainer: warden's bash image"
    out, err = run(untrusted)
    assert "marker=none" in out and "the workspace is not trusted" in err, err
    out, _ = run(untrusted, "--devcontainer")
    assert "marker=from-the-image" in out, "--devcontainer asks for it in any workspace"


async def test_an_untrusted_workspaces_dev_container_is_neither_built_nor_used(
    settings: Settings, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A dev container is workspace content an earlier subagent may have written: in a
    workspace nobody trusted, its Dockerfile is not built and its image not used."""
    dev_container(
        workspace, {"build": {"dockerfile": "Dockerfile"}}, "FROM scratch-never-built\nRUN false\n"
    )
    script = delegate("echo ran")
    async with scripted_run(settings, workspace, script, trusted=False) as (run, _):
        result = await run.parent.run("run it")
    assert "ran" in result.text, result.text
    assert "the dev container is not used: the workspace is not trusted" in caplog.text


async def test_a_dev_container_dockerfile_is_built_offline_once_and_used(
    settings: Settings, workspace: Path, cc_image: str, engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.runtime.run_images import prepare_run_images

    dockerfile = (
        f"FROM {cc_image}\nUSER 0\n"
        "RUN echo built-offline > /etc/devcontainer-marker && "
        "(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' , > /etc/build-net)\n"
        "USER 1000\n"
    )
    dev_container(workspace, {"build": {"dockerfile": "Dockerfile"}}, dockerfile)
    caplog.set_level("INFO", logger="warden.images")
    script = delegate("cat /etc/devcontainer-marker /etc/build-net; make --version | head -1")
    built: list[str] = []
    try:
        async with scripted_run(settings, workspace, script) as (run, _):
            result = await run.parent.run("what is in the image?")
            built.append(run.manager.plan.image_resolver.run.devcontainer)  # type: ignore[attr-defined]
        assert "built-offline" in result.text and "GNU Make" in result.text, result.text
        assert "lo," in result.text and "eth0" not in result.text, "a build step had a network"
        assert any("building warden-devcontainer:" in r.message for r in caplog.records)
        caplog.clear()
        # The second run builds nothing: same files, same tag.
        resolver = prepare_run_images(engine, settings, workspace)
        assert resolver.run.devcontainer is not None
        assert not any("building warden-devcontainer" in r.message for r in caplog.records)
        assert any("is up to date" in r.message for r in caplog.records)
        assert resolver.run.devcontainer == built[0]
    finally:
        for tag in built:  # this test's own image (it is content-addressed: no one shares it)
            engine.images.remove(tag, force=True)


async def test_a_dev_container_asking_for_privileges_gets_warnings_and_the_same_sandbox(
    settings: Settings, workspace: Path, node_image: str, caplog: pytest.LogCaptureFixture
) -> None:
    dev_container(workspace, {
        "image": node_image, "privileged": True, "capAdd": ["SYS_ADMIN", "NET_ADMIN"],
        "securityOpt": ["seccomp=unconfined"], "runArgs": ["--network=host", "--pid=host"],
        "mounts": ["source=/,target=/host,type=bind"], "forwardPorts": [8080],
    })  # fmt: skip
    caplog.set_level("WARNING", logger="warden.images")
    script = delegate(FACTS + "test -e /host && echo host=mounted || echo host=absent")
    async with scripted_run(settings, workspace, script, approver=PERSON_ALLOWS) as (run, _):
        result = await run.parent.run("check the sandbox")
    warned = [r.message for r in caplog.records]
    for key in ("privileged", "capAdd", "securityOpt", "runArgs", "mounts", "forwardPorts"):
        assert sum(f"`{key}` is not applied" in m for m in warned) == 1, (key, warned)
    found = facts(result.text)
    assert {key: found.get(key) for key in EXPECTED_FACTS} == EXPECTED_FACTS, result.text
    assert found["host"] == "absent" and found["Seccomp"] == "2"


async def test_the_bash_type_has_the_file_tools_under_the_same_rules(
    settings: Settings, workspace: Path
) -> None:
    from orchestrator.runtime.tasks import TaskInput, TaskStatus

    (workspace / "notes.txt").write_text("alpha\n")
    project_workspace(workspace)
    script = [
        convo(
            "filer",
            {"prompt_contains": "FILE-TOOLS"},
            [tool("Read", file_path="/workspace/notes.txt")],
            [tool("Edit", file_path="/workspace/notes.txt", old_string="alpha", new_string="beta")],
            [tool("Write", file_path="/workspace/blocked/x.txt", content="no")],
            [tool("Glob", pattern="*.txt")],
            [text("{last_tool_result}")],
        )
    ]
    async with scripted_run(
        settings, workspace, script, mode="acceptEdits", deny=("Write(./blocked/**)",)
    ) as (run, server):
        result = await run.manager.run_task(
            TaskInput(description="files", prompt="FILE-TOOLS", subagent_type="bash")
        )
        audit = run.store.audit(run.run_id)
    assert result.status is TaskStatus.COMPLETED, result.render()
    assert (workspace / "notes.txt").read_text() == "beta\n"
    assert not (workspace / "blocked").exists(), "the deny rule held for the bash type's Write"
    decided = {(row.tool_name, row.final) for row in audit if row.agent_type == "bash"}
    assert {("Read", "allow"), ("Edit", "allow"), ("Write", "deny"), ("Glob", "allow")} <= decided
    glob_result = [r for r in server.requests if r.conversation == "filer"][-1].body
    assert "notes.txt" in json.dumps(glob_result["messages"][-1])


async def test_granted_egress_works_in_a_project_image_and_stays_allowlisted(
    settings: Settings, workspace: Path, node_image: str
) -> None:
    from orchestrator.egress.resolver import StaticResolver
    from orchestrator.egress.setup import EgressRequest
    from tests.egress_support import upstream

    project_workspace(workspace)
    # Plain HTTP through the proxy the runner forwards to, with bash's /dev/tcp:
    # the image has no curl, no Python.
    fetch = (
        'p=${HTTP_PROXY##*:}; p=${p%%/*}; for host in allowed.test denied.test; do '
        'exec 3<>/dev/tcp/127.0.0.1/$p; '
        'printf "GET http://$host:%s/hello HTTP/1.1\\r\\nHost: $host\\r\\nConnection: close\\r\\n\\r\\n" '
        'PORT >&3; echo "$host: $(head -1 <&3 | tr -d "\\r")"; exec 3<&-; done; '
        "echo net=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ,)"
    )
    with upstream() as port:
        script = delegate(fetch.replace("PORT", str(port)))
        egress = EgressRequest(
            allow_domains=("allowed.test",),
            deny_domains=("denied.test",),
            resolver=StaticResolver(dict.fromkeys(("allowed.test", "denied.test"), "127.0.0.1")),
        )
        async with scripted_run(settings, workspace, script, image=node_image, egress=egress) as (
            run,
            _,
        ):
            result = await run.parent.run("fetch")
    assert "allowed.test: HTTP/1.1 200" in result.text, result.text
    assert "denied.test: HTTP/1.1 403" in result.text, result.text
    assert "net=lo," in result.text, "egress adds no network interface"
