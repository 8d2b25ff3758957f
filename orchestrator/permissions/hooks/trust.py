"""What a trusted hook sees on the host.

Only hooks the person marked trusted in a file no subagent can write run on the
host (`definitions`); every other hook runs in the run's sandbox. Even a trusted
hook inherits nothing by default: its environment is `HOOK_ENV_ALLOWLIST`
(locale, terminal, home), a fixed `HOOK_PATH` with no workspace directory on it,
`CLAUDE_PROJECT_DIR` (as Claude Code sets it), and the variables a settings file
names under `warden.hookEnv`. So `ANTHROPIC_API_KEY` and other secrets never
reach a hook unless you name them. The working directory is an empty temporary
directory unless the hook entry says `"cwd": "workspace"`.

Whether a hook runs on the host is never guessed from its command: a tool
pointed at the project by an option or a stream (`make -C`, `npm --prefix`,
`sh < FILE`, a configuration file it loads) runs what a subagent wrote, and no
reading of a shell command lists everything a tool will load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

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
