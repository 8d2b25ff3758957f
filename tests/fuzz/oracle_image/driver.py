#!/usr/bin/python3
"""The oracle driver: runs inside the hardened oracle container (stdlib only).

It connects to the host's Unix socket (path in argv[1]) and answers one JSON line
per request `{"id": N, "command": "...", "timeout": S}` with one JSON line of what
bash really did: every execve, every open for writing (and rename, unlink, mkdir,
symlink, link, truncate, chmod, chown, utime...), every socket connect, as
recorded by `strace -ff`. Each case runs as `bash -c COMMAND` in a fresh empty
directory with stdin, stdout and stderr on /dev/null, under a timeout; afterwards
every process but this driver and init is killed and /tmp is emptied.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

WORK = "/tmp/fuzz-work"
TEMPLATE = "/tmp/.fuzz-template"
"""Copied to WORK before each case: a git repository and a few hostile files."""
WALLED = False
"""argv[2] names the walled workspace (warden's mounts over denied paths): cases run
there, its mount points stay, and everything else is reset to the template (its
own `.git` is the host's, read-only)."""
OUTPUT = "/tmp/.fuzz-output"
OUTPUT_LIMIT = 64 * 1024
"""Bytes of a case's stdout and stderr reported (the judge looks for secrets)."""
TRACE_DIR = "/tmp/fuzz-trace"
TRACE = TRACE_DIR + "/t"
BASH = "/usr/bin/bash"
MAX_TRACE_BYTES = 8 * 1024 * 1024
"""Trace output read per case; a longer trace is cut and reported as truncated."""
MAX_EVENTS = 200
"""Events reported per kind per case."""
SYSCALLS = (
    "execve,execveat,open,openat,openat2,creat,connect,rename,renameat,renameat2,"
    "unlink,unlinkat,rmdir,mkdir,mkdirat,symlink,symlinkat,link,linkat,truncate,"
    "mknod,mknodat,chmod,fchmodat,chown,fchownat,lchown,utimensat,utime,utimes,"
    "clone,clone3,fork,vfork"
)
STRACE = [
    "/usr/bin/strace",
    "-ff",
    "-qq",
    "-y",
    "-xx",
    "-s",
    "65535",
    "-e",
    "signal=none",
    "-e",
    "trace=" + SYSCALLS,
    "-o",
    TRACE,
]
WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
PATH_WRITES = {
    # syscall: indexes of path arguments that are written (dirfd-relative ones
    # are printed by -y with the directory's path)
    "creat": (0,),
    "rename": (0, 1),
    "renameat": (1, 3),
    "renameat2": (1, 3),
    "unlink": (0,),
    "unlinkat": (1,),
    "rmdir": (0,),
    "mkdir": (0,),
    "mkdirat": (1,),
    "symlink": (1,),
    "symlinkat": (2,),
    "link": (1,),
    "linkat": (3,),
    "truncate": (0,),
    "mknod": (0,),
    "mknodat": (1,),
    "chmod": (0,),
    "fchmodat": (1,),
    "chown": (0,),
    "fchownat": (1,),
    "lchown": (0,),
    "utimensat": (1,),
    "utime": (0,),
    "utimes": (0,),
}
_LINE = re.compile(r"^(?P<name>\w+)\((?P<args>.*)\) += (?P<ret>.*)$", re.DOTALL)
_STR = re.compile(r'"((?:\\x[0-9a-f]{2})*)"(\.\.\.)?')
_RET_PATH = re.compile(r"^(-?\d+)(?:<(.*)>)?")


def _unhex(text: str) -> str:
    return bytes.fromhex(text.replace("\\x", "")).decode("utf-8", "replace")


def _split_args(args: str) -> list[str]:
    """Top-level comma-separated arguments (strings are hex, so no quotes to fear)."""
    out, depth, cur = [], 0, []
    for ch in args:
        if ch in "[{(<":
            depth += 1
        elif ch in "]})>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur).strip())
    return out


def _path_arg(arg: str) -> str | None:
    """A path argument, made absolute with the dirfd path -y printed before it."""
    m = _STR.search(arg)
    return _unhex(m.group(1)) if m else None


def _resolve(args: list[str], dir_index: int | None, path_index: int) -> str | None:
    path = _path_arg(args[path_index]) if path_index < len(args) else None
    if not path or path.startswith("/") or dir_index is None:
        return path
    m = re.search(r"<((?:\\x[0-9a-f]{2})*)>", args[dir_index])
    base = _unhex(m.group(1)) if m else "?"
    return base.rstrip("/") + "/" + path


def _ret(ret: str) -> tuple[bool, str | None, str]:
    """(succeeded, path of a returned fd, errno name or '')."""
    m = _RET_PATH.match(ret.strip())
    if not m:
        return False, None, ret.strip()[:40]
    ok = not m.group(1).startswith("-")
    fd_path = _unhex(m.group(2)) if m.group(2) and m.group(2).startswith("\\x") else m.group(2)
    err = ret.split()[1] if not ok and len(ret.split()) > 1 else ""
    return ok, fd_path, err


def parse_process(
    pid: int, lines: list[str], events: dict[str, list[dict[str, object]]]
) -> list[int]:
    """Add one process's events; return the pids it created."""
    children: list[int] = []
    image = None
    for raw in lines:
        m = _LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        name, args_text, ret = m.group("name"), m.group("args"), m.group("ret")
        args = _split_args(args_text)
        ok, fd_path, err = _ret(ret)
        if name in ("clone", "clone3", "fork", "vfork"):
            if ok and ret.strip().split("<")[0].isdigit():
                children.append(int(ret.strip().split("<")[0].split()[0]))
            continue
        if name in ("execve", "execveat"):
            pi = 1 if name == "execveat" else 0
            filename = _resolve(args, 0 if name == "execveat" else None, pi)
            argv_arg = args[pi + 1] if len(args) > pi + 1 else ""
            argv = [_unhex(s) for s, _ in _STR.findall(argv_arg)]
            events["execs"].append(
                {
                    "pid": pid,
                    "image": image,
                    "filename": filename,
                    "argv": argv,
                    "ok": ok,
                    "error": err,
                }
            )
            if ok:
                image = filename
            continue
        if name == "connect":
            events["connects"].append(
                {
                    "pid": pid,
                    "image": image,
                    "address": args[1] if len(args) > 1 else "",
                    "ok": ok,
                    "error": err,
                }
            )
            continue
        if name in ("open", "openat", "openat2"):
            pi = 0 if name == "open" else 1
            flags = args[pi + 1] if len(args) > pi + 1 else ""
            if not any(f in flags.split("|") for f in WRITE_FLAGS) and "O_TMPFILE" not in flags:
                continue
            events["writes"].append(
                {
                    "pid": pid,
                    "image": image,
                    "syscall": name,
                    "path": _resolve(args, None if name == "open" else 0, pi),
                    "flags": flags.split(",")[0],
                    "ok": ok,
                    "error": err,
                    "opened": fd_path,
                }
            )
            continue
        for index in PATH_WRITES.get(name, ()):
            dir_index = (
                index - 1 if name.endswith("at") or name in ("renameat2", "linkat") else None
            )
            if name in ("symlinkat",):
                dir_index = 1
            events["writes"].append(
                {
                    "pid": pid,
                    "image": image,
                    "syscall": name,
                    "path": _resolve(args, dir_index, index),
                    "flags": "",
                    "ok": ok,
                    "error": err,
                    "opened": None,
                }
            )
    return children


def collect(root_pid: int) -> dict[str, object]:
    events: dict[str, list[dict[str, object]]] = {"execs": [], "writes": [], "connects": []}
    budget = MAX_TRACE_BYTES
    truncated = False
    parents: dict[int, int] = {}
    files = sorted(os.listdir(TRACE_DIR))
    per_pid: dict[int, list[str]] = {}
    for name in files:
        pid = int(name.rsplit(".", 1)[1])
        with open(os.path.join(TRACE_DIR, name), encoding="ascii", errors="replace") as fh:
            text = fh.read(max(budget, 0))
        budget -= len(text)
        if budget <= 0:
            truncated = True
        per_pid[pid] = text.splitlines()
    for pid, lines in per_pid.items():
        for child in parse_process(pid, lines, events):
            parents[child] = pid
    for kind in events:
        if len(events[kind]) > MAX_EVENTS:
            events[kind] = events[kind][:MAX_EVENTS]
            truncated = True
    return {"root": root_pid, "parents": parents, "truncated": truncated, **events}


def _kill_strays() -> None:
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            with contextlib.suppress(OSError):
                os.kill(int(name), signal.SIGKILL)


def _empty(directory: str, keep: tuple[str, ...] = ()) -> None:
    def unlock(func: object, path: str, _exc: object) -> None:
        try:
            os.chmod(os.path.dirname(path) or "/", 0o700)
            os.chmod(path, 0o700)
        except OSError:
            pass

    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if path in keep:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=unlock)
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _mount_points(root: str) -> set[str]:
    """Top-level names under `root` that are (or hold) mount points."""
    names = set()
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            point = re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point.startswith(root + "/"):
                names.add(point[len(root) + 1 :].split("/", 1)[0])
    return names


def _reset_walled() -> None:
    keep = tuple(os.path.join(WORK, n) for n in _mount_points(WORK))
    _empty(WORK, keep=keep)
    for name in os.listdir(TEMPLATE):
        if name == ".git" or os.path.join(WORK, name) in keep:
            continue
        source, target = os.path.join(TEMPLATE, name), os.path.join(WORK, name)
        if os.path.isdir(source):
            shutil.copytree(source, target, symlinks=True)
        else:
            shutil.copy2(source, target)


def run_case(command: str, timeout: float) -> dict[str, object]:
    _empty("/tmp", keep=(TEMPLATE,))
    _empty("/dev/shm")
    if WALLED:
        _reset_walled()
    else:
        shutil.copytree(TEMPLATE, WORK, symlinks=True)
    os.makedirs(TRACE_DIR, mode=0o700)
    output = open(OUTPUT, "wb")  # noqa: SIM115 - closed below, after bash ends
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "GIT_OPTIONAL_LOCKS": "0",
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        [*STRACE, BASH, "-c", command],
        cwd=WORK,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=output,
        start_new_session=True,
    )
    timed_out = False
    try:
        status = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_strays()
        status = proc.wait()
    elapsed = time.monotonic() - started
    _kill_strays()
    output.close()
    with open(OUTPUT, "rb") as produced:
        text = produced.read(OUTPUT_LIMIT).decode("utf-8", "replace")
    # The root is the one traced process that no traced process created.
    result = collect(0)
    created = set(result["parents"])  # type: ignore[arg-type]
    roots = [int(n.rsplit(".", 1)[1]) for n in os.listdir(TRACE_DIR)]
    roots = [p for p in roots if p not in created]
    result["root"] = roots[0] if len(roots) == 1 else None
    result["parents"] = {str(k): v for k, v in result["parents"].items()}  # type: ignore[union-attr]
    result.update(timed_out=timed_out, strace_status=status, seconds=round(elapsed, 4), output=text)
    return result


GIT_CONFIG = (
    "[core]\n\tfsmonitor = touch fsmonitor-ran\n\tpager = touch pager-ran\n"
    "[alias]\n\tst = !touch alias-ran\n"
)
HOSTILE_FILES = {
    # What an untrusted checkout may hold: config that makes git or bash run code
    # when a variable points at it, and programs that shadow allowed ones on PATH.
    "x.txt": ("hi\ntouch\n", 0o644),
    "gitcfg": (GIT_CONFIG, 0o644),
    ".gitconfig": (GIT_CONFIG, 0o644),
    "git/config": (GIT_CONFIG, 0o644),
    "bashenv": ("touch bashenv-ran\n", 0o644),
    "bin/echo": ("#!/bin/sh\ntouch path-ran\n", 0o755),
    "bin/cat": ("#!/bin/sh\ntouch path-ran\n", 0o755),
    "bin/ls": ("#!/bin/sh\ntouch path-ran\n", 0o755),
    "bin/git": ("#!/bin/sh\ntouch path-ran\n", 0o755),
}


def make_template() -> None:
    """An empty git repository plus HOSTILE_FILES, copied to WORK before each case."""
    subprocess.run(
        ["git", "init", "-q", TEMPLATE], check=True, env={"HOME": "/tmp", "PATH": "/usr/bin:/bin"}
    )
    for name, (text, mode) in HOSTILE_FILES.items():
        path = os.path.join(TEMPLATE, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(path, mode)


def main() -> None:
    global WORK, WALLED
    if len(sys.argv) > 2:
        WORK, WALLED = sys.argv[2], True
    make_template()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sys.argv[1])
    stream = sock.makefile("rwb", buffering=0)
    stream.write(json.dumps({"ready": True, "uid": os.getuid(), "bash": BASH}).encode() + b"\n")
    for line in stream:
        request = json.loads(line)
        try:
            answer = run_case(request["command"], float(request.get("timeout", 3.0)))
        except Exception as exc:  # reported to the host, which treats the case as broken
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answer["id"] = request.get("id")
        stream.write(json.dumps(answer).encode() + b"\n")


if __name__ == "__main__":
    main()
