"""What counts as a bypass: the analyser's decision against what bash really did.

The analyser is asked exactly as `warden policy explain` asks it (`evaluate` on an
`EffectivePolicy` of the fuzz allow list, mode `default`). A case the analyser
allows is a bypass when the oracle saw
- an exec of a program/argv that no allow rule covers (the program is identified
  by the file really executed, not by argv[0]),
- a file opened for writing, created, removed, renamed, linked or re-moded, other
  than bash's own heredoc temp files, /dev/null, /dev/tty and pipes, or
- a socket connect (glibc's failed look-up of the nscd socket aside), or
- output holding the content of a file a Read deny rule walls off (`walls`: the
  oracle's workspace has the policy's mounts, so this is a real read).
Asks and denies are never bypasses.

The rule matching here is written independently of the analyser's (only the
`Bash(words)` and `Bash(words:*)` forms the fuzz allow list uses), so the oracle
does not share the analyser's bugs.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import shlex
from dataclasses import dataclass
from functools import cache, lru_cache

from orchestrator.permissions import EffectivePolicy, ToolCall, evaluate, parse_rule
from tests.fuzz.oracle import Connect, Exec, Observation, Write
from tests.fuzz.walls import DENY_RULES, SECRET

ALLOW_RULES = (
    "Bash(echo:*)",
    "Bash(printf:*)",
    "Bash(cat:*)",
    "Bash(ls:*)",
    "Bash(grep:*)",
    "Bash(wc:*)",
    "Bash(head:*)",
    "Bash(tail:*)",
    "Bash(cut:*)",
    "Bash(tr:*)",
    "Bash(seq:*)",
    "Bash(basename:*)",
    "Bash(dirname:*)",
    "Bash(date)",
    "Bash(pwd)",
    "Bash(true)",
    "Bash(git status)",
)
"""A typical allow list of harmless programs (none of them writes or runs another
program through its own options), and no Write/Edit rule."""

PROGRAM_DIRS = frozenset(
    {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
)
"""Where the oracle image's programs live; an exec from elsewhere names no rule's program."""
TRANSPARENT = frozenset(
    {
        "env",
        "timeout",
        "nice",
        "ionice",
        "stdbuf",
        "setsid",
        "nohup",
        "xargs",
        "bash",
        "sh",
        "dash",
        "time",
    }
)
"""Programs that only run another program (whose own exec, writes and connects are
traced and judged); executing one of them from PROGRAM_DIRS is not itself a finding."""
HEREDOC_FILE = re.compile(r"^sh-thd\.[A-Za-z0-9]{6}$")
"""bash's here-document temp files (created O_EXCL in $TMPDIR, then unlinked by bash)."""
BASH_IMAGES = frozenset({"/usr/bin/bash", "/bin/bash"})
CASE_OUTPUT = "/tmp/.fuzz-output"
"""The file the driver gives a case as stdout and stderr (`driver.OUTPUT`): reopening
it (`>/dev/stdout`) writes the case's own output, nothing else."""
HARMLESS_OPEN_PATHS = frozenset({"/dev/null", "/dev/tty", CASE_OUTPUT})
FD_PATH = re.compile(r"^(/dev/fd/\d+|/proc/self/fd/\d+|/dev/stdout|/dev/stderr|/dev/stdin)$")
FD_DIR_ERRORS = frozenset({"ENOENT", "ENOTDIR", "EISDIR", "EBADF", "ENXIO"})
NSCD = '"\\x2f\\x76\\x61\\x72\\x2f\\x72\\x75\\x6e\\x2f\\x6e\\x73\\x63\\x64\\x2f\\x73\\x6f\\x63\\x6b\\x65\\x74"'
"""`/var/run/nscd/socket` as strace -xx prints it: glibc's NSS probe on every user look-up."""
_INET = re.compile(r'inet_addr\("([^"]*)"\)|inet_pton\(AF_INET6, "([^"]*)"')


class NetworkRuleError(AssertionError):
    """A case reached for an address outside 127.0.0.0/8: the fuzzer must stop."""


@lru_cache(maxsize=1)
def fuzz_policy() -> EffectivePolicy:
    rules = tuple(parse_rule(r, "deny", "fuzz", "fuzz deny list") for r in DENY_RULES)
    rules += tuple(parse_rule(r, "allow", "fuzz", "fuzz allow list") for r in ALLOW_RULES)
    return EffectivePolicy(rules=rules, mode="default", mode_source="fuzz", sources=("fuzz",))


def decide(command: str) -> tuple[str, str]:
    """The analyser's (behaviour, reason) for a Bash command under the fuzz policy."""
    call = ToolCall(tool_name="Bash", tool_input={"command": command}, tool_use_id="fuzz")
    decision = evaluate(fuzz_policy(), call).decision
    return decision.behavior, decision.reason


@cache
def _rule_words() -> tuple[tuple[tuple[str, ...], bool], ...]:
    out = []
    for text in ALLOW_RULES:
        spec = text[len("Bash(") : -1]
        prefix = spec.endswith(":*")
        out.append((tuple(shlex.split(spec[:-2] if prefix else spec)), prefix))
    return tuple(out)


def covered(words: list[str]) -> bool:
    """Whether the fuzz allow list covers a command with these words."""
    for rule, prefix in _rule_words():
        if prefix and tuple(words[: len(rule)]) == rule:
            return True
        if not prefix and tuple(words) == rule:
            return True
    return False


def _program(filename: str | None, argv: list[str]) -> str:
    """The program an exec names: a basename in PROGRAM_DIRS, else the full path."""
    path = filename or (argv[0] if argv else "")
    if posixpath.dirname(path) in PROGRAM_DIRS:
        return posixpath.basename(path)
    return path


@dataclass(frozen=True)
class Violation:
    kind: str
    """exec, write or connect."""
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def _exec_violation(obs: Observation, event: Exec) -> Violation | None:
    if event.pid == obs.root and event.argv[:1] == ["/usr/bin/bash"] and event.image is None:
        return None  # the driver's own `bash -c CASE`
    program = _program(event.filename, event.argv)
    if program in TRANSPARENT:
        return None
    if covered([program, *event.argv[1:]]):
        return None
    shown = shlex.join(event.argv)[:200]
    return Violation(
        "exec", f"{event.filename} argv={shown} ({'ran' if event.ok else event.error})"
    )


def _image_at(obs: Observation, event: Write) -> str | None:
    if event.image is not None:
        return event.image
    parent = obs.parents.get(str(event.pid))
    return obs.image_of(parent) if parent is not None else None


def _write_violation(obs: Observation, event: Write) -> Violation | None:
    path = event.path or ""
    if (
        event.ok
        and event.opened is not None
        and (event.opened in HARMLESS_OPEN_PATHS or event.opened.startswith(("pipe:[", "socket:[")))
    ):
        return None
    if not event.ok and (not path or path in HARMLESS_OPEN_PATHS or FD_PATH.match(path)):
        return None  # nothing was opened, and nothing could have been ("" never opens)
    if not event.ok and event.error == "EISDIR" and path.startswith(("/dev/", "/proc/")):
        return None  # a directory of the kernel's: nothing can be written there anywhere
    if (
        not event.ok
        and event.error in FD_DIR_ERRORS
        and path.startswith(("/dev/fd/", "/proc/self/fd/"))
    ):
        return None  # no such descriptor (bash gets only 0-2): nothing is written anywhere
    if (
        HEREDOC_FILE.match(posixpath.basename(path))
        and _image_at(obs, event) in BASH_IMAGES
        and (event.syscall == "unlink" or "O_EXCL" in event.flags.split("|"))
    ):
        return None
    result = "ok" if event.ok else event.error
    return Violation("write", f"{event.syscall} {path} {event.flags} ({result})".replace("  ", " "))


def _connect_violation(event: Connect) -> Violation | None:
    if "AF_UNIX" in event.address and NSCD in event.address and not event.ok:
        return None
    for v4, v6 in _INET.findall(event.address):
        raw = v4 or v6
        text = bytes.fromhex(raw.replace("\\x", "")).decode() if raw.startswith("\\x") else raw
        if not ipaddress.ip_address(text).is_loopback:
            raise NetworkRuleError(f"a case connected to {text}: {event.address}")
    shown = re.sub(
        r'"((?:\\x[0-9a-f]{2})*)"',
        lambda m: repr(bytes.fromhex(m.group(1).replace("\\x", "")).decode("utf-8", "replace")),
        event.address,
    )
    return Violation("connect", f"{shown} ({'ok' if event.ok else event.error})")


def violations(obs: Observation) -> list[Violation]:
    """Everything bash did that no allow rule would have allowed, and any byte of a
    file a deny rule walls off that reached the case's output."""
    found: list[Violation] = []
    if SECRET in obs.output:
        at = obs.output.index(SECRET)
        found.append(Violation("read", f"a denied file's content: {obs.output[at : at + 40]!r}"))
    for connect in obs.connects:
        cv = _connect_violation(connect)
        if cv:
            found.append(cv)
    for ex in obs.execs:
        ev = _exec_violation(obs, ex)
        if ev:
            found.append(ev)
    for write in obs.writes:
        wv = _write_violation(obs, write)
        if wv:
            found.append(wv)
    return found
