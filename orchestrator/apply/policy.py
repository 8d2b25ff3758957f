"""The policy decision of a change set, before anyone is asked: every path is
checked against the protected paths, the `Edit`/`Write` rules and mode its task
ran under (as an `Edit` call of that task to that path would be), new executable bits, links that leave the
workspace (or point into a protected path), hard links and the size caps. Any
rejection rejects the whole change set (it is one decision), with a reason per
path; the team's `PreApply` hook (`apply.hook`) then sees what passed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.apply.changeset import ChangeSet, FileChange, PathReason
from orchestrator.permissions.evaluate import evaluate
from orchestrator.permissions.models import ToolCall
from orchestrator.permissions.policy import EffectivePolicy

PROTECTED_DIRS = (".git", ".claude", ".devcontainer", ".vscode", ".idea", ".husky", ".github")
"""A change under one of these (at any depth for `.git`, at the root for the
others) is refused: git, warden, Claude Code, editors and CI run what they hold."""
PROTECTED_FILES = (
    ".devcontainer.json",
    ".mcp.json",
    ".gitattributes",
    ".gitmodules",
    ".gitconfig",
    ".envrc",
    ".env",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".pre-commit-config.yaml",
)
"""Root files a tool reads and acts on (shells, direnv, package managers, git)."""
DEFAULT_MAX_FILE_BYTES = 16 << 20
"""Largest text file a change set may add or change."""
DEFAULT_MAX_BINARY_BYTES = 1 << 20
"""Largest binary file a change set may add or change."""
MAX_CHANGES = 5_000
"""Most paths one change set may touch."""


class ApplyPolicy(BaseModel):
    """What a change set may contain (`warden run --apply-max-*`, `WARDEN_APPLY_MAX_*`,
    held to the settings files' `warden.apply` caps)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    """Largest text file a change may write."""
    max_binary_bytes: int = DEFAULT_MAX_BINARY_BYTES
    """Largest binary file a change may write."""
    allow_executable: bool = False
    """Whether a change may add an executable file or set an executable bit."""
    protect: tuple[str, ...] = ()
    """More protected paths (the run's `--protect`), relative to the workspace."""


EditDecider = Callable[[str], tuple[str, str, str]]
"""`path` → (behavior, reason, rule) of an `Edit` call to that workspace path."""


def edit_rules(policy: EffectivePolicy, workspace: Path) -> EditDecider:
    """`policy`'s rules and mode on an `Edit` call to a workspace path, as the gate
    decides one (blocking: it may resolve links on the host). `policy` is the one
    the change set's task ran under; its agent's tool list is left out: it says
    which tools the agent may call, not which paths it may change (a change made
    with Bash is held to the same path rules and mode as its Bash writes were)."""
    policy = policy.model_copy(update={"allowed_tools": None})

    def decider(path: str) -> tuple[str, str, str]:
        call = ToolCall(tool_name="Edit", tool_input={"file_path": f"/workspace/{path}"})
        found = evaluate(policy, call, workspace_host=workspace).decision
        return found.behavior, found.reason, found.rule or ""

    return decider


def decide(
    change_set: ChangeSet, policy: ApplyPolicy, edit: EditDecider | None = None
) -> tuple[PathReason, ...]:
    """The reasons `change_set` is rejected (empty: policy passes it)."""
    if len(change_set.changes) > MAX_CHANGES:
        return (
            PathReason(
                path="",
                reason=f"touches {len(change_set.changes)} paths, more than {MAX_CHANGES}",
                rule="size cap",
            ),
        )
    out: list[PathReason] = []
    for change in change_set.changes:
        out += check_change(change, policy, edit)
    return tuple(out)


def check_change(
    change: FileChange, policy: ApplyPolicy, edit: EditDecider | None = None
) -> list[PathReason]:
    path = change.path
    found: list[PathReason] = []

    def no(reason: str, rule: str) -> None:
        found.append(PathReason(path=path, reason=reason, rule=rule))

    bad = _bad_name(path)
    if bad:
        no(bad, "path")
        return found
    protected = protected_by(path, policy.protect)
    if protected:
        no(f"a protected path ({protected}): a subagent's change set may not touch it", protected)
    if change.hard_link:
        no("a hard link: its content is shared with another file; write a plain file", "hard link")
    if change.new_type == "symlink" and change.link_target is not None:
        leaves = link_problem(path, change.link_target, policy.protect)
        if leaves:
            no(leaves, "link")
    if change.new_type == "file":
        cap = policy.max_binary_bytes if change.binary else policy.max_file_bytes
        size = change.new_size or 0
        if size > cap or not change.stored:
            what, knob = ("binary file", "binary") if change.binary else ("file", "file")
            no(
                f"a {what} of {size} bytes, over the cap of {cap} bytes (warden run "
                f"--apply-max-{knob}, WARDEN_APPLY_MAX_{knob.upper()}, settings "
                f"warden.apply.max{knob.capitalize()}: the stricter wins)",
                "size cap",
            )
        old_exec = bool((change.old_mode or 0) & 0o111) if change.old_type == "file" else False
        if (change.new_mode or 0) & 0o111 and not old_exec and not policy.allow_executable:
            no(
                "sets an executable bit (a change set may not make a file executable; "
                "set the bit yourself once the rest is applied)",
                "executable",
            )
    if edit is not None and not found:
        behavior, reason, rule = edit(path)
        if behavior == "deny":
            no(f"the policy denies editing it: {reason}", rule or "Edit")
    return found


def _bad_name(path: str) -> str:
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "not a plain relative path"
    return ""


def protected_by(path: str, extra: Sequence[str] = ()) -> str:
    """The protected path `path` is (or lies under), or ""."""
    parts = path.split("/")
    if ".git" in parts:
        return ".git"
    if parts[0] in PROTECTED_DIRS:
        return parts[0]
    if path in PROTECTED_FILES:
        return path
    for p in extra:
        p = p.strip("/")
        if path == p or path.startswith(p + "/"):
            return p
    return ""


def link_problem(path: str, target: str, extra: Sequence[str] = ()) -> str:
    """Why a link at `path` to `target` is refused, or "" (it stays inside the
    workspace and out of protected paths, judged on its text: never followed)."""
    if target.startswith("/"):
        return f"a link to {target!r}, outside the workspace (an absolute target)"
    parts = [p for p in target.split("/") if p not in ("", ".")]
    named = [i for i, p in enumerate(parts) if p != ".."]
    if named and ".." in parts[named[0] :]:
        # After a name that may itself be a link, `..` climbs from wherever that
        # link leads: judged on the text alone, it could leave the workspace.
        return (
            f"a link to {target!r}: '..' after a name is refused (it may climb out through a link)"
        )
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if joined == ".." or joined.startswith("../"):
        return f"a link to {target!r}, which leaves the workspace"
    if joined == ".":
        return ""
    protected = protected_by(joined, extra)
    if protected:
        return f"a link to {target!r}, into the protected path {protected}"
    return ""
