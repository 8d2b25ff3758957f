"""Wheels for an image's Python, downloaded on the host and cached.

Builds have no network, so the pinned packages (and pip itself, which runs from
its own wheel inside the build) are fetched here with `pip download` for the
image's Python version and platform, and handed to the build context.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import ImageBuildError
from orchestrator.images.base import BaseProbe
from orchestrator.images.hashing import BUILD_REQUIREMENTS, REQUIREMENTS, SOURCE_ROOT

Log = Callable[[str], None]

OLDEST_MANYLINUX_GLIBC = 17
"""manylinux_2_17 (manylinux2014) is the oldest wheel tag worth accepting."""
DOWNLOAD_TIMEOUT_S = 600
COMPLETE_MARKER = ".complete"


def manylinux_platforms(probe: BaseProbe) -> list[str]:
    """pip `--platform` values the image can use, newest glibc first."""
    libc, version = probe.libc
    if libc != "glibc":
        raise ImageBuildError(
            f"the base image's C library is {libc or 'unknown'}, not glibc; warden's wheels "
            "need a glibc base (Debian or Ubuntu based)"
        )
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError as exc:
        raise ImageBuildError(f"cannot read the base image's glibc version {version!r}") from exc
    if major != 2 or minor < OLDEST_MANYLINUX_GLIBC:
        raise ImageBuildError(f"the base image's glibc {version} is older than 2.17")
    arch = probe.machine
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, OLDEST_MANYLINUX_GLIBC - 1, -1)]
    return [*tags, f"manylinux2014_{arch}"]


def wheel_dir(cache_root: Path, probe: BaseProbe, root: Path = SOURCE_ROOT) -> Path:
    """Cache directory for one (Python, platform, pins) combination."""
    pins = hashlib.sha256()
    for relative in (REQUIREMENTS, BUILD_REQUIREMENTS):
        pins.update((root / relative).read_bytes())
    major, minor = probe.python
    return (
        cache_root
        / f"cp{major}{minor}-{probe.machine}-glibc{probe.libc[1]}-{pins.hexdigest()[:12]}"
    )


def ensure_wheels(cache_root: Path, probe: BaseProbe, log: Log, root: Path = SOURCE_ROOT) -> Path:
    """The directory of wheels for `probe`'s Python, downloading them once."""
    target = wheel_dir(cache_root, probe, root)
    if (target / COMPLETE_MARKER).is_file():
        log(f"wheels: using cached {target}")
        return target
    major, minor = probe.python
    cache_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=cache_root))
    argv = [
        sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
        "--only-binary=:all:", "--implementation", "cp",
        "--python-version", f"{major}.{minor}", "--abi", f"cp{major}{minor}",
        *(arg for platform in manylinux_platforms(probe) for arg in ("--platform", platform)),
        "--dest", str(staging),
        "-r", str(root / REQUIREMENTS), "-r", str(root / BUILD_REQUIREMENTS),
    ]  # fmt: skip
    log(f"wheels: downloading pinned wheels for CPython {major}.{minor} {probe.machine}")
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ImageBuildError(f"pip download took longer than {DOWNLOAD_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ImageBuildError(
            f"pip download of the image's wheels failed (exit {done.returncode}); check that "
            f"the package index pip is configured with answers, or fill {target} yourself "
            f"from another machine:\n{tail}"
        )
    (staging / COMPLETE_MARKER).write_text("\n".join(sorted(p.name for p in staging.iterdir())))
    if target.exists() and not (target / COMPLETE_MARKER).is_file():
        shutil.rmtree(target, ignore_errors=True)  # an interrupted earlier download
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / COMPLETE_MARKER).is_file():
            raise
        # A concurrent build finished the same download first: use its copy.
    log(f"wheels: cached in {target}")
    return target
