"""The run as GitHub Actions shows it: a Markdown step summary (appended to the file
named by GITHUB_STEP_SUMMARY) and workflow-command annotations (`::error`,
`::warning`) for failed tasks and denied tool calls.

Both carry container-written text (descriptions, reasons, tool names), and GitHub
renders both: the summary as GitHub-flavoured Markdown (HTML, images and links
included), annotations as commands parsed line by line. So every such string is
made inert first: in the summary it sits inside a code span, where Markdown, HTML
and autolinks are not interpreted; in an annotation its `%`, CR and LF are
percent-encoded as the runner documents, so it can neither end the command nor
start another one. Annotations go to stderr, which the runner also reads, so
`--json` keeps stdout for JSON alone.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

from orchestrator.results.models import RunResult
from orchestrator.results.summary import tree_order
from orchestrator.untrusted_text import as_data

MAX_CELL_CHARS = 300
"""Longest container text in one summary cell; longer is cut and marked `…`."""
MAX_ANNOTATIONS = 50
"""Most annotations one run prints (GitHub shows 10 per step anyway); the last one
says how many more there were."""
STATUS_MARK = {"completed": "✅", "failed": "❌", "timed_out": "⏱️", "disk_limit": "❌"}


def code_span(value: object, limit: int = MAX_CELL_CHARS) -> str:
    """Container text as an inert Markdown code span fit for a table cell."""
    text = " ".join(as_data(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("|", "\\|")  # a pipe ends a table cell even inside code
    if not text:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def step_summary(result: RunResult) -> str:
    """The run's Markdown summary: outcome, the task tree, the denials."""
    lines = [
        f"### warden run `{result.run_id or 'not started'}`: {result.status}",
        "",
        f"exit code {result.exit_code}; {len(result.tasks)} task(s); "
        f"{result.tokens} subagent tokens; {len(result.denials)} denial(s)"
        + (f"; `--fail-on` matched: {', '.join(result.failed_on)}" if result.failed_on else ""),
        "",
    ]
    if result.error:
        lines += [f"error: {code_span(result.error, 1_000)}", ""]
    if result.tasks:
        lines += [
            "| task | type | status | tokens | tool calls | denials |",
            "|---|---|---|---:|---:|---:|",
        ]
        for level, task in tree_order(result.tasks):
            indent = "&nbsp;&nbsp;" * level + ("↳ " if level else "")
            lines.append(
                f"| {indent}{code_span(task.description)} | {code_span(task.agent_type)} "
                f"| {STATUS_MARK.get(task.status, '')} {task.status} | {task.tokens} "
                f"| {task.tool_calls} | {task.denials} |"
            )
        lines.append("")
    if result.denials:
        lines += ["| denied tool | task | decided by | reason |", "|---|---|---|---|"]
        for denial in result.denials:
            lines.append(
                f"| {code_span(denial.tool_name)} | {denial.task_id or 'parent'} "
                f"| {code_span(denial.decided_by)} | {code_span(denial.reason)} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def command_data(value: object) -> str:
    """An annotation's message, escaped as the runner decodes it."""
    text = as_data(value)
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def command_property(value: object) -> str:
    """An annotation property (title), escaped as the runner decodes it."""
    return command_data(value).replace(":", "%3A").replace(",", "%2C")


def workflow_commands(result: RunResult) -> Iterator[str]:
    """`::error`/`::warning` lines for failed tasks, denials and a failed run."""
    lines: list[str] = []
    if result.status not in ("completed",):
        lines.append(
            f"::error title={command_property(f'warden run {result.status}')}::"
            + command_data(result.error or f"the run {result.status}")
        )
    for task in result.tasks:
        if task.status in ("failed", "timed_out", "disk_limit"):
            title = f"warden task {task.status}: {as_data(task.description)[:100]}"
            lines.append(
                f"::error title={command_property(title)}::"
                + command_data(f"{task.task_id} ({task.agent_type}): {task.error or task.status}")
            )
    for denial in result.denials:
        title = f"warden denied {as_data(denial.tool_name)[:100]}"
        lines.append(
            f"::warning title={command_property(title)}::"
            + command_data(f"{denial.task_id or 'parent'}: {denial.decided_by}: {denial.reason}")
        )
    if len(lines) > MAX_ANNOTATIONS:
        more = len(lines) - MAX_ANNOTATIONS + 1
        lines = [*lines[: MAX_ANNOTATIONS - 1], f"::notice::{more} more; see the step summary"]
    yield from lines


def publish(result: RunResult, summary_path: Path | None) -> None:
    """Append the step summary (when the job has a summary file) and print the
    annotations on stderr. A summary file that cannot be written is said, not fatal:
    the run's own outputs are already written."""
    if summary_path is not None:
        try:
            with summary_path.open("a", encoding="utf-8") as f:
                f.write(step_summary(result))
        except OSError as exc:
            print(
                f"warden: cannot append to GITHUB_STEP_SUMMARY ({summary_path}): {exc.strerror}",
                file=sys.stderr,
            )
    for line in workflow_commands(result):
        print(line, file=sys.stderr)
    sys.stderr.flush()
