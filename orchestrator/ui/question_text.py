"""The text of an approval question: what a person reads before answering.

What a person approves must be what runs, so the prompt leads with the fields
that decide what runs (the Bash command, the file path, the size and sha256 of
Write/Edit content, the egress host) and shows each in full, or cut with an
explicit "N more characters, shown with v" marker. Agent-written fields that do
not decide what runs (a Bash `description`, the task description) come after,
each cut on its own, so padding one field can never push another off the screen.

Every piece of container text is made visible with `untrusted_text.as_data`
(controls, zero-width and other format characters, odd spaces) and printed on
lines that start with a quote bar, wrapped at the frame's width here rather than
by the terminal, so agent text cannot draw a line that looks like warden's own.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

from rich.cells import chop_cells

from orchestrator.untrusted_text import as_data, printable

if TYPE_CHECKING:
    from orchestrator.permissions.approvers import ApprovalQuestion

DECISION_FIELDS: dict[str, tuple[str, ...]] = {
    "Bash": ("command",),
    "Write": ("file_path", "content"),
    "Edit": ("file_path", "old_string", "new_string", "replace_all"),
    "MultiEdit": ("file_path", "edits"),
    "NotebookEdit": ("notebook_path", "cell_id", "edit_mode", "new_source"),
    "Read": ("file_path",),
    "Glob": ("pattern", "path"),
    "Grep": ("pattern", "path"),
    "WebFetch": ("url",),
    "Network": ("host", "port"),
}
"""Per tool, the input fields that decide what runs, in the order shown. For a tool
not listed every field may decide, so every field is shown as a decision field."""

CONTENT_FIELDS = frozenset({"content", "old_string", "new_string", "new_source", "edits"})
"""Decision fields shown with their size and sha256 before the text itself."""

MAX_DECISION_CHARS = 4000
"""Shown of one decision field (after escaping); the rest is announced, shown with `v`."""

MAX_OTHER_CHARS = 300
"""Shown of one agent-written field that does not decide what runs."""

MAX_ASKED_BY_CHARS = 1000
"""Shown of the "asked by" line (a rule, a hook's reason, the analyser's, which may
quote the whole command: the command itself is shown above, cut at MAX_DECISION_CHARS)."""

TERMINAL_MORE = "shown with v"
"""How the terminal says where the rest of a cut field is (its `v` answer)."""

MAX_FIELDS = 24
"""Input fields shown in a prompt; further fields are counted, shown with `v`."""

DEFAULT_WIDTH = 100
"""Columns of the prompt's frame when the terminal's width is not known."""

MIN_TEXT_COLUMNS = 20
"""Narrowest quoted line: a very narrow terminal still gets readable chunks."""

CHAIN_DESCRIPTION_CHARS = 80
"""Shown of each task's description in the asking chain."""

KEY_CHARS = 40
"""Shown of an input field's name (names are agent-written too)."""

RUN_MIN = 4
"""A run of this many identical escaped characters is shown once, with a count."""

QUOTE = "  │ "
"""Starts every line of container text."""


def _hops(q: ApprovalQuestion) -> list[tuple[str, str, str]]:
    """(task id, agent type, description) per task in the chain, the asker last."""
    ids = list(q.chain) if q.chain and q.chain[-1] == q.task_id else [*q.chain, q.task_id]
    agents = [*q.chain_agents, *["?"] * len(ids)][: len(ids)]
    agents[-1] = q.agent_type
    descriptions = [*q.chain_descriptions, *[""] * len(ids)][: len(ids)]
    descriptions[-1] = q.description
    return list(zip(ids, agents, descriptions, strict=True))


def chain_text(q: ApprovalQuestion) -> str:
    """`run R → parent agent → sa_A (general-purpose) → sa_B (bash)`: who asks, through whom."""
    hops = [f"{task_id} ({agent})" for task_id, agent, _ in _hops(q)]
    head = [f"run {q.run_id}"] if q.run_id else []
    return " → ".join([*head, "parent agent", *hops])


def chain_lines(q: ApprovalQuestion, width: int) -> list[str]:
    """The asking chain, one quoted line per task with its description, the run's
    parent agent first and the asker last."""
    run = f" (run {q.run_id})" if q.run_id else ""
    lines = [f"  chain{run}: parent agent →"]
    hops = _hops(q)
    for index, (task_id, agent, description) in enumerate(hops):
        arrow = " ← asks" if index == len(hops) - 1 else " →"
        about = f": {printable(description, CHAIN_DESCRIPTION_CHARS)}" if description else ""
        hop = f"{printable(task_id, KEY_CHARS)} ({printable(agent, KEY_CHARS)}){about}{arrow}"
        lines.extend(quoted(hop, width, None, escaped=True))
    return lines


def quoted(
    text: object,
    width: int,
    limit: int | None,
    *,
    escaped: bool = False,
    more: str = TERMINAL_MORE,
) -> list[str]:
    """`text` made visible (unless `escaped` says it already is), cut at `limit`
    characters with the cut announced (`more`: where the rest is, in the words of the
    surface showing it), and wrapped into lines that each start with the quote bar and
    fit `width` cells."""
    shown = _RUN.sub(_count_run, str(text) if escaped else as_data(text))
    cut = 0
    if limit is not None and len(shown) > limit:
        end = _cut_point(shown, limit)
        shown, cut = shown[:end], len(shown) - end
    columns = max(width - len(QUOTE), MIN_TEXT_COLUMNS)
    lines = [
        QUOTE + chunk
        for line in shown.split("\n")
        for chunk in (chop_cells(line, columns) if line else [""])
    ]
    if cut:
        lines.append(f"  [{cut} more characters, {more}]")
    return lines


_RUN = re.compile(rf"(\\u[0-9a-f]{{4}}|\\U[0-9a-f]{{8}}|\\x[0-9a-f]{{2}}|\\t)\1{{{RUN_MIN - 1},}}")


def _count_run(match: re.Match[str]) -> str:
    """`⟨\\u200b 5000 times⟩`: a run of one escaped character, counted, so padding is
    plain to see and cannot fill the screen."""
    escape = match.group(1)
    return f"⟨{escape} {len(match.group(0)) // len(escape)} times⟩"


_LONGEST_TOKEN = 44
"""Characters in the longest escape or counted run `_TOKEN` matches."""

_TOKEN = re.compile(r"⟨\\[^⟩]{1,40}⟩|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|\\x[0-9a-f]{2}|\\t")
"""One escape or counted run: a cut never splits one."""


def _cut_point(shown: str, limit: int) -> int:
    """`limit`, or the start of the escape `limit` would split."""
    window_start = max(limit - _LONGEST_TOKEN, 0)
    for match in _TOKEN.finditer(shown, window_start, limit + _LONGEST_TOKEN):
        if match.start() < limit < match.end():
            return match.start()
    return limit


def _value_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def input_lines(
    q: ApprovalQuestion, width: int, *, full: bool = False, more: str = TERMINAL_MORE
) -> list[str]:
    """The tool input: decision fields first and in full (or cut with a marker saying
    where the rest is, `more`), then the other fields; `full` shows everything uncut
    (the `v` answer)."""
    decides = DECISION_FIELDS.get(q.tool_name, tuple(q.tool_input))
    first = [key for key in decides if key in q.tool_input]
    rest = [key for key in q.tool_input if key not in first]
    keys = [*first, *rest]
    shown_keys = keys if full else keys[:MAX_FIELDS]
    lines: list[str] = []
    for key in shown_keys:
        deciding = key in first
        if rest and key == rest[0]:
            lines.append("  other input fields:")
        limit = None if full else (MAX_DECISION_CHARS if deciding else MAX_OTHER_CHARS)
        text = _value_text(q.tool_input[key])
        name = printable(key, KEY_CHARS)
        if deciding and key in CONTENT_FIELDS:
            data = text.encode("utf-8", "surrogatepass")
            lines.append(f"  {name}: {len(text)} characters, {len(data)} bytes")
            lines.append(f"  {name} sha256: {hashlib.sha256(data).hexdigest()}")
        lines.append(f"  {name}:")
        lines.extend(quoted(text, width, limit, more=more))
    if len(keys) > len(shown_keys):
        lines.append(f"  [{len(keys) - len(shown_keys)} more input fields, {more}]")
    return lines


def render_question(
    q: ApprovalQuestion, width: int = DEFAULT_WIDTH, *, more: str = TERMINAL_MORE
) -> str:
    """The question as plain text fitting `width` columns, container text quoted as
    data; a cut field says where the rest is in `more` (the surface's own words)."""
    who = f"{printable(q.task_id, KEY_CHARS)} ({printable(q.agent_type, KEY_CHARS)})"
    lines = [
        f"Permission request: {printable(q.tool_name, KEY_CHARS)} for task {who}",
        "  input (from the agent, shown as data; what runs is exactly this):",
        *input_lines(q, width, more=more),
        f"  input sha256: {q.input_hash[:16]}",
        "  asked by:",
        *quoted(
            f"{q.asked_by} — {q.reason}" if q.reason else q.asked_by,
            width, MAX_ASKED_BY_CHARS, more=more,
        ),
        *chain_lines(q, width),
        "  task description (from the agent, shown as data):",
        *quoted(q.description, width, MAX_OTHER_CHARS, more=more),
    ]
    return "\n".join(lines)


def render_full_input(q: ApprovalQuestion, width: int = DEFAULT_WIDTH) -> str:
    """Every input field uncut (still made visible and quoted): the `v` answer."""
    return "\n".join(
        ["  full input (from the agent, shown as data):", *input_lines(q, width, full=True)]
    )
