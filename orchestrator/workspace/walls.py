"""Deny rules as mounts: which workspace paths a policy's deny rules make walls.

A `Read` deny rule (and `sandbox.filesystem.denyRead`) names what a sandbox may
not read; an `Edit`/`Write` deny rule (and `denyWrite`) what it may not write.
The Bash analyser asks about commands that might do either, but a parser of
attacker text is not a wall. So at each sandbox's start every path that exists
in the workspace and that such a rule matches is:

- **masked** (Read deny): an empty, read-only file or directory is bind-mounted
  over it. Every route to it (another tool, `/proc/self/cwd/...`, a descriptor,
  a program's option, a link made inside the sandbox) reads the empty mask. A
  masked path is also read-only, and a hard link to it cannot be made (`link`
  across mounts fails with EXDEV);
- **read-only** (Edit/Write deny): the path itself is bind-mounted read-only, as
  `.git` and `.claude` are (`guard`).

What a rule covers is decided by the same patterns the rules use
(`permissions.paths`): `Read(./.env)` matches `.env` at any depth, `Read(./secrets/**)`
the directory `secrets`, whose mount also covers every file created under it
later. A glob over files (`Read(**/*.pem)`) covers the files that exist when the
sandbox starts; one created later in a directory that is not masked is not hidden
from the sandbox that created it (or one already running): the analyser keeps
asking about it, and the next sandbox masks it. Other names of a masked file
(hard links made before the sandbox started) are masked too.

Rules for paths outside the workspace (`~/.ssh/**`, `//etc/shadow`) name paths of
the image, not host files, and stay with the analyser; a whole-tool `Read` deny
denies the tool, it masks nothing.

Bounds: at most `MAX_WALL_MOUNTS` mounts and `MAX_SCAN_ENTRIES` directory entries
looked at per sandbox. Past `MAX_WALL_MOUNTS` matches (a sandbox can make hundreds
of `.env` files to keep the next one from starting), whole directories are walled
in place of the paths they hold (`_coalesce`): the deepest directory that brings
the count within the bound, masked when a path under it is, so a sandbox sees
less than the rules name, never more. The workspace itself and directories that
hold another mount (`.git`, `.claude`, ...) are never walled whole; when the
matches cannot be brought within the bound so (spread over more than
`MAX_WALL_MOUNTS` top-level entries), or past `MAX_SCAN_ENTRIES`, the sandbox does
not start, and the error names the rule (fail closed).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import stat
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.permissions import paths
from orchestrator.permissions.policy import EffectivePolicy
from sandbox_tools.wire import WORKSPACE

MAX_WALL_MOUNTS = 128
"""Most paths one sandbox masks or mounts read-only for deny rules (each is a mount)."""
MAX_SCAN_ENTRIES = 200_000
"""Most directory entries looked at to find what deny rules match, per sandbox."""
MASK_ROOT = Path("/run/warden-masks")
"""Where the empty mask file and directory live when warden runs as root."""
READ_TOOLS = frozenset({"Read"})
WRITE_TOOLS = frozenset({"Edit", "Write"})


class WallError(ConfigError):
    """A deny rule cannot be held by mounts within the bounds: the sandbox does not start."""


@dataclass(frozen=True)
class DenyWall:
    """One deny rule as a container path pattern."""

    rule: str
    """The rule as written, with its source (for messages)."""
    pattern: str
    """An absolute container glob pattern under /workspace."""
    mask: bool
    """True: hide what it matches (Read deny); False: make it read-only (Edit deny)."""


def walls_of(policy: EffectivePolicy) -> tuple[DenyWall, ...]:
    """The walls a policy's deny rules stand for (patterns under the workspace only)."""
    found: list[DenyWall] = []
    for rule in policy.rules_for("deny"):
        if rule.whole_tool or rule.specifier is None:
            continue  # denies the tool itself; nothing to mount
        if rule.tool in READ_TOOLS:
            mask = True
        elif rule.tool in WRITE_TOOLS:
            mask = False
        else:
            continue
        for pattern in paths.rule_patterns(rule.specifier, strict=True):
            if paths.inside(pattern, [WORKSPACE]):
                found.append(DenyWall(f"{rule.text} ({rule.source})", pattern, mask))
    return tuple(dict.fromkeys(found))


@dataclass
class Walled:
    """What the walls hold in one workspace now: relative path → the rule."""

    masked: dict[str, str] = field(default_factory=dict)
    read_only: dict[str, str] = field(default_factory=dict)


def find_walled(workspace: Path, walls: Iterable[DenyWall], keep: Iterable[str] = ()) -> Walled:
    """Every existing workspace path the walls match, looked for now (links are not
    followed; a link a Read deny matches has its target in the workspace masked);
    past MAX_WALL_MOUNTS, directories of them (`_coalesce`; never one holding a path
    of `keep`, the workspace paths mounted otherwise). Raises WallError past the
    bounds."""
    walls = tuple(walls)
    found = Walled()
    if not walls:
        return found
    scan = _Scan(workspace, walls)
    linked: dict[tuple[int, int], tuple[str, bool]] = {}
    # One regular expression for all walls: most entries match none, and are done
    # with one match (which wall matched is looked up only for the few that do).
    any_wall = re.compile(
        "|".join(f"(?:{paths.pattern_regex(w.pattern)})(?:/.*)?" for w in walls), re.DOTALL
    )
    for rel, entry in scan.entries():
        container = f"{WORKSPACE}/{rel}"
        if any_wall.fullmatch(container) is None:
            continue
        for wall in walls:
            target = found.masked if wall.mask else found.read_only
            if _under(rel, target) or not paths.matches(wall.pattern, container):
                continue
            if entry.is_symlink():
                _add_link_target(workspace, container, wall, found)
                continue
            target[rel] = wall.rule
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if wall.mask:
                    scan.skip.add(rel)  # the empty mask hides all of it
            elif info.st_nlink > 1:
                linked[(info.st_dev, info.st_ino)] = (wall.rule, wall.mask)
    if linked:
        _add_other_names(workspace, linked, found, walls)
    _prune(found)
    _coalesce(found, keep)
    _check_count(found)
    return found


def _prune(found: Walled) -> None:
    """Nothing is mounted inside a masked directory (its mask is empty: there is no
    place to mount on), and a path masked is not also mounted read-only."""
    for walled in (found.masked, found.read_only):
        for rel in list(walled):
            parent = posixpath.dirname(rel)
            if (parent and _under(parent, found.masked)) or (
                walled is found.read_only and rel in found.masked
            ):
                del walled[rel]


MAX_COALESCE_ROUNDS = MAX_WALL_MOUNTS
"""Most directories `_coalesce` walls in place of the paths under them."""


def _coalesce(found: Walled, keep: Iterable[str]) -> None:
    """Past MAX_WALL_MOUNTS paths, wall directories in place of the paths they hold, so
    a sandbox that made hundreds of files a deny rule matches cannot keep the next one
    from starting. Each round walls the deepest directory whose paths bring the count
    within the bound (else the one that saves most): it is masked when any path under
    it is (read-only otherwise), so it hides or protects more than the rules name,
    never less. Never the workspace itself, nor a directory holding another mount
    (`keep`: an empty mask has no place to mount on); what cannot be brought within
    the bound so fails in `_check_count`."""
    blocked = {""}
    for rel in keep:
        while rel and rel not in blocked:
            blocked.add(rel)
            rel = posixpath.dirname(rel)
    for _ in range(MAX_COALESCE_ROUNDS):
        total = len(found.masked) + len(found.read_only)
        if total <= MAX_WALL_MOUNTS:
            return
        held: Counter[str] = Counter()
        for rel in [*found.masked, *found.read_only]:
            parent = posixpath.dirname(rel)
            while parent not in blocked:
                held[parent] += 1
                parent = posixpath.dirname(parent)

        saving = {
            d: n - (0 if d in found.masked or d in found.read_only else 1) for d, n in held.items()
        }
        candidates = [d for d in held if saving[d] > 0]
        if not candidates:
            return
        enough = [d for d in candidates if saving[d] >= total - MAX_WALL_MOUNTS]
        if enough:
            best = max(enough, key=lambda d: (d.count("/"), -held[d], d))
        else:
            best = max(candidates, key=lambda d: (saving[d], d.count("/"), d))
        _wall_directory(found, best, held[best])


def _wall_directory(found: Walled, directory: str, count: int) -> None:
    under = directory + "/"
    rules: Counter[str] = Counter()
    mask = directory in found.masked
    for walled in (found.masked, found.read_only):
        for rel in [r for r in walled if r == directory or r.startswith(under)]:
            rules[walled.pop(rel)] += 1
            mask = mask or walled is found.masked
    rule = rules.most_common(1)[0][0]
    label = f"{rule}, walled as the directory of {count} matches"
    (found.masked if mask else found.read_only)[directory] = label


def _under(rel: str, walled: dict[str, str]) -> bool:
    """Whether `rel` or a directory above it is already walled this way."""
    while rel:
        if rel in walled:
            return True
        rel = posixpath.dirname(rel)
    return False


def _add_link_target(workspace: Path, container: str, wall: DenyWall, found: Walled) -> None:
    resolved = paths.resolve_symlinks(container, workspace)
    if resolved is None or not paths.inside(resolved, [WORKSPACE]) or resolved == WORKSPACE:
        return  # loops, or leaves the workspace: no host file of ours behind it
    rel = resolved[len(WORKSPACE) + 1 :]
    if os.path.lexists(workspace / rel):
        (found.masked if wall.mask else found.read_only).setdefault(rel, wall.rule)


def _add_other_names(
    workspace: Path,
    linked: dict[tuple[int, int], tuple[str, bool]],
    found: Walled,
    walls: tuple[DenyWall, ...],
) -> None:
    """Hard links to a walled file elsewhere in the workspace get its wall too."""
    scan = _Scan(workspace, walls, everything=True)
    scan.skip.update(rel for rel in found.masked)
    for rel, entry in scan.entries():
        if entry.is_dir(follow_symlinks=False) or entry.is_symlink():
            continue
        info = entry.stat(follow_symlinks=False)
        hit = linked.get((info.st_dev, info.st_ino))
        if hit is not None:
            rule, mask = hit
            (found.masked if mask else found.read_only).setdefault(rel, rule)


def _check_count(found: Walled) -> None:
    total = len(found.masked) + len(found.read_only)
    if total <= MAX_WALL_MOUNTS:
        return
    counts: dict[str, int] = {}
    for rule in [*found.masked.values(), *found.read_only.values()]:
        counts[rule] = counts.get(rule, 0) + 1
    worst = max(counts, key=lambda r: counts[r])
    raise WallError(
        f"deny rule {worst} matches {counts[worst]} paths in the workspace "
        f"({total} in all for its deny rules, in more places than a directory below the "
        f"workspace can cover; a sandbox holds at most {MAX_WALL_MOUNTS} as mounts), so "
        "the sandbox was not started: deny their directory instead (e.g. "
        "`Read(./certs/**)`), or remove files the rule should not match"
    )


class _Scan:
    """A walk of the workspace that goes only where a wall's pattern could match."""

    def __init__(self, workspace: Path, walls: tuple[DenyWall, ...], *, everything: bool = False):
        self.workspace = workspace
        self.walls = walls
        self.prefixes = [paths.static_prefix(w.pattern) for w in walls]
        self.everything = everything or any(
            paths.inside(WORKSPACE, [prefix]) for prefix in self.prefixes
        )
        self.seen = 0
        self.skip: set[str] = set()
        """Directories not to descend into (masked as a whole)."""

    def _wanted(self, container: str) -> bool:
        return self.everything or any(
            paths.inside(prefix, [container]) or paths.inside(container, [prefix])
            for prefix in self.prefixes
        )

    def entries(self) -> Iterator[tuple[str, os.DirEntry[str]]]:
        stack = [""]
        while stack:
            rel_dir = stack.pop()
            try:
                listing = os.scandir(self.workspace / rel_dir if rel_dir else self.workspace)
            except OSError:
                continue  # gone, or not a directory any more: nothing under it to wall
            with listing:
                for entry in listing:
                    self.seen += 1
                    if self.seen > MAX_SCAN_ENTRIES:
                        raise WallError(
                            f"more than {MAX_SCAN_ENTRIES} files in the workspace to look "
                            f"through for the deny rules {self._rules()}, so the sandbox "
                            "was not started: anchor the rules to directories (e.g. "
                            "`Read(/config/.env)` rather than `Read(./.env)`), or remove "
                            "what need not be in the workspace"
                        )
                    rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                    container = f"{WORKSPACE}/{rel}"
                    if not self._wanted(container):
                        continue
                    yield rel, entry
                    if rel not in self.skip and entry.is_dir(follow_symlinks=False):
                        stack.append(rel)

    def _rules(self) -> str:
        return ", ".join(dict.fromkeys(w.rule for w in self.walls))


def mask_sources(root: Path | None = None) -> tuple[Path, Path]:
    """An empty file and an empty directory to mount over masked paths, made once:
    under `MASK_ROOT` as root, else in a private directory of the temp dir. Each
    is checked (owner, mode, still empty) every time. Raises WallError."""
    if root is None:
        root = (
            MASK_ROOT
            if os.geteuid() == 0
            else Path(tempfile.gettempdir()) / (f"warden-masks-{os.geteuid()}")
        )
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o755)
    empty_file, empty_dir = root / "empty-file", root / "empty-dir"
    with contextlib.suppress(FileExistsError):
        os.close(os.open(empty_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444))
    with contextlib.suppress(FileExistsError):
        os.mkdir(empty_dir, 0o555)
    for path, kind in ((root, stat.S_ISDIR), (empty_file, stat.S_ISREG), (empty_dir, stat.S_ISDIR)):
        info = os.lstat(path)
        if (
            not kind(info.st_mode)
            or info.st_uid != os.geteuid()
            or info.st_mode & 0o222 & ~(0o200 if path == root else 0)
        ):
            raise WallError(
                f"{path} (where warden keeps the empty masks it mounts over denied paths) "
                "is not what warden made (owner, type or mode changed); remove it and run again"
            )
    if os.lstat(empty_file).st_size or os.listdir(empty_dir):
        raise WallError(f"the masks in {root} are not empty any more; remove {root} and run again")
    return empty_file, empty_dir


__all__ = [
    "MAX_SCAN_ENTRIES",
    "MAX_WALL_MOUNTS",
    "DenyWall",
    "WallError",
    "Walled",
    "find_walled",
    "mask_sources",
    "walls_of",
]
