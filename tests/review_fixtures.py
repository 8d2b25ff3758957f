"""A hostile apply review, shared by the tests of every review channel (terminal,
page, webhook, MCP): names and lines a subagent wrote to fool a reviewer (markup,
script, ANSI escapes, bidi overrides, zero-width characters, a lookalike name, a
newline in a name), a new executable bit, a link out of the tree, a binary.

`python -m tests.review_fixtures STORE OUT [answer|page]` asks the review on this
process's terminal (`TerminalApprover`) and writes the answer as JSON to OUT: the
pseudo-terminal tests run it as a person's shell would."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from orchestrator.apply.changeset import ApplyReview, ChangeSet, ContentStore, FileChange

SCRIPT_NAME = '<img src=x onerror="window.__pwned=1">.txt'
"""A file name that is markup."""
BIDI_NAME = "invoice\u202etxt.exe"
"""Reads as `invoiceexe.txt` where bidi overrides are honoured."""
LOOKALIKE_NAME = "p\u0430ypal.py"
"""A Cyrillic a (U+0430) among Latin letters."""
NEWLINE_NAME = "notes\n── fake.py"
"""A newline in a name, followed by what looks like warden's next file header."""
SCRIPT_LINE = '<img src=x onerror="window.__pwned=2"><script>window.__pwned=3</script>'
ANSI_LINE = "clear \x1b[2J\x1b[H\x1b]8;;http://evil\x07link\x1b]8;;\x07 \u202eexe.gnp\u200b end"
OLD_TEXT = b"keep one\nchange me\nkeep two\n"
NEW_TEXT = f"keep one\n{SCRIPT_LINE}\n{ANSI_LINE}\nkeep two\n".encode()
BINARY = b"\x7fELF\x00\x01\x02\x03 binary"
LONG_FILE_LINES = 120
"""Lines of a long added file: enough that a terminal pages the review."""


def hostile_change_set(store: ContentStore, *, task_id: str = "sa_review") -> ChangeSet:
    text_old, text_new, blob = store.put(OLD_TEXT), store.put(NEW_TEXT), store.put(BINARY)
    long_text = "".join(f"long line {i}\n" for i in range(LONG_FILE_LINES)).encode()
    changes = [
        FileChange(
            path="src/app.py", kind="modified", old_type="file", new_type="file",
            old_sha256=text_old, new_sha256=text_new, old_size=len(OLD_TEXT),
            new_size=len(NEW_TEXT), old_mode=0o644, new_mode=0o755,
        ),
        FileChange(
            path=SCRIPT_NAME, kind="added", new_type="file", new_sha256=text_new,
            new_size=len(NEW_TEXT), new_mode=0o644,
        ),
        FileChange(
            path=BIDI_NAME, kind="added", new_type="file", new_sha256=blob,
            new_size=len(BINARY), new_mode=0o755, binary=True,
        ),
        FileChange(
            path=LOOKALIKE_NAME, kind="added", new_type="file", new_sha256=text_old,
            new_size=len(OLD_TEXT), new_mode=0o644,
        ),
        FileChange(
            path=NEWLINE_NAME, kind="added", new_type="file", new_sha256=text_old,
            new_size=len(OLD_TEXT), new_mode=0o644,
        ),
        FileChange(path="etc-link", kind="symlink", new_type="symlink", link_target="/etc/shadow"),
        FileChange(
            path="zz/long.txt", kind="added", new_type="file", new_sha256=store.put(long_text),
            new_size=len(long_text), new_mode=0o644,
        ),
    ]  # fmt: skip
    return ChangeSet(
        run_id="run_review", task_id=task_id, agent="coder", base="0" * 40,
        changes=tuple(sorted(changes, key=lambda c: c.path)),
    )  # fmt: skip


def hostile_review(store: ContentStore, *, task_id: str = "sa_review") -> ApplyReview:
    return ApplyReview.of(
        hostile_change_set(store, task_id=task_id),
        store,
        run_id="run_review",
        task_id=task_id,
        agent_type="coder",
        description="edit the app \x1b[31m<b>now</b>",
        chain=(task_id,),
        chain_agents=("coder",),
    )


def main(argv: list[str]) -> int:
    from orchestrator.ui.approval_prompt import TerminalApprover

    store, out = ContentStore(Path(argv[0])), Path(argv[1])
    review = hostile_review(store)
    answer = asyncio.run(TerminalApprover(user="tester").approve(review))
    out.write_text(answer.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
