"""The oracle: bash really running each case in one hardened warden sandbox.

One container per fuzz session, created through warden's own `DockerBackend`
with a workspace at /workspace that has the walls a run with the fuzz policy's
deny rules gets (`walls`: the secrets masked, the protected directory read-only,
by warden's `WorkspaceGuard`); each case runs there
(no network, cap-drop ALL, no-new-privileges, read-only root, non-root user,
pids/memory limits, warden labels with a unique session), removed at the end.
Its command is the driver (`oracle_image/driver.py`), which connects back to a Unix
socket the host listens on (mounted read-only into the container) and answers
one case per JSON line. `/etc/hosts` and `/etc/resolv.conf` are replaced by
loopback-only files, so even a name lookup cannot target another address.

ptrace works under warden's hardening as it is (tracing one's own children needs
no capability, and Docker's default seccomp profile allows ptrace on this
kernel); nothing is loosened for the oracle.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import labels as wl
from orchestrator.backend.contract import Mount, ResourceLimits, SandboxSpec
from orchestrator.backend.docker import DockerBackend
from orchestrator.config import Settings
from orchestrator.errors import WardenError
from orchestrator.workspace import WorkspaceGuard
from sandbox_tools.wire import WORKSPACE
from tests.fuzz.walls import make_workspace

CASE_TIMEOUT_S = 3.0
"""Wall time bash gets per case before everything it started is killed."""
ANSWER_SLACK_S = 20.0
"""Extra time the driver may take to collect and report a case."""
CONNECT_TIMEOUT_S = 60.0
"""How long the driver may take to start and connect back."""
SESSION_PREFIX = "fuzz-"
ORACLE_LIMITS = ResourceLimits(
    memory_bytes=512 * 1024 * 1024, cpus=1.0, pids=128, tmp_bytes=256 * 1024 * 1024
)
HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost\n"
RESOLV = "nameserver 127.0.0.1\noptions attempts:1 timeout:1\n"


class OracleError(WardenError, RuntimeError):
    """The oracle container or its driver failed (not a finding)."""


class Exec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    pid: int
    image: str | None
    """The program the process ran before this exec (None: inherited from its parent)."""
    filename: str | None
    argv: list[str]
    ok: bool
    error: str = ""


class Write(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    pid: int
    image: str | None
    syscall: str
    path: str | None
    flags: str = ""
    ok: bool
    error: str = ""
    opened: str | None = None
    """What a successful open really opened (strace -y): a path, `pipe:[…]`, …"""


class Connect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    pid: int
    image: str | None
    address: str
    ok: bool
    error: str = ""


class Observation(BaseModel):
    """What bash did for one case, as the tracer saw it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    root: int | None
    parents: dict[str, int] = Field(default_factory=dict)
    execs: list[Exec] = Field(default_factory=list)
    writes: list[Write] = Field(default_factory=list)
    connects: list[Connect] = Field(default_factory=list)
    output: str = ""
    """The case's stdout and stderr (the first OUTPUT_LIMIT bytes)."""
    truncated: bool = False
    timed_out: bool = False
    strace_status: int = 0
    seconds: float = 0.0

    def image_of(self, pid: int) -> str | None:
        """The program a process was running (its own last exec, else its parent's)."""
        seen: set[int] = set()
        current: int | None = pid
        while current is not None and current not in seen:
            seen.add(current)
            for e in reversed(self.execs):
                if e.pid == current and e.ok:
                    return e.filename
            parent = self.parents.get(str(current))
            current = parent
        return None


class Oracle:
    """One running oracle container; `observe(command)` runs one case."""

    def __init__(self, client: Any, image: str, *, case_timeout_s: float = CASE_TIMEOUT_S) -> None:
        self._client = client
        self._image = image
        settings = Settings.from_env()
        self._backend = DockerBackend(
            client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
        )
        self.session = SESSION_PREFIX + uuid.uuid4().hex[:12]
        self.case_timeout_s = case_timeout_s
        self._dir: Path | None = None
        self._server: socket.socket | None = None
        self._conn: socket.socket | None = None
        self._stream: Any = None
        self._container: str | None = None
        self._next_id = 0
        self.restarts = 0
        self._settings = settings
        self._guard: WorkspaceGuard | None = None
        self._ws_root: Path | None = None

    def __enter__(self) -> Oracle:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="warden-fuzz-io-"))
        self._dir.chmod(0o755)
        (self._dir / "hosts").write_text(HOSTS)
        (self._dir / "resolv.conf").write_text(RESOLV)
        sock_path = self._dir / "oracle.sock"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(sock_path))
        os.chmod(sock_path, 0o777)
        self._server.listen(1)
        self._server.settimeout(CONNECT_TIMEOUT_S)
        # Apart from /fuzz-io (mounted as it is): only /workspace, walled, shows it.
        self._ws_root = Path(tempfile.mkdtemp(prefix="warden-fuzz-ws-"))
        self._guard = make_workspace(self._ws_root / "workspace", self._settings)
        spec = SandboxSpec(
            image=self._image,
            command=[
                "/usr/bin/python3",
                "/opt/fuzz-oracle/driver.py",
                "/fuzz-io/oracle.sock",
                WORKSPACE,
            ],
            workspace=self._guard.workspace,
            mounts=[
                Mount(source=self._dir, target="/fuzz-io", read_only=True),
                Mount(source=self._dir / "hosts", target="/etc/hosts", read_only=True),
                Mount(source=self._dir / "resolv.conf", target="/etc/resolv.conf", read_only=True),
                *self._guard.mounts(),
            ],
            user="1000:1000",
            limits=ORACLE_LIMITS,
            warden_labels=wl.warden_labels(self.session, exec="fuzz-oracle"),
            workdir=WORKSPACE,
        )
        self._container = self._backend.start(spec)
        try:
            self._conn, _ = self._server.accept()
        except OSError as exc:
            self.close()
            raise OracleError(f"the oracle driver did not connect back ({exc})") from exc
        self._conn.settimeout(self.case_timeout_s + ANSWER_SLACK_S)
        self._stream = self._conn.makefile("rwb", buffering=0)
        hello = json.loads(self._stream.readline() or b"{}")
        if not hello.get("ready"):
            self.close()
            raise OracleError(f"the oracle driver sent {hello!r} instead of a greeting")

    def observe(self, command: str) -> Observation:
        """Run one case; restart the container once if it died under the case.

        Raises OracleError when the case fails again in a fresh container."""
        try:
            return self._observe(command)
        except (OSError, ValueError, OracleError):
            self.restarts += 1
            self.close()
            self.start()
        try:
            return self._observe(command)
        except (OSError, ValueError) as exc:
            raise OracleError(f"the oracle failed twice on this case ({exc})") from exc

    def _observe(self, command: str) -> Observation:
        if self._stream is None:
            raise OracleError("the oracle is not running")
        self._next_id += 1
        request = {"id": self._next_id, "command": command, "timeout": self.case_timeout_s}
        self._stream.write(json.dumps(request).encode() + b"\n")
        line = self._stream.readline()
        if not line:
            raise OracleError("the oracle driver closed the stream")
        answer = json.loads(line)
        if "error" in answer:
            raise OracleError(f"the oracle driver failed: {answer['error']}")
        answer.pop("id", None)
        return Observation.model_validate(answer)

    def close(self) -> None:
        for closable in (self._stream, self._conn, self._server):
            if closable is not None:
                with contextlib.suppress(OSError):
                    closable.close()
        self._stream = self._conn = self._server = None
        if self._container is not None:
            self._backend.remove(self._container)
            self._container = None
        if self._guard is not None:
            self._guard.release()
            self._guard = None
        if self._ws_root is not None:
            shutil.rmtree(self._ws_root, ignore_errors=True)
            self._ws_root = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
