"""The box a dev container's Dockerfile is built in: its limits, its network and
what is left when it ends.

A workspace Dockerfile is hostile input the engine runs (each `RUN` is a
container the engine starts on the host), so warden builds it inside a box:

- a *holder* container (warden's `bash` image, hardened like a sandbox: no
  network but `lo`, no capabilities, read-only root, not root) starts first,
  carrying the build's process and memory limits (`BuildLimits`);
- every build step runs in the holder's cgroup (`cgroupparent`: the engine nests
  each step's cgroup under the holder's, so its `pids.max` and memory limit bound
  all the steps' processes together) and in its network namespace
  (`networkmode=container:<holder>`: only `lo`);
- when the run's egress grants domains, the holder runs warden's forwarder on a
  loopback port wired to the run's egress proxy (`BuildEgress`: its rules, no
  questions), and the build gets the standard proxy build arguments pointing at
  it; nothing else is reachable;
- every step has RLIMIT_FSIZE at the build's disk cap (the build request's
  `ulimits`), and the watchdog measures the running steps' layers (their writable
  directories) against the cap; `layers_bytes` counts the step images' layers
  once the build ends;
- a watchdog ends the build when it runs past its deadline, its processes
  reach the limit or its layers the disk cap: it kills the running step (steps are found by their network
  mode), so the engine fails the build; `CUT_AFTER_S` later it cuts the
  connection, which makes the engine cancel the build.
Nesting a build's cgroups under a container needs the engine's cgroupfs driver
on cgroup v1 (the machines this project runs on). On other engines a build asking
for a process limit is refused before it starts (`WARDEN_BUILD_PIDS_LIMIT=0`
builds there with a memory cap per step and no process cap).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections.abc import Generator, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from orchestrator.backend.contract import (
    BUILD_DEADLINE_VARIABLE,
    BUILD_DISK_VARIABLE,
    BUILD_MEMORY_VARIABLE,
    BUILD_PIDS_VARIABLE,
    BuildLimits,
)
from orchestrator.backend.seccomp import security_options
from orchestrator.errors import ImageBuildError
from orchestrator.labels import warden_labels

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container
    from requests import Response

HOLDER_USER = "65534:65534"
"""The holder's user when no egress proxy needs a particular one."""
HOLDER_START_S = 20.0
"""Longest wait for the holder to report its cgroup (and its proxy port)."""
WATCH_INTERVAL_S = 0.25
"""How often the watchdog looks at the deadline and the process count."""
CUT_AFTER_S = 30.0
"""After a limit is crossed and its step killed, how long the engine has to end
the build before warden closes the connection (the engine then cancels it)."""
SOCKET_DIR_IN_HOLDER = "/run/warden"
PROXY_ARGS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
NO_PROXY = "localhost,127.0.0.1,::1"
_HOLDER_SCRIPT = """
import os, sys, time
def say(line):
    sys.stdout.write(line + "\\n"); sys.stdout.flush()
def peaked():
    try:
        with open(PIDS + "pids.peak") as peak, open(PIDS + "pids.max") as limit:
            top = limit.read().strip()
            return top != "max" and int(peak.read()) >= int(top)
    except (OSError, ValueError):
        return False
PIDS = "/sys/fs/cgroup/pids/"
for line in open("/proc/self/cgroup"):
    parts = line.strip().split(":", 2)
    if len(parts) == 3 and "pids" in parts[1].split(","):
        say("cgroup " + parts[2])
say("proxy " + os.environ.get("HTTP_PROXY", ""))
say("ready")
if sys.argv[1:] == ["--peaked"]:
    sys.exit(0 if peaked() else 1)
while not peaked():
    time.sleep(%(interval)s)
say("pids-max")
while True:
    time.sleep(3600)
"""
"""The holder's program (python3 of warden's image, standard library): it reports
its cgroup and proxy, then says `pids-max` once the processes of its cgroup, which
holds the steps' cgroups, have reached its limit (`pids.peak`, hierarchical). It
forks nothing, so it works at the limit."""
HOLDER_WATCH_S = 0.1
_FORWARDER = ("python3", "-m", "sandbox_tools.egress_forward", "--")
_PIDS_CROSSED = (
    "its processes reached the build's process limit of {0} ({1}; a fork bomb or a "
    "runaway build, or raise it)"
)
DISK_EVERY = 2
"""The watchdog measures the steps' layers every this many looks (walking a layer
costs more than the other looks)."""
SIGXFSZ_STATUS = 128 + 25
"""A step's shell status when a file reached RLIMIT_FSIZE (SIGXFSZ)."""
_CGROUP_LINE = re.compile(r"^cgroup (/\S*)$", re.MULTILINE)
_PROXY_LINE = re.compile(r"^proxy (\S*)$", re.MULTILINE)


def tree_bytes(root: Path) -> int:
    """Disk blocks used under `root` (no link followed); 0 when it cannot be read
    (the engine is remote, or warden is not root: RLIMIT_FSIZE still holds)."""
    total = 0
    pending = [str(root)]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                found = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += found.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
    return total


def layers_bytes(client: DockerClient, images: list[str]) -> int:
    """Bytes of the top layers of `images` (each step image's own layer)."""
    from docker.errors import APIError

    api: Any = client.api  # inspect_image has no annotations in the SDK
    total = 0
    for image in images:
        try:
            found = api.inspect_image(image)
        except APIError:
            continue
        upper = ((found.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
        if upper:
            total += tree_bytes(Path(upper))
    return total


class BuildLimitError(ImageBuildError):
    """A build crossed one of its limits (deadline, processes, memory) and was stopped."""


@dataclass(frozen=True)
class BuildEgress:
    """A running egress proxy a build may use (`egress.oneoff`)."""

    socket_dir: Path
    """Holds the proxy's socket; mounted read-only into the holder."""
    user: str
    """`uid:gid` the proxy admits (the holder runs as it)."""
    groups: tuple[int, ...] = ()
    """Extra groups the holder needs to enter `socket_dir` (`broker.listener.groups_for`)."""


class BuildBox:
    """The holder, its watchdog and the cleanup of one build (a context manager:
    on exit every step container and the holder are gone)."""

    def __init__(
        self,
        client: DockerClient,
        limits: BuildLimits,
        *,
        holder_image: str,
        egress: BuildEgress | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.limits = limits
        self.holder_image = holder_image
        self.egress = egress
        self.labels = {
            **warden_labels(f"devbuild-{uuid.uuid4().hex[:12]}", images="build"),
            **(labels or {}),
        }
        self.holder: Container | None = None
        self.cgroup: str | None = None
        """The holder's cgroup, under which the engine nests each step's."""
        self.proxy = ""
        """The forwarder's URL inside the holder's network namespace ("" without egress)."""
        self.crossed: str | None = None
        """Which limit the watchdog stopped the build for, in words (None: none)."""
        self.written: dict[str, int] = {}
        """Bytes in each step container's layer, as last measured (by container id)."""
        self._done = threading.Event()

    def __enter__(self) -> BuildBox:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _nested_cgroups(self) -> bool:
        info = self.client.info()
        if info.get("CgroupDriver") == "cgroupfs" and str(info.get("CgroupVersion", "1")) == "1":
            return True
        if self.limits.pids:
            raise ImageBuildError(
                "this engine cannot limit the processes of a dev container build (it needs "
                "the cgroupfs driver on cgroup v1; this one has "
                f"{info.get('CgroupDriver')!r} on cgroup v{info.get('CgroupVersion')}); "
                "build the image yourself (docker build) and name it in devcontainer.json "
                f"`image`, or set {BUILD_PIDS_VARIABLE}=0 to build without a process limit"
            )
        return False

    def _start(self) -> None:
        nested = self._nested_cgroups()
        command = ["python3", "-I", "-S", "-c", _HOLDER_SCRIPT % {"interval": HOLDER_WATCH_S}]
        mounts: list[dict[str, Any]] = []
        user = HOLDER_USER
        groups: list[str] = []
        if self.egress is not None:
            groups = [str(group) for group in self.egress.groups]
            command = [*_FORWARDER, *command]
            user = self.egress.user
            mounts.append(
                {"Type": "bind", "Source": str(self.egress.socket_dir),
                 "Target": SOCKET_DIR_IN_HOLDER, "ReadOnly": True}
            )  # fmt: skip
        memory = self.limits.memory_bytes
        self.holder = self.client.containers.run(  # type: ignore[call-overload]  # mounts as dicts
            self.holder_image,
            command[1:],
            entrypoint=command[:1],
            detach=True,
            network_mode="none",
            user=user,
            init=True,
            read_only=True,
            cap_drop=["ALL"],
            security_opt=security_options(),
            pids_limit=self.limits.pids or -1,
            mem_limit=memory,
            memswap_limit=memory,
            labels=self.labels,
            mounts=mounts or None,
            group_add=groups or None,
        )
        output = self._wait_ready()
        if nested:
            found = _CGROUP_LINE.search(output)
            if found is None:
                raise ImageBuildError(f"the build holder reported no pids cgroup: {output[:300]!r}")
            self.cgroup = found.group(1)
        if self.egress is not None:
            proxy = _PROXY_LINE.search(output)
            if proxy is None or not proxy.group(1).startswith("http://127.0.0.1:"):
                raise ImageBuildError(
                    f"the build's egress forwarder did not start: {output[:300]!r}"
                )
            self.proxy = proxy.group(1)

    def _wait_ready(self) -> str:
        assert self.holder is not None
        until = time.monotonic() + HOLDER_START_S
        while True:
            output = self.holder.logs(stdout=True, stderr=True).decode(errors="replace")
            if "\nready\n" in output:
                return output
            self.holder.reload()
            if self.holder.status not in ("created", "running") or time.monotonic() > until:
                raise ImageBuildError(
                    f"the build holder ({self.holder_image}) did not start: "
                    f"{self.holder.status}, {output[:300]!r}"
                )
            time.sleep(0.05)

    def query(self) -> dict[str, Any]:
        """The build request's parameters that put its steps in the box."""
        assert self.holder is not None
        params: dict[str, Any] = {"networkmode": f"container:{self.holder.id}"}
        if self.cgroup is not None:
            params["cgroupparent"] = self.cgroup
        else:  # no nesting: at least each step's memory
            params["memory"] = params["memswap"] = self.limits.memory_bytes
        if self.limits.disk_bytes:  # no single file past the cap, whatever the timing
            cap = self.limits.disk_bytes
            params["ulimits"] = json.dumps([{"Name": "fsize", "Soft": cap, "Hard": cap}])
        return params

    def proxy_args(self) -> dict[str, str]:
        """Docker's predefined proxy build arguments (not kept in the image, not part
        of the cache key) pointing at the holder's forwarder; none without egress."""
        if not self.proxy:
            return {}
        return {**dict.fromkeys(PROXY_ARGS, self.proxy), "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}

    def build(
        self, context: IO[bytes], params: Mapping[str, Any]
    ) -> Generator[dict[str, Any], None, None]:
        """POST /build with `params` (the engine's query names) in the box; the
        decoded output. The watchdog runs while it is read; afterwards `crossed`
        says whether it stopped the build."""
        # docker-py's build() has no cgroupparent and adds the client's own proxies:
        # the documented endpoint through its request helpers (not in its stubs).
        api: Any = self.client.api
        query = {**params, **self.query()}
        query["buildargs"] = json.dumps({**params.get("buildargs", {}), **self.proxy_args()})
        response: Response = api._post(
            api._url("/build"),
            data=context,
            params=query,
            headers={"Content-Type": "application/tar"},
            stream=True,
            timeout=self.limits.deadline_s + CUT_AFTER_S,
        )
        api._raise_for_status(response)
        watchdog = threading.Thread(target=self._watch, args=(response,), daemon=True)
        watchdog.start()
        try:
            yield from api._stream_helper(response, decode=True)
        except Exception:
            if self.crossed is None:
                raise
            # the watchdog cut the connection: the limit is the error
        finally:
            self._done.set()
            watchdog.join()
            response.close()

    def _watch(self, response: Response) -> None:
        deadline = time.monotonic() + self.limits.deadline_s
        cut_at: float | None = None
        looks = 0
        while not self._done.wait(WATCH_INTERVAL_S):
            looks += 1
            if self.limits.disk_bytes and self.crossed is None and looks % DISK_EVERY == 0:
                self._measure()
            if self.crossed is None:
                self.crossed = self._crossed(deadline) or self.disk_reached()
            if self.crossed is None:
                continue
            self.kill_steps()
            if cut_at is None:
                cut_at = time.monotonic() + CUT_AFTER_S
            elif time.monotonic() >= cut_at:
                response.close()
                return

    def _crossed(self, deadline: float) -> str | None:
        if time.monotonic() >= deadline:
            return (
                f"it ran past the build deadline of {self.limits.deadline_s:g} s "
                f"({BUILD_DEADLINE_VARIABLE}; raise it if the build needs longer)"
            )
        if self.limits.pids and self._holder_said("pids-max"):
            return _PIDS_CROSSED.format(self.limits.pids, BUILD_PIDS_VARIABLE)
        return None

    def _stats(self) -> dict[str, Any]:
        assert self.holder is not None
        try:
            found = self.client.api.stats(str(self.holder.id), stream=False, one_shot=True)
        except Exception:  # the holder is going away: nothing to measure
            return {}
        return found if isinstance(found, dict) else {}

    def pids_reached(self) -> str | None:
        """Words for the process limit when the build's processes reached it at any
        time (asked of the holder's cgroup once the build is over: a step that hit the
        limit and ended between two looks of the watchdog counts too)."""
        if self.holder is None or not self.limits.pids or self.cgroup is None:
            return None
        script = _HOLDER_SCRIPT % {"interval": HOLDER_WATCH_S}
        try:
            asked = self.holder.exec_run(["python3", "-I", "-S", "-c", script, "--peaked"])
        except Exception:  # the holder is gone: nothing more to learn
            return None
        return (
            _PIDS_CROSSED.format(self.limits.pids, BUILD_PIDS_VARIABLE)
            if asked.exit_code == 0
            else None
        )

    def _holder_said(self, word: str) -> bool:
        assert self.holder is not None
        try:
            output = self.holder.logs(stdout=True, stderr=False).decode(errors="replace")
        except Exception:  # the holder is going away
            return False
        return f"\n{word}\n" in output

    def _measure(self) -> None:
        """The size of each step container's layer (its writable directory)."""
        from docker.errors import APIError

        for step in self.steps():
            try:
                found = self.client.api.inspect_container(step)
            except APIError:  # removed meanwhile: its last size stands
                continue
            upper = ((found.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
            if upper:
                self.written[step] = max(self.written.get(step, 0), tree_bytes(Path(upper)))

    def disk_reached(self, failure: str | None = None, layers: int = 0) -> str | None:
        """Words for the disk limit when the steps' layers (measured while they ran,
        or `layers`: the bytes of the images the build made) reached it, or a step
        was stopped by RLIMIT_FSIZE (its `failure`); None: not reached."""
        cap = self.limits.disk_bytes
        if not cap:
            return None
        written = max(sum(self.written.values()), layers)
        stopped = failure is not None and f"non-zero code: {SIGXFSZ_STATUS}" in failure
        if written < cap and not stopped:
            return None
        return (
            f"its steps wrote {'a file as large as' if stopped and written < cap else 'more than'}"
            f" the build's disk limit of {cap // 1024**2} MiB ({BUILD_DISK_VARIABLE}; by "
            "default the sandbox write limit, WARDEN_DISK_WRITE_LIMIT; raise it if the "
            "build needs more)"
        )

    def memory_reached(self) -> str | None:
        """Words for the memory limit when the build's processes hit it (None: no)."""
        memory = self._stats().get("memory_stats") or {}
        if int(memory.get("max_usage") or 0) < self.limits.memory_bytes:  # cgroup v1's peak
            return None
        return (
            f"its processes reached the build's memory limit of "
            f"{self.limits.memory_bytes // 1024**2} MiB ({BUILD_MEMORY_VARIABLE}; raise it "
            "if the build needs more)"
        )

    def steps(self) -> list[str]:
        """Ids of the build's step containers (they share the holder's network)."""
        if self.holder is None:
            return []
        mode = f"container:{self.holder.id}"
        return [
            str(found["Id"])
            for found in self.client.api.containers(all=True)
            if (found.get("HostConfig") or {}).get("NetworkMode") == mode
        ]

    def kill_steps(self) -> None:
        from docker.errors import APIError

        for step in self.steps():
            with suppress(APIError):  # already stopped or removed
                self.client.api.kill(step)

    def close(self) -> None:
        """Remove every step container left and the holder."""
        from docker.errors import APIError

        self._done.set()
        for container in self.steps():
            with suppress(APIError):
                self.client.api.remove_container(container, force=True)
        if self.holder is not None:
            with suppress(APIError):
                self.holder.remove(force=True)
