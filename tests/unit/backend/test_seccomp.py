"""Locks in warden's seccomp profile: shipped with the package, an allowlist, and
without the calls warden has no use for (io_uring first)."""

from __future__ import annotations

import json

from orchestrator.backend import seccomp

NEVER_SERVED = {
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
    "perf_event_open", "bpf", "keyctl", "add_key", "request_key", "kexec_load",
    "kexec_file_load", "open_by_handle_at", "name_to_handle_at", "unshare", "setns",
    "mount", "fsopen", "pivot_root", "init_module", "finit_module", "process_vm_writev",
}  # fmt: skip
ORDINARY = {"read", "write", "openat", "execve", "wait4", "mmap", "futex", "socket",
            "connect", "pipe2", "getdents64", "statx", "rt_sigaction", "prctl", "seccomp"}  # fmt: skip


def test_the_profile_is_an_allowlist_without_what_warden_never_needs() -> None:
    profile = json.loads(seccomp.profile_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    allowed = seccomp.allowed_names()
    assert not NEVER_SERVED & allowed
    assert allowed >= ORDINARY
    # only the native ABI of each machine: no 32-bit or x32 sub-architectures
    assert all(not arch["subArchitectures"] for arch in profile["archMap"])


def test_clone_is_served_only_without_namespace_flags_and_fallocate_is_not_supported() -> None:
    rules = json.loads(seccomp.profile_text())["syscalls"]
    (clone,) = [rule for rule in rules if rule["names"] == ["clone"]]
    (mask,) = clone["args"]
    assert mask["op"] == "SCMP_CMP_MASKED_EQ" and mask["valueTwo"] == 0
    assert mask["value"] & 0x10000000 and mask["value"] & 0x40000000  # NEWUSER, NEWNET
    (fallocate,) = [rule for rule in rules if rule["names"] == ["fallocate"]]
    assert fallocate["action"] == "SCMP_ACT_ERRNO" and fallocate["errnoRet"] == 95


def test_every_container_gets_it_with_no_new_privileges() -> None:
    options = seccomp.security_options()
    assert options[0] == "no-new-privileges"
    assert options[1] == f"seccomp={seccomp.profile_text()}"
