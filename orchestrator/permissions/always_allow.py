""" "Always allow": the exact rule for one approved call, written to the workspace's
`.claude/settings.local.json` after the person has seen it.

Only a rule that matches exactly the approved input and nothing else is offered:
a Bash command that is one simple command in plain words (no `*` wildcard, rule
punctuation or shell operators, which would widen the rule or be matched per
simple command). Anything else gets "allow once" and "allow for this run" only.

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
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.permissions.rules import parse_rule

SETTINGS_FILE = Path(".claude") / "settings.local.json"
MAX_ALWAYS_RULE_CHARS = 300
"""Longest command offered as an exact rule (a longer one is better reviewed in a file)."""
_PLAIN_COMMAND = re.compile(r"^[A-Za-z0-9_./=+,@%-][A-Za-z0-9_./=+,@% -]*$")
"""Words a rule matches literally: no wildcard, parentheses, colon, quotes or operators."""


def exact_rule(tool_name: str, tool_input: dict[str, Any]) -> str | None:
    """The allow rule that matches exactly this call, or None when there is none."""
    command = tool_input.get("command")
    if tool_name != "Bash" or not isinstance(command, str):
        return None
    command = " ".join(command.split())
    if not command or len(command) > MAX_ALWAYS_RULE_CHARS or not _PLAIN_COMMAND.match(command):
        return None
    rule = f"Bash({command})"
    parsed = parse_rule(rule, "allow", "always-allow", "always-allow")
    return rule if parsed.specifier == command else None


def add_allow_rule(workspace: Path, rule: str) -> Path:
    """Add `rule` to `permissions.allow` of the workspace's settings.local.json.

    Raises ConfigError when the file is not a JSON object or a path on the way is a
    symbolic link (the file is then left as it was)."""
    claude = workspace / SETTINGS_FILE.parent
    target = workspace / SETTINGS_FILE
    for path in (claude, target):
        if path.is_symlink():
            raise ConfigError(f"{path} is a symbolic link; not writing the rule {rule} there")
    settings: dict[str, Any] = {}
    if target.exists():
        try:
            loaded = json.loads(target.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{target} is not readable JSON ({exc}); add {rule} by hand") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{target} is not a JSON object; add {rule} by hand")
        settings = loaded
    permissions = settings.setdefault("permissions", {})
    if not isinstance(permissions, dict):
        raise ConfigError(f"`permissions` in {target} is not an object; add {rule} by hand")
    allow = permissions.setdefault("allow", [])
    if not isinstance(allow, list):
        raise ConfigError(f"`permissions.allow` in {target} is not a list; add {rule} by hand")
    if rule not in allow:
        allow.append(rule)
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
