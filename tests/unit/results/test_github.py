"""Under GitHub Actions a run's summary and annotations show container-written text
as text: the Markdown summary renders no HTML, image or link from it, and an
annotation's message can neither end its command nor start a forged one."""

from __future__ import annotations

from markdown_it import MarkdownIt

from orchestrator.results.github import code_span, step_summary, workflow_commands
from orchestrator.results.models import Denial, RunResult, TaskSummary

HOSTILE = (
    "<img src=x onerror=alert(1)> ![t](http://127.0.0.1/p.png) [c](javascript:alert(1)) "
    "<script>x</script> | col ``tick`` \\n%0A\n::error::forged\r::add-mask::x *b* <b>"
)


def _run() -> RunResult:
    task = TaskSummary(
        task_id="sa_1", parent_id=None, depth=1, agent_type="bash", description=HOSTILE,
        status="failed", duration_s=1.0, tokens=5, turns=1, tool_calls=1, denials=1,
        asks=0, files_written=[], error=HOSTILE,
    )  # fmt: skip
    denial = Denial(
        task_id="sa_1", tool_name="Bash", input_hash="h", decided_by="rule: Bash(rm:*)",
        reason=HOSTILE,
    )  # fmt: skip
    return RunResult(
        run_id="run_1", status="completed", exit_code=3, result="", duration_s=1.0, tokens=5,
        tasks=[task], denials=[denial], fail_on=["denied"], failed_on=["denied"],
    )  # fmt: skip


def test_the_step_summary_renders_container_text_as_text() -> None:
    html = MarkdownIt("commonmark").enable("table").render(step_summary(_run()))
    for markup in ("<img", "<script", "<a ", "<b>", "<em>", "<strong>"):
        assert markup not in html
    # Each row keeps its columns: a pipe in the text did not open a new cell.
    body = html.split("<tbody>")
    assert len(body) == 3  # the task table and the denial table
    assert body[1].count("<td") == 6 and body[2].split("</tbody>")[0].count("<td") == 4
    assert "onerror=alert(1)" in html  # still there, as text


def test_a_code_span_survives_backticks_at_its_edges() -> None:
    html = MarkdownIt("commonmark").render(code_span("`a``b`"))
    assert "<code>`a``b`</code>" in html


def test_annotations_cannot_forge_commands() -> None:
    lines = list(workflow_commands(_run()))
    assert len(lines) == 2
    assert lines[0].startswith("::error title=warden task failed%3A ")
    assert lines[1].startswith("::warning title=warden denied Bash::")
    for line in lines:
        assert "\n" not in line and "\r" not in line
        # The runner reads a command only at a line's start: the forged one stays
        # inside this line's message, after an encoded line feed.
        assert "%0A::error::forged" in line
