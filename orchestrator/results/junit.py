"""The run as a JUnit XML report (`warden run --junit FILE`): one test case per
subagent task plus one for the parent agent, a failure for failed, timed-out and
denied, so CI systems show the run natively.

Case names are stable across runs of one script, so CI history can follow a case:
a task is named by its path of descriptions from the top-level task down (`parent
description > task description`), with `[2]`, `[3]` on later siblings that share a
name. Random ids never enter a name; each case's task id is a property of the suite
(`<property name="task_id: NAME" value="sa_…"/>`), where every JUnit schema allows
properties, and a line of its `system-out`.

The XML is built with the standard library's ElementTree, which escapes markup;
container text also passes through `untrusted_text.as_data` and loses the few
characters XML 1.0 cannot carry at all, so a hostile result cannot break the file.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable

from orchestrator.results.models import RunResult, TaskSummary
from orchestrator.results.summary import tree_order
from orchestrator.untrusted_text import as_data

FAILING_STATUSES = {
    "failed": "failed",
    "timed_out": "timed out",
    "disk_limit": "killed at a disk limit",
}
"""Task statuses reported as a JUnit failure (denials are one too)."""
SKIPPED_STATUSES = ("stopped", "interrupted", "pending", "running")
"""Task statuses reported as skipped: they never ran to an end."""
MAX_MESSAGE_CHARS = 2_000
"""Longest failure message attribute; the body carries the rest."""
MAX_NAME_CHARS = 500
"""Longest test case name; a longer description path is cut (announced with `…`)."""
PATH_SEPARATOR = " > "
SUITE_NAME = "warden"
PARENT_CASE = "parent agent"

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def text(value: object) -> str:
    """Container text made inert and valid for XML 1.0."""
    return _NOT_XML.sub("\ufffd", as_data(value))


def junit_xml(result: RunResult) -> bytes:
    """The report as UTF-8 XML bytes."""
    suite = ET.Element("testsuite", name=SUITE_NAME)
    names = case_names(result.tasks)
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="run_id", value=text(result.run_id or ""))
    for task in result.tasks:
        ET.SubElement(
            properties, "property", name=f"task_id: {names[task.task_id]}", value=task.task_id
        )
    failures = skipped = 0
    parent = ET.SubElement(
        suite,
        "testcase",
        classname="warden.parent",
        name=PARENT_CASE,
        time=f"{result.duration_s:.3f}",
    )
    refused = [
        f"refused {text(d.tool_name)} ({text(d.decided_by)}): {text(d.reason)}"
        for d in result.denials
        if d.task_id is None
    ]
    if result.status != "completed":
        failures += 1
        failure = ET.SubElement(parent, "failure", type=result.status)
        failure.set("message", text(result.error or f"the run {result.status}")[:MAX_MESSAGE_CHARS])
    elif refused:  # a Task call of the parent's that warden refused
        failures += 1
        failure = ET.SubElement(parent, "failure", type="denied")
        failure.set("message", refused[0][:MAX_MESSAGE_CHARS])
        failure.text = "\n".join(refused)
    for task in result.tasks:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"warden.{text(task.agent_type)}",
            name=names[task.task_id],
            time=f"{task.duration_s or 0:.3f}",
        )
        problems = _problems(task, result)
        if problems:
            failures += 1
            kind = task.status if task.status in FAILING_STATUSES else "denied"
            failure = ET.SubElement(case, "failure", type=kind)
            failure.set("message", problems[0][:MAX_MESSAGE_CHARS])
            failure.text = "\n".join(problems)
        elif task.status in SKIPPED_STATUSES:
            skipped += 1
            ET.SubElement(case, "skipped", message=f"task {task.status}")
        out = ET.SubElement(case, "system-out")
        out.text = (
            f"task id: {task.task_id}\nstatus: {task.status}\ntokens: {task.tokens}\nturns: {task.turns}\n"
            f"tool calls: {task.tool_calls}\ndenials: {task.denials}\n"
            + "".join(f"wrote: {text(p)}\n" for p in task.files_written)
        )
    suite.set("tests", str(len(result.tasks) + 1))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    suite.set("time", f"{result.duration_s:.3f}")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data


def case_names(tasks: Iterable[TaskSummary]) -> dict[str, str]:
    """task id -> its stable case name: the descriptions from the top-level task down,
    the second and later siblings of one name numbered in creation order."""
    ordered = list(tasks)
    own: dict[str, str] = {}
    seen: dict[str, int] = {}
    for _level, task in tree_order(ordered):
        parent = own.get(task.parent_id or "", "")
        label = " ".join(text(task.description).split()) or task.agent_type
        name = f"{parent}{PATH_SEPARATOR}{label}" if parent else label
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} [{seen[name]}]"
        own[task.task_id] = name
    return {
        task_id: name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 1] + "…"
        for task_id, name in own.items()
    }


def _problems(task: TaskSummary, result: RunResult) -> list[str]:
    problems = []
    if task.status in FAILING_STATUSES:
        problems.append(f"task {FAILING_STATUSES[task.status]}: {text(task.error or '')}".rstrip())
    for denial in result.denials:
        if denial.task_id == task.task_id:
            problems.append(
                f"denied {text(denial.tool_name)} ({text(denial.decided_by)}): "
                f"{text(denial.reason)}"
            )
    return problems
