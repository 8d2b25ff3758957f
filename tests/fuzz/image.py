"""The oracle image: warden's agent image plus strace and the driver, built offline.

strace and its libraries come from the host's Debian archive as .deb files
(`apt-get download`, cached in warden's state dir) and are installed with
`dpkg -i` in a `docker build` with no network, FROM the local content-addressed
agent image. The tag is `warden-fuzz-oracle:<hash12>` over the Dockerfile, the
driver, the .deb files and the base image id, so an unchanged oracle image is
never rebuilt.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.config import Settings
from orchestrator.errors import ImageBuildError
from orchestrator.images import resolve_image
from orchestrator.images.base_image import image_id

ORACLE_DIR = Path(__file__).resolve().parent / "oracle_image"
REPOSITORY = "warden-fuzz-oracle"
PACKAGES = ("strace",)
"""Debian packages the oracle adds; their dependencies come along."""
LABEL_KIND = "warden.image-kind"
LABEL_CONTENT_HASH = "warden.content-hash"
BUILD_TIMEOUT_S = 600
APT_TIMEOUT_S = 300


def _dependencies(packages: tuple[str, ...]) -> list[str]:
    """The packages and everything they depend on (real packages only)."""
    out = subprocess.run(
        [
            "apt-cache",
            "depends",
            "--recurse",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
            *packages,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=APT_TIMEOUT_S,
    ).stdout
    names = {line.strip() for line in out.splitlines() if line and not line[0].isspace()}
    return sorted(n for n in names if not n.startswith("<"))


def deb_cache(settings: Settings, log: Callable[[str], None]) -> Path:
    """The directory of .deb files for PACKAGES, downloaded once on the host."""
    cache = settings.state_dir / "fuzz-oracle-debs"
    done = cache / ".complete"
    if done.exists():
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    names = _dependencies(PACKAGES)
    log(f"downloading {len(names)} Debian packages for the oracle image into {cache}")
    try:
        subprocess.run(
            ["apt-get", "download", *names],
            cwd=cache,
            check=True,
            capture_output=True,
            text=True,
            timeout=APT_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise ImageBuildError(
            f"could not download {', '.join(names)} with apt-get ({detail.strip()[-300:]}); "
            "run `apt-get update` on the host, or copy the .deb files into "
            f"{cache} and create {done}"
        ) from exc
    done.touch()
    return cache


def oracle_tag(base_id: str, debs: Path) -> str:
    digest = hashlib.sha256(f"oracle base {base_id}\n".encode())
    for path in [ORACLE_DIR / "Dockerfile", ORACLE_DIR / "driver.py", *sorted(debs.glob("*.deb"))]:
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def ensure_oracle_image(client: Any, log: Callable[[str], None] = lambda _m: None) -> str:
    """The oracle image's tag, building it first when it does not exist.

    Raises ImageNotFoundError when warden's agent image is not built, ImageBuildError
    when the packages cannot be fetched or the build fails."""
    base = resolve_image(client, "agent")
    base_id = image_id(client, base)
    assert base_id is not None
    debs = deb_cache(Settings.from_env(), log)
    tag = oracle_tag(base_id, debs)
    if image_id(client, tag) is not None:
        return tag
    log(f"building {tag} FROM {base}")
    with tempfile.TemporaryDirectory(prefix="warden-fuzz-oracle-") as tmp:
        context = Path(tmp)
        (context / "debs").mkdir()
        for deb in debs.glob("*.deb"):
            (context / "debs" / deb.name).write_bytes(deb.read_bytes())
        for name in ("Dockerfile", "driver.py"):
            (context / name).write_bytes((ORACLE_DIR / name).read_bytes())
        recent: list[str] = []
        for chunk in client.api.build(
            path=str(context),
            dockerfile="Dockerfile",
            tag=tag,
            buildargs={"BASE": base},
            labels={LABEL_KIND: "fuzz-oracle", LABEL_CONTENT_HASH: tag.split(":")[1]},
            network_mode="none",
            pull=False,
            rm=True,
            forcerm=True,
            decode=True,
            timeout=BUILD_TIMEOUT_S,
        ):
            if "error" in chunk:
                raise ImageBuildError(
                    f"building {tag} failed: {chunk['error']}\n" + "\n".join(recent[-20:])
                )
            recent.extend(str(chunk.get("stream", "")).splitlines())
    if image_id(client, tag) is None:
        raise ImageBuildError(f"building {tag} reported no error but left no image")
    return tag
