"""The agent-memory groups: what Claude Code lets Write, Edit and Bash write in an
agent's memory directory (`.claude/agent-memory/NAME/`), in the default and
acceptEdits modes, with and without an `echo` rule. warden's side decides them as
agent `rev` (`memory_dir`), whose memory directory that is.
"""

from __future__ import annotations

from tests.differential.cases import FILES, Group, _bash, _group, _write

MEM = ".claude/agent-memory/rev"
MEMORY_DIR = "/workspace/.claude/agent-memory/rev"
"""The agent's own memory directory as warden's sandbox sees it."""


def memory_groups() -> list[Group]:
    files = {**FILES, f"{MEM}/MEMORY.md": "- [a](a.md) a\n", f"{MEM}/a.md": "a\n",
             ".claude/agent-memory-local/rev/MEMORY.md": "x\n"}  # fmt: skip
    calls = [
        _write(f"{MEM}/new.md"),
        _write(f"{MEM}/notes.txt"),
        _write(".claude/agent-memory/other/x.md"),
        _write(".claude/agent-memory-local/rev/l.md"),
        _bash(f"echo hi > {MEM}/b.md"),
        _bash(f"echo hi >> {MEM}/MEMORY.md"),
        _bash(f"echo hi > {MEM}/b.txt"),
        _bash(f"touch {MEM}/t.md"),
        _bash(f"tee {MEM}/t2.md < README.md"),
        _bash(f"cp README.md {MEM}/c.md"),
        _bash(f"mkdir -p {MEM}/sub"),
        _bash(f"rm -f {MEM}/a.md"),
        _bash(f"sed -i s/a/b/ {MEM}/MEMORY.md"),
    ]
    groups = []
    for gid, mode, project in (
        ("memory-default", "default", None),
        ("memory-acceptEdits", "acceptEdits", None),
        ("memory-echo", "default", {"permissions": {"allow": ["Bash(echo:*)"]}}),
    ):
        g = _group(gid, calls, mode=mode, project=project)
        g["files"] = files
        g["memory_dir"] = MEMORY_DIR
        groups.append(g)
    return groups
