"""What a hook on the host may see and run.

Hooks run on the host with the user's rights, next to a workspace that
subagents write. Two ways a subagent could get its own code run there:

1. **The environment.** A hook inherits nothing by default: its environment is
   `HOOK_ENV_ALLOWLIST` (locale, terminal, home), a fixed `HOOK_PATH` with no
   workspace directory on it, `CLAUDE_PROJECT_DIR` (as Claude Code sets it),
   and the variables a settings file names under `warden.hookEnv`. So
   `ANTHROPIC_API_KEY` and other secrets never reach a hook unless you name
   them. The working directory is an empty temporary directory unless the hook
   entry says `"cwd": "workspace"`.
2. **The command.** A hook whose command runs a file inside the workspace runs
   whatever a subagent put there: `./format.sh`, `$CLAUDE_PROJECT_DIR/bin/lint`,
   `python3 tools/check.py`, or a package runner that looks in the workspace
   (`npx prettier` finds a planted `node_modules/.bin/prettier`, `make` reads
   the Makefile, `python -m` imports from its cwd). `workspace_code` finds these
   with the Bash analyser and the hook is refused, unless its entry says
   `"trusted": true`. Files under `.claude/` and `.git` are exempt: they are
   read-only in every sandbox, so a subagent cannot have written them.

What this cannot see: a tool started from outside the workspace that reads
configuration from it (prettier and eslint load JavaScript config files next
to the file they format). Such hooks belong in a sandbox: `"sandbox": true`.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.permissions.shell import DYNAMIC, analyse

HOOK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH every host hook gets (never a workspace directory)."""
HOOK_ENV_ALLOWLIST = (
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "TZ",
    "TMPDIR",
)
"""Host variables a hook inherits; anything else must be named in `warden.hookEnv`."""
SAFE_WORKSPACE_DIRS = (".claude", ".git")
"""Workspace paths no sandbox can write (read-only mounts): hooks may run files there."""
PROJECT_RUNNERS = frozenset(
    {
        # run project-defined code found from the working directory
        "npx", "npm", "pnpm", "pnpx", "yarn", "bunx", "bun", "corepack", "deno",
        "make", "gmake", "just", "task", "rake", "bundle", "cargo", "gradle", "mvn",
        "tox", "nox", "poetry", "pipenv", "pdm", "hatch", "uv", "uvx", "pre-commit",
        "direnv", "mise", "asdf",
    }
)  # fmt: skip
"""Commands that run code from their working directory: refused there unless trusted."""
INTERPRETERS = frozenset(
    {"python", "python3", "node", "ruby", "perl", "php", "sh", "bash", "dash", "zsh", "deno", "bun"}
)
"""Commands whose first non-option argument is a script they run; without one
(`python -m`, `-c`, `node -e`) they import code from their working directory."""
INLINE_CODE_FLAGS = frozenset({"-m", "-c", "-e", "--eval", "-p", "--print", "-r", "--require"})
_WORD_SPLIT = re.compile(r"[\s;|&()<>`]+")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def hook_environment(
    workspace: Path | None, names: Sequence[str], source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a host hook: allowlist, fixed PATH, named extras."""
    env = os.environ if source is None else source
    out = {k: env[k] for k in HOOK_ENV_ALLOWLIST if k in env}
    out.update({k: env[k] for k in names if k in env})
    out["PATH"] = HOOK_PATH
    if workspace is not None:
        out["CLAUDE_PROJECT_DIR"] = str(workspace)
    return out


def workspace_code(
    command: str, workspace: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> str | None:
    """Why `command`, run with `sh -c` in `cwd` and `env`, would run workspace content;
    None if not. Variables of `env` are expanded first (`$CLAUDE_PROJECT_DIR`, `$HOME`)."""
    workspace = Path(os.path.realpath(workspace))
    known = {**(env or {}), "CLAUDE_PROJECT_DIR": str(workspace)}
    text = _VARIABLE.sub(lambda m: known.get(m.group(1) or m.group(2), m.group(0)), command)
    analysis = analyse(text)
    if analysis.problems:
        return _word_check(text, workspace, Path(os.path.realpath(cwd)))
    cwds = [Path(os.path.realpath(cwd))]
    for simple in analysis.commands:
        if simple.words and simple.words[0] in ("cd", "pushd") and len(simple.words) > 1:
            target = simple.words[1]
            cwds.append(workspace if DYNAMIC in target else _resolve(target, cwds[0]))
    in_workspace = any(_inside(c, workspace) for c in cwds)
    for simple in analysis.commands:
        if not simple.words:
            continue
        name = simple.words[0]
        if DYNAMIC in name:
            return f"its command name {simple.display()!r} is only known at run time"
        base = posixpath.basename(name)
        paths = [name]
        script = _script(simple.words) if base in INTERPRETERS else None
        if script is not None:
            if DYNAMIC in script:
                return f"the script {simple.display()!r} runs is only known at run time"
            paths.append(script)
        elif in_workspace and (base in PROJECT_RUNNERS or base in INTERPRETERS):
            return (
                f"{base!r} runs with the workspace as its working directory, where it "
                "finds code a subagent may have written (node_modules/.bin, Makefile, "
                "modules on the import path)"
            )
        for path in paths:
            found = _locate(path, cwds)
            if found is not None and _inside(found, workspace) and not _safe(found, workspace):
                return f"{path!r} is {found}, a file in the workspace that a subagent can write"
    return None


def _word_check(text: str, workspace: Path, cwd: Path) -> str | None:
    """For a command the analyser cannot prove: every word is treated as something
    that may run. A word naming a workspace file, or a runner in the workspace, refuses."""
    words = [w.strip("'\"") for w in _WORD_SPLIT.split(text) if w.strip("'\"")]
    cwds = [cwd]
    if any(w in ("cd", "pushd") for w in words):
        cwds.append(workspace)
    in_workspace = any(_inside(c, workspace) for c in cwds)
    for word in words:
        base = posixpath.basename(word)
        if in_workspace and (base in PROJECT_RUNNERS or base in INTERPRETERS):
            return f"{base!r} may run with the workspace as its working directory"
        if "/" in word and "$" in word:
            return f"{word!r} is only known at run time"
        if "/" in word:
            found = _locate(word, cwds)
            if found is not None and _inside(found, workspace) and not _safe(found, workspace):
                return f"{word!r} is {found}, a file in the workspace that a subagent can write"
    return None


def _script(words: Sequence[str]) -> str | None:
    for word in words[1:]:
        if word in INLINE_CODE_FLAGS:
            return None
        if not word.startswith("-"):
            return word
    return None


def _locate(word: str, cwds: Sequence[Path]) -> Path | None:
    if "/" not in word:
        found = shutil.which(word, path=HOOK_PATH)
        return Path(os.path.realpath(found)) if found else None
    for cwd in cwds:
        candidate = _resolve(word, cwd)
        if os.path.lexists(candidate):
            return candidate
    return _resolve(word, cwds[-1])


def _resolve(word: str, cwd: Path) -> Path:
    return Path(os.path.realpath(os.path.join(cwd, os.path.expanduser(word))))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _safe(path: Path, workspace: Path) -> bool:
    return any(_inside(path, workspace / d) for d in SAFE_WORKSPACE_DIRS)
