"""What a subagent's system prompt says about where it runs (stdlib only): its
environment details (working directory, git repository or not, platform, OS
version, date) and a git status snapshot of the workspace, in the places and order
Claude Code gives them to its subagents (after the agent's prompt).

The snapshot is taken here, inside the sandbox, on purpose: the workspace's `.git`
may be attacker-written (a hook, `core.fsmonitor`, a filter driver in its config
runs code), and here it can only reach what the subagent already reaches. git
runs with the user's and the system's config ignored, hooks and fsmonitor off, no
optional locks, and a time limit; an image without git gives no snapshot.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess

GIT_TIMEOUT_S = 5.0
MAX_STATUS_CHARS = 2_000
"""Longest status list in the snapshot (Claude Code also cuts it, saying so)."""
RECENT_COMMITS = 5
GIT_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
}
GIT_SAFE = ("-c", "core.fsmonitor=", "-c", "core.hooksPath=/dev/null", "-c", "safe.directory=*",
            "--no-pager")  # fmt: skip


def _git(cwd: str, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *GIT_SAFE, *args],
            cwd=cwd, env=GIT_ENV, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
            check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def is_git_repo(cwd: str) -> bool:
    return _git(cwd, "rev-parse", "--is-inside-work-tree") == "true"


def environment_section(cwd: str, *, git_repo: bool, today: datetime.date | None = None) -> str:
    """The environment details, as one section."""
    day = (today or datetime.datetime.now(datetime.UTC).date()).isoformat()
    return (
        "Here is useful information about the environment you are running in:\n<env>\n"
        f"Working directory: {cwd}\n"
        f"Is directory a git repo: {'Yes' if git_repo else 'No'}\n"
        f"Platform: {platform.system().lower()}\n"
        f"OS Version: {platform.system()} {platform.release()}\n"
        f"Today's date: {day}\n</env>"
    )


def git_status_section(cwd: str) -> str | None:
    """A snapshot of the repository's state (branch, changed files, recent commits);
    None outside a repository or when git cannot tell."""
    branch = _git(cwd, "branch", "--show-current")
    status = _git(cwd, "status", "--short", "--untracked-files=normal")
    if branch is None or status is None:
        return None
    if len(status) > MAX_STATUS_CHARS:
        status = status[:MAX_STATUS_CHARS] + "\n[status cut; run `git status` for the rest]"
    main = next(
        (b for b in ("main", "master") if _git(cwd, "rev-parse", "--verify", "-q", b) is not None),
        branch,
    )
    log = _git(cwd, "log", "--oneline", f"-n{RECENT_COMMITS}") or "(none)"
    return (
        "gitStatus: a snapshot of the repository taken when this task started; it does "
        "not change as you work.\n\n"
        f"Current branch: {branch or '(detached)'}\n\n"
        f"Main branch (usually the target of pull requests): {main}\n\n"
        f"Status:\n{status or '(clean)'}\n\n"
        f"Recent commits:\n{log}"
    )


def system_prompt(base: str, cwd: str, *, environment: bool, git_status: bool) -> str:
    """`base` (the agent's prompt and memory, from the host) with the sections the
    spec asks for, in Claude Code's order."""
    if not (environment or git_status) or not os.path.isdir(cwd):
        return base
    git_repo = is_git_repo(cwd)
    parts = [base] if base else []
    if environment:
        parts.append(environment_section(cwd, git_repo=git_repo))
    if git_status and git_repo:
        snapshot = git_status_section(cwd)
        if snapshot:
            parts.append(snapshot)
    return "\n\n".join(parts)
