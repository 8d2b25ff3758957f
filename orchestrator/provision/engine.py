"""Starting an engine on demand (`warden doctor --fix`): what this host has, the plan
to fix it, and carrying the plan out (apt-get, a detached dockerd, waiting for it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.backend.connect import (
    connect,
    dockerd_installed,
    engine_problem,
    socket_path,
    socket_state,
)
from orchestrator.errors import EngineUnavailableError

DOCKERD = Path("/usr/sbin/dockerd")
DOCKERD_PIDFILE = Path("/var/run/docker.pid")
DOCKERD_LOG = Path("/var/log/warden-dockerd.log")
"""Where a dockerd that warden starts writes its log."""
DEFAULT_DOCKER_HOSTS = frozenset({"", "unix:///var/run/docker.sock", "unix:///run/docker.sock"})
SOCKET_WAIT_S = 30.0
"""How long `--fix` waits for a freshly started dockerd to answer."""
SOCKET_POLL_S = 0.5
APT_TIMEOUT_S = 900
"""Bound on one apt-get call (docker.io is ~70 MB of packages)."""
ENGINE_PACKAGE = "docker.io"
BOOTSTRAP_PACKAGE = "debootstrap"
"""Needed to bootstrap a base image from Debian packages when none is present."""


@dataclass(frozen=True)
class HostFacts:
    """What `--fix` decides from; gathered by `host_facts()`, built by hand in tests."""

    engine_answers: bool
    is_root: bool
    is_debian: bool
    dockerd_installed: bool
    dockerd_running: bool
    debootstrap_installed: bool
    docker_host: str = ""
    socket: str = "absent"
    """What a connect to the engine's socket met (`connect.socket_state`)."""


@dataclass(frozen=True)
class FixPlan:
    """What `--fix` will do, or (refusal) exactly what the user must do instead."""

    install: tuple[str, ...] = ()
    start_dockerd: bool = False
    wait_for_engine: bool = False
    refusal: str | None = None

    @property
    def nothing_to_do(self) -> bool:
        return not (self.install or self.start_dockerd or self.wait_for_engine or self.refusal)


def plan_fix(facts: HostFacts) -> FixPlan:
    """The decision logic of `warden doctor --fix`, free of side effects."""
    can_apt = facts.is_root and facts.is_debian
    extras = (BOOTSTRAP_PACKAGE,) if can_apt and not facts.debootstrap_installed else ()
    if facts.engine_answers:
        return FixPlan(install=extras)
    if facts.docker_host not in DEFAULT_DOCKER_HOSTS:
        return FixPlan(
            refusal=f"DOCKER_HOST={facts.docker_host} does not answer and warden only starts "
            "a local engine: start the engine DOCKER_HOST points at, or unset DOCKER_HOST"
        )
    if not facts.is_root and facts.socket == "denied":
        host = facts.docker_host or "unix://"
        return FixPlan(refusal=engine_problem(host, "permission denied", facts.socket))
    if not facts.is_root:
        return FixPlan(
            refusal="the Docker engine is not running and starting it needs root: run "
            "`sudo warden doctor --fix` (Debian: installs docker.io and starts dockerd), or "
            "start your engine yourself (`sudo systemctl start docker`), or point DOCKER_HOST "
            "at a running engine"
        )
    if not facts.dockerd_installed and not facts.is_debian:
        return FixPlan(
            refusal="the Docker engine is not installed and this is not Debian, so warden "
            "cannot install it: install Docker Engine for your system "
            "(https://docs.docker.com/engine/install/), start it, then run `warden doctor`"
        )
    install = extras if facts.dockerd_installed else (ENGINE_PACKAGE, *extras)
    return FixPlan(install=install, start_dockerd=not facts.dockerd_running, wait_for_engine=True)


def host_facts() -> HostFacts:
    """Look at this host (one ping, a few stat calls)."""
    try:
        connect(timeout_s=3)
        answers = True
    except EngineUnavailableError:
        answers = False
    return HostFacts(
        engine_answers=answers,
        is_root=os.geteuid() == 0,
        is_debian=_is_debian(),
        dockerd_installed=dockerd_installed(),
        dockerd_running=_dockerd_pid() is not None,
        debootstrap_installed=shutil.which("debootstrap") is not None
        or Path("/usr/sbin/debootstrap").exists(),
        docker_host=os.environ.get("DOCKER_HOST", ""),
        socket=socket_state(socket_path(os.environ.get("DOCKER_HOST") or "unix://")),
    )


def apply_fix(plan: FixPlan, log: Callable[[str], None]) -> list[str]:
    """Carry out `plan`; the actions taken, in words. Raises EngineUnavailableError."""
    if plan.refusal:
        raise EngineUnavailableError(plan.refusal)
    done: list[str] = []
    if plan.install:
        log(f"installing {' '.join(plan.install)} with apt-get")
        _apt("update")
        _apt("install", "-y", "--no-install-recommends", *plan.install)
        done.append(f"installed {', '.join(plan.install)} (apt-get)")
    pid: int | None = None
    if plan.start_dockerd:
        dockerd = str(DOCKERD) if DOCKERD.exists() else (shutil.which("dockerd") or str(DOCKERD))
        DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
        pid = _spawn_detached(dockerd, DOCKERD_LOG)
        log(f"started {dockerd} (pid {pid}) in the background; log: {DOCKERD_LOG}")
        done.append(f"started {dockerd} (pid {pid}), logging to {DOCKERD_LOG}")
    if plan.wait_for_engine:
        waited = _wait_for_engine(SOCKET_WAIT_S, pid)
        done.append(f"engine answered after {waited:.1f} s")
    return done


def _spawn_detached(program: str, log_path: Path) -> int:
    """Start `program` so that it outlives warden: its own session, reparented to init
    (the intermediate shell exits at once), output appended to `log_path`."""
    launcher = 'nohup "$0" >>"$1" 2>&1 </dev/null & echo $!'
    done = subprocess.run(
        ["sh", "-c", launcher, program, str(log_path)],
        capture_output=True, text=True, start_new_session=True, timeout=30, check=False,
    )  # fmt: skip
    try:
        return int(done.stdout.strip())
    except ValueError:
        raise EngineUnavailableError(
            f"could not start {program}: {done.stderr.strip() or 'no pid reported'}"
        ) from None


def _wait_for_engine(limit_s: float, pid: int | None = None) -> float:
    """Seconds until the engine answered; gives up after `limit_s`, or at once when the
    dockerd we started (`pid`) has exited."""
    started = time.monotonic()
    while True:
        try:
            connect(timeout_s=2)
            return time.monotonic() - started
        except EngineUnavailableError:
            if pid is not None and not Path(f"/proc/{pid}").exists():
                raise EngineUnavailableError(
                    f"dockerd exited right after it started; read {DOCKERD_LOG} "
                    f"(last lines: {_tail(DOCKERD_LOG)})"
                ) from None
            if time.monotonic() - started > limit_s:
                raise EngineUnavailableError(
                    f"dockerd did not answer within {limit_s:.0f} s; read {DOCKERD_LOG} "
                    f"(last lines: {_tail(DOCKERD_LOG)})"
                ) from None
            time.sleep(SOCKET_POLL_S)


def _apt(*args: str) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        done = subprocess.run(
            ["apt-get", *args], env=env, capture_output=True, text=True,
            timeout=APT_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise EngineUnavailableError(
            f"apt-get {args[0]} took longer than {APT_TIMEOUT_S} s; check the Debian mirror"
        ) from exc
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        raise EngineUnavailableError(
            f"apt-get {' '.join(args)} failed (exit {done.returncode}): {tail}; "
            "fix apt (mirror, disk space), then run `warden doctor --fix` again"
        )


def _is_debian() -> bool:
    if Path("/etc/debian_version").exists():
        return True
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return False
    return any(
        line.split("=", 1)[1].strip('"').split().count("debian") > 0
        for line in text.splitlines()
        if line.startswith(("ID=", "ID_LIKE="))
    )


def _dockerd_pid() -> int | None:
    try:
        pid = int(DOCKERD_PIDFILE.read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if comm == "dockerd" else None


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "no log"
