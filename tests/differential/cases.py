"""The generated cases: groups of tool calls that share one set of settings.

A group is what one Claude Code session sees: managed, user, project and local
settings, CLI flags (`--permission-mode`, `--allowedTools`, `--disallowedTools`),
whether the workspace is trusted, the workspace's files, and the calls the
scripted model makes, one per turn. `{ws}` and `{home}` in rules and inputs stand
for the workspace and the home directory (`/workspace` and `/root` on warden's
side). Everything a call may run is harmless inside the test's namespace
(Claude Code runs allowed calls for real, as an unprivileged user).

The set is deterministic; `SLICE` names the groups CI runs.
"""

from __future__ import annotations

import itertools
from typing import Any

Group = dict[str, Any]

FILES = {
    ".env": "SECRET=1\n",
    "sub/.env": "SECRET=2\n",
    "sub/deep/.env": "SECRET=3\n",
    "README.md": "readme\n",
    "sub/notes.txt": "notes\n",
    "key.pem": "pem\n",
    "sub/key.pem": "pem\n",
    "src/app.py": "print(1)\n",
    "src/gen/out.py": "x = 1\n",
    "secrets/token": "t\n",
}
MODES = ("default", "acceptEdits", "plan", "dontAsk", "bypassPermissions")


def _read(rel: str) -> dict[str, Any]:
    return {"tool": "Read", "input": {"file_path": "{ws}/" + rel}}


def _bash(command: str) -> dict[str, Any]:
    return {"tool": "Bash", "input": {"command": command, "description": "differential case"}}


def _write(rel: str) -> dict[str, Any]:
    return {"tool": "Write", "input": {"file_path": "{ws}/" + rel, "content": "x\n"}}


def _fetch(url: str) -> dict[str, Any]:
    return {"tool": "WebFetch", "input": {"url": url, "prompt": "summarise"}}


def _group(gid: str, calls: list[dict[str, Any]], **settings: Any) -> Group:
    numbered = [{"id": f"{gid}.{i}", **c} for i, c in enumerate(calls)]
    return {"id": gid, "files": FILES, "calls": numbered, **settings}


def read_rule_groups() -> list[Group]:
    """Path rule forms (`./`, `/`, `//`, `~/`, `**`, bare names, trailing `/`) x deny/ask."""
    specs = [
        "./.env",
        ".env",
        "/.env",
        "/{ws}/.env",
        "**/.env",
        "sub/**",
        "./sub/",
        "*.pem",
        "./src/gen/**",
        "secrets",
        "/sub/*.txt",
        "sub/deep/",
    ]
    targets = [
        ".env",
        "sub/.env",
        "sub/deep/.env",
        "README.md",
        "sub/notes.txt",
        "key.pem",
        "sub/key.pem",
        "src/gen/out.py",
        "secrets/token",
    ]
    groups = []
    for i, (spec, behavior) in enumerate(itertools.product(specs, ("deny", "ask"))):
        project = {"permissions": {behavior: [f"Read({spec})"]}}
        groups.append(_group(f"read{i:02d}", [_read(t) for t in targets], project=project))
    return groups


def edit_rule_groups() -> list[Group]:
    """Edit/Write rules and the modes' defaults for writes in and out of the workspace."""
    rules = [
        {"allow": ["Edit(src/**)"]},
        {"allow": ["Edit(./src/**)"], "deny": ["Edit(./src/gen/**)"]},
        {"ask": ["Write(*.md)"], "allow": ["Edit"]},
        {},
    ]
    groups = []
    for i, (perms, mode) in enumerate(itertools.product(rules, MODES)):
        n = f"e{i:02d}"
        calls = [
            _write(f"src/{n}_new.py"),
            _write(f"src/gen/{n}_new.py"),
            _write(f"{n}_doc.md"),
            _write(f"sub/{n}_x.txt"),
            {"tool": "Write", "input": {"file_path": f"/tmp/{n}_outside.txt", "content": "x\n"}},
        ]
        groups.append(_group(f"edit{i:02d}", calls, project={"permissions": perms}, mode=mode))
    return groups


BASH_COMMANDS = [
    "echo hi",
    "echo hi && ls",
    "echo hi; touch t1",
    "ls | wc -l",
    "cat README.md",
    "cat .env",
    "cat sub/.env",
    "head -n 1 .env",
    "grep SECRET .env",
    "cat < .env",
    "echo $(cat .env)",
    "echo x > out.txt",
    "timeout 5 echo hi",
    "FOO=1 echo hi",
    "ls && rm -f nothing",
    "git status",
    "touch t2",
    "sh -c 'echo hi'",
    "find . -name README.md",
    "ls -la sub",
]
BASH_RULES: list[dict[str, list[str]]] = [
    {"allow": ["Bash(echo:*)", "Bash(ls:*)", "Bash(cat:*)"], "deny": ["Read(./.env)"]},
    {"allow": ["Bash(git status)", "Bash(echo hi)"], "deny": ["Bash(rm:*)"]},
    {"allow": ["Bash(echo *)", "Bash(head:*)", "Bash(grep:*)"], "ask": ["Bash(touch:*)"]},
    {"allow": ["Bash"], "deny": ["Bash(touch:*)", "Read(.env)"]},
    {"allow": ["Bash(timeout:*)", "Bash(sh:*)", "Bash(find:*)", "Bash(wc:*)"]},
    {},
]


def bash_groups() -> list[Group]:
    """Bash rules x command composition (lists, pipes, substitutions, redirections,
    wrappers, env prefixes) x modes."""
    groups = []
    for i, (perms, mode) in enumerate(
        itertools.product(BASH_RULES, ("default", "acceptEdits", "dontAsk"))
    ):
        calls = [_bash(c) for c in BASH_COMMANDS]
        groups.append(_group(f"bash{i:02d}", calls, project={"permissions": perms}, mode=mode))
    return groups


LEVELS = ("managed", "user", "project", "local", "cli")


def _place(level: str, behavior: str, rule: str, into: Group) -> None:
    if level == "cli":
        key = {"allow": "cli_allow", "deny": "cli_deny"}[behavior]
        into.setdefault(key, []).append(rule)
        return
    doc = into.setdefault(level, {"permissions": {}})
    doc["permissions"].setdefault(behavior, []).append(rule)


def level_groups() -> list[Group]:
    """The same rules at every settings level, and an allow at one level against a
    deny at another: deny from anywhere holds."""
    groups = []
    for i, (allow_at, deny_at) in enumerate(itertools.product(LEVELS, LEVELS)):
        g = _group(
            f"lvl{i:02d}",
            [_bash("touch made.txt"), _bash("ls"), _read(".env"), _bash("echo hi")],
        )
        _place(allow_at, "allow", "Bash(touch:*)", g)
        _place(allow_at, "allow", "Bash(ls:*)", g)
        _place(deny_at, "deny", "Bash(ls:*)", g)
        _place(deny_at, "deny", "Read(./.env)", g)
        groups.append(g)
    return groups


def managed_key_groups() -> list[Group]:
    """Managed-only keys and `disableBypassPermissionsMode`."""
    calls = [_bash("touch x"), _write("w.txt"), _read("README.md"), _bash("ls"), _bash("echo hi")]
    groups = []
    for i, level in enumerate(("managed", "user", "project")):
        doc = {"permissions": {"disableBypassPermissionsMode": "disable"}}
        groups.append(_group(f"bypassoff{i}", calls, mode="bypassPermissions", **{level: doc}))
    for i, allow_at in enumerate(("user", "project", "local", "cli")):
        g = _group(
            f"rulesonly{i}",
            calls,
            managed={
                "allowManagedPermissionRulesOnly": True,
                "permissions": {"allow": ["Bash(echo:*)"]},
            },
        )
        _place(allow_at, "allow", "Bash(touch:*)", g)
        _place(allow_at, "allow", "Bash(ls:*)", g)
        groups.append(g)
    groups.append(
        _group(
            "managed-nopermissions",
            calls,
            managed={"allowManagedHooksOnly": True},
            project={"permissions": {"allow": ["Bash(ls:*)"]}},
        )
    )
    return groups


def trust_groups() -> list[Group]:
    """An untrusted workspace: its allow rules do nothing, its deny and ask rules hold."""
    calls = [_bash("touch x"), _bash("ls"), _bash("echo hi"), _read(".env"), _read("README.md")]
    groups = []
    for i, where in enumerate(("project", "local")):
        for trusted in (True, False):
            g = _group(f"trust{i}{'t' if trusted else 'u'}", calls, trusted=trusted)
            _place(where, "allow", "Bash(touch:*)", g)
            _place(where, "allow", "Bash(echo:*)", g)
            _place(where, "deny", "Read(./.env)", g)
            g[where]["permissions"]["ask"] = ["Bash(ls:*)"]
            groups.append(g)
    return groups


def webfetch_groups() -> list[Group]:
    """WebFetch domain rules in each mode."""
    calls = [
        _fetch("https://example.com/a"),
        _fetch("https://docs.example.com/b"),
        _fetch("https://other.org/c"),
    ]
    rulesets = [
        {"allow": ["WebFetch(domain:example.com)"]},
        {"deny": ["WebFetch(domain:example.com)"]},
        {"allow": ["WebFetch"], "deny": ["WebFetch(domain:other.org)"]},
        {},
    ]
    groups = []
    for i, (perms, mode) in enumerate(
        itertools.product(rulesets, ("default", "bypassPermissions", "dontAsk"))
    ):
        groups.append(_group(f"fetch{i:02d}", calls, project={"permissions": perms}, mode=mode))
    return groups


def mode_groups() -> list[Group]:
    """No rules: each mode's default for reads, searches, writes and commands, inside
    and outside the workspace."""
    calls = [
        _read("README.md"),
        {"tool": "Read", "input": {"file_path": "/etc/hostname"}},
        {"tool": "Glob", "input": {"pattern": "**/*.py"}},
        {"tool": "Grep", "input": {"pattern": "print"}},
        _write("m_new.txt"),
        _bash("ls"),
        _bash("touch m.txt"),
    ]
    return [_group(f"mode{i}", calls, mode=m) for i, m in enumerate(MODES)]


def all_groups() -> list[Group]:
    return [
        *read_rule_groups(),
        *edit_rule_groups(),
        *bash_groups(),
        *level_groups(),
        *managed_key_groups(),
        *trust_groups(),
        *webfetch_groups(),
        *mode_groups(),
    ]


SLICE = (
    "read00",
    "read05",
    "bash00",
    "bash09",
    "lvl07",
    "bypassoff0",
    "rulesonly1",
    "trust0u",
    "fetch01",
    "mode0",
)
"""The groups CI runs (about a minute): one of each kind."""
