"""Where rules come from, and how the sources merge.

Sources, highest first: the managed policy file (`Settings.managed_policy`), the
CLI (`--policy FILE|NAME`, `--allow`, `--deny`, `--mode`), the workspace's
`.claude/settings.local.json` and `.claude/settings.json` (their `permissions`
block, read as Claude Code reads it), and the user's `settings.json` in
`Settings.config_dir`. Deny and ask rules of every source hold (so nothing below
the managed file can loosen it); allow rules add up; the mode comes from the
highest source that sets one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml

from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.permissions.executed_paths import ask_rules
from orchestrator.permissions.models import MODES, Mode
from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.permissions.rules import PATH_TOOLS, Rule, RuleBehavior, parse_rule
from orchestrator.permissions.sandbox_settings import filesystem_denies
from orchestrator.permissions.settings_files import SettingsFile, SettingsStack, load_stack
from orchestrator.regular_file import read_regular
from orchestrator.shipped import shipped_root

SHIPPED_POLICIES = "policies"
"""The folder of warden's shipped files (`shipped.shipped_root`) holding the policies it
ships (`default`, `ci`, `strict`)."""
POLICY_SUFFIXES = (".yaml", ".yml", ".json")
MAX_POLICY_BYTES = 1024 * 1024
"""Largest policy or settings file read."""
PERMISSION_KEYS = frozenset({"allow", "deny", "ask", "defaultMode", "additionalDirectories"})
COMMENT_KEYS = frozenset({"description", "$comment", "comment", "comments"})
IGNORED_CLAUDE_KEYS = frozenset({"disableBypassPermissionsMode"})
"""Read by `settings_files.managed_keys`, not as rules."""
BUILT_IN_SOURCE = "built-in"
BUILT_IN_ASK = ask_rules()
"""Always asked, in every mode but dontAsk (where they are denied): the rows of the
table of executed paths that ask (`executed_paths.py`: git metadata at any depth,
settings, editor, shell, hook-manager and package-manager configuration). A subagent
that could rewrite them could loosen the next run's policy or get code run later."""


class PolicySource:
    """The permissions one file or flag set contributes."""

    def __init__(
        self,
        name: str,
        rules: list[Rule],
        mode: Mode | None = None,
        additional_directories: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.rules = rules
        self.mode = mode
        self.additional_directories = list(additional_directories)


def read_document(path: Path) -> Any:
    """Parse a JSON or YAML file; PolicyError names the file and line. Read by
    `read_regular` (links followed: the person's path), so a FIFO left where a
    `--policy` file in the workspace is expected is refused, never waited on."""
    try:
        data = read_regular(path, MAX_POLICY_BYTES, follow_links=True)
        if len(data) > MAX_POLICY_BYTES:
            raise PolicyError(f"{path}: larger than {MAX_POLICY_BYTES} bytes; is it a policy?")
        text = data.decode("utf-8")
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read it ({exc.strerror}); check the path") from exc
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{path}: not UTF-8 text") from exc
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise PolicyError(
                f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg}); "
                "fix the syntax (JSON allows no comments or trailing commas)"
            ) from exc
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise PolicyError(f"{path}: {where}invalid YAML ({exc.problem}); fix the syntax") from exc
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: invalid YAML ({exc})") from exc


def _line_of(path: Path, needle: str) -> str:
    try:
        text = read_regular(path, MAX_POLICY_BYTES, follow_links=True).decode(
            "utf-8", errors="replace"
        )
    except OSError:
        return ""
    for quoted in (json.dumps(needle), needle):
        idx = text.find(quoted)
        if idx >= 0:
            return f" (line {text.count(chr(10), 0, idx) + 1})"
    return ""


def parse_block(block: Any, source: str, path: Path | None, *, strict_keys: bool) -> PolicySource:
    """Turn a `permissions` block into a PolicySource; `strict_keys` rejects unknown keys."""
    label = str(path) if path else source
    if block is None:
        return PolicySource(source, [])
    if not isinstance(block, dict):
        raise PolicyError(f"{label}: `permissions` must be a mapping with allow/deny/ask lists")
    for key in block:
        if key in PERMISSION_KEYS or key in COMMENT_KEYS or key in IGNORED_CLAUDE_KEYS:
            continue
        if strict_keys:
            raise PolicyError(
                f"{label}: unknown key {key!r}; a policy has {', '.join(sorted(PERMISSION_KEYS))}"
            )
    rules: list[Rule] = []
    for behavior in get_args(RuleBehavior):
        items = block.get(behavior) or []
        if not isinstance(items, list):
            raise PolicyError(f"{label}: {behavior!r} must be a list of rules, got {items!r}")
        for i, text in enumerate(items):
            where = f"{label}: {behavior}[{i}]"
            if path is not None and isinstance(text, str):
                where += _line_of(path, text)
            rules.append(parse_rule(text, behavior, source, where))
    mode = block.get("defaultMode")
    if mode is not None and mode not in MODES:
        raise PolicyError(f"{label}: defaultMode {mode!r} is not one of {', '.join(MODES)}")
    dirs = block.get("additionalDirectories") or []
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise PolicyError(f"{label}: additionalDirectories must be a list of paths")
    return PolicySource(source, rules, mode, dirs)


@dataclass(frozen=True)
class PolicyDocument:
    """A `--policy` file as read once for a run (`workspace.inputs`): the permission
    policy and the egress rules both decide from this parse, never a second read."""

    path: Path
    doc: Any
    """The parsed JSON or YAML (read only)."""


def read_policy_document(settings: Settings, name_or_path: str) -> PolicyDocument:
    """Find a `--policy` file (`find_policy`) and read it once. PolicyError naming the fix."""
    path = find_policy(settings, name_or_path)
    return PolicyDocument(path, read_document(path))


def policy_document(settings: Settings, policy: str | PolicyDocument) -> PolicyDocument:
    """`policy` as read once: given so, or read now from its name or path."""
    return policy if isinstance(policy, PolicyDocument) else read_policy_document(settings, policy)


def read_policy_file(path: Path, source: str, doc: Any = None) -> PolicySource:
    """A warden policy file (YAML or JSON): the `permissions` keys at the top level,
    or a settings file with a `permissions` block. `doc`: its content as already
    parsed (`PolicyDocument`); None reads it now."""
    doc = read_document(path) if doc is None else doc
    if isinstance(doc, dict) and "permissions" in doc:
        return parse_block(doc["permissions"], source, path, strict_keys=False)
    return parse_block(doc, source, path, strict_keys=True)


def find_policy(settings: Settings, name_or_path: str) -> Path:
    """A policy by path, or by name in `config_dir/policies/` then warden's own."""
    candidate = Path(name_or_path).expanduser()
    if candidate.is_file():
        return candidate
    if "/" in name_or_path or candidate.suffix in POLICY_SUFFIXES:
        raise PolicyError(f"policy file {name_or_path} does not exist")
    dirs = [settings.config_dir / "policies", shipped_root() / SHIPPED_POLICIES]
    for directory in dirs:
        for suffix in POLICY_SUFFIXES:
            path = directory / f"{name_or_path}{suffix}"
            if path.is_file():
                return path
    known = sorted(
        {p.stem for d in dirs if d.is_dir() for p in d.iterdir() if p.suffix in POLICY_SUFFIXES}
    )
    raise PolicyError(
        f"no policy named {name_or_path!r}; known policies: {', '.join(known) or 'none'} "
        "(or pass a file path)"
    )


def load_policy(
    settings: Settings,
    workspace: Path,
    *,
    policy: str | PolicyDocument | None = None,
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
    mode: str | None = None,
    trusted: bool = True,
    stack: SettingsStack | None = None,
) -> EffectivePolicy:
    """Read every source and merge them into the workspace's effective policy.

    `trusted` False (a workspace the user has not trusted): the project's own allow
    rules and mode are left out; its deny and ask rules still hold. `stack`: the
    run's settings files as read once (`workspace.inputs`); None reads them now.
    `policy`: a `--policy` name or path (read now), or the file as the run read it."""
    stack = load_stack(settings, workspace, MAX_POLICY_BYTES) if stack is None else stack
    if mode is not None and mode not in MODES:
        raise PolicyError(f"--mode {mode!r} is not one of {', '.join(MODES)}")
    cli_rules = [parse_rule(r, "deny", "cli:--deny", f"--deny {r!r}") for r in deny]
    cli_rules += [parse_rule(r, "allow", "cli:--allow", f"--allow {r!r}") for r in allow]
    cli_mode = next((m for m in MODES if m == mode), None)
    cli = PolicySource("cli", cli_rules, cli_mode)
    managed = [f for f in stack.files if f.managed]
    lower = [f for f in stack.files if not f.managed]
    sources = [_from_file(f) for f in managed]
    sources.append(cli)
    if policy is not None:
        document = policy_document(settings, policy)
        sources.append(read_policy_file(document.path, f"policy:{document.path}", document.doc))
    notes = stack.notes()
    for f in lower:
        src = _from_file(f)
        if not trusted and f.kind in PROJECT_KINDS:
            dropped = [r.text for r in src.rules if r.behavior == "allow"]
            if dropped or src.mode:
                notes.append(
                    f"{f.path}: the workspace is not trusted, so its allow rules "
                    f"({', '.join(dropped) or 'none'}) and mode are not applied; its deny "
                    "and ask rules are (trust it with --trust-workspace)"
                )
            src = PolicySource(src.name, [r for r in src.rules if r.behavior != "allow"])
        sources.append(src)
    builtin = [parse_rule(r, "ask", BUILT_IN_SOURCE, BUILT_IN_SOURCE) for r in BUILT_IN_ASK]
    sources.append(PolicySource(BUILT_IN_SOURCE, builtin))
    if stack.managed.permission_rules_only:
        sources, dropped_allows = _managed_rules_only(sources)
        if dropped_allows:
            notes.append(
                "allowManagedPermissionRulesOnly (managed settings): allow rules outside the "
                f"managed settings are not applied: {', '.join(dropped_allows)}"
            )
    merged = merge(sources)
    if stack.managed.bypass_disabled_by and merged.mode == "bypassPermissions":
        notes.append(
            f"bypassPermissions (from {merged.mode_source}) is disabled by "
            f"disableBypassPermissionsMode in {stack.managed.bypass_disabled_by}; "
            "the default mode applies"
        )
        merged = merged.with_mode(
            "default", f"{stack.managed.bypass_disabled_by} (disableBypassPermissionsMode)"
        )
    return merged.model_copy(
        update={
            "notes": tuple(notes),
            "bypass_disabled": stack.managed.bypass_disabled_by is not None,
        }
    )


PROJECT_KINDS = frozenset({"project", "project-local"})
"""Settings files the workspace itself provides (and so only a trusted one may loosen)."""


USER_SETTINGS_ANCHOR = "~/.claude"
"""Where `/x` in a path rule of `~/.claude/settings.json` points: Claude Code reads it
relative to that file's directory (measured; in project and managed settings `/x` is
relative to the project root)."""


def _from_file(f: SettingsFile) -> PolicySource:
    src = parse_block(f.doc.get("permissions"), f.source, f.path, strict_keys=False)
    rules = [_user_anchored(r) for r in src.rules] if f.kind == "user" else src.rules
    rules = [*filesystem_denies(f), *rules]
    return PolicySource(src.name, rules, src.mode, src.additional_directories)


def _user_anchored(rule: Rule) -> Rule:
    """`Read(/x)` in the user's settings as `Read(~/.claude/x)` (`//x` stays absolute)."""
    spec = rule.specifier
    if rule.tool not in PATH_TOOLS or not spec or not spec.startswith("/") or spec.startswith("//"):
        return rule
    return rule.model_copy(update={"specifier": USER_SETTINGS_ANCHOR + spec})


def _managed_rules_only(sources: list[PolicySource]) -> tuple[list[PolicySource], list[str]]:
    """Only managed sources' and the command line's allow rules; every deny and ask
    rule is kept (stricter than Claude Code, which drops lower levels' deny rules too)."""
    out: list[PolicySource] = []
    dropped: list[str] = []
    for src in sources:
        if src.name.startswith(("managed:", "cli", "policy:")):
            out.append(src)  # the person's own flags still count, as in Claude Code
            continue
        dropped += [r.text for r in src.rules if r.behavior == "allow"]
        kept = [r for r in src.rules if r.behavior != "allow"]
        out.append(PolicySource(src.name, kept, src.mode, src.additional_directories))
    return out, dropped


def merge(sources: Sequence[PolicySource]) -> EffectivePolicy:
    """Merge sources given highest first: rules add up, the highest mode wins."""
    rules: list[Rule] = []
    for src in sources:
        rules.extend(src.rules)
    chosen = next((s for s in sources if s.mode is not None), None)
    dirs = [d for s in sources for d in s.additional_directories]
    return EffectivePolicy(
        rules=tuple(rules),
        mode=chosen.mode if chosen and chosen.mode else "default",
        mode_source=chosen.name if chosen else "built-in default",
        additional_directories=tuple(dict.fromkeys(dirs)),
        sources=tuple(s.name for s in sources if s.rules or s.mode or s.additional_directories),
    )
