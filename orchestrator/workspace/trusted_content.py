"""What a workspace's trust unlocks, as content: which files, their hashes, what
each would add, and how they changed since a person last said yes.

Trust is given to content a person has seen, never to a place. The files a yes
covers are the workspace's own settings (`.claude/settings.json`,
`.claude/settings.local.json`), its agent files (`.claude/agents/**/*.md`), its
skills (every file under `.claude/skills/`: a skill's `SKILL.md` and what it names), the
scripts its hooks name and those any hook that runs on the host names, whichever
file defines it (`host_scripts`: the person's own or managed settings, an agent
file's trusted command), each as every path a command spells from the workspace,
recorded as `absent` when it does not exist, and any other command word that is a
file inside the workspace, its
dev container (all of `.devcontainer/`, and `.devcontainer.json`) and its MCP
configuration (`.mcp.json`). A dev container that builds a Dockerfile also adds
its build context, wherever it lies (`"context": ".."` included): the Dockerfile
by its path, and one entry, `<build context> DIR`, for the tar the build is sent
(`images.devcontext`: every file `.dockerignore` leaves in, since any of them can
be `COPY`'d), whose text is the tar's hash and a list of each file's hash, mode
and name. The hash is taken when the run reads its inputs, without writing the
tar; a build makes the tar and sends it only while it has that hash. Each is
fingerprinted by content (`sha256:…`); a
link is recorded as the link (`link:TARGET`, never followed) and anything else
that is not a regular file as `other`. The record (`workspace.trust`) keeps these
fingerprints and a copy of each file's text up to `MAX_KEPT_BYTES`, so what
changed since can be shown as a diff.

`needs_trust` says what the workspace would add that only trust lets in: every
settings key that is not one of the few that only narrow (deny and ask rules,
`disableBypassPermissionsMode`, warden's `protect`, comments), agent files, a dev
container, MCP servers, and each existing script a host hook names (even one only
the person's own settings bring in: the host runs workspace bytes only once a
person has seen them). An untrusted workspace with only
`{"permissions": {"additionalDirectories": ["/"]}}` needs trust, as in Claude Code.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.permissions.hooks.scripts import (
    ABSENT,
    command_paths,
    is_real_dir,
    script_words,
)
from orchestrator.regular_file import read_regular
from orchestrator.untrusted_text import printable

if TYPE_CHECKING:
    from orchestrator.images.devcontext import DevContainerInputs

PROJECT_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")
PROJECT_AGENTS = ".claude/agents"
PROJECT_SKILLS = ".claude/skills"
DEVCONTAINER_DIR = ".devcontainer"
SINGLE_FILES = (*PROJECT_SETTINGS, ".devcontainer.json", ".mcp.json")
"""Files trust covers by name (when they exist)."""
MAX_FILE_BYTES = 64 * 1024 * 1024
"""Largest file hashed; a larger one is fingerprinted as `too large` (and so never
matches a recorded yes: it must shrink or be reviewed by other means)."""
MAX_KEPT_BYTES = 256 * 1024
"""Largest file whose text the record keeps for the next review's diff."""
MAX_FILES = 2000
"""Most files trust covers (a `.devcontainer/` holding more is refused as a whole)."""
MAX_SETTINGS_BYTES = 1024 * 1024
"""Largest settings file parsed for the hook scripts it names."""
MAX_DIFF_LINES = 400
"""Most diff lines shown for one file (the rest is announced)."""
BUILD_CONTEXT = "<build context> "
"""Prefix of the entry for a dev container's build context (its directory follows;
no file trust covers otherwise has this name)."""
TOO_MANY = "too many files"
"""The fingerprint of `.devcontainer/` when it holds more than `MAX_FILES`."""

HOST_SCRIPT = "a workspace script a hook runs on the host (not run there until you approve it)"
"""What `needs_trust` says of a script a host hook names (any settings layer)."""

NARROWING_KEYS = frozenset({"$schema", "description", "$comment", "comment", "comments"})
"""Top-level settings keys that unlock nothing (`permissions` and `warden` are looked
into: see `_widening`)."""
NARROWING_PERMISSION_KEYS = frozenset(
    {"deny", "ask", "disableBypassPermissionsMode", "description", "$comment", "comment"}
)
NARROWING_WARDEN_KEYS = frozenset({"protect", "apply"})
"""`warden` keys that only restrict (`apply`: size caps that can lower, never raise)."""


class TrustedFile(BaseModel):
    """One file's fingerprint and, when small enough, its text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str
    """`sha256:HEX`, `link:TARGET`, `other`, `too large`, `unreadable` or `absent`
    (a script a hook names that does not exist)."""
    text: str | None = None
    """Its UTF-8 text when at most `MAX_KEPT_BYTES` (None otherwise: binary or large)."""


Fingerprint = dict[str, TrustedFile]
"""Relative path → fingerprint, for every file trust covers."""


class ContentChange(BaseModel):
    """One file new, changed or removed since the last yes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    """Relative to the workspace (written by anyone: shown as text only)."""
    change: Literal["new", "changed", "removed"]
    diff: tuple[str, ...] = ()
    """Unified diff lines, or one line saying why no diff can be shown."""


def _walk(root: Path, rel: str) -> Iterator[str]:
    """Relative paths of every non-directory under `root/rel` (links not followed)."""
    base = root / rel
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames.sort()
        here = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            yield f"{here}/{name}"
        for name in dirnames:  # links to directories are listed by walk as dirs
            if os.path.islink(os.path.join(dirpath, name)):
                yield f"{here}/{name}"


def fingerprint_one(root: Path, rel: str) -> TrustedFile:
    path = root / rel
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return TrustedFile(digest=ABSENT, text="")  # a hook's script not there (yet)
    except OSError:
        return TrustedFile(digest="unreadable")
    if stat.S_ISLNK(info.st_mode):
        return TrustedFile(digest="link:" + os.readlink(path))
    if not stat.S_ISREG(info.st_mode):
        return TrustedFile(digest="other")
    if info.st_size > MAX_FILE_BYTES:
        return TrustedFile(digest="too large")
    try:
        data = read_regular(path, MAX_FILE_BYTES, expected=info)
    except OSError:
        return TrustedFile(digest="unreadable")
    text = None
    if len(data) <= MAX_KEPT_BYTES:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    return TrustedFile(digest="sha256:" + hashlib.sha256(data).hexdigest(), text=text)


def _load_json(root: Path, rel: str) -> object:
    try:
        return json.loads(read_regular(root / rel, MAX_SETTINGS_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _hook_commands(doc: object) -> Iterator[tuple[str, bool]]:
    """(command, runs in the workspace) of each hook a settings document defines."""
    hooks = doc.get("hooks") if isinstance(doc, dict) else None
    if not isinstance(hooks, dict):
        return
    for groups in hooks.values():
        for group in groups if isinstance(groups, list) else []:
            entries = group.get("hooks") if isinstance(group, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict) and isinstance(entry.get("command"), str):
                    yield entry["command"], entry.get("cwd") == "workspace"


def hook_scripts(root: Path, docs: Mapping[str, object]) -> list[str]:
    """Workspace files the hook commands of `docs` name (`named_scripts`)."""
    return named_scripts(root, [c for doc in docs.values() for c in _hook_commands(doc)])


def named_scripts(root: Path, commands: Iterable[tuple[str, bool]]) -> list[str]:
    """Workspace files that `commands` ((command, runs in the workspace) pairs) name:
    every path a command spells from the workspace (or, run in the workspace,
    relatively), whether it exists or not (an absent one is recorded as `absent`,
    so one that appears later is a change), and any other word that is an existing
    file. Resolvable words only: a command that builds a path at run time names
    nothing this can see."""
    found: list[str] = []
    real_root = os.path.realpath(root)
    for command, in_workspace in commands:
        named = script_words(command, real_root, cwd_workspace=in_workspace)
        found += [rel for _, rel in named if not is_real_dir(real_root, rel)]
        for rel in command_paths(command, real_root):
            candidate = os.path.join(real_root, rel)
            if os.path.lexists(candidate) and not os.path.isdir(candidate):
                found.append(rel)
    return list(dict.fromkeys(found))


def _from_text(text: str) -> TrustedFile:
    return _from_bytes(text.encode("utf-8"))


def _from_bytes(data: bytes) -> TrustedFile:
    text = None
    if len(data) <= MAX_KEPT_BYTES:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    return TrustedFile(digest="sha256:" + hashlib.sha256(data).hexdigest(), text=text)


def dev_container_prints(root: Path, dev: DevContainerInputs | None) -> Fingerprint:
    """The dev container's entries as read once (`images.devcontext`): its config's
    bytes, and for a Dockerfile build the Dockerfile and the context tar's hash."""
    if dev is None:
        return {}
    out: Fingerprint = {}
    if dev.raw is not None:
        out[dev.relative] = _from_bytes(dev.raw)
    config = dev.dev
    if config is None or config.dockerfile is None or config.context is None:
        return out
    where = os.path.relpath(config.context, root)
    made = dev.context
    if made is None:
        out[BUILD_CONTEXT + where] = TrustedFile(digest="unreadable")
        return out
    out[os.path.relpath(config.dockerfile, root)] = _from_bytes(made.dockerfile_bytes)
    # The tar's own hash (entries, the Dockerfile's name, args, target) heads the
    # listing; the entry's fingerprint is the listing's, so the record keeps it to diff.
    listing = f"build sha256:{made.digest}\n" + "".join(line + "\n" for line in made.listing)
    out[BUILD_CONTEXT + where] = _from_bytes(listing.encode("utf-8"))
    return out


def fingerprint(
    root: Path,
    texts: Mapping[str, str] | None = None,
    *,
    dev: DevContainerInputs | None = None,
    dev_read: bool = False,
    host_scripts: Sequence[str] = (),
) -> Fingerprint:
    """Every file trust covers in the workspace `root`, fingerprinted now. `texts`:
    settings files (by relative path) already read, fingerprinted from that text;
    `dev` (when `dev_read`): the dev container as already read, else read now;
    `host_scripts`: the workspace files the hooks that run on the host name,
    whichever settings file (the person's own, managed) or agent file holds them
    (`workspace.trust.host_hook_scripts`)."""
    if not dev_read:
        from orchestrator.images.devcontext import read_devcontainer

        dev = read_devcontainer(root)
    texts = texts or {}
    names: list[str] = [rel for rel in SINGLE_FILES if os.path.lexists(root / rel)]
    too_many: set[str] = set()
    for tree in (PROJECT_AGENTS, PROJECT_SKILLS, DEVCONTAINER_DIR):
        if os.path.isdir(root / tree) and not os.path.islink(root / tree):
            inside = [r for r in _walk(root, tree) if tree != PROJECT_AGENTS or r.endswith(".md")]
            if len(inside) > MAX_FILES:
                too_many.add(tree)
            else:
                names += inside
        elif os.path.lexists(root / tree):
            names.append(tree)  # a link or a file where a directory belongs
    names += [rel for rel in texts if rel not in names]
    out: Fingerprint = {tree: TrustedFile(digest=TOO_MANY) for tree in sorted(too_many)}
    out.update(dev_container_prints(root, dev))
    for rel in PROJECT_SETTINGS:
        if rel in texts:
            out[rel] = _from_text(texts[rel])
    docs = {rel: _doc(root, rel, texts) for rel in PROJECT_SETTINGS if rel in names}
    names += hook_scripts(root, docs)
    names += host_scripts
    for rel in dict.fromkeys(names):
        if rel not in out:
            out[rel] = fingerprint_one(root, rel)
    return out


def _doc(root: Path, rel: str, texts: Mapping[str, str]) -> object:
    if rel not in texts:
        return _load_json(root, rel)
    try:
        return json.loads(texts[rel])
    except ValueError:
        return None


def _widening(rel: str, doc: object) -> list[str]:
    if not isinstance(doc, dict):
        return [f"{rel}: settings warden cannot read as a mapping"] if doc is not None else []
    found: list[str] = []
    for key, value in doc.items():
        if key in NARROWING_KEYS or value in (None, [], {}, False, ""):
            continue
        if key == "permissions" and isinstance(value, dict):
            wide = sorted(
                k for k, v in value.items()
                if k not in NARROWING_PERMISSION_KEYS and v not in (None, [], {}, "")
            )  # fmt: skip
            found += [f"{rel}: permissions.{k}" for k in wide]
        elif key == "warden" and isinstance(value, dict):
            wide = sorted(k for k in value if k not in NARROWING_WARDEN_KEYS)
            found += [f"{rel}: warden.{k}" for k in wide]
        else:
            found.append(f"{rel}: {key}")
    return found


def needs_trust(
    root: Path, prints: Fingerprint | None = None, host_scripts: Sequence[str] = ()
) -> list[str]:
    """What the workspace itself would add that only trust lets in, in words
    (empty: it only narrows, or has nothing of its own). `host_scripts`: as for
    `fingerprint`; each that exists is workspace content the host would run."""
    prints = fingerprint(root, host_scripts=host_scripts) if prints is None else prints
    found: list[str] = []
    for rel in dict.fromkeys(host_scripts):
        entry = prints.get(rel)
        if entry is not None and entry.digest != ABSENT:
            found.append(f"{rel}: {HOST_SCRIPT}")
    for rel in PROJECT_SETTINGS:
        entry = prints.get(rel)
        if entry is None:
            continue
        if entry.text is None:
            found.append(f"{rel}: settings warden cannot read as text ({entry.digest})")
            continue
        try:
            doc = json.loads(entry.text)
        except ValueError:
            found.append(f"{rel}: settings that are not valid JSON")
            continue
        found += _widening(rel, doc)
    if any(p.startswith(PROJECT_AGENTS + "/") or p == PROJECT_AGENTS for p in prints):
        found.append(f"{PROJECT_AGENTS}/: agent definitions")
    if any(p.startswith(PROJECT_SKILLS + "/") or p == PROJECT_SKILLS for p in prints):
        found.append(f"{PROJECT_SKILLS}/: skills (instructions a subagent loads and follows)")
    if any(p.startswith(DEVCONTAINER_DIR) for p in prints):
        found.append("a dev container (its image, or a Dockerfile warden builds)")
    if ".mcp.json" in prints:
        found.append(".mcp.json: MCP servers")
    return found


def changes(
    before: Mapping[str, TrustedFile], after: Mapping[str, TrustedFile]
) -> list[ContentChange]:
    """What is new, changed or removed in `after` since `before`, with diffs."""
    out: list[ContentChange] = []
    for rel in sorted(set(before) | set(after)):
        old, new = before.get(rel), after.get(rel)
        if old is not None and new is not None and old.digest == new.digest:
            continue
        kind: Literal["new", "changed", "removed"] = (
            "new" if old is None else "removed" if new is None else "changed"
        )
        out.append(ContentChange(path=rel, change=kind, diff=_diff(rel, old, new)))
    return out


def _diff(rel: str, old: TrustedFile | None, new: TrustedFile | None) -> tuple[str, ...]:
    def text_of(f: TrustedFile | None) -> list[str] | None:
        if f is None or f.digest == ABSENT:
            return []
        return None if f.text is None else f.text.splitlines()

    a, b = text_of(old), text_of(new)
    if a is None or b is None:
        return (
            f"(no text diff: was {old.digest if old else 'absent'}, "
            f"now {new.digest if new else 'absent'})",
        )
    lines = list(difflib.unified_diff(a, b, f"a/{rel}", f"b/{rel}", lineterm="", n=2))
    if len(lines) > MAX_DIFF_LINES:
        cut = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"… {cut} more diff line(s) not shown"]
    return tuple(lines)


def render(found: list[ContentChange]) -> list[str]:
    """Plain-text lines for a terminal: every name and diff line as inert text."""
    lines: list[str] = []
    for c in found:
        lines.append(f"{c.change:<8} {printable(c.path, 300)}")
        lines += [f"    {printable(d, 400)}" for d in c.diff]
    return lines
