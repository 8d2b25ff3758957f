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
import json
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


HOME_FILES = {
    "secret.txt": "s\n",
    ".claude/secret.txt": "s\n",
    ".claude/.env": "SECRET=4\n",
    ".claude/sub/notes.txt": "n\n",
}


def user_path_groups() -> list[Group]:
    """Path rule forms anchored at a root (`/`, `//`, `~/`) in the user's
    `~/.claude/settings.json`: what `/x` means there (the project root, or the
    settings file's directory?), for reads in the workspace and in the home."""
    specs = ["/.env", "/sub/*.txt", "/secret.txt", "~/secret.txt", "//{home}/.claude/.env",
             "//{ws}/.env"]  # fmt: skip
    targets = [
        _read(".env"),
        _read("sub/.env"),
        _read("sub/notes.txt"),
        *(
            {"tool": "Read", "input": {"file_path": "{home}/" + rel}}
            for rel in ("secret.txt", ".claude/secret.txt", ".claude/.env", ".claude/sub/notes.txt")
        ),
    ]
    groups = []
    for i, (spec, behavior) in enumerate(itertools.product(specs, ("deny", "ask"))):
        user = {"permissions": {behavior: [f"Read({spec})"]}}
        g = _group(f"userpath{i:02d}", targets, user=user)
        g["home_files"] = HOME_FILES
        groups.append(g)
    managed_targets = [
        _read(".env"),
        _read("sub/.env"),
        {"tool": "Read", "input": {"file_path": "/etc/claude-code/.env"}},
        {"tool": "Read", "input": {"file_path": "/etc/claude-code/secret.txt"}},
    ]
    for i, spec in enumerate(("/.env", "/secret.txt")):
        managed = {"permissions": {"deny": [f"Read({spec})"]}}
        groups.append(_group(f"managedpath{i}", managed_targets, managed=managed))
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
    "wc -l *.md",
    "cat sub/*",
    "head -n 1 .e*",
    "cp -r sub /tmp/diffcopy",
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


WRITE_COMMANDS = [
    "cp README.md src/gen/a.py",
    "echo x | tee src/gen/b.py",
    "touch src/gen/c.py",
    "mv src/app.py src/gen/app.py",
    "sed -i s/1/2/ src/gen/out.py",
    "echo x > src/gen/d.py",
    "cp README.md src/ok.py",
]


def bash_write_groups() -> list[Group]:
    """Commands that write a file an Edit rule denies or asks about, each command
    allowed by a Bash rule."""
    allow = [f"Bash({c}:*)" for c in ("cp", "tee", "touch", "mv", "sed", "echo")]
    groups = []
    for i, (behavior, mode) in enumerate(
        itertools.product(("deny", "ask"), ("default", "acceptEdits"))
    ):
        perms = {"allow": allow, behavior: ["Edit(./src/gen/**)"]}
        calls = [_bash(c) for c in WRITE_COMMANDS]
        groups.append(_group(f"bwrite{i}", calls, project={"permissions": perms}, mode=mode))
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


def _hook_output(decision: str | None, reason: str, updated: dict[str, str] | None = None) -> str:
    specific: dict[str, Any] = {"hookEventName": "PreToolUse"}
    if decision is not None:
        specific |= {"permissionDecision": decision, "permissionDecisionReason": reason}
    if updated is not None:
        specific["updatedInput"] = {**updated, "description": "rewritten by a hook"}
    out = {"hookSpecificOutput": specific}
    return "cat >/dev/null; echo '" + json.dumps(out) + "'"


HOOKS: dict[str, dict[str, Any]] = {
    "allow": {"command": _hook_output("allow", "hook allows")},
    "deny": {"command": _hook_output("deny", "hook denies")},
    "ask": {"command": _hook_output("ask", "hook asks")},
    "exit2": {"command": "cat >/dev/null; echo 'hook blocks' >&2; exit 2"},
    "exit2-allow-json": {"command": _hook_output("allow", "x") + "; exit 2"},
    "error": {"command": "cat >/dev/null; echo 'hook broke' >&2; exit 1"},
    "timeout": {"command": "cat >/dev/null; sleep 4", "timeout": 1},
    "bad-json": {"command": "cat >/dev/null; echo '{\"hookSpecificOutput\": {'"},
    "bad-decision": {"command": _hook_output("maybe", "unknown decision")},
    "plain-output": {"command": "cat >/dev/null; echo looks fine"},
    "legacy-approve": {
        "command": 'cat >/dev/null; echo \'{"decision": "approve", "reason": "ok"}\''
    },
    "legacy-block": {"command": 'cat >/dev/null; echo \'{"decision": "block", "reason": "no"}\''},
    "no-touch": {"command": "if grep -q touch; then echo 'no touch' >&2; exit 2; fi"},
    "rewrite-touch": {"command": _hook_output("allow", "rewritten", {"command": "touch rw.txt"})},
    "rewrite-echo": {"command": _hook_output(None, "", {"command": "echo rewritten"})},
}
"""PreToolUse hook commands (POSIX sh; each reads its stdin, as Claude Code writes it)."""
HOOK_RULES: list[dict[str, list[str]]] = [
    {},
    {"allow": ["Bash(touch:*)", "Bash(echo:*)", "Write"]},
    {"deny": ["Bash(touch:*)"], "allow": ["Bash(echo:*)"]},
    {"ask": ["Bash(echo:*)"], "allow": ["Bash(touch:*)"]},
]


def _hooks(*entries: tuple[str, list[str]]) -> dict[str, Any]:
    """A settings `hooks` block: (matcher, [hook names]) per entry."""
    return {
        "hooks": {
            "PreToolUse": [
                {"matcher": matcher, "hooks": [{"type": "command", **HOOKS[n]} for n in names]}
                for matcher, names in entries
            ]
        }
    }


def _hook_calls(n: str) -> list[dict[str, Any]]:
    return [_bash(f"touch {n}.txt"), _bash("echo hi"), _read("README.md"), _write(f"{n}_w.txt")]


def hook_groups() -> list[Group]:
    """PreToolUse hooks in settings (allow/deny/ask by JSON and exit codes, errors,
    timeouts, malformed output, matchers, several hooks, levels) x rules x modes."""
    groups = []
    decisive = ("allow", "deny", "ask", "exit2")
    i = 0
    for name, perms, mode in itertools.product(
        decisive, HOOK_RULES, ("default", "dontAsk", "bypassPermissions")
    ):
        doc = {"permissions": perms, **_hooks(("Bash|Write", [name]))}
        groups.append(_group(f"hook{i:02d}", _hook_calls(f"h{i}"), user=doc, mode=mode))
        i += 1
    odd = ("exit2-allow-json", "error", "timeout", "bad-json", "bad-decision",
           "plain-output", "legacy-approve", "legacy-block", "no-touch")  # fmt: skip
    for name, perms in itertools.product(odd, HOOK_RULES[:2]):
        doc = {"permissions": perms, **_hooks(("", [name]))}
        groups.append(_group(f"hook{i:02d}", _hook_calls(f"h{i}"), user=doc))
        i += 1
    for matcher in ("Bash", "Write|Edit", "*", "Bas", "B.*", "bash", "Read", "^Bash$"):
        doc = {"permissions": HOOK_RULES[1], **_hooks((matcher, ["exit2"]))}
        groups.append(_group(f"hookm{i:02d}", _hook_calls(f"h{i}"), user=doc))
        i += 1
    several = [
        (("Bash", ["allow", "deny"]),),
        (("Bash", ["ask", "allow"]),),
        (("Bash", ["allow", "error"]),),
        (("Bash", ["allow"]), ("*", ["ask"])),
        (("Bash", ["ask", "timeout"]),),
        (("Bash", ["allow", "no-touch"]),),
    ]
    for entries in several:
        doc = {"permissions": HOOK_RULES[0], **_hooks(*entries)}
        groups.append(_group(f"hooks{i:02d}", _hook_calls(f"h{i}"), user=doc))
        i += 1
    for level, trusted, name in itertools.product(
        ("managed", "project", "local"), (True, False), ("allow", "exit2")
    ):
        if level == "managed" and not trusted:
            continue
        g = _group(f"hookl{i:02d}", _hook_calls(f"h{i}"), trusted=trusted)
        g[level] = _hooks(("Bash", [name]))
        groups.append(g)
        i += 1
    for managed, user in (
        ({"allowManagedHooksOnly": True}, _hooks(("Bash", ["allow"]))),
        ({"allowManagedHooksOnly": True}, _hooks(("Bash", ["exit2"]))),
        ({"disableAllHooks": True}, _hooks(("Bash", ["allow"]))),
        (None, {"disableAllHooks": True, **_hooks(("Bash", ["allow"]))}),
        (None, {"disableAllHooks": True, **_hooks(("Bash", ["exit2"]))}),
        ({**_hooks(("Bash", ["exit2"]))}, {"disableAllHooks": True}),
    ):
        g = _group(f"hookk{i:02d}", _hook_calls(f"h{i}"), user=user)
        if managed is not None:
            g["managed"] = managed
        groups.append(g)
        i += 1
    for project, local, name in (
        ({"disableAllHooks": True}, None, "allow"),
        ({"disableAllHooks": True}, None, "exit2"),
        (None, {"disableAllHooks": False}, "exit2"),
    ):
        user = _hooks(("Bash", [name]))
        if local is not None:
            user["disableAllHooks"] = True
        g = _group(f"hookk{i:02d}", _hook_calls(f"h{i}"), user=user)
        for level, toggle in (("project", project), ("local", local)):
            if toggle is not None:
                g[level] = toggle
        groups.append(g)
        i += 1
    for name, perms in itertools.product(
        ("rewrite-touch", "rewrite-echo"), (HOOK_RULES[2], {"allow": ["Bash(echo:*)"]})
    ):
        doc = {"permissions": perms, **_hooks(("Bash", [name]))}
        groups.append(_group(f"hooku{i:02d}", _hook_calls(f"h{i}"), user=doc))
        i += 1
    return groups


def _notebook(rel: str) -> dict[str, Any]:
    return {
        "tool": "NotebookEdit",
        "input": {"notebook_path": "{ws}/" + rel, "new_source": "x = 2", "cell_id": "c1"},
    }


NOTEBOOK = json.dumps(
    {
        "cells": [{"cell_type": "code", "id": "c1", "metadata": {}, "source": ["x = 1"],
                   "outputs": [], "execution_count": None}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
)  # fmt: skip


def trust_record_groups() -> list[Group]:
    """Trust as recorded (no flag): Claude Code's record for the exact project path,
    for its parent, for `/`; warden's own record; an untrusted workspace whose local
    settings allow and set a mode; a project with only `additionalDirectories`."""
    calls = [_bash("touch x"), _bash("echo hi"), _read("README.md"),
             {"tool": "Read", "input": {"file_path": "/etc/hostname"}},
             {"tool": "Write", "input": {"file_path": "/tmp/tr_out.txt", "content": "x\n"}}]  # fmt: skip
    project = {"permissions": {"allow": ["Bash(touch:*)", "Bash(echo:*)"]}}
    groups = []
    for place in ("ws", "parent", "root"):
        groups.append(_group(f"trec-{place}", calls, project=project, trust_record=[place]))
    groups.append(
        _group("trec-warden", calls, project=project, trust_record=["ws"], warden_record=True)
    )
    local = {"permissions": {"allow": ["Bash(touch:*)"], "defaultMode": "acceptEdits"}}
    for trusted in (True, False):
        tag = "t" if trusted else "u"
        groups.append(_group(f"tlocal-{tag}", calls, local=local, trusted=trusted))
        dirs = {"permissions": {"additionalDirectories": ["/etc", "/tmp"]}}
        for mode in ("default", "acceptEdits"):
            groups.append(
                _group(f"tdirs-{tag}-{mode}", calls, project=dirs, trusted=trusted, mode=mode)
            )
    return groups


def ask_under_allow_groups() -> list[Group]:
    """An ask never lost to an allow of any scope: managed asks under lower allows,
    allow and ask at one level, WebFetch domain asks under a bare allow."""
    fetches = [_fetch("https://example.com/a"), _fetch("https://other.org/c")]
    bashes = [_bash("touch au.txt"), _bash("echo hi")]
    cases: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [
        ("fetch-bare", {"project": {"permissions": {
            "allow": ["WebFetch"], "ask": ["WebFetch(domain:example.com)"]}}}, fetches),
        ("fetch-managed", {"managed": {"permissions": {"ask": ["WebFetch(domain:example.com)"]}},
                           "project": {"permissions": {"allow": ["WebFetch"]}}}, fetches),
        ("fetch-same", {"user": {"permissions": {
            "allow": ["WebFetch(domain:example.com)"],
            "ask": ["WebFetch(domain:example.com)"]}}}, fetches),
        ("bash-managed", {"managed": {"permissions": {"ask": ["Bash(touch:*)"]}},
                          "project": {"permissions": {"allow": ["Bash(touch:*)", "Bash"]}}},
         bashes),
        ("bash-cli", {"managed": {"permissions": {"ask": ["Bash(echo:*)"]}},
                      "cli_allow": ["Bash(echo:*)"]}, bashes),
        ("read-managed", {"managed": {"permissions": {"ask": ["Read(./README.md)"]}},
                          "local": {"permissions": {"allow": ["Read"]}}}, [_read("README.md")]),
    ]  # fmt: skip
    groups = []
    for name, levels, calls in cases:
        for mode in ("default", "bypassPermissions"):
            groups.append(_group(f"askallow-{name}-{mode}", calls, mode=mode, **levels))
    return groups


def case_and_command_groups() -> list[Group]:
    """Path rules in another case than the file; `sudo` before a denied command;
    NotebookEdit under an Edit deny in bypassPermissions."""
    files = {**FILES, "nb/a.ipynb": NOTEBOOK, "Docs/Guide.MD": "g\n"}
    reads = [_read("key.pem"), _read("sub/key.pem"), _read("README.md"), _read("Docs/Guide.MD"),
             _read("src/app.py")]  # fmt: skip
    groups = []
    for i, spec in enumerate(("**/*.PEM", "./readme.md", "./docs/**", "SRC/**", "*.md")):
        for behavior in ("deny", "ask"):
            g = _group(f"case{i}{behavior[0]}", reads, project={"permissions": {
                behavior: [f"Read({spec})"]}})  # fmt: skip
            g["files"] = files
            groups.append(g)
    writes = [_write("src/c_new.py"), _write("SRC/c_new2.py"), _write("docs/c.md")]
    g = _group("case-edit", writes, project={"permissions": {"deny": ["Edit(./Src/**)"]}},
               mode="acceptEdits")  # fmt: skip
    g["files"] = files
    groups.append(g)
    sudo = [_bash("sudo rm -f nothing"), _bash("sudo -u root rm -f nothing"),
            _bash("command rm -f nothing"), _bash("env rm -f nothing")]  # fmt: skip
    for mode in ("default", "bypassPermissions"):
        groups.append(_group(f"sudo-{mode}", sudo, mode=mode, project={"permissions": {
            "deny": ["Bash(rm:*)"], "allow": ["Bash"]}}))  # fmt: skip
    looser = {"permissions": {"allow": ["Write(//tmp/lw_out.txt)", "Edit(/workspace/docs/**)"]}}
    groups.append(_group("looser-write", [
        {"tool": "Write", "input": {"file_path": "/tmp/lw_out.txt", "content": "x\n"}},
        _write("docs/lw.md")], project=looser))  # fmt: skip
    for mode in ("default", "acceptEdits", "bypassPermissions"):
        g = _group(f"nbedit-{mode}", [_notebook("nb/a.ipynb")], mode=mode,
                   project={"permissions": {"deny": ["Edit(./nb/**)"]}})  # fmt: skip
        g["files"] = files
        groups.append(g)
    return groups


def all_groups() -> list[Group]:
    from tests.differential.memory_cases import memory_groups
    from tests.differential.skill_cases import skill_groups

    return [
        *read_rule_groups(),
        *user_path_groups(),
        *edit_rule_groups(),
        *bash_groups(),
        *bash_write_groups(),
        *level_groups(),
        *managed_key_groups(),
        *trust_groups(),
        *webfetch_groups(),
        *mode_groups(),
        *hook_groups(),
        *trust_record_groups(),
        *ask_under_allow_groups(),
        *case_and_command_groups(),
        *skill_groups(),
        *memory_groups(),
    ]


SLICE = (
    "read00",
    "read05",
    "userpath00",
    "bash00",
    "bash09",
    "bwrite0",
    "lvl07",
    "bypassoff0",
    "rulesonly1",
    "trust0u",
    "fetch01",
    "mode0",
    "hook09",
    "hook27",
    "hook41",
    "hook53",
    "hooks74",
    "hookl85",
    "hookk93",
    "skill01",
)
"""The groups CI runs (about a minute): one of each kind, and hooks: an allow against
an ask rule, an ask against an allow rule, exit 2 in bypassPermissions, a timeout,
allow and deny together, an untrusted workspace's block, a user's disableAllHooks; a
`Skill(name)` allow for a skill with `allowed-tools`."""
