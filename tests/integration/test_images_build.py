"""warden's images, built for real and inspected from inside: the restricted bash
image has no package manager, compiler, network client or setuid/setgid file and
no working pip; the agent image has its tools and the runner; neither keeps pip
or carries the SDK stack (the runner is standard library only); both are
flattened, labelled, usable by any uid with a read-only root; a second build is a no-op and `resolve_image` is fast."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator import __version__
from orchestrator.backend.connect import connect
from orchestrator.config import Settings
from orchestrator.images import build_images, image_status, resolve_image
from orchestrator.images.hashing import LABEL_CONTENT_HASH, LABEL_VERSION
from orchestrator.labels import SESSION, warden_labels
from tests.conftest import warden_argv, warden_env

pytestmark = pytest.mark.integration

FORBIDDEN_EXACT = {
    # package managers
    "apt", "apt-get", "apt-cache", "apt-key", "apt-mark", "aptitude", "dpkg", "dpkg-deb",
    "pip", "pip3", "easy_install", "cpan",
    # compilers, assemblers, linkers
    "gcc", "cc", "c++", "g++", "cpp", "clang", "clang++", "tcc", "as", "ld", "ld.bfd", "ld.gold",
    # network clients
    "curl", "wget", "nc", "netcat", "ncat", "ssh", "scp", "sftp", "telnet", "ftp", "socat",
    "ping", "ping6", "git", "openssl", "rsync", "busybox",
    # changing identity or namespaces
    "su", "sudo", "mount", "umount", "passwd", "newgrp", "chsh", "chfn", "gpasswd", "nsenter",
    "unshare", "chroot", "setpriv", "runuser", "login", "useradd", "setcap", "capsh",
}  # fmt: skip
FORBIDDEN_PREFIXES = ("gcc-", "g++-", "clang-", "pip3.", "dpkg-", "apt-", "git-")
FORBIDDEN_SUFFIXES = ("-gcc", "-ld", "-as", "-g++")
SECOND_BUILD_BUDGET_S = 15.0


@pytest.fixture(scope="module")
def client() -> Any:
    return connect()


@pytest.fixture(scope="module")
def tags(client: Any) -> dict[str, str]:
    """The images for the current sources (built here if the tree changed)."""
    return build_images(client, Settings.from_env(), log=lambda line: None, pull=False)


@pytest.fixture(scope="module")
def session() -> Iterator[str]:
    name = f"test-images-{time.time_ns()}"
    yield name
    client = connect()  # closed here: an engine socket left to the collector warns in a later test
    try:
        leftovers = client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"{SESSION}={name}"}
        )
        for container in leftovers:
            container.remove(force=True)
    finally:
        client.close()
    assert not leftovers, "a test left a container behind"


def run(
    client: Any, session: str, image: str, script: str, *, user: str | None = None
) -> tuple[int, str]:
    """Run `sh -c script` hardened (no network, read-only root, no caps) and remove it."""
    container = client.containers.create(
        image,
        ["sh", "-c", script],
        user=user,
        network_disabled=True,
        read_only=True,
        tmpfs={"/tmp": "size=16m"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        labels=warden_labels(session, test="images"),
    )
    try:
        container.start()
        status = container.wait(timeout=120)["StatusCode"]
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    return int(status), output


LIST_EXECUTABLES = "find / -xdev \\( -type f -perm /111 -o -type l \\) 2>/dev/null"
"""Every executable file and every symlink, anywhere on the image's file system."""


def forbidden_in(paths: list[str]) -> list[str]:
    """The paths whose file name is a forbidden tool's."""
    found = []
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        if (
            name in FORBIDDEN_EXACT
            or name.startswith(FORBIDDEN_PREFIXES)
            or name.endswith(FORBIDDEN_SUFFIXES)
        ):
            found.append(path)
    return found


def test_restricted_image_contains_no_forbidden_tool(
    client: Any, tags: dict[str, str], session: str
) -> None:
    # As non-root, find may not read every directory: the listing size check below
    # guards against a listing that silently came back empty.
    _, output = run(client, session, tags["bash"], LIST_EXECUTABLES, user="1000:1000")
    paths = output.splitlines()
    assert len(paths) > 300, f"the listing looks truncated: {output[:500]}"
    assert "/usr/bin/bash" in paths or "/bin/bash" in paths
    assert forbidden_in(paths) == []
    assert not [p for p in paths if "/git-core/" in p or "/apt/methods/" in p]


def test_the_forbidden_tool_check_can_fail() -> None:
    assert forbidden_in(["/usr/bin/curl", "/usr/sbin/su", "/usr/bin/x86_64-linux-gnu-gcc"]) == [
        "/usr/bin/curl", "/usr/sbin/su", "/usr/bin/x86_64-linux-gnu-gcc",
    ]  # fmt: skip


def test_restricted_image_has_no_setuid_or_setgid_file(
    client: Any, tags: dict[str, str], session: str
) -> None:
    # As root inside (still no caps), so that find can read every directory.
    _, output = run(
        client, session, tags["bash"], "find / -xdev -perm /6000 -print; echo END", user="0:0"
    )
    assert output.strip() == "END", f"setuid/setgid files: {output}"


def test_restricted_image_names_are_not_found_by_the_shell(
    client: Any, tags: dict[str, str], session: str
) -> None:
    names = " ".join(sorted(FORBIDDEN_EXACT))
    script = f"for t in {names}; do command -v $t; done; echo END"
    status, output = run(client, session, tags["bash"], script)
    assert status == 0
    assert output.strip() == "END", f"reachable on PATH: {output}"


def test_restricted_image_has_the_shell_users_tools(
    client: Any, tags: dict[str, str], session: str
) -> None:
    tools = "bash ls cat cp mv rm mkdir find xargs grep sed awk diff sort head tail wc python3"
    script = f"for t in {tools}; do command -v $t >/dev/null || echo MISSING $t; done; echo END"
    status, output = run(client, session, tags["bash"], script, user="1000:1000")
    assert status == 0
    assert output.strip() == "END", output


@pytest.mark.parametrize("kind", ["agent", "bash"])
def test_pip_is_gone_and_does_not_run(
    client: Any, tags: dict[str, str], session: str, kind: str
) -> None:
    status, output = run(client, session, tags[kind], "python3 -m pip --version", user="1000:1000")
    assert status != 0
    assert "No module named pip" in output
    status, output = run(
        client, session, tags[kind], "python3 -m ensurepip --help", user="1000:1000"
    )
    assert status != 0
    names = ("pip", "pip-*", "pip3*", "*.whl", "ensurepip")
    look = (
        "find / -xdev \\( " + " -o ".join(f"-name '{n}'" for n in names) + " \\) -print; echo END"
    )
    _, output = run(client, session, tags[kind], look, user="0:0")
    assert output.strip() == "END", f"pip or wheels left in {kind}: {output}"


def test_agent_image_has_its_tools_and_the_runner_packages(
    client: Any, tags: dict[str, str], session: str
) -> None:
    tools = "python3 git bash ps find grep sed xargs"
    script = (
        f"for t in {tools}; do command -v $t >/dev/null || echo MISSING $t; done; "
        "python3 -c 'import sandbox_tools.runner; print(\"IMPORTS OK\")'; "
        "git --version >/dev/null && ps -o pid= -p 1 >/dev/null && echo TOOLS OK"
    )
    status, output = run(client, session, tags["agent"], script, user="1000:1000")
    assert status == 0, output
    assert "MISSING" not in output
    assert "IMPORTS OK" in output and "TOOLS OK" in output


@pytest.mark.parametrize("kind", ["agent", "bash"])
def test_any_uid_can_import_the_runner_and_use_home(
    client: Any, tags: dict[str, str], session: str, kind: str
) -> None:
    script = (
        'test "$(id -u)" = 4242 && touch "$HOME/probe" && '
        "python3 -I -c 'import sandbox_tools.runner' && echo OK"
    )
    status, output = run(client, session, tags[kind], script, user="4242:4242")
    assert status == 0 and output.strip().endswith("OK"), output


@pytest.mark.parametrize("kind", ["agent", "bash"])
def test_no_sdk_stack_is_in_the_image(
    client: Any, tags: dict[str, str], session: str, kind: str
) -> None:
    stack = "anthropic pydantic pydantic_core httpx httpx2 httpcore2 opentelemetry"
    script = (
        "python3 -c 'import importlib.util as u; "
        f'print("FOUND", [m for m in "{stack}".split() if u.find_spec(m)])\''
    )
    status, output = run(client, session, tags[kind], script, user="1000:1000")
    assert status == 0 and "FOUND []" in output, output


@pytest.mark.parametrize("kind", ["agent", "bash"])
def test_default_user_is_not_root(
    client: Any, tags: dict[str, str], session: str, kind: str
) -> None:
    status, output = run(client, session, tags[kind], "id -u")
    assert status == 0
    assert output.strip() not in {"", "0"}


@pytest.mark.parametrize("kind", ["agent", "bash"])
def test_images_are_flat_and_labelled(client: Any, tags: dict[str, str], kind: str) -> None:
    info = client.api.inspect_image(tags[kind])
    assert len(info["RootFS"]["Layers"]) == 1, "removed files could hide in a lower layer"
    labels = info["Config"]["Labels"]
    assert labels[LABEL_VERSION] == __version__
    assert tags[kind].endswith(":" + labels[LABEL_CONTENT_HASH][:12])


def test_resolve_image_returns_the_built_tags_with_one_engine_call(
    client: Any, tags: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolving is on every task's start path: it reads the engine once and never
    builds (its speed is measured in bench/, not asserted here)."""
    requests: list[str] = []
    send = client.api.send

    def counted(request: Any, **kwargs: Any) -> Any:
        requests.append(f"{request.method} {request.path_url}")
        return send(request, **kwargs)

    monkeypatch.setattr(client.api, "send", counted)
    assert resolve_image(client, "agent") == tags["agent"]
    assert resolve_image(client, "bash") == tags["bash"]
    assert resolve_image(client, tags["bash"]) == tags["bash"]
    assert len(requests) == 3, requests
    assert not any("/build" in r for r in requests)


def test_doctor_reports_the_images_current(client: Any, tags: dict[str, str]) -> None:
    states = {s.kind: s for s in image_status(client)}
    assert states["agent"].state == "current" and states["agent"].tag == tags["agent"]
    assert states["bash"].state == "current" and states["bash"].tag == tags["bash"]


def test_a_second_build_is_a_no_op(client: Any, tags: dict[str, str]) -> None:
    ids = {kind: client.api.inspect_image(tag)["Id"] for kind, tag in tags.items()}
    started = time.monotonic()
    done = subprocess.run(
        warden_argv("images", "build", "--no-pull"),
        env=warden_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert elapsed < SECOND_BUILD_BUDGET_S
    assert done.stderr.count("up to date") == len(tags) == 3, done.stderr  # agent, bash, runtime
    assert f"agent\t{tags['agent']}" in done.stdout
    assert {kind: client.api.inspect_image(tag)["Id"] for kind, tag in tags.items()} == ids
