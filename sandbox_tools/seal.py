"""Refuse `fallocate(2)` in this process and every process it starts.

`fallocate` reserves disk space in one call without writing a byte: no
`write_bytes`, no RLIMIT_FSIZE with `FALLOC_FL_KEEP_SIZE`, so one call could take
the workspace's file system below the host's free-space floor before the host's
next look. The runner installs a seccomp filter (on top of the engine's own)
before any tool runs; every process the subagent starts inherits it and cannot
remove it. The call fails with EOPNOTSUPP, which tools already handle: glibc's
`posix_fallocate` (and Python's `os.posix_fallocate`) then writes the blocks,
which the host counts like any other write.

Standard library only (ctypes), like the rest of the runner.
"""

from __future__ import annotations

import ctypes
import errno
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
X32_SYSCALL_BIT = 0x40000000

# (audit arch, fallocate's number there): the ABIs a Linux container may run.
FALLOCATE = (
    (0xC000003E, 285),  # x86_64 (x32 too: its numbers carry X32_SYSCALL_BIT)
    (0x40000003, 324),  # i386
    (0xC00000B7, 47),  # aarch64
    (0x40000028, 352),  # arm
)

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_AND_K = 0x54
_RET_K = 0x06
_ARCH_OFFSET = 4
_NR_OFFSET = 0


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def program() -> list[bytes]:
    """The filter: for each known architecture, fallocate → EOPNOTSUPP; all else allowed."""
    deny = _insn(_RET_K, SECCOMP_RET_ERRNO | errno.EOPNOTSUPP)
    allow = _insn(_RET_K, SECCOMP_RET_ALLOW)
    body: list[bytes] = []
    for arch, number in FALLOCATE:
        # ld arch; jeq arch ? next : skip this block (4 instructions)
        body += [
            _insn(_LD_W_ABS, _ARCH_OFFSET),
            _insn(_JEQ_K, arch, 0, 4),
            _insn(_LD_W_ABS, _NR_OFFSET),
            _insn(_AND_K, ~X32_SYSCALL_BIT & 0xFFFFFFFF),
            _insn(_JEQ_K, number, 0, 1),
            deny,
        ]
    return [*body, allow]


def refuse_fallocate() -> str | None:
    """Install the filter; None when done, else why not (the host's floors still hold)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        code = b"".join(program())
        buf = ctypes.create_string_buffer(code, len(code))
        fprog = struct.pack("HP", len(code) // 8, ctypes.addressof(buf))  # native alignment
        fprog_buf = ctypes.create_string_buffer(fprog, len(fprog))
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"no_new_privs: {errno.errorcode.get(ctypes.get_errno(), '?')}"
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buf, 0, 0) != 0:
            return f"seccomp: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    except (OSError, AttributeError) as exc:
        return str(exc)
    return None
