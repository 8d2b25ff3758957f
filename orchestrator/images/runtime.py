"""warden's Python runtime for project images, on the host.

The `runtime` image (`images/runtime/`) carries an interpreter, the shared
libraries it loads (its own C library and dynamic loader included), a trimmed
standard library and `sandbox_tools`. It is never run. Its one directory is
copied out once per content hash into the state directory
(`STATE_DIR/runtime/<hash12>/`) and bind-mounted read-only at `RUNTIME_TARGET`
in sandboxes of project images, where the runner starts through that loader:

    /opt/warden/runtime/lib/ld-linux-x86-64.so.2 --library-path /opt/warden/runtime/lib \\
        /opt/warden/runtime/bin/python3.11 -I -S -u -B -m sandbox_tools

So a project image needs no Python and no particular C library: only Linux on
the machine's architecture, and bash for the Bash tool (`images.project`).
`--library-path` applies to the runner's own process only; the commands it runs
use the image's own programs and libraries.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.backend.contract import Mount
from orchestrator.errors import ImageBuildError
from orchestrator.labels import warden_labels

if TYPE_CHECKING:
    from docker import DockerClient

RUNTIME_TARGET = "/opt/warden/runtime"
"""Where the runtime is mounted in a sandbox (and where it lives in its image)."""
STATE_SUBDIR = "runtime"
MANIFEST = "manifest.json"
MAX_RUNTIME_BYTES = 256 * 1024 * 1024
"""Largest runtime archive copied out of the image (it is about 35 MB)."""


@dataclass(frozen=True)
class Runtime:
    """One copied-out runtime: where it is on the host and how to start the runner."""

    host_dir: Path
    python: str
    executable: str
    loader: str
    library_path: str
    machine: str

    def runner(self) -> tuple[str, ...]:
        """The command that runs `python -m sandbox_tools` inside a sandbox: isolated
        (-I: no PYTHON* variables, no user site), no site module (-S), unbuffered,
        no bytecode writes."""
        return (*self.python_command(), "-I", "-S", "-u", "-B", "-m", "sandbox_tools")

    def python_command(self) -> tuple[str, ...]:
        """The runtime's interpreter, started through its own loader and libraries
        (so the image's C library does not matter); arguments are appended."""
        at = RUNTIME_TARGET
        return (
            f"{at}/{self.loader}", "--library-path", f"{at}/{self.library_path}",
            f"{at}/{self.executable}",
        )  # fmt: skip

    def mount(self) -> Mount:
        return Mount(source=self.host_dir, target=RUNTIME_TARGET, read_only=True)


def load_runtime(host_dir: Path) -> Runtime:
    """The runtime copied out into `host_dir`; ImageBuildError when it is incomplete."""
    try:
        doc = json.loads((host_dir / MANIFEST).read_text())
        return Runtime(
            host_dir=host_dir,
            python=str(doc["python"]),
            executable=str(doc["executable"]),
            loader=str(doc["loader"]),
            library_path=str(doc["library_path"]),
            machine=str(doc["machine"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ImageBuildError(
            f"warden's Python runtime in {host_dir} is unreadable ({exc}); remove that "
            "directory and run again (it is copied out of the runtime image anew)"
        ) from exc


def ensure_runtime(client: DockerClient, tag: str, state_dir: Path) -> Runtime:
    """The runtime of image `tag`, copied out into the state directory on first use.

    The copy goes to a temporary directory first and is renamed into place, so an
    interrupted copy is never used. Raises ImageBuildError.
    """
    name = tag.rsplit(":", 1)[-1]
    target = state_dir / STATE_SUBDIR / name
    if (target / MANIFEST).is_file():
        return load_runtime(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(target.parent, 0o755)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        _copy_out(client, tag, scratch)
        with contextlib.suppress(FileNotFoundError):
            # Another process finished first: keep theirs.
            os.rename(scratch / "runtime", target)
        if not (target / MANIFEST).is_file():
            raise ImageBuildError(f"copying warden's runtime out of {tag} left no {MANIFEST}")
    except OSError as exc:
        if not (target / MANIFEST).is_file():
            raise ImageBuildError(f"could not copy warden's runtime into {target}: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return load_runtime(target)


def _copy_out(client: DockerClient, tag: str, into: Path) -> None:
    """RUNTIME_TARGET of `tag` into `into/runtime`, through a container that is
    created and never started."""
    session = f"images-runtime-{uuid.uuid4().hex[:8]}"
    container = client.api.create_container(
        tag, command=["/never-run"], network_disabled=True,
        labels=warden_labels(session, images="runtime-copy"),
    )  # fmt: skip
    try:
        stream, _stat = client.api.get_archive(container["Id"], RUNTIME_TARGET)
        buffer = io.BytesIO()
        for chunk in stream:
            buffer.write(chunk)
            if buffer.tell() > MAX_RUNTIME_BYTES:
                raise ImageBuildError(
                    f"the runtime in {tag} is larger than {MAX_RUNTIME_BYTES} bytes; "
                    "rebuild it with `warden images build --force`"
                )
    finally:
        client.api.remove_container(container["Id"], force=True)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as archive:
        # The archive's top directory is `runtime/`; the data filter refuses links
        # out of it, device files and absolute paths.
        archive.extractall(into, filter="data")
