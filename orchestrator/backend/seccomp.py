"""warden's own seccomp profile: which system calls the kernel serves in a warden
container, and the probe that shows the engine applied it.

The profile (`seccomp.json`, package data) is an allowlist for the machine's own
ABI only (x86_64 or aarch64: no 32-bit or x32 calls): the ordinary calls of
programs (files, processes, threads, signals, sockets, timers, memory) are
served; everything else fails with EPERM (ENOSYS on engines that honour
`defaultErrnoRet`). Left out, because nothing warden runs needs them and each is
kernel attack surface or reaches past the sandbox:

- io_uring (`io_uring_setup`, `io_uring_enter`, `io_uring_register`): its
  operations bypass per-call filters (`IORING_OP_FALLOCATE` reserved a whole disk
  from a sandbox under the engine's default profile);
- `bpf`, `perf_event_open`, `userfaultfd`, the key ring (`keyctl`, `add_key`,
  `request_key`), `kcmp`, `process_vm_readv/writev`, `pidfd_getfd`,
  `process_madvise`, `process_mrelease`, `memfd_secret`, landlock, NUMA policy
  (`mbind`, `set_mempolicy`, `migrate_pages`, `move_pages`);
- namespaces and mounts (`unshare`, `setns`, `mount`, the new mount API,
  `pivot_root`, `chroot`), file handles (`name_to_handle_at`,
  `open_by_handle_at`), fanotify, modules, kexec, reboot, swap, clocks, quotas,
  `syslog`, `acct`, `iopl`/`ioperm`, `modify_ldt`, obsolete calls;
- `clone` only without namespace flags; `clone3` answers ENOSYS (its flags sit in
  memory a filter cannot read; the C library then falls back to `clone`);
  `personality` only for the values programs use.

`fallocate` fails with EOPNOTSUPP (as the runner's own filter, `sandbox_tools.seal`,
also makes it): the C library's `posix_fallocate` then writes the blocks, which
the disk limit counts. `ptrace` stays (debuggers and leak checkers use it; the
Yama scope and the missing capabilities confine it to the sandbox's own
processes).

The engine's classic builder takes no security options, so dev container build
steps run under the engine's default profile (`images.buildbox` puts them in the
holder's network namespace and cgroup instead); the holder itself gets this one.
"""

from __future__ import annotations

import functools
import json
import uuid
from importlib import resources
from typing import TYPE_CHECKING

from orchestrator.labels import warden_labels

if TYPE_CHECKING:
    from docker import DockerClient

PROFILE_FILE = "seccomp.json"
REFUSED_FOR_PROBE = "io_uring_setup"
PROBE_PROGRAM = """
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
answer = libc.syscall(425, 8, params)  # io_uring_setup(8, &params) on x86_64 and aarch64
refused = errno.errorcode.get(ctypes.get_errno(), "?") if answer < 0 else ""
mode = [line.split(":", 1)[1].strip() for line in open("/proc/self/status")
        if line.startswith("Seccomp:")]
print(json.dumps({"seccomp": mode[0] if mode else "", "io_uring_setup": refused}))
"""
"""Run by `warden doctor` in a hardened container: the kernel's seccomp mode of the
process (2: a filter) and what io_uring_setup answered ("" when it succeeded)."""


@functools.cache
def profile_text() -> str:
    """The profile as compact JSON, as the engine takes it in `SecurityOpt`."""
    raw = resources.files("orchestrator.backend").joinpath(PROFILE_FILE).read_text()
    return json.dumps(json.loads(raw), separators=(",", ":"))


def security_options() -> list[str]:
    """`SecurityOpt` of every container warden starts: no new privileges, and
    warden's profile in place of the engine's default."""
    return ["no-new-privileges", f"seccomp={profile_text()}"]


def allowed_names() -> frozenset[str]:
    """Every system call the profile lets through (with or without argument checks)."""
    profile = json.loads(profile_text())
    return frozenset(
        name
        for rule in profile["syscalls"]
        if rule["action"] == "SCMP_ACT_ALLOW"
        for name in rule["names"]
    )


def probe(client: DockerClient, image: str) -> str | None:
    """Start one container of `image` (it needs python3) with warden's security
    options and no network, and report what the engine did with the profile: None
    when the process ran under a filter and io_uring_setup was refused, else the
    problem in words (with the fix)."""
    from docker.errors import DockerException

    try:
        output = client.containers.run(
            image,
            ["python3", "-I", "-S", "-c", PROBE_PROGRAM],
            network_disabled=True,
            cap_drop=["ALL"],
            security_opt=security_options(),
            user="65534:65534",
            read_only=True,
            remove=True,
            labels=warden_labels(f"doctor-{uuid.uuid4().hex[:8]}", doctor="seccomp"),
        )
    except DockerException as exc:
        return (
            f"the engine refused warden's seccomp profile ({str(exc)[:300]}); warden needs an "
            "engine with seccomp support (Docker's docker.io on Linux has it)"
        )
    try:
        found = json.loads(bytes(output).decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"the seccomp probe printed nothing readable: {bytes(output)[:200]!r}"
    if found.get("seccomp") != "2":
        return (
            f"the engine started the probe without a seccomp filter (Seccomp: "
            f"{found.get('seccomp')!r}); run the engine with seccomp enabled"
        )
    if not found.get(REFUSED_FOR_PROBE):
        return "io_uring_setup was served despite warden's profile: the engine ignored it"
    return None
