"""Path rules: how a rule's path pattern and a tool's path are put on the same footing.

Tool paths are container paths; a relative one is relative to the workspace
(`/workspace`). Rule specifiers are read like Claude Code's, with gitignore-style
globs (`*` within one component, `**` across components, `?`, `[...]`; a pattern
matches a path when it matches the path or any directory above it):

| rule specifier     | means (container path)                                              |
|--------------------|---------------------------------------------------------------------|
| `//x`              | the absolute path `/x`                                              |
| `~/x`              | `x` under a home directory: `/root/x` or `/home/*/x`                |
| `/workspace/x`     | the absolute path (warden's mount point is spelled out)             |
| `/x`               | `x` at the workspace root (Claude Code: relative to the project); a |
|                    | deny or ask rule also matches the absolute `/x`, to err safe        |
| `./x/y`, `x/y`     | relative to the workspace root                                      |
| `x`, `./x`         | a file or directory named `x` anywhere in the workspace (gitignore: |
|                    | a pattern without an inner slash is not anchored; Claude Code drops |
|                    | the `./`, so `Read(./.env)` also covers `sub/.env`)                 |

A tool path is compared in every spelling it might take: lexically normalised
(`..` collapsed) and, when the host workspace is known, with symlinks inside the
workspace resolved (a link's target is read as a container path). A deny or ask
rule matches when ANY spelling matches; an allow rule only when ALL do.

Deny and ask rules match regardless of case, as Claude Code matches path rules
(`Read(**/*.PEM)` denies `key.pem`); an allow rule matches only the case it names
(Linux file systems are case sensitive: `Edit(src/**)` does not allow `SRC/x`,
which is a different directory), stricter than Claude Code and listed in the
table of differences in `policies/README.md`.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections import deque
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from sandbox_tools.wire import WORKSPACE

HOME_DIRS = ("/root", "/home/*")
"""Where `~` may point inside a container."""
MAX_SYMLINK_HOPS = 40
"""Symlinks followed while resolving one path (the kernel's own limit)."""
PATH_MAX = 4096
"""Longest path the kernel opens (bytes, with its NUL); longer ones fail with
ENAMETOOLONG. A tool path this long is never resolved or matched: it asks."""


class PathTooLongError(ValueError):
    """A tool path longer than PATH_MAX: no file can be opened by it."""


def check_length(path: str) -> None:
    """Raise PathTooLongError for a path the kernel would refuse as too long."""
    if len(path.encode("utf-8", "surrogateescape")) >= PATH_MAX:
        raise PathTooLongError(
            f"a path of {len(path)} characters is longer than PATH_MAX ({PATH_MAX} bytes)"
        )


def normalise(path: str, cwd: str = WORKSPACE) -> list[str]:
    """A tool path as absolute, `..`-free container paths (several for `~`)."""
    if path.startswith("~/") or path == "~":
        bases = [h for h in HOME_DIRS]
        rest = path[2:]
        return [_clean(posixpath.join(b, rest)) for b in bases]
    if not path.startswith("/"):
        path = posixpath.join(cwd, path)
    return [_clean(path)]


def _clean(path: str) -> str:
    cleaned = posixpath.normpath("/" + path.lstrip("/"))
    return "/" if cleaned == "//" else cleaned


def spellings(path: str, workspace_host: Path | None, cwd: str = WORKSPACE) -> list[str]:
    """Every container path `path` may stand for: lexical, and symlink-resolved.
    Raises PathTooLongError (before any work) for a path longer than PATH_MAX."""
    check_length(path)
    out: list[str] = []
    raw = path if path.startswith(("/", "~")) else posixpath.join(cwd, path)
    for lexical in normalise(path, cwd):
        out.append(lexical)
    if workspace_host is not None and not raw.startswith("~"):
        resolved = resolve_symlinks(raw, workspace_host)
        out.append(resolved if resolved is not None else "\x00unresolvable")
    return list(dict.fromkeys(out))


def resolve_symlinks(path: str, workspace_host: Path) -> str | None:
    """Resolve symlinks of a container path inside the workspace, reading them on the
    host. Outside the workspace the path is kept as written (the host cannot see
    the container's filesystem). None when the links loop.

    Linear in the path: the walk holds one `O_PATH` descriptor of the directory it
    is in and looks each component up relative to it (never a whole prefix again),
    and below a component that does not exist nothing is looked up."""
    queue = deque(p for p in path.split("/") if p)
    parts: list[str] = []
    walk = _Walk(workspace_host)
    hops = 0
    try:
        while queue:
            part = queue.popleft()
            if part == ".":
                continue
            if part == "..":
                if parts:
                    parts.pop()
                walk.up_to(len(parts))
                continue
            parts.append(part)
            st = walk.lookup(parts)
            if st is None or not stat.S_ISLNK(st.st_mode):
                continue
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                return None
            target = walk.readlink(part)
            parts.pop()
            if target.startswith("/"):
                parts.clear()
                walk.up_to(0)
            queue.extendleft(reversed([p for p in target.split("/") if p]))
        return "/" + "/".join(parts)
    finally:
        walk.close()


def open_directory(container_path: str, workspace_host: Path) -> int | None:
    """A readable descriptor of the directory `container_path` (absolute, links
    resolved) under the workspace, opened from the workspace down one component at
    a time without following a link (the caller closes it); None when it is outside
    the workspace, missing, not a directory, or a link now (a sandbox swapped it)."""
    parts = [p for p in container_path.split("/") if p]
    walk = _Walk(workspace_host)
    try:
        for depth in range(1, len(parts) + 1):
            st = walk.lookup(parts[:depth])
            if st is None or not stat.S_ISDIR(st.st_mode):
                return None
        if walk.fd is None or walk.depth != len(parts):
            return None  # a component turned into a link between its lstat and open
        try:
            return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=walk.fd)
        except OSError:
            return None
    finally:
        walk.close()


class _Walk:
    """An `O_PATH` descriptor of the deepest existing workspace directory on the way
    (`depth` components of the container path: 1 is `/workspace` itself)."""

    def __init__(self, workspace_host: Path) -> None:
        self.host = workspace_host
        self.fd: int | None = None
        self.depth = 0

    def lookup(self, parts: list[str]) -> os.stat_result | None:
        """lstat of the last of `parts`, or None when it is outside the workspace, below
        something missing, or missing; steps into it when it is a directory."""
        if len(parts) == 1:
            if parts[0] != WORKSPACE.strip("/"):
                return None
            self._set(self._open(str(self.host), None), 1)
            return os.stat(self.fd) if self.fd is not None else None
        if self.fd is None or self.depth != len(parts) - 1:
            return None
        try:
            st = os.lstat(parts[-1], dir_fd=self.fd)
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode):
            self._set(self._open(parts[-1], self.fd), len(parts))
        return st

    def readlink(self, name: str) -> str:
        assert self.fd is not None
        return os.readlink(name, dir_fd=self.fd)

    def up_to(self, depth: int) -> None:
        """Leave directories until the walk is at most `depth` deep."""
        while self.fd is not None and self.depth > depth:
            parent = self._open("..", self.fd) if self.depth > 1 else None
            self._set(parent, self.depth - 1)

    def _open(self, name: str, dir_fd: int | None) -> int | None:
        flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
        if dir_fd is not None and name != "..":
            flags |= os.O_NOFOLLOW
        try:
            return os.open(name, flags, dir_fd=dir_fd)
        except OSError:
            return None

    def _set(self, fd: int | None, depth: int) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.depth = fd, depth if fd is not None else 0

    def close(self) -> None:
        self._set(None, 0)


def to_host(container_path: str, workspace_host: Path) -> Path | None:
    """The host path of a container path under the workspace, else None."""
    if container_path == WORKSPACE:
        return workspace_host
    if container_path.startswith(WORKSPACE + "/"):
        return workspace_host / container_path[len(WORKSPACE) + 1 :]
    return None


def inside(path: str, roots: Sequence[str]) -> bool:
    """True when the normalised container path lies in one of `roots`."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def rule_patterns(specifier: str, *, strict: bool) -> list[str]:
    """Absolute container glob patterns a path specifier stands for. `strict` (deny
    and ask rules) also reads `/x` as the absolute path."""
    spec = specifier.strip()
    dir_only = spec.endswith("/") and len(spec) > 1
    if dir_only:
        spec = spec.rstrip("/")
    suffix = "/**" if dir_only else ""
    if spec.startswith("//"):
        return [_clean_pattern("/" + spec.lstrip("/") + suffix)]
    if spec.startswith("~/") or spec == "~":
        return [_clean_pattern(posixpath.join(h, spec[2:]) + suffix) for h in HOME_DIRS]
    if spec == WORKSPACE or spec.startswith(WORKSPACE + "/"):
        return [_clean_pattern(spec + suffix)]
    if spec.startswith("/"):
        pats = [_clean_pattern(WORKSPACE + spec + suffix)]
        return [*pats, _clean_pattern(spec + suffix)] if strict else pats
    while spec.startswith("./"):  # Claude Code drops `./`, then reads it as gitignore does
        spec = spec[2:]
    if spec in ("", "."):
        return [_clean_pattern(WORKSPACE + "/**")]
    if "/" not in spec:  # gitignore: a pattern with no inner slash matches at any depth
        return [_clean_pattern(posixpath.join(WORKSPACE, "**", spec) + suffix)]
    return [_clean_pattern(posixpath.join(WORKSPACE, spec) + suffix)]


def _clean_pattern(pattern: str) -> str:
    parts: list[str] = []
    for part in pattern.split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts:
            parts.pop()
        elif part != "..":
            parts.append(part)
    return "/" + "/".join(parts)


def matches(pattern: str, path: str, *, fold: bool = False) -> bool:
    """gitignore semantics: the pattern matches the path or a directory above it
    (one match of the pattern followed by `(/.*)?`, not one match per parent).
    `fold`: letters match in either case (deny and ask rules)."""
    return _compile_covering(pattern, fold).fullmatch(path) is not None


def pattern_regex(pattern: str, *, fold: bool = False) -> str:
    """The regular expression (source) a glob pattern compiles to: it matches the
    path itself; append `(?:/.*)?` for the directories above it too. `fold`: each
    letter as a class of both its cases (no flags: readers of the source need none)."""
    return _compile(pattern, fold).pattern


@lru_cache(maxsize=1024)
def _compile_covering(pattern: str, fold: bool = False) -> re.Pattern[str]:
    if pattern == "/":
        return re.compile("/.*", re.DOTALL)
    return re.compile(f"(?:{_compile(pattern, fold).pattern})(?:/.*)?", re.DOTALL)


def _literal(c: str, fold: bool) -> str:
    if fold and c.lower() != c.upper() and len(c.lower()) == len(c.upper()) == 1:
        return f"[{re.escape(c.lower())}{re.escape(c.upper())}]"
    return re.escape(c)


def _both_cases(body: str) -> str:
    """A bracket body with every letter's other case added (ranges of letters too)."""
    extra = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            lo, hi = body[i], body[i + 2]
            if lo.isalpha() and hi.isalpha() and lo.isascii() and hi.isascii():
                extra.append(f"{lo.swapcase()}-{hi.swapcase()}")
            i += 3
            continue
        if body[i].isalpha() and len(body[i].swapcase()) == 1:
            extra.append(body[i].swapcase())
        i += 1
    return body + "".join(extra)


@lru_cache(maxsize=1024)
def _compile(pattern: str, fold: bool = False) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("/**/", i):
            out.append("(?:/.*)?/")
            i += 4
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1 : end]
                negated = body.startswith("!")
                if negated:
                    body = body[1:]
                if fold:
                    body = _both_cases(body)
                out.append("[" + ("^" if negated else "") + body.replace("\\", "\\\\") + "]")
                i = end + 1
        else:
            out.append(_literal(c, fold))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def static_prefix(pattern: str) -> str:
    """The directory part of a pattern before its first glob character."""
    cut = len(pattern)
    for ch in "*?[":
        idx = pattern.find(ch)
        if idx >= 0:
            cut = min(cut, idx)
    return posixpath.dirname(pattern[:cut]) if cut < len(pattern) else pattern
