"""Toolchain images for the project-image tests and benchmark: Debian's nodejs +
npm, and make + gcc, each on the local Debian base with Python removed, built
offline from .deb files downloaded on the host (`apt-get`, the machine's Debian
mirror), with testcontainers' `DockerImage`.

`python3 -m tests.toolchains` builds both (`.ci/setup` runs it). The tag is
`warden-test-toolchain:<name>-<hash12>` of this Dockerfile, the toolchain's
package list and the base image id, so a second run builds nothing (and needs
no download). Images carry the label `warden-test.toolchain`.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config import Settings
from orchestrator.errors import ImageBuildError
from orchestrator.images.base_image import bootstrap_tag, image_id

if TYPE_CHECKING:
    from docker import DockerClient

HERE = Path(__file__).resolve().parent
REPOSITORY = "warden-test-toolchain"
LABEL = "warden-test.toolchain"
CACHE_DIR = Path(os.environ.get("WARDEN_TEST_CACHE", Path.home() / ".cache" / "warden-tests"))
"""Where downloaded .deb files are kept between runs."""
APT_TIMEOUT_S = 600


@dataclass(frozen=True)
class Toolchain:
    name: str
    packages: tuple[str, ...]
    skip: str | None = None
    """Packages (regex on the name) not unpacked although a dependency names them."""
    check: str = ""
    """A command that must work in the image (run by the tests, not the build)."""


TOOLCHAINS = {
    "node": Toolchain(
        "node",
        ("nodejs", "npm"),
        # node-gyp (an npm dependency) wants Python and compilers to build native
        # addons; `npm test` and `npm run` need neither.
        skip=r"^(lib)?python3|^(gcc|g\+\+|cpp)(-\d+)?$|^perl",
        check="node --version && npm --version",
    ),
    "cc": Toolchain("cc", ("make", "gcc", "libc6-dev"), check="make --version && gcc --version"),
}


def local_base(client: DockerClient) -> str:
    """The local Debian base the toolchains are unpacked onto (warden's bootstrapped
    base, else the configured one when present)."""
    for ref in (bootstrap_tag(), Settings.from_env().base_image):
        if image_id(client, ref) is not None:
            return ref
    raise ImageBuildError("no local Debian base image; run `warden images build --no-pull` first")


def toolchain_tag(client: DockerClient, toolchain: Toolchain, base: str) -> str:
    digest = hashlib.sha256((HERE / "Dockerfile").read_bytes())
    digest.update(f"\n{toolchain}\nbase {image_id(client, base)}\n".encode())
    return f"{REPOSITORY}:{toolchain.name}-{digest.hexdigest()[:12]}"


def ensure_toolchain(client: DockerClient, name: str, log: Callable[[str], None] = print) -> str:
    """The tag of toolchain `name`'s image, built (offline) only when missing."""
    toolchain = TOOLCHAINS[name]
    base = local_base(client)
    tag = toolchain_tag(client, toolchain, base)
    if image_id(client, tag) is not None:
        return tag
    debs = _download(toolchain, _base_packages(client, base), log)
    with tempfile.TemporaryDirectory(prefix=f"warden-toolchain-{name}-") as tmp:
        context = Path(tmp)
        shutil.copy2(HERE / "Dockerfile", context / "Dockerfile")
        _merge_debs(debs, context / "root.tar")
        log(f"toolchain {name}: building {tag} from {len(debs)} .deb files (no network)")
        _build(context, tag, base, name)
    return tag


def _build(context: Path, tag: str, base: str, name: str) -> None:
    # testcontainers' reaper needs a registry; these images are kept (cached by
    # content) and found by their label.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.image import DockerImage

    image = DockerImage(
        path=context, tag=tag, clean_up=False, buildargs={"BASE": base},
        network_mode="none", pull=False, rm=True, forcerm=True,
        labels={LABEL: name},
    )  # fmt: skip
    image.build()
    for line in image.get_logs():
        if isinstance(line, dict) and "error" in line:
            raise ImageBuildError(f"building {tag} failed: {line['error']}")
    image.get_docker_client().client.close()


MERGED_USR = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
"""The base's merged /usr: top-level directories that are links into /usr."""


def _merge_debs(debs: list[Path], into: Path) -> None:
    """The files of every .deb as one tar (`dpkg-deb --fsys-tarfile`, several at a
    time), paths moved under /usr where the base has links, directory entries left
    out (the engine makes parents): unpacked over the base by ADD, a directory entry
    would replace a link such as /bin -> usr/bin."""
    from concurrent.futures import ThreadPoolExecutor

    def data(deb: Path) -> bytes:
        return subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True,
                              check=True, timeout=APT_TIMEOUT_S).stdout  # fmt: skip

    seen: set[str] = set()
    with tarfile.open(into, "w") as out, ThreadPoolExecutor(max_workers=4) as pool:
        for blob in pool.map(data, debs):
            with tarfile.open(fileobj=io.BytesIO(blob)) as archive:
                for member in archive:
                    if member.isdir():
                        continue
                    parts = Path(member.name.removeprefix("./")).parts
                    if parts and parts[0] in MERGED_USR:
                        parts = (*Path(MERGED_USR[parts[0]]).parts, *parts[1:])
                    name = "/".join(parts)
                    if name in seen:
                        continue
                    seen.add(name)
                    member.name = name
                    if member.islnk():
                        link = Path(member.linkname.removeprefix("./")).parts
                        if link and link[0] in MERGED_USR:
                            link = (*Path(MERGED_USR[link[0]]).parts, *link[1:])
                        member.linkname = "/".join(link)
                    out.addfile(member, archive.extractfile(member) if member.isfile() else None)


def _base_packages(client: DockerClient, base: str) -> set[str]:
    """Package names installed in `base` (its dpkg status, read without running it)."""
    created = client.api.create_container(base, command=["true"], network_disabled=True,
                                          labels={LABEL: "probe"})  # fmt: skip
    try:
        stream, _ = client.api.get_archive(created["Id"], "/var/lib/dpkg/status")
        data = b"".join(stream)
    finally:
        client.api.remove_container(created["Id"], force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = archive.extractfile("status")
        assert member is not None
        status = member.read().decode(errors="replace")
    return set(re.findall(r"^Package: (\S+)$", status, flags=re.M))


def _download(toolchain: Toolchain, installed: set[str], log: Callable[[str], None]) -> list[Path]:
    """The .deb files of the toolchain and its dependencies that `installed` lacks,
    downloaded by apt (resolved as on an empty system) into the cache."""
    cache = CACHE_DIR / "debs"
    (cache / "partial").mkdir(parents=True, exist_ok=True)
    if not any(Path("/var/lib/apt/lists").glob("*_Packages")):
        subprocess.run(["apt-get", "update", "-qq"], check=True, timeout=APT_TIMEOUT_S)
    empty = cache / "empty-status"
    empty.touch()
    apt = ["apt-get", "install", "--download-only", "--no-install-recommends", "-y", "-qq",
           "-o", f"Dir::State::status={empty}", "-o", "Debug::NoLocking=1",
           "-o", f"Dir::Cache::archives={cache}"]  # fmt: skip
    with tempfile.TemporaryDirectory() as nothing:  # apt lists only what it has not cached
        (Path(nothing) / "partial").mkdir()
        resolve = [*apt, "-o", f"Dir::Cache::archives={nothing}", "--print-uris"]
        uris = subprocess.run([*resolve, *toolchain.packages], capture_output=True,
                              text=True, check=True, timeout=APT_TIMEOUT_S).stdout  # fmt: skip
    wanted = []
    for line in uris.splitlines():
        fields = line.split()
        if len(fields) < 2 or not fields[1].endswith(".deb"):
            continue
        package = fields[1].split("_", 1)[0]
        if package in installed or (toolchain.skip and re.search(toolchain.skip, package)):
            continue
        wanted.append(cache / fields[1])
    if not all(path.is_file() for path in wanted):
        log(f"toolchain {toolchain.name}: downloading {len(wanted)} Debian packages into {cache}")
        subprocess.run([*apt, *toolchain.packages], check=True, timeout=APT_TIMEOUT_S,
                       capture_output=True)  # fmt: skip
    missing = [path.name for path in wanted if not path.is_file()]
    if missing:
        raise ImageBuildError(f"apt did not download {', '.join(missing[:5])}")
    return wanted


def throwaway_label() -> dict[str, str]:
    """A label for images a test makes and removes (`LABEL=throwaway-<id>`)."""
    return {LABEL: f"throwaway-{uuid.uuid4().hex[:8]}"}
