"""Claude Code's settings files, found where Claude Code finds them, read completely.

Highest first: warden's managed policy (`WARDEN_MANAGED_POLICY`), Claude Code's
managed settings (`/etc/claude-code/managed-settings.json` on Linux), then, below
the CLI, the workspace's `.claude/settings.local.json` and `.claude/settings.json`,
the user's `~/.claude/settings.json` (`CLAUDE_CONFIG_DIR` moves `~/.claude`, as in
Claude Code) and warden's own `~/.config/warden/settings.json`.

A file that is absent contributes nothing. A path that exists but is not a
readable JSON object (a directory, a dangling link, unreadable, malformed, not an
object) refuses the run with one error naming the file, the line, what is wrong
and the fix: its deny rules must never vanish in silence. Keys warden does not
know are kept and reported (`unknown_keys`), never a reason to drop the file.

The managed-only keys that narrow what lower levels may do are read here
(`ManagedKeys`); a restricting key of the wrong type is refused, not ignored.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.jsontypes import JSONObject
from orchestrator.regular_file import read_regular

SettingsKind = Literal["managed", "project-local", "project", "user", "warden-user"]
MANAGED_KINDS = frozenset({"managed"})

KNOWN_TOP_KEYS = frozenset(
    {
        "$schema",
        "apiKeyHelper",
        "attribution",
        "autoUpdatesChannel",
        "availableModels",
        "alwaysThinkingEnabled",
        "awsAuthRefresh",
        "awsCredentialExport",
        "cleanupPeriodDays",
        "companyAnnouncements",
        "disableAllHooks",
        "enableAllProjectMcpServers",
        "enabledMcpjsonServers",
        "disabledMcpjsonServers",
        "allowedMcpServers",
        "deniedMcpServers",
        "enabledPlugins",
        "env",
        "extraKnownMarketplaces",
        "fileSuggestion",
        "forceLoginMethod",
        "forceLoginOrgUUID",
        "hooks",
        "includeCoAuthoredBy",
        "language",
        "model",
        "otelHeadersHelper",
        "outputStyle",
        "permissions",
        "plansDirectory",
        "prefersReducedMotion",
        "respectGitignore",
        "sandbox",
        "showTurnDuration",
        "spinnerTipsEnabled",
        "spinnerVerbs",
        "statusLine",
        "terminalProgressBarEnabled",
        "teammateMode",
        "theme",
        "verbose",
        # managed-only keys
        "allowManagedHooksOnly",
        "allowManagedMcpServersOnly",
        "allowManagedPermissionRulesOnly",
        "blockedMarketplaces",
        "strictKnownMarketplaces",
        "strictPluginOnlyCustomization",
        # warden's own block, and comments in warden's policy files
        "warden",
        "description",
        "$comment",
        "comment",
        "comments",
    }
)
"""Top-level keys of Claude Code's settings (and warden's `warden` block). Others are
kept and reported: a newer Claude Code may know them."""

WARDEN_POLICY_KEYS = frozenset(
    {"allow", "deny", "ask", "defaultMode", "additionalDirectories", "disableBypassPermissionsMode"}
)
"""A warden policy file holds these at its top level (a settings file, under `permissions`)."""
PLUGIN_ONLY_SURFACES = ("skills", "agents", "hooks", "mcp")
"""What `strictPluginOnlyCustomization` may lock to managed sources."""


@dataclass(frozen=True)
class SettingsFile:
    """One settings file that exists and was read."""

    kind: SettingsKind
    path: Path
    doc: JSONObject
    text: str = ""

    @property
    def source(self) -> str:
        label = "user" if self.kind == "warden-user" else self.kind
        return f"{label}:{self.path}"

    @property
    def managed(self) -> bool:
        return self.kind in MANAGED_KINDS

    def line_of(self, needle: str) -> str:
        """` (line N)` where `needle` (a key or a rule) first appears, else ``."""
        for quoted in (json.dumps(needle), needle):
            idx = self.text.find(quoted)
            if idx >= 0:
                return f" (line {self.text.count(chr(10), 0, idx) + 1})"
        return ""

    def unknown_keys(self) -> list[str]:
        """Reports for top-level keys warden does not know (kept, not an error)."""
        notes = []
        for key in self.doc:
            if key in KNOWN_TOP_KEYS:
                continue
            near = difflib.get_close_matches(key, KNOWN_TOP_KEYS, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            notes.append(
                f"{self.path}{self.line_of(key)}: key {key!r} is not one warden "
                f"reads (kept; the file's other settings apply){hint}"
            )
        return notes


@dataclass(frozen=True)
class ManagedKeys:
    """What managed settings lock down for every lower level."""

    permission_rules_only: bool = False
    """`allowManagedPermissionRulesOnly`: only managed allow rules apply."""
    hooks_only: bool = False
    """`allowManagedHooksOnly`: only managed hooks run."""
    plugin_only: frozenset[str] = frozenset()
    """`strictPluginOnlyCustomization`: surfaces (agents, hooks, ...) only managed
    sources may provide."""
    bypass_disabled_by: str | None = None
    """The file whose `permissions.disableBypassPermissionsMode` is `"disable"`."""
    disable_all_hooks: bool = False
    """Managed `disableAllHooks: true`: no hook runs at all."""


@dataclass(frozen=True)
class SettingsStack:
    """Every settings file that exists, highest first, and what managed ones lock."""

    files: tuple[SettingsFile, ...] = ()
    managed: ManagedKeys = field(default_factory=ManagedKeys)

    def notes(self) -> list[str]:
        return [n for f in self.files for n in f.unknown_keys()]


def refuse(path: Path, what: str, fix: str) -> PolicyError:
    return PolicyError(f"{path}: {what}; {fix}")


def read_settings(path: Path, kind: SettingsKind, max_bytes: int) -> SettingsFile | None:
    """The file at `path`, or None when nothing is there at all. Anything else that is
    not a JSON object refuses the run."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink() and not path.exists():
        raise refuse(
            path,
            f"a symbolic link to {os.readlink(path)!r}, which does not exist",
            "restore its target or remove the link (its rules would be lost)",
        )
    if path.is_dir():
        raise refuse(
            path,
            "a directory, not a settings file",
            "replace it with a JSON file (or remove it) so its rules are read",
        )
    if not path.is_file():
        raise refuse(path, "not a regular file", "replace it with a JSON settings file")
    try:
        raw = read_regular(path, max_bytes, follow_links=True)  # the person's paths
        if len(raw) > max_bytes:
            raise refuse(path, f"larger than {max_bytes} bytes", "is it a settings file?")
    except OSError as exc:
        raise refuse(
            path,
            f"cannot be read ({exc.strerror})",
            "fix its permissions so warden can read its rules",
        ) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(path, f"not UTF-8 text (byte {exc.start})", "save it as UTF-8 JSON") from exc
    if not text.strip():
        return SettingsFile(kind, path, {}, text)
    doc = _parse(path, text)
    if not isinstance(doc, dict):
        raise refuse(
            path,
            f"holds a JSON {type(doc).__name__}, not an object",
            'a settings file is an object like {"permissions": {"deny": [...]}}',
        )
    if kind == "managed" and "permissions" not in doc and WARDEN_POLICY_KEYS & set(doc):
        # warden's policy format (`WARDEN_MANAGED_POLICY`): the permissions at the top
        perms = {k: v for k, v in doc.items() if k in WARDEN_POLICY_KEYS}
        doc = {"permissions": perms, **{k: v for k, v in doc.items() if k not in perms}}
    return SettingsFile(kind, path, doc, text)


def _parse(path: Path, text: str) -> object:
    if path.suffix in (".yaml", ".yml"):  # a warden policy given as the managed policy
        try:
            return yaml.safe_load(text)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            raise refuse(path, f"{where}invalid YAML ({exc.problem})", "fix the syntax") from exc
        except yaml.YAMLError as exc:
            raise refuse(path, f"invalid YAML ({exc})", "fix the syntax") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise refuse(
            path,
            f"line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg})",
            "fix the syntax (JSON allows no comments or trailing commas)",
        ) from exc


def locations(settings: Settings, workspace: Path | None) -> list[tuple[SettingsKind, Path]]:
    """Where settings files may be, highest precedence first (the CLI sits between the
    managed files and the project's)."""
    out: list[tuple[SettingsKind, Path]] = []
    if settings.managed_policy is not None:
        out.append(("managed", settings.managed_policy))
    out.append(("managed", settings.claude_managed_settings))
    if workspace is not None:
        out.append(("project-local", workspace / ".claude" / "settings.local.json"))
        out.append(("project", workspace / ".claude" / "settings.json"))
    out.append(("user", settings.claude_dir / "settings.json"))
    out.append(("warden-user", settings.config_dir / "settings.json"))
    return out


def load_stack(settings: Settings, workspace: Path | None, max_bytes: int) -> SettingsStack:
    """Read every settings file (see the module doc); PolicyError on the first bad one."""
    files: list[SettingsFile] = []
    if settings.managed_policy is not None and not os.path.lexists(settings.managed_policy):
        raise PolicyError(
            f"managed policy {settings.managed_policy} does not exist; "
            "fix WARDEN_MANAGED_POLICY or ask your administrator"
        )
    for kind, path in locations(settings, workspace):
        found = read_settings(path, kind, max_bytes)
        if found is not None:
            files.append(found)
    return SettingsStack(tuple(files), managed_keys(files))


def _flag(f: SettingsFile, key: str) -> bool:
    value = f.doc.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise refuse(
            f.path,
            f"{key}{f.line_of(key)} is {value!r}, not true or false",
            f'write "{key}": true (or remove it)',
        )
    return value


def managed_keys(files: list[SettingsFile]) -> ManagedKeys:
    """The restricting keys: managed-only ones from managed files, and
    `disableBypassPermissionsMode` from any file (it only ever narrows)."""
    rules_only = hooks_only = no_hooks = False
    plugin_only: set[str] = set()
    bypass_by: str | None = None
    for f in files:
        perms = f.doc.get("permissions")
        if isinstance(perms, dict) and "disableBypassPermissionsMode" in perms:
            value = perms["disableBypassPermissionsMode"]
            if value != "disable":
                raise refuse(
                    f.path,
                    f"permissions.disableBypassPermissionsMode"
                    f"{f.line_of('disableBypassPermissionsMode')} is {value!r}",
                    'the only value Claude Code knows is "disable" (or remove the key)',
                )
            bypass_by = bypass_by or f.source
        if not f.managed:
            continue
        rules_only |= _flag(f, "allowManagedPermissionRulesOnly")
        hooks_only |= _flag(f, "allowManagedHooksOnly")
        no_hooks |= _flag(f, "disableAllHooks")
        plugin_only |= _surfaces(f)
    return ManagedKeys(rules_only, hooks_only, frozenset(plugin_only), bypass_by, no_hooks)


def _surfaces(f: SettingsFile) -> set[str]:
    key = "strictPluginOnlyCustomization"
    value = f.doc.get(key)
    if value is None or value is False:
        return set()
    if value is True:
        return set(PLUGIN_ONLY_SURFACES)
    if isinstance(value, list) and all(v in PLUGIN_ONLY_SURFACES for v in value):
        return {str(v) for v in value}
    raise refuse(
        f.path,
        f"{key}{f.line_of(key)} is {value!r}",
        f"write true, or a list of {', '.join(PLUGIN_ONLY_SURFACES)}",
    )
