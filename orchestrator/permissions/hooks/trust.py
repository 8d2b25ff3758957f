"""What a hook's process sees: an environment workspace files cannot steer.

Only hooks the person marked trusted in a file no subagent can write run on the
host (`definitions`); every other hook runs in the run's sandbox. Either way a
hook inherits nothing by default. On the host its environment is
`HOOK_ENV_ALLOWLIST` (locale, terminal, home), a fixed `HOOK_PATH` with no
workspace directory on it, `CLAUDE_PROJECT_DIR` (as Claude Code sets it), and the
variables a settings file names under `warden.hookEnv`; in a sandbox it is
`sandboxed_environment()`. So `ANTHROPIC_API_KEY` and other secrets never reach a
hook unless you name them. The working directory is an empty temporary directory
unless the hook entry says `"cwd": "workspace"`.

Wherever it runs and whatever its working directory, a hook's interpreters are
kept from loading what a subagent can write (`SAFE_INTERPRETER_ENV`):
- Python runs in safe-path mode (`PYTHONSAFEPATH=1`, what `-P` does: neither the
  working directory nor a script's directory is put on `sys.path`, so a
  `json.py` planted in the workspace is never imported by `python3 -c "import
  json"`), without the user site directory;
- no variable that points an interpreter or the dynamic loader at other code
  (`STEERING_VARIABLES`: `PYTHONPATH`, `NODE_PATH`, `NODE_OPTIONS`, `RUBYLIB`,
  `RUBYOPT`, `PERL5LIB`, `PERL5OPT`, `BASH_ENV`, `LD_*`, ...) is passed, not even
  when `warden.hookEnv` names it (it is dropped, said at load);
- `HOME` is never the workspace or inside it (a host `HOME` there is replaced by
  the hook's own empty directory), so dot-files a subagent wrote are not read as
  the person's configuration; `PATH` holds no workspace directory.

What no environment can stop, and a hook's author must take care of: tools that
look in their working directory by design (`node -e "require('x')"` resolves
`./node_modules`; `npm`, `make`, `bundle`, `cargo`, `git` read the project's own
files) run what a subagent wrote when the hook's working directory is the
workspace (`"cwd": "workspace"`) or when the command names a workspace file
(`make -C "$CLAUDE_PROJECT_DIR"`, `sh < FILE`). Keep the default working
directory, call interpreters on scripts outside the workspace, and read the
workspace as data. Whether a hook runs on the host is never guessed from its
command for the same reason: no reading of a shell command lists everything a
tool will load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from sandbox_tools.wire import WORKSPACE

HOOK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH every hook gets (never a workspace directory)."""
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
SAFE_INTERPRETER_ENV = {
    "PYTHONSAFEPATH": "1",
    "PYTHONNOUSERSITE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""Set for every hook: Python never imports from the working directory or a script's
directory, nor from the user site; it writes no `.pyc` beside workspace files."""
STEERING_VARIABLES = frozenset(
    {
        "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONEXECUTABLE",
        "PYTHONPLATLIBDIR", "PYTHONINSPECT", "PYTHONBREAKPOINT", "PYTHONWARNINGS",
        "NODE_PATH", "NODE_OPTIONS", "NODE_REPL_EXTERNAL_MODULE", "NPM_CONFIG_USERCONFIG",
        "RUBYLIB", "RUBYOPT", "GEM_HOME", "GEM_PATH", "BUNDLE_GEMFILE",
        "PERL5LIB", "PERLLIB", "PERL5OPT",
        "BASH_ENV", "ENV", "ZDOTDIR", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS",
        "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_EXEC_PATH", "GIT_DIR", "GIT_WORK_TREE",
        "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "CLASSPATH", "GOFLAGS", "RUSTC_WRAPPER",
        "XDG_CONFIG_HOME", "XDG_DATA_HOME", "PATH",
    }
)  # fmt: skip
"""Variables that point an interpreter, a shell or a tool at other code or
configuration: never passed to a hook (plus every `LD_*` and `DYLD_*`)."""


def steers(name: str) -> bool:
    """Whether passing `name` could make a hook load other code or configuration."""
    return name in STEERING_VARIABLES or name.startswith(("LD_", "DYLD_"))


def _inside(path: str, root: Path) -> bool:
    real = os.path.realpath(path)
    top = os.path.realpath(root)
    return real == top or real.startswith(top.rstrip("/") + "/")


def hook_environment(
    workspace: Path | None,
    names: Sequence[str],
    source: Mapping[str, str] | None = None,
    *,
    home: Path | None = None,
) -> dict[str, str]:
    """The environment of a host hook: allowlist, fixed PATH, named extras (never
    one that `steers`), safe interpreters. A `HOME` that is the workspace or lies
    in it becomes `home` (the hook's own empty directory), or is left out."""
    env = os.environ if source is None else source
    out = {k: env[k] for k in HOOK_ENV_ALLOWLIST if k in env}
    out.update({k: env[k] for k in names if k in env and not steers(k)})
    if workspace is not None and "HOME" in out and _inside(out["HOME"], workspace):
        if home is None:
            del out["HOME"]
        else:
            out["HOME"] = str(home)
    out.update(SAFE_INTERPRETER_ENV)
    out["PATH"] = HOOK_PATH
    if workspace is not None:
        out["CLAUDE_PROJECT_DIR"] = str(workspace)
    return out


def sandboxed_environment() -> dict[str, str]:
    """The whole environment of a sandboxed hook's process (nothing from the host or
    the image: the shim passes exactly this)."""
    return {
        "HOME": "/tmp",
        "PATH": HOOK_PATH,
        "LANG": "C.UTF-8",
        "CLAUDE_PROJECT_DIR": WORKSPACE,
        **SAFE_INTERPRETER_ENV,
    }
