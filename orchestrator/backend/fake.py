"""An in-process `ContainerBackend` that runs nothing: for unit tests of the layers above.

It keeps the contract of the Docker backend (label rules, never uid 0, output cap
with the same announcement, timeouts, kill, idempotent remove, list by label) so
code tested against it behaves the same on Docker. Outcomes are scripted: pass a
`responder` that maps a spec to a `FakeOutcome`, or rely on the default one, which
understands a tiny command vocabulary (`true`, `false`, `echo …`, `sleep N`,
`exit N`, `head -c N /dev/zero`). Never use it for isolation tests.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from orchestrator import labels as wl
from orchestrator.backend.capture import OutputCapture
from orchestrator.backend.contract import (
    ContainerBackend,
    ContainerInfo,
    SandboxResult,
    SandboxSpec,
    SandboxStatus,
)
from orchestrator.errors import (
    ConfigError,
    ContainerStartError,
    EngineUnavailableError,
    ImageNotFoundError,
)

_FEED_CHUNK = 64 * 1024


@dataclass(frozen=True)
class FakeOutcome:
    """What a fake container does once started."""

    exit_code: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_zero_bytes: int = 0
    """Extra NUL bytes written to stdout after `stdout` (floods without the memory)."""
    run_s: float = 0.0
    """How long it runs before exiting; `float("inf")` runs until killed."""
    oom: bool = False
    """Ends as if the kernel OOM-killed it (exit 137)."""


@dataclass
class _Container:
    id: str
    spec: SandboxSpec
    labels: dict[str, str]
    outcome: FakeOutcome
    started_at: float
    done: threading.Event = field(default_factory=threading.Event)
    killed: bool = False
    state: str = "running"


Responder = Callable[[SandboxSpec], FakeOutcome]


class FakeBackend(ContainerBackend):
    """Scripted backend. `started` records every spec it was given, in order."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        images: set[str] | None = None,
        engine_up: bool = True,
    ) -> None:
        self._responder = responder or default_responder
        self.images = images
        """Known images; None accepts any name."""
        self.engine_up = engine_up
        """Set to False to make every call raise EngineUnavailableError."""
        self.started: list[SandboxSpec] = []
        self._containers: dict[str, _Container] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def start(self, spec: SandboxSpec) -> str:
        self._check_engine()
        wl.check_user_labels(spec.labels)
        if wl.SESSION not in spec.warden_labels:
            raise ConfigError("a sandbox needs a warden.session label (labels.warden_labels)")
        if self.images is not None and spec.image not in self.images:
            raise ImageNotFoundError(f"image {spec.image!r} does not exist (fake backend)")
        outcome = self._responder(spec)
        container_id = f"fake{next(self._ids):060d}"
        labels = {**spec.labels, wl.VERSION: wl.warden_labels("-")[wl.VERSION]}
        labels.update(spec.warden_labels)
        with self._lock:
            self.started.append(spec)
            self._containers[container_id] = _Container(
                container_id, spec, labels, outcome, time.monotonic()
            )
        return container_id

    def wait(self, container_id: str, timeout_s: float | None) -> SandboxResult:
        self._check_engine()
        box = self._get(container_id)
        run_s = box.outcome.run_s
        limit = run_s if timeout_s is None else min(run_s, timeout_s)
        box.done.wait(None if limit == float("inf") else limit)
        timed_out = not box.killed and timeout_s is not None and run_s > timeout_s
        if timed_out:
            self.kill(container_id)
        box.state = "exited"
        stdout = OutputCapture("stdout", box.spec.output_limit_bytes)
        stderr = OutputCapture("stderr", box.spec.output_limit_bytes)
        stdout.feed(box.outcome.stdout)
        zeros = box.outcome.stdout_zero_bytes
        while zeros > 0:
            stdout.feed(bytes(min(zeros, _FEED_CHUNK)))
            zeros -= _FEED_CHUNK
        stderr.feed(box.outcome.stderr)
        if timed_out:
            status, code = SandboxStatus.TIMED_OUT, 137
        elif box.killed:
            status, code = SandboxStatus.KILLED, 137
        elif box.outcome.oom:
            status, code = SandboxStatus.OOM_KILLED, 137
        else:
            code = box.outcome.exit_code
            status = SandboxStatus.OK if code == 0 else SandboxStatus.ERROR
        return SandboxResult(
            status=status,
            exit_code=code,
            stdout=stdout.text(),
            stderr=stderr.text(),
            truncated=stdout.truncated or stderr.truncated,
            duration_s=time.monotonic() - box.started_at,
        )

    def kill(self, container_id: str) -> None:
        self._check_engine()
        with self._lock:
            box = self._containers.get(container_id)
        if box is not None and not box.done.is_set():
            box.killed = True
            box.done.set()

    def remove(self, container_id: str) -> None:
        self._check_engine()
        with self._lock:
            box = self._containers.pop(container_id, None)
        if box is not None:
            box.done.set()

    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        self._check_engine()
        with self._lock:
            boxes = list(self._containers.values())
        return [
            ContainerInfo(id=box.id, name=box.id[:12], status=box.state, labels=box.labels)
            for box in boxes
            if all(
                key in box.labels and (value is None or box.labels[key] == value)
                for key, value in labels.items()
            )
        ]

    def _get(self, container_id: str) -> _Container:
        with self._lock:
            box = self._containers.get(container_id)
        if box is None:
            raise ContainerStartError(f"no fake container {container_id}")
        return box

    def _check_engine(self) -> None:
        if not self.engine_up:
            raise EngineUnavailableError("the (fake) Docker engine does not answer")


def default_responder(spec: SandboxSpec) -> FakeOutcome:
    """The tiny vocabulary the conformance suite shares with real containers."""
    name, *args = spec.command
    if name == "true":
        return FakeOutcome()
    if name == "false":
        return FakeOutcome(exit_code=1)
    if name == "echo":
        return FakeOutcome(stdout=(" ".join(args) + "\n").encode())
    if name == "sleep" and len(args) == 1:
        return FakeOutcome(run_s=float(args[0]))
    if name == "sh" and len(args) == 2 and args[0] == "-c" and args[1].startswith("exit "):
        return FakeOutcome(exit_code=int(args[1].split()[1]))
    if name == "head" and args[:1] == ["-c"] and args[2:] == ["/dev/zero"]:
        return FakeOutcome(stdout_zero_bytes=int(args[1]))
    return FakeOutcome(exit_code=127, stderr=f"fake: {name}: command not found\n".encode())
