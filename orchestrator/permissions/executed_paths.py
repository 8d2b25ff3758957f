"""Paths that tools execute: one table, read by the permission rules and by the
end-of-run report.

A file a subagent writes may run later without anyone asking for it: git runs
hooks and `core.fsmonitor` from any repository's metadata (a nested `.git`
directory, a `.git` file's `gitdir:`, `commondir`); editors run tasks and settings
when a folder is opened; package managers, build tools and shells run their
configuration; CI runs workflows with the repository's secrets. Each row says
where such a file lives, what runs it, and whether an edit of it asks:

- `asks`: an Edit or Write (or a Bash redirection) to it asks in every mode but
  dontAsk (where it is denied), whatever the allow rules say. These are Claude
  Code's protected files and directories (its list of "dangerous" files and
  directories in 2.1.x, by name at any depth) plus git's metadata, so acceptEdits
  and bypassPermissions ask where Claude Code asks. Like every ask rule they
  match in either case (`permissions.paths`), so `.GIT/config` asks too.
- every row (asking or not) is watched by the end-of-run report (`workspace.report`):
  each file created, changed or removed under it is listed and audited.
  Under a row that asks, the change is also held (`workspace.held_changes`): put
  back as it was when the run started, the run's version kept aside for review,
  since a write through an interpreter is seen by no ask rule.

Patterns are gitignore-style from the workspace root: `/**/NAME` is NAME at any
depth, `/NAME` only at the root; a pattern covers everything under what it names.
`policies/README.md` shows the table to users.
"""

from __future__ import annotations

import configparser
import posixpath
from dataclasses import dataclass
from pathlib import Path

from sandbox_tools.wire import WORKSPACE


@dataclass(frozen=True)
class ExecutedPath:
    """One row: where the file lives, what runs it, whether an edit asks."""

    pattern: str
    runs: str
    asks: bool = False


def _rows(
    names: str, runs: str, *, asks: bool = False, anywhere: bool = True
) -> list[ExecutedPath]:
    lead = "/**/" if anywhere else "/"
    return [ExecutedPath(lead + n, runs, asks) for n in names.split()]


EXECUTED_PATHS: tuple[ExecutedPath, ...] = (
    # git: hooks, fsmonitor, filters, pagers, aliases; a .git file or commondir
    # points git at another directory's config
    *_rows(".git .gitmodules .gitconfig .config/git", "git (status, diff, log, ...)", asks=True),
    *_rows(".gitattributes", "git (filter and diff drivers)"),
    # Claude Code's and warden's settings, hooks, agents and MCP servers
    *_rows(".claude .mcp.json .claude.json", "warden and Claude Code", asks=True),
    # editors and dev containers, when the folder is opened
    *_rows(
        ".vscode .idea .devcontainer .devcontainer.json pyrightconfig.json",
        "editors (tasks, settings, dev containers)",
        asks=True,
    ),
    # shells and direnv
    *_rows(
        ".bashrc .bash_profile .bash_login .bash_logout .bash_aliases .profile .zshrc "
        ".zshenv .zprofile .zlogin .zlogout .envrc .ripgreprc",
        "shells, direnv, ripgrep",
        asks=True,
    ),
    # commit-hook managers
    *_rows(
        ".husky .pre-commit-config.yaml lefthook.yml .lefthook.yml lefthook.yaml .lefthook.yaml",
        "git commit hooks (husky, pre-commit, lefthook)",
        asks=True,
    ),
    # package managers' configuration and bundled releases
    *_rows(
        ".npmrc .yarnrc .yarnrc.yml .yarn .pnp.cjs .pnp.loader.mjs .pnpmfile.cjs "
        "bunfig.toml .bunfig.toml",
        "npm, yarn, pnpm, bun",
        asks=True,
    ),
    *_rows(".cargo", "cargo (config, aliases, runners)", asks=True),
    *_rows(".bazelrc .bazelversion .bazeliskrc", "bazel", asks=True),
    *_rows(
        ".mvn gradle-wrapper.properties maven-wrapper.properties",
        "gradle and maven wrappers",
        asks=True,
    ),
    # build and test entry points (reported, not asked: they are ordinary source)
    *_rows("node_modules/.bin package.json", "npm scripts and binaries"),
    *_rows(
        "Makefile makefile GNUmakefile *.mk CMakeLists.txt *.cmake meson.build",
        "make, cmake, meson",
    ),
    *_rows(
        "gradlew gradlew.bat mvnw mvnw.cmd gradle/wrapper build.gradle build.gradle.kts "
        "settings.gradle settings.gradle.kts pom.xml",
        "gradle and maven",
    ),
    *_rows("Cargo.toml build.rs", "cargo (build scripts)"),
    *_rows(
        "pyproject.toml setup.py setup.cfg tox.ini noxfile.py pytest.ini conftest.py "
        "sitecustomize.py usercustomize.py *.pth",
        "python, pip, pytest, tox, nox",
    ),
    *_rows(
        "Gemfile Rakefile justfile Justfile Taskfile.yml BUILD BUILD.bazel WORKSPACE Dockerfile",
        "ruby, just, task, bazel, docker",
    ),
    *_rows(
        "docker-compose.yml docker-compose.yaml compose.yml compose.yaml bin *.sh",
        "docker compose, scripts",
        anywhere=False,
    ),
    # CI, run with the repository's secrets
    *_rows(
        ".github/workflows .github/actions .gitlab-ci.yml .circleci .buildkite Jenkinsfile "
        "azure-pipelines.yml .travis.yml",
        "CI",
        anywhere=False,
    ),
)
"""Every path that runs later, in order of how directly it runs (the report lists
changes in this order)."""


def ask_rules() -> tuple[str, ...]:
    """The built-in ask rules for the rows that ask: `Edit(//**/NAME)` (any absolute
    path with that component, inside the workspace or not) or `Edit(/workspace/NAME)`."""
    out = []
    for row in EXECUTED_PATHS:
        if row.asks:
            rest = row.pattern.removeprefix("/**/")
            out.append(f"Edit(//**/{rest})" if rest != row.pattern else f"Edit({WORKSPACE}{rest})")
    return tuple(out)


def report_patterns() -> tuple[str, ...]:
    """Every row's pattern, for the end-of-run report."""
    return tuple(row.pattern for row in EXECUTED_PATHS)


MAX_GIT_CONFIG_BYTES = 256 * 1024
"""Largest `.git/config` read for `core.hooksPath`."""


def hooks_path_pattern(workspace: Path) -> str | None:
    """`core.hooksPath` of the workspace's repository, as a report pattern when it
    points inside the workspace (git runs its hooks from there); None otherwise.
    Read when a run starts (`.git` is read-only in sandboxes)."""
    config = workspace / ".git" / "config"
    try:
        if not config.is_file() or config.is_symlink():
            return None
        if config.stat().st_size > MAX_GIT_CONFIG_BYTES:
            return None
        text = config.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    value = parser.get("core", "hookspath", fallback=None)
    if not value:
        return None
    value = value.strip().strip('"')
    if value.startswith(WORKSPACE + "/"):
        value = value[len(WORKSPACE) :]
    elif value.startswith(str(workspace) + "/"):
        value = value[len(str(workspace)) :]
    elif value.startswith(("/", "~")):
        return None  # outside the workspace: no subagent writes there
    cleaned = posixpath.normpath(value.lstrip("/"))
    return None if cleaned in (".", "..") or cleaned.startswith("../") else "/" + cleaned
