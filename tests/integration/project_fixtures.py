"""Fixtures for the project-image tests: the toolchain images (`tests.toolchains`,
built once and cached by content), throw-away images made with testcontainers
and removed by label, and the sandbox-facts script that runs with bash alone.

Import the fixtures into a test module by name."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from orchestrator.backend.connect import connect
from tests.toolchains import CACHE_DIR, LABEL, ensure_toolchain, throwaway_label

if TYPE_CHECKING:
    from docker import DockerClient

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # no registry for its reaper

FACTS = r"""
echo
echo "net=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ,)"
echo "routes=$(tail -n +2 /proc/net/route | wc -l)"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t '
echo "uid=$(id -u) gid=$(id -g)"
touch /probe 2>/dev/null && echo "root=writable" || echo "root=read-only"
awk '$2=="/tmp" {print "tmp=" $3 "," $4}' /proc/mounts | sed 's/,inode64//'
echo "memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max)"
echo "pids=$(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max)"
touch /workspace/.git/probe 2>/dev/null && echo "git=writable" || echo "git=read-only"
touch /workspace/.claude/probe 2>/dev/null && echo "claude=writable" || echo "claude=read-only"
test -e /var/run/docker.sock && echo "docker.sock=present" || echo "docker.sock=absent"
echo "home=$HOME"
"""
"""Hardening facts, read from inside a sandbox with bash and coreutils only (no
Python): the same lines must come out of warden's own image and a project image."""


def facts(output: str) -> dict[str, str]:
    """`key=value` lines of FACTS' output (Cap lines are `CapEff:...`)."""
    found = {}
    for line in output.splitlines():
        key, sep, value = line.replace(":", "=", 1).partition("=")
        if sep and key.strip() and " " not in key.strip():
            found[key.strip()] = value.strip()
    return found


@pytest.fixture(scope="session")
def engine() -> Iterator[DockerClient]:
    client = connect()
    yield client
    client.close()


@pytest.fixture(scope="session")
def node_image(engine: DockerClient) -> str:
    """Debian's nodejs + npm on the Debian base, no Python (built once, cached)."""
    return ensure_toolchain(engine, "node")


@pytest.fixture(scope="session")
def cc_image(engine: DockerClient) -> str:
    """Debian's make + gcc on the Debian base, no Python (built once, cached)."""
    return ensure_toolchain(engine, "cc")


@pytest.fixture(scope="session")
def throwaway_images(engine: DockerClient) -> Iterator[dict[str, str]]:
    """A label for images one session makes; they are removed by it at the end."""
    label = throwaway_label()
    yield label
    key, value = next(iter(label.items()))
    for image in engine.images.list(filters={"label": f"{key}={value}"}):
        engine.images.remove(str(image.id), force=True)


@pytest.fixture(scope="session")
def no_bash_image(throwaway_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image with a file and no shell at all, built with testcontainers."""
    from testcontainers.core.image import DockerImage

    context = tmp_path_factory.mktemp("no-bash")
    (context / "Dockerfile").write_text("FROM scratch\nCOPY hello /hello\nCMD [\"/hello\"]\n")
    (context / "hello").write_text("not a program\n")
    tag = f"warden-test-no-bash:{next(iter(throwaway_images.values()))}"
    image = DockerImage(path=context, tag=tag, clean_up=False, labels=throwaway_images,
                        network_mode="none", pull=False)  # fmt: skip
    image.build()
    image.get_docker_client().client.close()
    return tag


@pytest.fixture(scope="session")
def libc_free_image(
    throwaway_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> str:
    """An image with no C library at all: Debian's statically linked bash and busybox
    on `scratch` (the .debs fetched on the host with apt, cached), built with
    testcontainers, no network. Like an Alpine (musl) image, it has no glibc."""
    import subprocess

    from testcontainers.core.image import DockerImage

    debs = CACHE_DIR / "static"
    debs.mkdir(parents=True, exist_ok=True)
    if not list(debs.glob("bash-static_*.deb")) or not list(debs.glob("busybox-static_*.deb")):
        subprocess.run(["apt-get", "download", "bash-static", "busybox-static"], cwd=debs,
                       check=True, capture_output=True, timeout=300)  # fmt: skip
    context = tmp_path_factory.mktemp("libc-free")
    unpacked = context / "unpacked"
    for deb in (*debs.glob("bash-static_*.deb"), *debs.glob("busybox-static_*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    for name, source in (("bash", "bash-static"), ("busybox", "busybox")):
        (context / name).write_bytes((unpacked / "bin" / source).read_bytes())
        (context / name).chmod(0o755)
    (context / "Dockerfile").write_text(
        "FROM scratch\nCOPY bash busybox /bin/\n"
        'RUN ["/bin/busybox", "--install", "-s", "/bin"]\nENV PATH=/bin\n'
    )
    tag = f"warden-test-libc-free:{next(iter(throwaway_images.values()))}"
    image = DockerImage(path=context, tag=tag, clean_up=False, labels=throwaway_images,
                        network_mode="none", pull=False)  # fmt: skip
    image.build()
    image.get_docker_client().client.close()
    return tag


@pytest.fixture(scope="session")
def foreign_arch_image(engine: DockerClient, throwaway_images: dict[str, str]) -> str:
    """An image that says it is for linux/arm64 (made by hand and `docker load`ed:
    nothing can build one for another architecture offline)."""
    tag = f"warden-test-arm64:{next(iter(throwaway_images.values()))}"
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"hello\n"))
    import hashlib

    digest = hashlib.sha256(layer.getvalue()).hexdigest()
    config = json.dumps({
        "architecture": "arm64", "os": "linux",
        "config": {"Cmd": ["/hello"], "Labels": throwaway_images},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest}"]},
    }).encode()  # fmt: skip
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [tag], "Layers": [f"{digest}/layer.tar"]}]
    ).encode()
    bundle = io.BytesIO()
    with tarfile.open(fileobj=bundle, mode="w") as tar:
        for name, data in ((f"{digest}/layer.tar", layer.getvalue()), (config_name, config),
                           ("manifest.json", manifest)):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    engine.images.load(bundle.getvalue())
    return tag


def project_workspace(root: Path) -> Path:
    """A workspace with the protected directories (.git, .claude), owned by the
    unprivileged user sandboxes run as."""
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".claude").mkdir()
    chown_tree(root)
    return root


def chown_tree(root: Path) -> None:
    owner = root.stat()
    for path in [root, *root.rglob("*")]:
        os.lchown(path, owner.st_uid, owner.st_gid)


__all__ = [
    "FACTS",
    "LABEL",
    "cc_image",
    "engine",
    "facts",
    "foreign_arch_image",
    "no_bash_image",
    "node_image",
    "project_workspace",
    "throwaway_images",
]  # fmt: skip
