"""The policy's walls in the oracle: a workspace with secrets a `Read` deny masks and a
directory an `Edit` deny makes read-only, mounted by warden's own `WorkspaceGuard`
(the mounts every subagent sandbox gets), and a family of cases that try to read or
write them by the routes issue 32 lists. A case the analyser allows is a bypass when
its output holds the secret (a real read) or it writes anything (a real write).
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Callable
from pathlib import Path

from orchestrator.config import Settings
from orchestrator.permissions import load_policy
from orchestrator.workspace import WorkspaceGuard
from orchestrator.workspace.walls import walls_of

SECRET = "FUZZ-SECRET-7f3a"
"""In every denied file: seen in a case's output, it was really read."""
DENY_RULES = ("Read(./.env)", "Read(./secrets/**)", "Edit(./protected/**)")
SECRET_FILES = {".env": f"{SECRET}-env\n", "secrets/key": f"{SECRET}-key\n"}
PROTECTED_FILES = {"protected/p": "original\n"}
ORACLE_UID = 1000


def make_workspace(root: Path, settings: Settings) -> WorkspaceGuard:
    """A git repository with the secret and protected files, owned by the oracle's
    user, and the guard whose mounts wall them off (as in a run with DENY_RULES)."""
    root.mkdir(mode=0o755)
    subprocess.run(["git", "init", "-q", str(root)], check=True, capture_output=True)
    for name, text in {**SECRET_FILES, **PROTECTED_FILES}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if os.geteuid() == 0:
        for dirpath, dirs, files in os.walk(root):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in [*dirs, *files])]:
                os.chown(name, ORACLE_UID, ORACLE_UID, follow_symlinks=False)
    policy = load_policy(settings, root, deny=DENY_RULES, trusted=False)
    return WorkspaceGuard.prepare(root, walls=walls_of(policy))


READERS = ("cat", "head -n 5", "tail -n 5", "grep -r .", "grep -h F", "wc -c", "ls -la")
ROUTES = (
    ".env",
    "secrets/key",
    "./secrets/../.env",
    "/workspace/.env",
    "/proc/self/cwd/.env",
    "/proc/self/root/workspace/.env",
    "/proc/1/cwd/.env",
    "~+/.env",
    "~+/secrets/key",
    "/dev/fd/3/.env 3<.",
    "/dev/fd/4/key 4<secrets",
    "secrets",
    ".",
    "s*/k*",
    ".e?v",
)
"""Ways of naming a denied file (a `Read` deny masks it: each must read nothing)."""


def walled_case(r: random.Random) -> str:
    """One try at a denied file: a reader through a route, a program option, a link
    made on the way, or a write to the protected directory."""
    reader, route = r.choice(READERS), r.choice(ROUTES)
    forms: list[Callable[[], str]] = [
        lambda: f"{reader} {route}",
        lambda: f"ln -s {r.choice(['.env', 'secrets/key', 'secrets'])} l && {reader} l",
        lambda: f"ln {r.choice(['.env', 'secrets/key'])} h; {reader} h",
        lambda: "git diff --no-index /dev/null .env",
        lambda: "git status; git diff --no-index /dev/null secrets/key",
        lambda: "wc --files0-from=.env",
        lambda: "printf '.env\\0' > l0; wc -c --files0-from=l0",
        lambda: f"cat x.txt | {reader} - {route}",
        lambda: f"sed '1r {r.choice(['.env', 'secrets/key'])}' x.txt",
        lambda: f"tar -cf - {r.choice(['.env', 'secrets'])} | tar -xOf -",
        lambda: "sort -o protected/p x.txt; cat protected/p",
        lambda: "sed -n 'w protected/p' x.txt",
        lambda: "find protected -delete",
        lambda: f"echo pwned > {r.choice(['protected/p', '/proc/self/cwd/protected/p', '.env'])}",
        lambda: "git log -1 --output=protected/p",
        lambda: "cat <.env; head <secrets/key",
    ]
    return r.choice(forms)()
