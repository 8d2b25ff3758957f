""" "Always allow": the exact rule for one approved call, written to the workspace's
`.claude/settings.local.json` after the person has seen it.

Only a rule that matches exactly the approved input and nothing wider is offered,
in the shape Claude Code writes:

| call | rule offered |
|---|---|
| Bash, one simple command in plain words | `Bash(npm run test)` (the exact command) |
| Read / Edit / Write of one file | `Read(/src/a.py)`, `Edit(/src/a.py)`, `Write(/src/a.py)`: the file, spelled from the workspace root (`//abs` outside it) |

and only after the policy engine itself proved it: a policy holding just that rule
allows this very call by that rule. Nothing is offered for a path with wildcard or
rule punctuation, a symbolic link or a directory (the rule would cover more than the
file, or not match it), a command the shell analyser did not prove, Glob/Grep
(their inputs are patterns), or a call an `ask` rule or a hook asked about (an allow
rule does not override those, so the next run would ask again). `Bash(prefix:*)`
rules are never offered: no analysis of this command proves what other commands with
the same first words would do. WebFetch and the other server tools never reach an
approver (they are allowed or refused by rule alone).

A path rule covers everything below the path it names (gitignore semantics, as in
Claude Code), and a missing file may later appear as a directory. So a path rule is
written with its companion ask rule, `Edit(/x/*)` beside `Edit(/x)`: whatever appears
under `/x` later asks, and the allow matches that one file, now and later.

The workspace is attacker-writable (subagents write there), so the file is written
without following links: `.claude` and the file must not be symbolic links, a file
that is not a regular file (a FIFO, a device, a directory) is refused without being
opened for a blocking read, and the new content replaces the file atomically (a link
at the destination is replaced, never followed). Writers are serialised by an
exclusive `flock` on the `.claude` directory (threads and processes alike), so
concurrent "always" answers each add their rule; none is lost.

A run's writer adds its rule only to the content the run read (`base`: the hash of
settings.local.json in the run's one snapshot, `workspace.inputs`, or what this
process itself wrote there since). If the file changed otherwise in between, the
rule is not written and the person is told: the run decides from one set of
bytes, and a rule the person approved must not carry unseen content along with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.jsontypes import JSONObject
from orchestrator.locking import flock_within
from orchestrator.permissions import paths
from orchestrator.permissions.evaluate import evaluate
from orchestrator.permissions.models import ToolCall
from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.permissions.rules import parse_rule
from orchestrator.permissions.settings_files import SettingsStack
from orchestrator.permissions.shell import analyse
from orchestrator.regular_file import NotRegularFileError, read_regular
from sandbox_tools.wire import WORKSPACE

SETTINGS_FILE = Path(".claude") / "settings.local.json"
MAX_ALWAYS_RULE_CHARS = 300
"""Longest command offered as an exact rule (a longer one is better reviewed in a file)."""
_PLAIN_COMMAND = re.compile(r"^[A-Za-z0-9_./=+,@%-][A-Za-z0-9_./=+,@% -]*$")
"""Words a rule matches literally: no wildcard, parentheses, colon, quotes or operators."""
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9_./=+,@%-]+$")
"""A path a rule names literally: no glob characters, `~`, spaces, quotes or parentheses."""
PATH_RULE_TOOLS = frozenset({"Read", "Edit", "Write"})
"""Tools whose "always allow" rule names the one file of the call."""
MAX_SETTINGS_BYTES = 1024 * 1024
"""Largest settings.local.json read back before adding a rule."""
LOCK_WAIT_S = 10.0
"""Longest wait for the lock on `.claude` (another warden holds it only while it
writes one rule; anything longer is a process holding it on purpose)."""
_PATH_RULE = re.compile(r"^(?P<tool>Edit|Write)\((?P<spec>/[^()*?\[\]]*)\)$")


def companion_rules(rule: str) -> list[str]:
    """The ask rules written beside an allow path rule so that it covers that one
    file only: `Edit(/x)` -> [`Edit(/x/*)`] (anything that appears below it asks).
    Not for Read rules: a Read ask rule makes every Grep that could reach it ask, and
    reads are the mode's default outside dontAsk anyway."""
    m = _PATH_RULE.match(rule)
    if m is None:
        return []
    return [f"{m['tool']}({m['spec'].rstrip('/')}/*)"]


def exact_rule(
    tool_name: str, tool_input: JSONObject, workspace_host: Path | None = None
) -> str | None:
    """The allow rule that matches exactly this call, or None when there is none.
    `workspace_host` lets path rules see links and directories in the workspace."""
    if tool_name == "Bash":
        rule = _bash_rule(tool_input.get("command"))
    elif tool_name in PATH_RULE_TOOLS:
        rule = _path_rule(tool_name, tool_input.get("file_path"), workspace_host)
    else:
        return None
    if rule is None or not _proven(rule, tool_name, tool_input, workspace_host):
        return None
    return rule


def _bash_rule(command: object) -> str | None:
    if not isinstance(command, str):
        return None
    command = " ".join(command.split())
    if not command or len(command) > MAX_ALWAYS_RULE_CHARS or not _PLAIN_COMMAND.match(command):
        return None
    analysis = analyse(command)
    if not analysis.understood or len(analysis.commands) != 1 or analysis.writes:
        return None
    return f"Bash({command})"


def _path_rule(tool_name: str, file_path: object, workspace_host: Path | None) -> str | None:
    if not isinstance(file_path, str) or len(file_path) > MAX_ALWAYS_RULE_CHARS:
        return None
    if not _PLAIN_PATH.match(file_path):
        return None
    spelled = paths.spellings(file_path, workspace_host)
    if len(spelled) != 1:  # a link in the way: the rule would not name the file read
        return None
    target = spelled[0]
    if target in ("/", WORKSPACE):
        return None
    host = paths.to_host(target, workspace_host) if workspace_host is not None else None
    if host is not None and host.is_dir():  # a path rule covers what is below it
        return None
    # `/x` is x at the workspace root, `//x` the absolute path (Claude Code's spelling).
    inside = target.startswith(WORKSPACE + "/")
    spec = target[len(WORKSPACE) :] if inside else "/" + target
    if paths.rule_patterns(spec, strict=True)[0] != target:
        return None
    return f"{tool_name}({spec})"


def _proven(rule: str, tool_name: str, tool_input: JSONObject, workspace_host: Path | None) -> bool:
    """True when a policy of just this rule allows this very call by this rule."""
    parsed = parse_rule(rule, "allow", "always-allow", "always-allow")
    asks = tuple(
        parse_rule(r, "ask", "always-allow", "always-allow") for r in companion_rules(rule)
    )
    explanation = evaluate(
        EffectivePolicy(rules=(parsed, *asks)),
        ToolCall(tool_name=tool_name, tool_input=tool_input),
        workspace_host=workspace_host,
    )
    return explanation.decision.behavior == "allow" and explanation.decision.rule == rule


ABSENT = "absent"
"""The `base` of a settings.local.json the run found missing."""


def settings_base(stack: SettingsStack | None) -> str | None:
    """The `base` a run's writer adds to: sha256 of settings.local.json as the run's
    snapshot holds it, `ABSENT` when it had none; None without a snapshot."""
    if stack is None:
        return None
    for f in stack.files:
        if f.kind == "project-local":
            return hashlib.sha256(f.text.encode("utf-8")).hexdigest()
    return ABSENT


def add_allow_rule(workspace: Path, rule: str, *, base: str | None = None) -> Path:
    """Add `rule` to `permissions.allow` of the workspace's settings.local.json, and
    its companion ask rules (`companion_rules`) to `permissions.ask`, in one write.
    `base` (`settings_base`): write only on top of that content (None: any).

    Raises ConfigError when the file is not a JSON object, a path on the way is a
    symbolic link, or it is not `base` (the file is then left as it was)."""
    additions: list[tuple[tuple[str, ...], str]] = [(("permissions", "allow"), rule)]
    additions += [(("permissions", "ask"), extra) for extra in companion_rules(rule)]
    return _add_to_settings_lists(workspace, additions, base)


def add_allowed_domain(workspace: Path, host: str, *, base: str | None = None) -> Path:
    """Add `host` to Claude Code's `sandbox.network.allowedDomains` of the workspace's
    settings.local.json (the "always allow" of an egress question); as `add_allow_rule`."""
    keys = ("sandbox", "network", "allowedDomains")
    return _add_to_settings_lists(workspace, [(keys, host)], base)


def add_to_settings_list(workspace: Path, keys: tuple[str, ...], value: str) -> Path:
    """Append `value` (once) to the list at `keys` in the workspace's
    settings.local.json, written atomically without following links."""
    return _add_to_settings_lists(workspace, [(keys, value)])


def _add_to_settings_lists(
    workspace: Path, additions: list[tuple[tuple[str, ...], str]], base: str | None = None
) -> Path:
    claude = workspace / SETTINGS_FILE.parent
    target = workspace / SETTINGS_FILE
    first = additions[0][1]
    if claude.is_symlink():
        raise ConfigError(f"{claude} is a symbolic link; not writing {first} there")
    with contextlib.suppress(FileExistsError):
        claude.mkdir()
    with _locked(claude):
        settings = _read_settings(target, first, base)
        for keys, value in additions:
            _append(settings, keys, value, target)
        _replace(workspace, claude, target, settings)
    return target


@contextlib.contextmanager
def _locked(claude: Path) -> Iterator[None]:
    """An exclusive flock on the `.claude` directory (opened without following a link),
    waited for at most LOCK_WAIT_S: every sandbox sees `.claude` (read-only, which does
    not stop a flock), so one could hold the lock for good. ConfigError then."""
    try:
        fd = os.open(claude, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{claude} is not a directory warden can use ({exc.strerror})") from exc
    try:
        if not flock_within(fd, fcntl.LOCK_EX, LOCK_WAIT_S):
            raise ConfigError(
                f"{claude} stayed locked by another process for {LOCK_WAIT_S:g} s "
                "(any sandbox can lock it); add the rule to "
                f"{claude / SETTINGS_FILE.name} by hand"
            )
        yield
    finally:
        os.close(fd)  # releases the lock


def _read_settings(target: Path, value: str, base: str | None = None) -> JSONObject:
    """The settings file's object ({} when absent). A link, a FIFO, a device or a
    directory is refused without blocking: it is opened non-blocking and checked.
    Given `base`, it must be that content, or what this process wrote there."""
    try:
        data = read_regular(target, MAX_SETTINGS_BYTES)
    except FileNotFoundError:
        _check_base(target, value, base, ABSENT)
        return {}
    except NotRegularFileError as exc:
        if exc.reason == "link":
            raise ConfigError(f"{target} is a symbolic link; not writing {value} there") from exc
        raise ConfigError(
            f"{target} is not a regular file; remove it or add {value} by hand"
        ) from exc
    except OSError as exc:
        what = "a symbolic link" if target.is_symlink() else f"not readable ({exc.strerror})"
        raise ConfigError(f"{target} is {what}; not writing {value} there") from exc
    if len(data) > MAX_SETTINGS_BYTES:
        raise ConfigError(
            f"{target} is larger than {MAX_SETTINGS_BYTES} bytes; add {value} by hand"
        )
    _check_base(target, value, base, hashlib.sha256(data).hexdigest())
    try:
        loaded = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{target} is not readable JSON ({exc}); add {value} by hand") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"{target} is not a JSON object; add {value} by hand")
    return loaded


def _check_base(target: Path, value: str, base: str | None, now: str) -> None:
    if base is None or now in (base, _OWN_WRITES.get(str(target.resolve()))):
        return
    raise ConfigError(
        f"{target} changed since this run read it (not by warden), so {value} was not "
        "written there: a rule you approve is added only to the content the run decided "
        "from (this run still allows the call as you answered); add it by hand, or "
        'answer "always" again in the next run'
    )


def _append(settings: JSONObject, keys: tuple[str, ...], value: str, target: Path) -> None:
    where = ".".join(keys)
    node = settings
    for depth, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            inner = ".".join(keys[: depth + 1])
            raise ConfigError(f"`{inner}` in {target} is not an object; add {value} by hand")
        node = child
    items = node.setdefault(keys[-1], [])
    if not isinstance(items, list):
        raise ConfigError(f"`{where}` in {target} is not a list; add {value} to {where} by hand")
    if value not in items:
        items.append(value)


_OWN_WRITES: dict[str, str] = {}
"""Resolved path -> sha256 of the settings this process wrote there for a person's
"always allow": warden's own change, which the end-of-run report must not present as a
sandbox's (sandboxes cannot write `.claude/`)."""


def own_write_digest(path: Path) -> str | None:
    """sha256 of what this process last wrote to `path` for an "always allow", if any."""
    return _OWN_WRITES.get(str(path.resolve()))


def _replace(workspace: Path, claude: Path, target: Path, settings: JSONObject) -> None:
    owner = workspace.stat()
    fd, tmp = tempfile.mkstemp(dir=claude, prefix=".settings-")
    data = (json.dumps(settings, indent=2) + "\n").encode("utf-8")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if os.geteuid() == 0:  # keep the file the workspace owner's
            os.chown(tmp, owner.st_uid, owner.st_gid)
        os.replace(tmp, target)
        _OWN_WRITES[str(target.resolve())] = hashlib.sha256(data).hexdigest()
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
