"""Choosing the base image: a suitable local one, else a pulled one, else one
bootstrapped from Debian packages (debootstrap + `docker import`).

The bootstrapped base is content-addressed like the images built on it:
`warden-base:<hash12>` of the bootstrap script, the Debian suite and the package
list. It carries every OS package any warden image needs, because apt cannot run
inside the offline builds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import __version__
from orchestrator.errors import ImageBuildError
from orchestrator.images.hashing import (
    HASH_LENGTH,
    LABEL_CONTENT_HASH,
    LABEL_KIND,
    LABEL_VERSION,
    MIN_PYTHON,
    ImageKind,
)
from orchestrator.labels import warden_labels
from orchestrator.shipped import shipped_root

if TYPE_CHECKING:
    from docker import DockerClient

Log = Callable[[str], None]

BOOTSTRAP_SCRIPT = "images/bootstrap-base.sh"
BOOTSTRAP_SUITE = "bookworm"
BOOTSTRAP_PACKAGES = ("git", "procps")
"""Debian packages on top of minbase + python3 (minbase already has bash,
coreutils, findutils, grep, sed, mawk, diffutils)."""
BOOTSTRAP_REPOSITORY = "warden-base"
BOOTSTRAP_TIMEOUT_S = 900
"""debootstrap takes about a minute here; a stuck mirror must not hang the build."""

PROBE_TIMEOUT_S = 60
"""Wall-clock bound on the probe container (python3 start-up, a few `which`)."""
PULL_TIMEOUT_S = 15.0
"""Bound on a pull attempt. Without a registry it fails in well under this."""

PROBE_TOOLS = (
    "bash", "git", "ps", "find", "xargs", "grep", "sed", "awk", "diff", "ls", "cat", "ldd",
)  # fmt: skip
_PROBE_CODE = (
    "import json, platform, shutil, sys;"
    "print(json.dumps({'python': list(sys.version_info[:2]), 'machine': platform.machine(),"
    " 'libc': list(platform.libc_ver()),"
    f" 'tools': sorted(t for t in {list(PROBE_TOOLS)!r} if shutil.which(t))}}))"
)


@dataclass(frozen=True)
class BaseProbe:
    """What a base image offers, found by running it once with no network."""

    python: tuple[int, int]
    machine: str
    libc: tuple[str, str]
    tools: frozenset[str]

    def missing_for(self, kind: ImageKind) -> list[str]:
        """Why this base cannot serve `kind` (empty when it can)."""
        missing = [t for t in kind.required_tools if t not in self.tools]
        if self.python < MIN_PYTHON:
            missing.insert(0, f"python3>={MIN_PYTHON[0]}.{MIN_PYTHON[1]}")
        return missing


@dataclass(frozen=True)
class BaseImage:
    """The base an image is built FROM."""

    ref: str
    image_id: str
    origin: str
    """"configured" (Settings.base_image, present locally), "pulled" or "bootstrapped"."""


@dataclass
class BaseResolver:
    """Finds the base for each kind, probing and bootstrapping at most once per build."""

    client: DockerClient
    configured: str
    log: Log
    pull: bool = True
    root: Path = field(default_factory=shipped_root)
    owner_labels: dict[str, str] = field(default_factory=dict)
    """The building process's owner labels, put on the probe container so a cleanup
    removes it once that process is dead (a SIGKILL between create and remove)."""
    _probes: dict[str, BaseProbe] = field(default_factory=dict)
    _pull_tried: bool = False

    def for_kinds(self, kinds: Iterable[ImageKind]) -> dict[str, BaseImage]:
        """kind name -> base. Prefers the configured base; falls back per kind."""
        chosen: dict[str, BaseImage] = {}
        pending = list(kinds)
        configured_id = image_id(self.client, self.configured)
        if configured_id is not None:
            pending = self._take_suitable(
                BaseImage(self.configured, configured_id, "configured"), pending, chosen
            )
        if not pending:
            return chosen
        boot_tag = bootstrap_tag(self.root)
        boot_id = image_id(self.client, boot_tag)
        if boot_id is None and configured_id is None and self.pull:
            pulled_id = self._try_pull(self.configured)
            if pulled_id is not None:
                pending = self._take_suitable(
                    BaseImage(self.configured, pulled_id, "pulled"), pending, chosen
                )
        if not pending:
            return chosen
        if boot_id is None:
            names = ", ".join(k.name for k in pending)
            self.log(f"base: bootstrapping {boot_tag} from Debian packages for {names}")
            boot_id = bootstrap_base(self.client, boot_tag, self.log, root=self.root)
        else:
            self.log(f"base: reusing bootstrapped {boot_tag}")
        for kind in pending:
            chosen[kind.name] = BaseImage(boot_tag, boot_id, "bootstrapped")
        return chosen

    def probe(self, base: BaseImage) -> BaseProbe:
        """Run `base` once (no network, unprivileged) to learn its Python and tools."""
        if base.image_id not in self._probes:
            self._probes[base.image_id] = probe_image(self.client, base.ref, self.owner_labels)
        return self._probes[base.image_id]

    def _take_suitable(
        self, base: BaseImage, pending: list[ImageKind], chosen: dict[str, BaseImage]
    ) -> list[ImageKind]:
        try:
            found = self.probe(base)
        except ImageBuildError as exc:
            self.log(f"base: {base.ref} is not usable ({exc})")
            return pending
        rest = []
        for kind in pending:
            missing = found.missing_for(kind)
            if missing:
                self.log(f"base: {base.ref} lacks {', '.join(missing)} for {kind.name}")
                rest.append(kind)
            else:
                self.log(f"base: {base.ref} ({base.origin}) is suitable for {kind.name}")
                chosen[kind.name] = base
        return rest

    def _try_pull(self, ref: str) -> str | None:
        if self._pull_tried:
            return None
        self._pull_tried = True
        self.log(f"base: {ref} is not present locally; trying to pull it")
        outcome: dict[str, BaseException | None] = {}

        def pull() -> None:
            try:
                from docker.utils import parse_repository_tag

                repository, tag = parse_repository_tag(ref)
                self.client.api.pull(repository, tag=tag or "latest")
                outcome["error"] = None
            except Exception as exc:  # any failure means: no pulled base
                outcome["error"] = exc

        worker = threading.Thread(target=pull, name="warden-pull", daemon=True)
        worker.start()
        worker.join(PULL_TIMEOUT_S)
        if "error" not in outcome:
            self.log(f"base: pulling {ref} gave no answer in {PULL_TIMEOUT_S:.0f} s; not using it")
            return None
        if outcome["error"] is not None:
            first = str(outcome["error"]).splitlines()[0][:160] if str(outcome["error"]) else ""
            self.log(f"base: pulling {ref} failed ({first or type(outcome['error']).__name__})")
            return None
        return image_id(self.client, ref)


def image_id(client: DockerClient, ref: str) -> str | None:
    """The local image id of `ref`, or None when it is not present."""
    from docker.errors import ImageNotFound, NotFound

    try:
        found = client.images.get(ref)
    except (ImageNotFound, NotFound):
        return None
    return str(found.id)


def probe_image(
    client: DockerClient, ref: str, owner_labels: dict[str, str] | None = None
) -> BaseProbe:
    """Run `ref` with no network as an unprivileged uid and report what it offers."""
    session = f"images-probe-{uuid.uuid4().hex[:8]}"
    container = client.containers.create(
        ref,
        entrypoint=["python3", "-c", _PROBE_CODE],
        network_disabled=True,
        user="65534:65534",
        labels={**warden_labels(session, images="probe"), **(owner_labels or {})},
    )
    try:
        container.start()
        result = container.wait(timeout=PROBE_TIMEOUT_S)
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
    except Exception as exc:
        raise ImageBuildError(f"could not run {ref} to inspect it: {exc}") from exc
    finally:
        container.remove(force=True)
    if result.get("StatusCode") != 0:
        raise ImageBuildError(f"python3 does not run in {ref}: {output.strip()[:300]}")
    try:
        data = json.loads(output.strip().splitlines()[-1])
        return BaseProbe(
            python=(int(data["python"][0]), int(data["python"][1])),
            machine=str(data["machine"]),
            libc=(str(data["libc"][0]), str(data["libc"][1])),
            tools=frozenset(str(t) for t in data["tools"]),
        )
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ImageBuildError(f"unexpected probe output from {ref}: {output[:300]!r}") from exc


def bootstrap_hash(root: Path | None = None) -> str:
    """sha256 of the bootstrap inputs: script, suite, packages."""
    root = root or shipped_root()
    digest = hashlib.sha256()
    digest.update((root / BOOTSTRAP_SCRIPT).read_bytes())
    digest.update(f"\nsuite {BOOTSTRAP_SUITE}\npackages {' '.join(BOOTSTRAP_PACKAGES)}\n".encode())
    return digest.hexdigest()


def bootstrap_tag(root: Path | None = None) -> str:
    return f"{BOOTSTRAP_REPOSITORY}:{bootstrap_hash(root)[:HASH_LENGTH]}"


def bootstrap_base(client: DockerClient, tag: str, log: Log, *, root: Path | None = None) -> str:
    """Run images/bootstrap-base.sh (root and debootstrap needed); the new image's id."""
    if os.geteuid() != 0:
        raise ImageBuildError(
            "no usable base image: bootstrapping one from Debian packages needs root. Run "
            "`warden images build` as root, or make a base with python3, bash, git and "
            "procps available locally (`docker load`) and set WARDEN_BASE_IMAGE to it"
        )
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "no usable base image and debootstrap is not installed; run `warden doctor --fix` "
            "(installs it on Debian) or `apt-get install -y debootstrap`, then build again"
        )
    labels = {
        LABEL_KIND: "base",
        LABEL_CONTENT_HASH: bootstrap_hash(root),
        LABEL_VERSION: __version__,
    }
    root = root or shipped_root()
    argv = ["bash", str(root / BOOTSTRAP_SCRIPT)]
    for key, value in labels.items():
        argv += ["--label", f"{key}={value}"]
    argv += [tag, BOOTSTRAP_SUITE, *BOOTSTRAP_PACKAGES]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=BOOTSTRAP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ImageBuildError(
            f"bootstrapping {tag} took longer than {BOOTSTRAP_TIMEOUT_S} s; "
            "check that the Debian mirror in /etc/apt answers"
        ) from exc
    for line in (done.stdout + done.stderr).splitlines():
        log(f"  {line}")
    new_id = image_id(client, tag)
    if done.returncode != 0 or new_id is None:
        raise ImageBuildError(f"bootstrapping {tag} failed (exit {done.returncode}; output above)")
    return new_id
