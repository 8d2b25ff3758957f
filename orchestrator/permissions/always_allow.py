""" "Always allow": the exact rule for one approved call, written to the workspace's
`.claude/settings.local.json` after the person has seen it.

Only a rule that matches exactly the approved input and nothing wider is offered,
in the shape Claude Code writes:

| call | rule offered |
|---|---|
| Bash, one simple command in plain words | `Bash(npm run test)` (the exact command) |
| Read / Edit / Write of one file | `Read(/src/a.py)`, `Edit(/src/a.py)`, `Write(/src/a.py)`: the file, spelled from the workspace root (`//abs` outside it) |

and only after the policy engine itself proved it: a policy holding just that rule
allows this very call by that rule. Nothing is offered for a path with wildcard or
rule punctuation, a symbolic link or a directory (the rule would cover more than the
file, or not match it), a command the shell analyser did not prove, Glob/Grep
(their inputs are patterns), or a call an `ask` rule or a hook asked about (an allow
rule does not override those, so the next run would ask again). `Bash(prefix:*)`
rules are never offered: no analysis of this command proves what other commands with
the same first words would do. WebFetch and the other server tools never reach an
approver (they are allowed or refused by rule alone).

The workspace is attacker-writable (subagents write there), so the file is written
without following links: `.claude` and the file must not be symbolic links, and the
new content replaces the file atomically (a link at the destination is replaced,
never followed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions import paths
from orchestrator.permissions.evaluate import evaluate
from orchestrator.permissions.models import ToolCall
from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.permissions.rules import parse_rule
from orchestrator.permissions.shell import analyse
from sandbox_tools.wire import WORKSPACE

SETTINGS_FILE = Path(".claude") / "settings.local.json"
MAX_ALWAYS_RULE_CHARS = 300
"""Longest command offered as an exact rule (a longer one is better reviewed in a file)."""
_PLAIN_COMMAND = re.compile(r"^[A-Za-z0-9_./=+,@%-][A-Za-z0-9_./=+,@% -]*$")
"""Words a rule matches literally: no wildcard, parentheses, colon, quotes or operators."""
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9_./=+,@%-]+$")
"""A path a rule names literally: no glob characters, `~`, spaces, quotes or parentheses."""
PATH_RULE_TOOLS = frozenset({"Read", "Edit", "Write"})
"""Tools whose "always allow" rule names the one file of the call."""


def exact_rule(
    tool_name: str, tool_input: JSONObject, workspace_host: Path | None = None
) -> str | None:
    """The allow rule that matches exactly this call, or None when there is none.
    `workspace_host` lets path rules see links and directories in the workspace."""
    if tool_name == "Bash":
        rule = _bash_rule(tool_input.get("command"))
    elif tool_name in PATH_RULE_TOOLS:
        rule = _path_rule(tool_name, tool_input.get("file_path"), workspace_host)
    else:
        return None
    if rule is None or not _proven(rule, tool_name, tool_input, workspace_host):
        return None
    return rule


def _bash_rule(command: object) -> str | None:
    if not isinstance(command, str):
        return None
    command = " ".join(command.split())
    if not command or len(command) > MAX_ALWAYS_RULE_CHARS or not _PLAIN_COMMAND.match(command):
        return None
    analysis = analyse(command)
    if not analysis.understood or len(analysis.commands) != 1 or analysis.writes:
        return None
    return f"Bash({command})"


def _path_rule(tool_name: str, file_path: object, workspace_host: Path | None) -> str | None:
    if not isinstance(file_path, str) or len(file_path) > MAX_ALWAYS_RULE_CHARS:
        return None
    if not _PLAIN_PATH.match(file_path):
        return None
    spelled = paths.spellings(file_path, workspace_host)
    if len(spelled) != 1:  # a link in the way: the rule would not name the file read
        return None
    target = spelled[0]
    if target in ("/", WORKSPACE):
        return None
    host = paths.to_host(target, workspace_host) if workspace_host is not None else None
    if host is not None and host.is_dir():  # a path rule covers what is below it
        return None
    # `/x` is x at the workspace root, `//x` the absolute path (Claude Code's spelling).
    inside = target.startswith(WORKSPACE + "/")
    spec = target[len(WORKSPACE) :] if inside else "/" + target
    if paths.rule_patterns(spec, strict=True)[0] != target:
        return None
    return f"{tool_name}({spec})"


def _proven(
    rule: str, tool_name: str, tool_input: JSONObject, workspace_host: Path | None
) -> bool:
    """True when a policy of just this rule allows this very call by this rule."""
    parsed = parse_rule(rule, "allow", "always-allow", "always-allow")
    explanation = evaluate(
        EffectivePolicy(rules=(parsed,)),
        ToolCall(tool_name=tool_name, tool_input=tool_input),
        workspace_host=workspace_host,
    )
    return explanation.decision.behavior == "allow" and explanation.decision.rule == rule


def add_allow_rule(workspace: Path, rule: str) -> Path:
    """Add `rule` to `permissions.allow` of the workspace's settings.local.json.

    Raises ConfigError when the file is not a JSON object or a path on the way is a
    symbolic link (the file is then left as it was)."""
    return add_to_settings_list(workspace, ("permissions", "allow"), rule)


def add_allowed_domain(workspace: Path, host: str) -> Path:
    """Add `host` to Claude Code's `sandbox.network.allowedDomains` of the workspace's
    settings.local.json (the "always allow" of an egress question); as `add_allow_rule`."""
    return add_to_settings_list(workspace, ("sandbox", "network", "allowedDomains"), host)


def add_to_settings_list(workspace: Path, keys: tuple[str, ...], value: str) -> Path:
    """Append `value` (once) to the list at `keys` in the workspace's
    settings.local.json, written atomically without following links."""
    claude = workspace / SETTINGS_FILE.parent
    target = workspace / SETTINGS_FILE
    where = ".".join(keys)
    for path in (claude, target):
        if path.is_symlink():
            raise ConfigError(f"{path} is a symbolic link; not writing {value} to {where} there")
    settings: JSONObject = {}
    if target.exists():
        try:
            loaded = json.loads(target.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{target} is not readable JSON ({exc}); add {value} to {where} by hand"
            ) from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{target} is not a JSON object; add {value} to {where} by hand")
        settings = loaded
    node = settings
    for depth, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            inner = ".".join(keys[: depth + 1])
            raise ConfigError(f"`{inner}` in {target} is not an object; add {value} by hand")
        node = child
    items = node.setdefault(keys[-1], [])
    if not isinstance(items, list):
        raise ConfigError(f"`{where}` in {target} is not a list; add {value} by hand")
    if value not in items:
        items.append(value)
    claude.mkdir(exist_ok=True)
    owner = workspace.stat()
    fd, tmp = tempfile.mkstemp(dir=claude, prefix=".settings-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(settings, indent=2) + "\n")
        if os.geteuid() == 0:  # keep the file the workspace owner's
            os.chown(tmp, owner.st_uid, owner.st_gid)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target
