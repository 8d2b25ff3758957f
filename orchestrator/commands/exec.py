"""`warden exec`: run one command in a fresh hardened container, then remove it.

Start-up is kept cheap: only click and the standard library are imported at module
level; pydantic and the docker SDK are imported inside the command, once the
arguments are known to be good.

A little over 400 lines, one idea: the command's options, building its one sandbox,
and turning every way it can end (exit, timeout, OOM, disk limit, signals) into an
exit status and the `--json` document.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import click

from orchestrator.egress.flags import EgressFlags, egress_options, limits_from_flags
from orchestrator.errors import ImageNotFoundError, WardenError

F = TypeVar("F", bound=Callable[..., Any])  # Any: any click command function

if TYPE_CHECKING:
    from docker import DockerClient

    from orchestrator.backend.contract import ContainerBackend, SandboxResult, SandboxSpec
    from orchestrator.config import Settings
    from orchestrator.images.buildbox import BuildEgress
    from orchestrator.images.choice import SandboxImage

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "bash"
DEFAULT_TIMEOUT_S = 300.0
EXIT_TIMED_OUT = 124
EXIT_OOM_KILLED = 137
EXIT_INTERRUPTED = 130
"""Ctrl-C; SIGTERM gives 143 and SIGHUP 129 (128 + the signal number)."""
EXIT_WARDEN_FAILED = 125
"""Like `docker run`: warden (not the command) failed."""
EXIT_DISK_LIMIT = 122
"""The command crossed a disk limit (bytes written or the free-space floor) and was killed."""

_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


class SizeType(click.ParamType[int]):
    """`512m`, `1g`, `65536`, `64k` (binary units) → bytes."""

    name = "size"

    def __init__(self, *, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(  # Any: click.ParamType.convert takes whatever was typed or defaulted
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().removesuffix("ib").removesuffix("b")
        number, unit = text, ""
        if text and text[-1] in _SIZE_UNITS:
            number, unit = text[:-1], text[-1]
        try:
            size = int(float(number) * _SIZE_UNITS[unit])
        except ValueError:
            self.fail(f"{value!r} is not a size like 512m or 1g", param, ctx)
        if size < 0 or (size == 0 and not self.allow_zero):
            self.fail(f"{value!r} must be positive", param, ctx)
        return size


def disk_limit_options(who: str, crossing: str) -> Callable[[F], F]:
    """`--disk-write-limit` and `--disk-free-floor`, worded for `who` (shared by
    `warden exec` and `warden run`)."""

    def decorate(command: F) -> F:
        command = click.option(
            "--disk-free-floor",
            type=SizeType(allow_zero=True),
            default=None,
            metavar="SIZE",
            help="Free space the workspace's file system must keep; 0: no floor "
            f"[default: WARDEN_DISK_FREE_FLOOR, else 1g]. Falling below: {crossing}.",
        )(command)
        return click.option(
            "--disk-write-limit",
            type=SizeType(allow_zero=True),
            default=None,
            metavar="SIZE",
            help=f"Most bytes {who} may write (and its largest file), e.g. 500m, 4g; 0: no "
            f"cap [default: WARDEN_DISK_WRITE_LIMIT, else 2g]. Crossing it: {crossing}.",
        )(command)

    return decorate


class UserType(click.ParamType[str]):
    """Numeric `uid:gid` (or `uid`), never root."""

    name = "uid:gid"

    def convert(  # Any: click.ParamType.convert takes whatever was typed or defaulted
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> str:
        from orchestrator.backend.contract import parse_user

        try:
            uid, gid = parse_user(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return f"{uid}:{gid}"


@click.command(
    "exec",
    context_settings={"allow_interspersed_args": False},
    help="Run COMMAND in a fresh hardened container (no network, no capabilities, "
    "read-only root, non-root, resource limits) with the workspace at /workspace, "
    "then remove it. Exit status: the command's own; 124 on timeout; 137 when "
    "OOM-killed; 122 when killed for crossing a disk limit; 130/143/129 when stopped by "
    "SIGINT/SIGTERM/SIGHUP; 125 when warden itself failed.",
)
@click.option(
    "--workspace",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Directory mounted read-write at /workspace (default: current directory).",
)
@click.option(
    "--image",
    default=None,
    metavar="IMAGE",
    help="agent, bash, or any local Linux image of this machine's architecture "
    f"[default: the workspace's dev container, else {DEFAULT_IMAGE}].",
)
@click.option(
    "--devcontainer/--no-devcontainer",
    default=None,
    help="Run the command in the workspace's dev container (.devcontainer/devcontainer.json) "
    "[default: yes when it has one and the workspace is trusted; WARDEN_DEVCONTAINER=0 "
    "turns that off].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds before the container is killed.",
)
@click.option(
    "--memory", type=SizeType(), default=None, help="Memory limit, e.g. 512m, 1g [default: 512m]."
)
@click.option(
    "--cpus",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="CPU quota in cores [default: 1].",
)
@click.option(
    "--pids", type=click.IntRange(min=8), default=None, help="Process limit [default: 256]."
)
@disk_limit_options("the command", "warden exec exits 122")
@click.option("--user", type=UserType(), default=None, help="uid:gid (default: the owner).")
@click.option(
    "--label",
    "user_labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra container label (repeatable); the warden. namespace is reserved.",
)
@click.option(
    "--protect",
    multiple=True,
    metavar="PATH",
    help="Workspace path mounted read-only (repeatable); .claude and .git always are.",
)
@egress_options("the command", SizeType(allow_zero=True))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the result.")
@click.argument("command", nargs=-1, required=True)
def exec_command(
    workspace: Path | None,
    image: str | None,
    devcontainer: bool | None,
    timeout: float,
    memory: int | None,
    cpus: float | None,
    pids: int | None,
    disk_write_limit: int | None,
    disk_free_floor: int | None,
    user: str | None,
    user_labels: tuple[str, ...],
    protect: tuple[str, ...],
    allow_domains: tuple[str, ...],
    deny_domains: tuple[str, ...],
    egress_max_down: int | None,
    egress_max_up: int | None,
    egress_max_connections: int | None,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    from orchestrator.errors import WardenError

    _log_warnings_to_stderr()
    labels = _parse_labels(user_labels)
    disk = (disk_write_limit, disk_free_floor)
    egress = None
    if allow_domains:  # the meter's module is imported only here
        limits = limits_from_flags(egress_max_down, egress_max_up, egress_max_connections)
        egress = EgressFlags(allow_domains, deny_domains, limits)
    try:
        code = _run(
            workspace,
            (image, devcontainer),
            timeout,
            memory,
            cpus,
            pids,
            disk,
            user,
            labels,
            protect,
            as_json,
            command,
            egress,
        )
    except WardenError as exc:
        click.echo(f"warden: error: {exc}", err=True)
        for note in getattr(exc, "__notes__", []):
            click.echo(note, err=True)
        code = EXIT_WARDEN_FAILED
    sys.stdout.flush()
    raise SystemExit(code)


def _run(
    workspace: Path | None,
    image: tuple[str | None, bool | None],
    timeout: float,
    memory: int | None,
    cpus: float | None,
    pids: int | None,
    disk: tuple[int | None, int | None],
    user: str | None,
    user_labels: dict[str, str],
    protect: tuple[str, ...],
    as_json: bool,
    command: tuple[str, ...],
    egress_flags: EgressFlags | None = None,
) -> int:
    from orchestrator.backend.connect import connect_beside

    # The engine answers the API version while warden's own modules load below.
    engine = connect_beside()
    from orchestrator import labels
    from orchestrator.backend.contract import DiskLimits, ResourceLimits, SandboxSpec
    from orchestrator.backend.factory import make_backend
    from orchestrator.backend.weakened import weakened_guards
    from orchestrator.config import Settings
    from orchestrator.images import choice  # noqa: F401  (loaded while the engine answers)
    from orchestrator.lifecycle import socket_dirs
    from orchestrator.runtime import run_images  # noqa: F401  (likewise)
    from orchestrator.workspace.guard import WorkspaceGuard

    settings = Settings.from_env()
    socket_dirs.check_workspace_excludes(workspace or Path.cwd(), settings)
    limits: dict[str, Any] = {"disk": DiskLimits.from_settings(settings, *disk)}
    for missing in weakened_guards(limits["disk"]):
        logging.getLogger("warden").warning("%s", missing)
    if memory is not None:
        limits["memory_bytes"] = memory
    if cpus is not None:
        limits["cpus"] = cpus
    if pids is not None:
        limits["pids"] = pids
    from orchestrator import start_up_done
    from orchestrator.errors import ConfigError

    start_up_done()  # the docker SDK, pydantic and warden's modules are imported
    exec_id = os.urandom(8).hex()  # 16 hex digits; `uuid` would cost ~2 ms of imports
    # The command is untrusted and the workspace outlives it: .claude (settings,
    # hooks, agents) and .git (hooks, config) stay read-only, as in `warden run`.
    guard = WorkspaceGuard.prepare(workspace or Path.cwd(), protect=protect, leave_no_trace=True)
    egress = None
    try:
        client = engine()
        chosen = _resolve_image(
            client, settings, workspace or Path.cwd(), *image, user=user, egress=egress_flags,
            remembered=True,
        )  # fmt: skip
        try:
            spec = SandboxSpec(
                image=chosen.ref,
                # The container's entrypoint, under the engine's init; warden's seccomp
                # profile refuses fallocate as in every sandbox (`images.sealing`).
                command=list(command),
                workspace=(workspace or Path.cwd()),
                mounts=[*chosen.mounts, *guard.mounts()],
                env=dict(chosen.env),  # warden's own images' (a project image keeps its ENV)
                user=user,
                limits=ResourceLimits(**limits),
                labels=user_labels,
                warden_labels=labels.warden_labels(f"exec-{exec_id}", exec=exec_id),
                timeout_s=timeout,
            )
        except ConfigError as exc:
            raise click.UsageError(f"invalid sandbox settings: {exc}") from exc
        if egress_flags is not None:  # the proxy's imports are paid only here
            from orchestrator.egress.oneoff import start_exec_egress

            egress = start_exec_egress(
                settings, spec, egress_flags, socket_root=socket_dirs.socket_root()
            )
            spec = egress.sandbox_spec(spec)
        backend = make_backend(client, settings)
        try:
            result = run_interruptible(backend, spec)
        except ImageNotFoundError:
            if not chosen.remembered:
                raise
            # The image the state directory remembered is gone: look it up (or say how
            # to build it), and run the command there.
            chosen = _resolve_image(client, settings, workspace or Path.cwd(), *image,
                                    user=user, egress=egress_flags, remembered=False)  # fmt: skip
            result = run_interruptible(backend, replace(spec, image=chosen.ref))
    finally:
        if egress is not None:
            egress.close()
        guard.release()
    if isinstance(result, Interrupted):
        click.echo(
            f"warden: interrupted ({signal.Signals(result.signum).name}); "
            "container killed and removed",
            err=True,
        )
        return 128 + result.signum
    code = exit_status(result)
    if as_json:
        payload = {
            "status": result.status.value,
            "exit_code": code,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "truncated": result.truncated,
            "duration_s": round(result.duration_s, 4),
            **({"reason": result.reason} if result.reason else {}),
        }
        sys.stdout.write(json.dumps(payload) + "\n")
        return code
    sys.stdout.write(result.stdout)
    sys.stdout.flush()
    sys.stderr.write(result.stderr)
    if result.status.value != "ok":
        sys.stderr.write(f"warden: {_describe(result, timeout)}\n")
    return code


@dataclass(frozen=True)
class Interrupted:
    """A stop signal ended the run; the exit status is 128 + signum (130, 143, 129)."""

    signum: int


def run_interruptible(backend: ContainerBackend, spec: SandboxSpec) -> SandboxResult | Interrupted:
    """`backend.run(spec)`, but SIGINT/SIGTERM/SIGHUP kill and remove the container.

    Returns `Interrupted` when a signal arrived. A signal never interrupts a call
    midway (an exception raised inside the engine's client, or while a lock is held,
    can leave that lock taken and the cleanup waiting on it for ever): its handler
    only notes it and has a thread remove the containers carrying the run's unique
    labels, which ends the wait; one created after that sweep is removed here.
    """
    arrived: list[int] = []
    sweeps: list[threading.Thread] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if arrived:
            return  # the cleanup is under way already
        arrived.append(signum)
        sweep = threading.Thread(
            target=_sweep, args=(backend, spec.warden_labels), name="warden-stop", daemon=True
        )
        sweeps.append(sweep)
        sweep.start()

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in handled}
    for sig in handled:
        signal.signal(sig, on_signal)
    container_id: str | None = None
    result: SandboxResult | None = None
    try:
        try:
            container_id = backend.start(spec)
            if not arrived:
                result = backend.wait(container_id, spec.timeout_s)
        except WardenError:
            if not arrived:
                raise  # a real failure; with a stop under way, the sweep caused it
        finally:
            for sweep in sweeps:  # one removal at a time: the engine refuses a second
                sweep.join()
            if container_id is not None:
                backend.remove(container_id)
            if arrived:
                backend.cleanup(spec.warden_labels)  # one made after the sweep looked
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if arrived:
        return Interrupted(arrived[0])
    assert result is not None
    return result


def _sweep(backend: ContainerBackend, labels: Mapping[str, str]) -> None:
    try:
        backend.cleanup(labels)
    except WardenError as exc:  # the main thread sweeps again and reports what fails
        log.debug("could not remove the interrupted command's container: %s", exc)


def exit_status(result: SandboxResult) -> int:
    """Our exit status for a result: the command's own, 124 timed out, 137 OOM."""
    status = result.status.value
    if status == "timed_out":
        return EXIT_TIMED_OUT
    if status == "oom_killed":
        return EXIT_OOM_KILLED
    if status == "disk_limit":
        return EXIT_DISK_LIMIT
    return result.exit_code


def _describe(result: SandboxResult, timeout: float) -> str:
    status = result.status.value
    if status == "timed_out":
        return f"timed out after {timeout:g} s; the container was killed"
    if status == "oom_killed":
        return "out of memory: the kernel killed the command (raise --memory)"
    if status == "killed":
        return "the container was killed from outside"
    if result.reason:
        return result.reason
    if status == "removed":
        return "the container was removed from outside warden (docker rm -f)"
    return f"command exited with status {result.exit_code}"


def _parse_labels(pairs: tuple[str, ...]) -> dict[str, str]:
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--label")
        if key.startswith("warden."):
            raise click.BadParameter(
                f"{key!r} is in the reserved 'warden.' namespace; choose another prefix",
                param_hint="--label",
            )
        result[key] = value
    return result


def _resolve_image(
    client: DockerClient,
    settings: Settings,
    workspace: Path,
    image: str | None,
    devcontainer: bool | None,
    *,
    user: str | None,
    egress: EgressFlags | None,
    remembered: bool,
) -> SandboxImage:
    """The command's image by `warden run`'s precedence without the agent file
    (`--image` > the dev container > `bash`); `agent`/`bash` → the current
    content-addressed tag; any other name must be a local Linux image of this
    architecture (checked before the container starts). A dev container build
    reaches the network only through the command's own egress rules. `remembered`:
    warden's own image may be the id the state directory last confirmed (no engine
    call; the caller looks again when the create finds it gone)."""
    from orchestrator.images.choice import SandboxImages
    from orchestrator.runtime.run_images import command_image

    def build_egress() -> AbstractContextManager[BuildEgress | None]:
        from orchestrator.egress.oneoff import identity_for
        from orchestrator.egress.sources import exec_rules
        from orchestrator.runtime.run_images import oneoff_build_egress

        if egress is None:
            return nullcontext()
        identity = identity_for(workspace.resolve(), user, settings.fallback_uid)
        rules = exec_rules(settings, egress.allow_domains, egress.deny_domains)
        return oneoff_build_egress(rules, egress.limits, identity)

    name = command_image(
        client,
        settings,
        workspace,
        image=image,
        devcontainer=devcontainer,
        default=DEFAULT_IMAGE,
        progress=lambda line: click.echo(f"warden: {line}", err=True),
        build_egress=build_egress,
    )
    images = SandboxImages(client, settings.state_dir)
    return (remembered and images.remembered(name)) or images.get(name, runner=False)


def _log_warnings_to_stderr() -> None:
    logger = logging.getLogger("warden")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("warden: warning: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
