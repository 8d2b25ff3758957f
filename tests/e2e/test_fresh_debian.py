"""The README's two commands on a stock Debian 12 that has only `python3`.

A newcomer's machine may be a bare Debian 12: no pip module, and system-wide installs
refused (PEP 668). This test copies the checkout into a fresh container of warden's own
bootstrapped Debian base (debootstrap minbase + python3, nothing else) and types the
README's commands there, unchanged:

    bash install.sh && .venv/bin/warden demo
    bash .ci/setup && .venv/bin/python -m pytest

The container reaches only what a machine of this kind has: the package mirror
(Debian's packages, the Python package index this machine is configured with, whose
configuration and trust root are mounted read-only) and the host's Docker engine
through its socket. The checkout, the state dir and the socket root are mounted at the
same paths as on the host, so the sandboxes the engine starts see the same workspace.
The second command runs its set-up in full, then the test suite's collection (every
test module imports in the fresh environment) and one module, not the whole suite: the
suite itself is what CI runs on the host.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from orchestrator import labels as wl
from orchestrator.backend.connect import connect
from orchestrator.images.base_image import bootstrap_tag
from orchestrator.lifecycle.socket_dirs import ROOT_SOCKET_ROOT
from tests.conftest import REPO_ROOT

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

FRESH_TIMEOUT_S = 900
"""Both commands in the container (apt, pip; the images are already built on the host's
engine). The figures it prints go into the README."""
TEST_LABEL = "warden-test.fresh"
MACHINE_CA = Path("/etc/ssl/certs/ca-certificates.crt")
"""The machine's trust root: its package index is reached through it."""
PACKAGE_CONFIG = (
    Path("/etc/pip.conf"),
    Path("/etc/xdg/pip"),
    Path("/opt/pypi"),
    Path("/opt/pypi-more"),
    Path("/opt/wheels"),
)
"""Where this kind of machine keeps its package index configuration and local indexes."""
CLAUDE_CODE_CACHE = Path("/var/tmp/warden-differential")
"""The pinned Claude Code CLI .ci/setup installs from npm; shared, so npm is not re-run."""

SCRIPT = r"""
set -u
cd "$CHECKOUT"
echo "== premise"
if python3 -m pip --version >/dev/null 2>&1; then echo "premise: pip present"; else echo "premise: no pip"; fi
echo "== command 1 at $(date +%s)"
bash install.sh && .venv/bin/warden demo
echo "== command 1 exit $? at $(date +%s)"
echo "== command 2 at $(date +%s)"
bash .ci/setup && .venv/bin/python -m pytest -q -p no:cacheprovider --collect-only \
  && .venv/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_dependencies.py
echo "== command 2 exit $? at $(date +%s)"
"""


@pytest.fixture
def docker_client() -> Iterator[DockerClient]:
    client = connect()
    yield client
    client.close()


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Path]:
    """The tree under test as a clean clone sees it: tracked and new, not ignored, files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    root = tmp_path / "clone"
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    yield root
    shutil.rmtree(root, ignore_errors=True)  # its .venv is a few hundred MB


def _volumes(checkout: Path, state: Path) -> dict[str, dict[str, str]]:
    same_path = {"bind": "", "mode": "rw"}
    volumes = {
        "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
        str(checkout.parent): {**same_path, "bind": str(checkout.parent)},
        str(ROOT_SOCKET_ROOT): {**same_path, "bind": str(ROOT_SOCKET_ROOT)},
        str(CLAUDE_CODE_CACHE): {**same_path, "bind": str(CLAUDE_CODE_CACHE)},
    }
    for path in PACKAGE_CONFIG:
        if path.exists():
            volumes[str(path)] = {"bind": str(path), "mode": "ro"}
    if MACHINE_CA.exists():
        # Not over the image's own file: installing ca-certificates rewrites that one.
        volumes[str(MACHINE_CA)] = {"bind": "/machine-ca.crt", "mode": "ro"}
    assert state.is_relative_to(checkout.parent)
    return volumes


def _run_fresh(client: DockerClient, checkout: Path, state: Path, marker: str) -> str:
    base = bootstrap_tag()
    try:
        client.images.get(base)
    except Exception as exc:  # any failure means the base is unusable
        pytest.fail(f"the Debian base {base} is missing ({exc}); run `bash .ci/setup` first")
    ROOT_SOCKET_ROOT.mkdir(mode=0o711, exist_ok=True)
    CLAUDE_CODE_CACHE.mkdir(exist_ok=True)
    env: dict[str, Any] = {
        "CHECKOUT": str(checkout),
        "CI": "true",
        "WARDEN_STATE_DIR": str(state),
        "PIP_CERT": "/machine-ca.crt" if MACHINE_CA.exists() else "",
    }
    container = client.containers.run(
        base,
        ["bash", "-c", SCRIPT],
        detach=True,
        network_mode="host",  # the package mirror, as the host itself reaches it
        environment={k: v for k, v in env.items() if v},
        volumes=_volumes(checkout, state),
        labels={TEST_LABEL: marker},
    )
    try:
        container.wait(timeout=FRESH_TIMEOUT_S)
        logs: bytes = container.logs(stdout=True, stderr=True)
        return logs.decode(errors="replace")
    finally:
        container.remove(force=True)


def test_the_readme_commands_work_on_a_debian_with_only_python3(
    docker_client: DockerClient, checkout: Path
) -> None:
    state = checkout.parent / "state"
    marker = uuid.uuid4().hex[:12]
    out = _run_fresh(docker_client, checkout, state, marker)
    tail = out[-4000:]
    print("\n".join(line for line in out.splitlines() if line.startswith("== ")))

    assert "premise: no pip" in out, tail  # the base really is a pip-less Debian
    # Command 1: set-up from nothing, then the offline demo, whose work persists.
    assert "setup: installing python3-venv" in out, tail
    first = out.split("== command 1", 1)[1].split("== command 2", 1)[0]
    assert "== command 1 exit 0" in out, tail
    assert ": completed" in first and "Wrote SUMMARY.md" in first, first[-4000:]
    # The user's set-up installs warden as a package and none of the tests' tools.
    assert "installing warden (as a package)" in first, first[-4000:]
    for tool in ("jq", "nodejs", "chromium"):
        assert f"setup: installing {tool}" not in first, first[-4000:]
    # Command 2: the developer's set-up (the user's again, editable, plus the tests'
    # tools: nothing of the user's set-up is redone but the install), then the tests.
    second = out.split("== command 2", 1)[1]
    assert "installing warden (editable" in second, tail
    assert "python3-venv" not in second and "docker.io" not in second, tail
    assert "== command 2 exit 0 " in out, tail
    assert " passed" in second, tail

    # Nothing left behind: the demo's sandboxes are gone, and so is the test's container.
    (run_dir,) = (state / "runs").iterdir()
    left = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{wl.RUN}={run_dir.name}"}
    )
    assert not left, [c.name for c in left]
    assert not docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{TEST_LABEL}={marker}"}
    )
