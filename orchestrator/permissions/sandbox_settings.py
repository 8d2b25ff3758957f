"""Claude Code's `sandbox.filesystem` settings, held as permission rules.

In Claude Code, `sandbox.filesystem.denyRead` and `denyWrite` name paths its
OS-level sandbox keeps sandboxed commands from reading or writing (merged with the
`Read(...)` and `Edit(...)` deny rules). warden's sandboxes are containers, and
every tool call and command is decided on the host, so the same restriction
becomes a `Read` or `Edit` deny rule of the file it is in: it then holds for the
Read/Edit/Write tools and for commands that read or write the path, which is
stricter than Claude Code (its file tools are not bound by these keys).

Paths: `/x` is absolute, `~/x` in the home, `./x` and `x` relative to the project
(as permission rules read them; in the user's settings also to `~/.claude`).
`allowRead` and `allowWrite` only widen what a sandboxed command may do; warden
does not read them (a path they name is decided by the rules), nor the
managed-only `allowManagedReadPathsOnly`, which only narrows `allowRead`. A key
that looks like a misspelling of one of these refuses the file: a misspelt
`denyRead` must not drop its paths in silence.
"""

from __future__ import annotations

import difflib

from orchestrator.errors import PolicyError
from orchestrator.permissions.rules import Rule, parse_rule
from orchestrator.permissions.settings_files import SettingsFile

DENY_KEYS = {"denyRead": "Read", "denyWrite": "Edit"}
"""`sandbox.filesystem` keys that restrict, and the rule each path becomes."""
OTHER_KEYS = ("allowRead", "allowWrite", "allowManagedReadPathsOnly")
"""Claude Code's keys that only widen a sandboxed command's reach (not read)."""
USER_RELATIVE_ROOT = "~/.claude/"
RESTRICTING_BLOCKS = ("filesystem", "network")
"""`sandbox` blocks that carry restrictions: a key spelt close to one is refused."""


def filesystem_denies(f: SettingsFile) -> list[Rule]:
    """The deny rules `sandbox.filesystem` of one settings file stands for."""
    sandbox = f.doc.get("sandbox")
    if sandbox is None:
        return []
    if not isinstance(sandbox, dict):
        raise PolicyError(f"{f.path}{f.line_of('sandbox')}: `sandbox` must be a mapping")
    for key in sandbox:
        close = difflib.get_close_matches(key, RESTRICTING_BLOCKS, n=1, cutoff=0.7)
        if key not in RESTRICTING_BLOCKS and close:
            raise PolicyError(
                f"{f.path}{f.line_of(key)}: sandbox key {key!r} is not one Claude Code knows "
                f"(did you mean {close[0]!r}?); fix its name so its restrictions are not lost"
            )
    block = sandbox.get("filesystem")
    if block is None:
        return []
    where = f"{f.path}{f.line_of('filesystem')}: sandbox.filesystem"
    if not isinstance(block, dict):
        raise PolicyError(f"{where} must be a mapping with denyRead/denyWrite lists")
    known = [*DENY_KEYS, *OTHER_KEYS]
    for key in block:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if key not in known and close:
            raise PolicyError(
                f"{where}: key {key!r} is not one Claude Code knows (did you mean "
                f"{close[0]!r}?); fix its name so its paths are not lost"
            )
    rules: list[Rule] = []
    for key, tool in DENY_KEYS.items():
        items = block.get(key, [])
        if not isinstance(items, list) or not all(isinstance(p, str) and p.strip() for p in items):
            raise PolicyError(f"{where}.{key} must be a list of paths, got {items!r}")
        for i, path in enumerate(p for p in items if isinstance(p, str)):
            for spec in _specifiers(path.strip(), user=f.kind == "user"):
                rules.append(parse_rule(f"{tool}({spec})", "deny", f.source, f"{where}.{key}[{i}]"))
    return rules


def _specifiers(path: str, *, user: bool) -> list[str]:
    """A sandbox path as permission-rule specifiers."""
    if path.startswith("//"):
        return [path]
    if path.startswith("/"):
        return ["/" + path]  # absolute: `//x` in a rule
    if path == "~" or path.startswith("~/"):
        return [path]
    relative = path.removeprefix("./")
    return [path, USER_RELATIVE_ROOT + relative] if user else [path]
