"""How a change set reads to a person: the one rendering every review channel shows
(the terminal's paged diff, the page's diff view, the webhook's document, the MCP
elicitation).

`render_change_set` turns a `ChangeSet` and the `ContentStore` holding its bytes
into a `ChangeSetView`: a header naming the change set's hash (what a yes binds to),
then one entry per file: a one-line summary (kind, sizes, short hashes, modes), the
callouts a reviewer must not miss (a new executable bit, a set-id bit, a link that
leaves the tree, a name that is not what it looks like), and for a text file its
unified diff (difflib). Binary files, links, submodule pointers and removals are
summaries only.

Every name and every line is attacker text. Lines go through
`untrusted_text.as_data` (controls, ANSI escapes, bidi overrides, zero-width and
other invisible characters become visible escapes) and are split on `\\n` only, so
no other line break (CR, VT, FF, NEL, U+2028) can start a line of its own. Names
are escaped further (`shown_name`): backslashes are doubled (an escape in a name is
always warden's), spaces at the ends of a component and `.`/`..` components are
made visible, and a name with any non-ASCII character also gets an ASCII-only
spelling, so a lookalike (`p\\u0430ypal.py`: a Cyrillic `\\u0430`) or a differently
normalised twin cannot pass for the name it imitates. Content lines are shown
behind a gutter (`│`), so nothing a file holds can draw a line that looks like
warden's own.

Every limit is a named constant and every cut is announced; the hashes in the
header and the summaries still bind the whole content, cut or not.
"""

from __future__ import annotations

import difflib
import hashlib
import threading
import unicodedata
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from orchestrator.apply.changeset import ChangeSet, FileChange
from orchestrator.errors import WardenError
from orchestrator.untrusted_text import as_data

MAX_FILE_DIFF_LINES = 400
"""Diff lines shown per file; the rest of that file's diff is counted, not shown."""
MAX_TOTAL_DIFF_LINES = 4000
"""Diff lines shown for the whole change set; later files get their summary only."""
MAX_DIFF_INPUT_BYTES = 512 * 1024
"""A side larger than this is not diffed (difflib's cost grows with it): summary only."""
MAX_DIFF_INPUT_LINES = 3000
"""The changed part of a file (between its unchanged first and last lines) is not
diffed when longer than this on either side: difflib's cost grows with its square
(3,000 interleaved changes take about 0.7 s here)."""
MAX_LINE_CHARS = 400
"""Shown of one diff line (after escaping); the rest is counted on the line."""
MAX_NAME_CHARS = 1000
"""Shown of one name (path or link target, after escaping)."""
MAX_TOTAL_COMPARED_LINES = 6000
"""Lines difflib may compare for one whole review (the changed parts of its files,
counted on the longer side); later files get their summary only. Bounds a review's
cost whatever the subagent wrote (two worst-case files of 3,000 lines)."""
CONTEXT_LINES = 3
"""Unchanged lines shown around each change (diff -u's default)."""
MAX_SUMMARY_FILES = 200
"""Files listed in a summary (the page's card, an MCP form); the rest are counted."""
SHORT_HASH = 16
"""Hex digits of a file's sha256 in its summary line (the document carries all 64)."""

GUTTER = "│"
"""Starts every line of file content, so content never starts a line of its own."""
EXEC_BITS = 0o111
SPECIAL_BITS = 0o7000
"""setuid, setgid, sticky."""

DiffTag = Literal["hunk", "context", "added", "removed", "note"]
"""What a diff line is: a hunk header (warden's, from line numbers), a line of
content unchanged, added or removed (attacker text, escaped), or warden's note
(`\\ No newline at end of file`, a cut line)."""

_MARK: dict[DiffTag, str] = {"context": " ", "added": "+", "removed": "-"}


class RenderError(WardenError):
    """The change set cannot be shown as what it is (its stored content is missing
    or differs from its hash); it must not be offered for review."""


class Contents(Protocol):
    """Where the reviewed bytes are (`changeset.ContentStore`)."""

    def read(self, sha256: str) -> bytes:
        """The bytes whose sha256 is `sha256`; raises (KeyError, OSError, a
        WardenError) when there are none."""
        ...


class DiffLine(BaseModel):
    """One line of a file's diff, its text already made visible."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: DiffTag
    text: str
    """Escaped: safe to print, and to put on a page as text."""


class FileView(BaseModel):
    """One changed file as a person reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    change: FileChange
    """The change itself (raw: its strings are attacker text; documents carry it)."""
    path: str
    """The name, escaped (`shown_name`)."""
    path_ascii: str = ""
    """The name with every non-ASCII character escaped, when that differs from `path`."""
    summary: str
    """One line: kind, sizes, short hashes, modes, link target, commits."""
    notes: tuple[str, ...] = ()
    """What a reviewer must not miss: new executable or set-id bits, a link that
    leaves the tree, a name that is not what it looks like."""
    lines: tuple[DiffLine, ...] = ()
    """The unified diff of a text file (empty for the rest)."""
    cut: str = ""
    """Why part (or all) of the diff is not shown, and how much; empty when whole."""


class ChangeSetView(BaseModel):
    """A change set as a person reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str
    """The change set's hash: what a yes binds to."""
    task_id: str
    agent: str
    """Escaped."""
    base: str
    """Escaped."""
    counts: str
    """`3 files: 1 added, 1 modified, 1 removed`."""
    files: tuple[FileView, ...]

    def header(self) -> list[str]:
        return [
            f"Change set {self.sha256}",
            f"  from task {self.task_id} ({self.agent}), against {self.base}",
            f"  {self.counts}",
            "  Names and lines below were written by the subagent: shown as data, "
            "escapes (\\x1b, \\u202e, ...) mark characters that would not show.",
        ]

    def text(self) -> str:
        """The whole review as plain text: header, then each file's summary, callouts
        and diff (content behind the gutter)."""
        lines = self.header()
        for view in self.files:
            lines.extend(file_lines(view))
        return "\n".join(lines) + "\n"

    def summary_text(self, files: int = MAX_SUMMARY_FILES) -> str:
        """Header and one line per file (the first `files`, the rest counted), no
        diffs: where a diff does not fit (a page's question list, an MCP form)."""
        lines = self.header()
        for view in self.files[:files]:
            lines.append(f"── {view.path}  {view.summary}")
            if view.path_ascii:
                lines.append(f"     ! name in ASCII: {view.path_ascii}")
            lines.extend(f"     ! {note}" for note in view.notes)
        if len(self.files) > files:
            lines.append(f"[{len(self.files) - files} more files not listed here]")
        return "\n".join(lines) + "\n"


def file_lines(view: FileView) -> list[str]:
    """One file's part of the plain text."""
    lines = [f"── {view.path}", f"   {view.summary}"]
    if view.path_ascii:
        lines.append(f"   ! name in ASCII: {view.path_ascii}")
    lines.extend(f"   ! {note}" for note in view.notes)
    for line in view.lines:
        if line.tag in _MARK:
            lines.append(f"   {GUTTER}{_MARK[line.tag]}{line.text}")
        else:
            lines.append(f"   {line.text}")
    if view.cut:
        lines.append(f"   [{view.cut}]")
    return lines


# ---- names ----------------------------------------------------------------------------


def shown_name(name: str, limit: int | None = MAX_NAME_CHARS) -> str:
    """A name (path or link target) as it may be shown: `as_data`, with newlines as
    `\\n`, backslashes doubled (so every escape in a name is warden's), a space at
    either end of a component as `\\x20`, cut at `limit` with the cut counted."""
    shown = "/".join(_component(c) for c in name.split("/"))
    if limit is not None and len(shown) > limit:
        shown = f"{shown[:limit]}… [{len(shown) - limit} more characters]"
    return shown


def _component(component: str) -> str:
    core = component.strip(" ")
    lead = len(component) - len(component.lstrip(" ")) if core else len(component)
    trail = len(component) - len(component.rstrip(" ")) if core else 0
    body = "".join("\\\\" if ch == "\\" else "\\n" if ch == "\n" else as_data(ch) for ch in core)
    return "\\x20" * lead + body + "\\x20" * trail


def ascii_name(name: str, limit: int | None = MAX_NAME_CHARS) -> str:
    """`shown_name` with every non-ASCII character escaped too (`\\u0430`), so a
    lookalike or a differently normalised twin cannot pass for another name."""
    shown = "".join(
        ch if ord(ch) < 0x80 else f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"
        for ch in shown_name(name, None)
    )
    if limit is not None and len(shown) > limit:
        shown = f"{shown[:limit]}… [{len(shown) - limit} more characters]"
    return shown


def name_notes(name: str) -> list[str]:
    """What is odd about a name, beyond what its escaping shows."""
    notes = []
    components = name.split("/")
    if name.startswith("/"):
        notes.append("the name is absolute")
    if any(c in (".", "..") for c in components):
        notes.append("the name has a '.' or '..' component")
    if any(c == "" for c in components[1:-1]):
        notes.append("the name has an empty component (//)")
    if any(c.startswith("-") for c in components):
        notes.append("a name component starts with '-'")
    if any(c != c.strip(" ") for c in components):
        notes.append("a name component starts or ends with a space")
    if as_data(name) != name or "\n" in name:
        notes.append("the name holds control or invisible characters (shown escaped)")
    return notes


def _scripts(component: str) -> set[str]:
    """The scripts (LATIN, CYRILLIC, GREEK, ...) of a component's letters."""
    found = set()
    for ch in component:
        if ch.isalpha():
            found.add(unicodedata.name(ch, "UNKNOWN").split(" ")[0])
    return found


def lookalike_notes(name: str) -> list[str]:
    """A name a person could read as another: letters of several scripts in one
    component (a Cyrillic `\\u0430` among Latin letters), or a spelling Unicode would
    normalise to something else (two names that look the same)."""
    notes = []
    for component in name.split("/"):
        scripts = _scripts(component)
        if len(scripts) > 1:
            joined = ", ".join(sorted(scripts))
            notes.append(
                f"a name component mixes letters of several scripts ({as_data(joined)}): "
                "it may imitate another name; read its ASCII spelling"
            )
            break
    if unicodedata.normalize("NFC", name) != name:
        notes.append("the name is not in Unicode's composed form (NFC): a twin may look the same")
    return notes


# ---- one file ---------------------------------------------------------------------------


def _short(sha256: str | None) -> str:
    return sha256[:SHORT_HASH] if sha256 else "-"


def _size(size: int | None) -> str:
    return "-" if size is None else f"{size} bytes"


def _mode(mode: int | None) -> str:
    return "-" if mode is None else f"{mode:04o}"


def mode_notes(change: FileChange) -> list[str]:
    """New executable and set-id bits, called out."""
    notes: list[str] = []
    new, old = change.new_mode, change.old_mode or 0
    if new is None:
        return notes
    if (new & EXEC_BITS) & ~(old & EXEC_BITS):
        was = "new file" if change.old_mode is None else f"{_mode(change.old_mode)} →"
        notes.append(f"NEW EXECUTABLE BIT (mode {was} {_mode(new)})")
    if (new & SPECIAL_BITS) & ~(old & SPECIAL_BITS):
        notes.append(f"NEW SETUID/SETGID/STICKY BIT (mode {_mode(new)})")
    return notes


def link_notes(target: str) -> list[str]:
    """Where a link points, when that is outside its tree or unusual."""
    notes = []
    if target.startswith("/"):
        notes.append("the link's target is an absolute path (outside the workspace)")
    if ".." in target.split("/"):
        notes.append("the link's target climbs with '..' (it may leave the workspace)")
    if not target:
        notes.append("the link's target is empty")
    return notes


def _side(change: FileChange, old: bool) -> str:
    """What one side of a change held, in a few words."""
    kind = change.old_type if old else change.new_type
    if kind == "symlink":
        return f"a symlink → {shown_name((change.old_link_target if old else change.link_target) or '')}"
    if kind == "submodule":
        return f"a submodule at {as_data((change.old_commit if old else change.new_commit) or '-')}"
    if kind is None:
        return "nothing"
    if kind == "dir":
        return "an empty directory"
    what = "binary" if change.binary else "text"
    size, sha, mode = (
        (change.old_size, change.old_sha256, change.old_mode)
        if old
        else (change.new_size, change.new_sha256, change.new_mode)
    )
    shown_mode = f", mode {_mode(mode)}" if mode is not None else ""
    return f"{what}, {_size(size)}, sha256 {_short(sha)}{shown_mode}"


def summary_line(change: FileChange) -> str:
    """One line: what changed, sizes, short hashes, modes, link targets, commits."""
    kind = change.kind
    if kind == "submodule":
        line = (
            f"submodule pointer {as_data(change.old_commit or '-')} → "
            f"{as_data(change.new_commit or '-')}"
        )
    elif kind == "symlink":
        line = f"symlink → {shown_name(change.link_target or '')}"
        if change.old_type is not None:
            line += f" (was {_side(change, old=True)})"
    elif kind == "removed":
        line = f"removed: {_side(change, old=True)}"
    elif kind == "added":
        line = f"added: {_side(change, old=False)}"
        if change.old_type == "dir":
            line += " (in place of an empty directory)"
    elif kind == "mode_changed":
        line = (
            f"mode {_mode(change.old_mode)} → {_mode(change.new_mode)} "
            f"(content unchanged, sha256 {_short(change.new_sha256)})"
        )
    elif change.old_type == "file" and change.new_type in ("file", None):
        modes = (
            f", mode {_mode(change.old_mode)} → {_mode(change.new_mode)}"
            if change.old_mode != change.new_mode
            else f", mode {_mode(change.new_mode)}"
        )
        line = (
            f"modified ({'binary' if change.binary else 'text'}, "
            f"{_size(change.old_size)} → {_size(change.new_size)}, "
            f"sha256 {_short(change.old_sha256)} → {_short(change.new_sha256)}{modes})"
        )
    else:
        line = f"modified: {_side(change, old=True)} → {_side(change, old=False)}"
    if not change.stored:
        line += " — content not kept (over the size cap): it cannot be applied"
    return line


def _content(store: Contents, sha256: str, path: str) -> bytes:
    """The stored bytes, checked against their hash: a review shows exactly what the
    hash names, or nothing."""
    try:
        data = store.read(sha256)
    except (KeyError, OSError, WardenError) as exc:
        raise RenderError(
            f"the content of {shown_name(path)} (sha256 {sha256[:12]}…) cannot be shown "
            f"({exc}); the change set cannot be reviewed as it was taken: discard it "
            "(warden discard TASK) and run the task again"
        ) from exc
    if hashlib.sha256(data).hexdigest() != sha256:
        raise RenderError(
            f"the stored content of {shown_name(path)} does not match its sha256 {sha256}; "
            "the store was changed after the change set was taken: discard it"
        )
    return data


def _lines(data: bytes) -> list[str]:
    """Lines split on `\\n` only, each keeping its `\\n` (the last may lack one);
    undecodable bytes kept as lone surrogates, which `as_data` shows as escapes."""
    text = data.decode("utf-8", "surrogateescape")
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _shown_line(line: str) -> str:
    body = as_data(line.removesuffix("\n")).replace("\n", "\\n")
    if body.endswith(" "):  # trailing spaces would not show
        stripped = body.rstrip(" ")
        body = stripped + "\\x20" * (len(body) - len(stripped))
    if len(body) > MAX_LINE_CHARS:
        body = f"{body[:MAX_LINE_CHARS]}… [{len(body) - MAX_LINE_CHARS} more characters]"
    return body


class TooLongToDiffError(ValueError):
    """The part of a file that differs has more lines than `MAX_DIFF_INPUT_LINES`."""


def _unchanged_ends(old: list[str], new: list[str]) -> tuple[int, int]:
    """Lines equal at the start, and (of the rest) at the end, of both sides."""
    head = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return head, tail


def _range(start: int, length: int) -> str:
    """A hunk header's range, as diff -u writes it (1-based; an empty range names
    the line before it)."""
    first = start + 1 if length else start
    return f"{first}" if length == 1 else f"{first},{length}"


def _middle(a: list[str], b: list[str]) -> tuple[int, list[str], list[str]]:
    """Where the compared part starts, and each side's part between the unchanged
    first and last lines (with their context)."""
    head, tail = _unchanged_ends(a, b)
    start = max(head - CONTEXT_LINES, 0)
    keep = max(tail - CONTEXT_LINES, 0)
    return start, a[start : len(a) - keep], b[start : len(b) - keep]


def _hunks(start: int, a_mid: list[str], b_mid: list[str]) -> Iterator[DiffLine]:
    matcher = difflib.SequenceMatcher(None, a_mid, b_mid)
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        yield DiffLine(
            tag="hunk", text=f"@@ -{_range(start + i1, i2 - i1)} +{_range(start + j1, j2 - j1)} @@"
        )
        for op, oi1, oi2, oj1, oj2 in group:
            if op == "equal":
                yield from _content_lines("context", a_mid[oi1:oi2])
                continue
            if op in ("replace", "delete"):
                yield from _content_lines("removed", a_mid[oi1:oi2])
            if op in ("replace", "insert"):
                yield from _content_lines("added", b_mid[oj1:oj2])


def diff_lines(old: bytes, new: bytes) -> Iterator[DiffLine]:
    """The unified diff of two texts, every line made visible. Only the part between
    the unchanged first and last lines is compared (so a small edit to a big file
    costs little); raises TooLongToDiffError when that part is too long to compare
    within a bounded time (difflib's cost grows with its square)."""
    start, a_mid, b_mid = _middle(_lines(old), _lines(new))
    if max(len(a_mid), len(b_mid)) > MAX_DIFF_INPUT_LINES:
        raise TooLongToDiffError(max(len(a_mid), len(b_mid)))
    yield from _hunks(start, a_mid, b_mid)


@dataclass
class Budget:
    """What is left of one review's limits as its files are rendered."""

    lines: int = MAX_TOTAL_DIFF_LINES
    """Diff lines still to show."""
    compared: int = MAX_TOTAL_COMPARED_LINES
    """Lines difflib may still compare."""


def _content_lines(tag: DiffTag, lines: list[str]) -> Iterator[DiffLine]:
    for line in lines:
        yield DiffLine(tag=tag, text=_shown_line(line))
        if not line.endswith("\n"):
            yield DiffLine(tag="note", text="\\ No newline at end of file")


def _diff(change: FileChange, store: Contents, budget: Budget) -> tuple[tuple[DiffLine, ...], str]:
    """A text file's diff, within what is left of the review's `budget`, and the cut
    note."""
    if (
        change.kind not in ("added", "modified")
        or change.new_type != "file"
        or change.binary
        or not change.new_sha256
    ):
        return (), ""
    if not change.stored:
        return (), "not shown: the content was not kept (over the size cap)"
    if change.kind == "modified" and change.old_sha256 == change.new_sha256:
        return (), ""
    sizes = [s for s in (change.old_size, change.new_size) if s is not None]
    if any(size > MAX_DIFF_INPUT_BYTES for size in sizes):
        return (), (
            f"not shown as a diff: larger than {MAX_DIFF_INPUT_BYTES} bytes; "
            "its sha256 above binds the whole content"
        )
    if budget.lines <= 0:
        return (), "diff not shown: the review's diff budget is spent on the files above"
    new = _content(store, change.new_sha256, change.path)
    old = (
        _content(store, change.old_sha256, change.path)
        if change.old_type == "file" and change.old_sha256
        else b""
    )
    if not new and not old:
        return (DiffLine(tag="note", text="(empty file)"),), ""
    start, a_mid, b_mid = _middle(_lines(old), _lines(new))
    compared = max(len(a_mid), len(b_mid))
    if compared > MAX_DIFF_INPUT_LINES:
        return (), (
            f"not shown as a diff: the changed part has {compared} lines, more than "
            f"{MAX_DIFF_INPUT_LINES}; its sha256 above binds the whole content"
        )
    if compared > budget.compared:
        return (), (
            "diff not shown: the review compared as many lines as it may on the files "
            "above; its sha256 binds the whole content"
        )
    budget.compared -= compared
    limit = min(MAX_FILE_DIFF_LINES, budget.lines)
    shown: list[DiffLine] = []
    total = 0
    for line in _hunks(start, a_mid, b_mid):
        total += 1
        if len(shown) < limit:
            shown.append(line)
    budget.lines -= len(shown)
    cut = ""
    if total > len(shown):
        cut = (
            f"{total - len(shown)} more diff lines of this file not shown "
            f"(of {total}); its sha256 above binds the whole content"
        )
    return tuple(shown), cut


def render_file(change: FileChange, store: Contents, budget: Budget | None = None) -> FileView:
    """One change as a person reads it (within what is left of a review's `budget`)."""
    notes = [*name_notes(change.path), *lookalike_notes(change.path), *mode_notes(change)]
    if change.kind == "symlink":
        notes.extend(link_notes(change.link_target or ""))
    if change.hard_link:
        notes.append("HARD LINK: the file shares its content with another path")
    lines, cut = _diff(change, store, budget if budget is not None else Budget())
    path = shown_name(change.path)
    ascii_form = ascii_name(change.path)
    return FileView(
        change=change,
        path=path,
        path_ascii=ascii_form if ascii_form != path else "",
        summary=summary_line(change),
        notes=tuple(notes),
        lines=lines,
        cut=cut,
    )


def counts_line(change_set: ChangeSet) -> str:
    """`3 files: 1 added, 1 modified, 1 removed`."""
    found = Counter(change.kind for change in change_set.changes)
    n = len(change_set.changes)
    parts = [f"{count} {kind.replace('_', ' ')}" for kind, count in sorted(found.items())]
    return f"{n} file{'s' if n != 1 else ''}" + (f": {', '.join(parts)}" if parts else "")


VIEWS_KEPT = 8
"""Rendered change sets kept, by hash: every channel offered one review shares one
rendering (its cost is bounded, but paid once)."""
_views: OrderedDict[str, ChangeSetView] = OrderedDict()
_views_lock = threading.Lock()


def render_change_set(change_set: ChangeSet, store: Contents) -> ChangeSetView:
    """The change set as a person reads it (kept by its hash, which names every byte
    shown). Raises RenderError when its stored content is missing or is not what its
    hashes say (it must not be offered). Blocking: call it off the event loop."""
    with _views_lock:
        if (kept := _views.get(change_set.sha256)) is not None:
            return kept
    view = _render(change_set, store)
    with _views_lock:
        _views[change_set.sha256] = view
        while len(_views) > VIEWS_KEPT:
            _views.popitem(last=False)
    return view


def _render(change_set: ChangeSet, store: Contents) -> ChangeSetView:
    budget = Budget()
    files = [render_file(change, store, budget) for change in change_set.changes]
    return ChangeSetView(
        sha256=change_set.sha256,
        task_id=as_data(change_set.task_id),
        agent=shown_name(change_set.agent, 200),
        base=shown_name(change_set.base, 200),
        counts=counts_line(change_set),
        files=tuple(files),
    )
