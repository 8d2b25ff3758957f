"""`warden run` takes a job the way CI jobs hand one over: a prompt too long for one
argument (from a file or stdin), a deadline for the whole run, and Claude Code's
spellings of the flags people already type. Each is driven through the real CLI
against the real engine and the scripted model."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from orchestrator.config import Settings
from orchestrator.exit_codes import ExitCode
from tests.conftest import run_warden, warden_argv, warden_env
from tests.integration.harness import PARENT_MATCH, containers_of, task, text, tool

pytestmark = pytest.mark.integration

MARKER = "END-OF-THE-LONG-PROMPT"
LONG_PROMPT = "Review every line below.\n" + "x = 1  # padding\n" * 20_000 + MARKER
"""About 340 KB: over Linux's 128 KiB limit for one argument."""


def _script(tmp_path: Path, conversations: list[dict[str, object]]) -> Path:
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump({"conversations": conversations}))
    return path


def _answering_only_the_whole_prompt(tmp_path: Path) -> Path:
    return _script(
        tmp_path,
        [
            {
                "name": "parent",
                "match": {**PARENT_MATCH, "prompt_contains": MARKER},
                "turns": [{"content": [text("read all of it")]}],
            }
        ],
    )


def test_a_prompt_longer_than_an_argument_arrives_whole_from_a_file(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    prompt_file = tmp_path / "prompt.md"
    prompt_file.write_text(LONG_PROMPT)
    script = _answering_only_the_whole_prompt(tmp_path)
    proc = run_warden(
        settings, "run", "--prompt-file", str(prompt_file), "--replay", str(script),
        "--workspace", str(workspace), "--output-format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = proc.stdout.splitlines()  # `json`: the result document alone, no events
    result = json.loads(line)
    assert (result["status"], result["result"]) == ("completed", "read all of it")


def test_a_prompt_from_standard_input(settings: Settings, workspace: Path, tmp_path: Path) -> None:
    script = _answering_only_the_whole_prompt(tmp_path)
    proc = subprocess.run(
        warden_argv("run", "-p", "-", "--replay", str(script), "--workspace", str(workspace)),
        input=LONG_PROMPT,
        env=warden_env(WARDEN_STATE_DIR=str(settings.state_dir)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "read all of it"


@pytest.mark.parametrize(
    ("argv", "fix"),
    [
        (["run", "--json"], "no prompt"),
        (["run", "--json", "--prompt-file", "/nonexistent/prompt.md"], "cannot read the prompt"),
        (["run", "--json", "go", "--no-such-flag"], "No such option"),
        (["run", "--json", "go", "--replay", "/nonexistent/script.yaml"], "does not exist"),
        (["run", "--output-format", "json", "a", "--prompt-file", "/etc/hostname"], "once"),
    ],
)
def test_a_refused_command_line_still_ends_with_one_result_document(
    settings: Settings, tmp_path: Path, argv: list[str], fix: str
) -> None:
    junit = tmp_path / "j.xml"
    proc = run_warden(settings, *argv, "--junit", str(junit), timeout=60)
    assert proc.returncode == ExitCode.USAGE
    (line,) = proc.stdout.splitlines()
    result = json.loads(line)
    assert (result["type"], result["status"], result["exit_code"]) == ("result", "failed", 2)
    assert fix in result["error"] and fix in proc.stderr
    assert "Traceback" not in proc.stderr
    assert junit.exists() and b"<failure" in junit.read_bytes()


def test_the_run_timeout_stops_every_subagent_and_exits_124(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    script = _script(
        tmp_path,
        [
            {
                "name": "parent",
                "match": PARENT_MATCH,
                "turns": [{"content": [task("NAPPER", "bash")]}],
            },
            {
                "name": "napper",
                "match": {"prompt_contains": "NAPPER"},
                "turns": [{"content": [tool("Bash", command="sleep 300", timeout=600000)]}],
            },
        ],
    )
    proc = run_warden(
        settings, "run", "go", "--replay", str(script), "--workspace", str(workspace),
        "--allowedTools", "Bash(sleep:*) Task", "--timeout", "15", "--json",
    )  # fmt: skip
    assert proc.returncode == ExitCode.TIMED_OUT, proc.stderr[-2000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["status"] == "stopped" and "--timeout of 15 s" in result["error"]
    assert [t["status"] for t in result["tasks"]] == ["stopped"]
    assert containers_of(result["run_id"]) == []


def test_claude_code_flag_spellings_mean_what_they_mean_there(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """--disallowedTools denies (a list in one value), --max-turns bounds the parent."""
    script = _script(
        tmp_path,
        [
            {
                "name": "parent",
                "match": PARENT_MATCH,
                "turns": [
                    {"content": [task("WRITER", "bash")]},
                    {"content": [task("AGAIN", "bash")]},
                ],
            },
            {
                "name": "writer",
                "match": {"prompt_contains": "WRITER"},
                "turns": [
                    {"content": [tool("Bash", command="touch made.txt")]},
                    {"content": [text("{last_tool_result}")]},
                ],
            },
        ],
    )
    proc = run_warden(
        settings, "run", "go", "--replay", str(script), "--workspace", str(workspace),
        "--permission-mode", "bypassPermissions", "--json", "--max-turns", "1",
        "--disallowedTools", "Read,Bash(touch:*) Edit",
        GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"),
    )  # fmt: skip
    result = json.loads(proc.stdout.splitlines()[-1])  # stdout stays JSON under Actions
    assert not (workspace / "made.txt").exists()
    assert [d["tool_name"] for d in result["denials"]] == ["Bash"]
    assert len(result["tasks"]) == 1  # one parent turn: the second Task was never asked for
    assert "limit of 1 turns" in result["result"] + (result["error"] or "")
    # Under GitHub Actions: the step summary and an annotation for the denial.
    summary = (tmp_path / "summary.md").read_text()
    assert "| `Bash` |" in summary and "test task" in summary
    assert "::warning title=warden denied Bash::" in proc.stderr


def test_a_refused_task_call_is_visible_to_ci(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """The model asked for a subagent type that does not exist: no task ever starts,
    yet CI sees it: an event, a denial, an outcome --fail-on selects, a JUnit failure."""
    script = _script(
        tmp_path,
        [
            {
                "name": "parent",
                "match": PARENT_MATCH,
                "turns": [
                    {"content": [task("anything", "no-such-agent")]},
                    {"content": [text("gave up")]},
                ],
            }
        ],
    )
    junit = tmp_path / "j.xml"
    proc = run_warden(
        settings, "run", "go", "--replay", str(script), "--workspace", str(workspace),
        "--json", "--fail-on", "denied", "--junit", str(junit),
    )  # fmt: skip
    assert proc.returncode == ExitCode.OUTCOME, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    result = lines[-1]
    assert result["tasks"] == [] and result["failed_on"] == ["denied"]
    (denial,) = result["denials"]
    assert (denial["task_id"], denial["tool_name"]) == (None, "Task")
    assert "no-such-agent" in denial["reason"]
    assert [e["kind"] for e in lines[:-1]].count("task_refused") == 1
    parent_case = ET.parse(junit).getroot().find("testsuite/testcase[@name='parent agent']")
    assert parent_case is not None
    failure = parent_case.find("failure")
    assert failure is not None and failure.get("type") == "denied"


def test_a_task_deny_rule_refuses_the_parents_task_call(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """`Task(bash)` in the deny list keeps warden's own parent from starting a bash
    subagent, as Claude Code's deny rule keeps its Task tool from it; the model reads
    why, and CI sees the refusal."""
    script = _script(
        tmp_path,
        [
            {
                "name": "parent",
                "match": PARENT_MATCH,
                "turns": [
                    {"content": [task("touch made.txt", "bash")]},
                    {"content": [text("gave up")]},
                ],
            }
        ],
    )
    proc = run_warden(
        settings, "run", "go", "--replay", str(script), "--workspace", str(workspace),
        "--deny", "Task(bash)", "--json", "--fail-on", "denied",
    )  # fmt: skip
    assert proc.returncode == ExitCode.OUTCOME, proc.stderr[-2000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["tasks"] == [] and not (workspace / "made.txt").exists()
    (denial,) = result["denials"]
    assert (denial["task_id"], denial["tool_name"]) == (None, "Task")
    assert "Task(bash)" in denial["reason"]


def test_fork_and_background_flags_reach_the_parent(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """`--fork` gives the parent the subagents' tools and lets a `fork: true` Task start
    from the parent's own conversation; `--background` runs a Task that did not say
    `run_in_background` in the background, and its result comes back as a notification."""
    script = _script(
        tmp_path,
        [
            {
                # A fork's first request ends with the fork-mode brief and holds the
                # parent's assistant message (turn 1); a fresh subagent's would not match.
                "name": "fork",
                "match": {"last_message_contains": "[Fork mode]"},
                "turns": [{"content": [text("-")]}, {"content": [text("FORK-DONE")]}],
            },
            {
                # Offered Bash only in fork mode: without --fork no conversation matches.
                "name": "parent",
                "match": {**PARENT_MATCH, "has_tool": "Bash"},
                "turns": [
                    {"content": [task("FORK-JOB", fork=True)]},
                    {"content": [text("waiting")]},
                    {"content": [text("all done")]},
                ],
            },
        ],
    )
    proc = run_warden(
        settings, "run", "go", "--replay", str(script), "--workspace", str(workspace),
        "--permission-mode", "bypassPermissions", "--json", "--fork", "--background",
    )  # fmt: skip
    assert proc.returncode == ExitCode.OK, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["result"] == "all done"
    assert [t["status"] for t in result["tasks"]] == ["completed"]
    logs = json.loads(run_warden(settings, "logs", result["run_id"], "--json").stdout)
    sent = json.dumps(logs["parent_transcript"])
    assert "Task started in the background with id" in sent
    assert "<task-notification>Background task" in sent
    assert "Result: FORK-DONE" in sent  # only the fork's final answer came back


def test_a_root_owned_workspace_is_named_with_the_fix_before_any_write_fails(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """Sandboxes never run as root: in a root-owned workspace they get the fallback
    uid and every write there fails. The person hears why once, at the start, not
    only as a subagent's failed writes."""
    script = _script(
        tmp_path,
        [
            {"name": "parent", "match": PARENT_MATCH,
             "turns": [{"content": [task("WRITER write", "general-purpose")]},
                       {"content": [text("done")]}]},
            {"name": "writer", "match": {"prompt_contains": "WRITER"},
             "turns": [{"content": [tool("Write", file_path="/workspace/out.md", content="x")]},
                       {"content": [text("tried")]}]},
        ],
    )  # fmt: skip
    run = ("run", "go", "--replay", str(script), "--allow", "Write")
    owned = run_warden(settings, *run, "--workspace", str(workspace))
    assert owned.returncode == 0, owned.stderr[-2000:]
    assert "owned by root" not in owned.stderr and (workspace / "out.md").is_file()
    root_owned = tmp_path / "root-owned"
    root_owned.mkdir()
    assert root_owned.stat().st_uid == 0, "the test runs as root, as CI does"
    ran = run_warden(settings, *run, "--workspace", str(root_owned))
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stderr.count("owned by root") == 1, ran.stderr[-2000:]
    assert "chown" in ran.stderr and "--user UID:GID" in ran.stderr
    assert not (root_owned / "out.md").exists()


def test_a_policy_file_in_the_workspace_cannot_be_rewritten_by_a_subagent(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """`--policy` may name a file in the checkout; a subagent that could rewrite it
    would choose the rules of the next run. It is read-only in every sandbox."""
    policy = workspace / "ci" / "policy.yaml"
    policy.parent.mkdir()
    rules = "allow:\n  - Bash\ndeny:\n  - Bash(rm:*)\n"
    policy.write_text(rules)
    owner = workspace.stat()
    for made in (policy.parent, policy):  # the checkout's own files, as a user's are
        os.chown(made, owner.st_uid, owner.st_gid)
    overwrite = "echo 'allow: [Bash]' > ci/policy.yaml; echo status=$?; echo x > ci/other; echo other=$?"
    script = _script(
        tmp_path,
        [
            {"name": "parent", "match": PARENT_MATCH,
             "turns": [{"content": [task("REWRITER go", "bash")]},
                       {"content": [text("done")]}]},
            {"name": "rewriter", "match": {"prompt_contains": "REWRITER"},
             "turns": [{"content": [tool("Bash", command=overwrite)]},
                       {"content": [text("tried")]}]},
        ],
    )  # fmt: skip
    ran = run_warden(
        settings, "run", "go", "--replay", str(script), "--policy", str(policy),
        "--permission-mode", "acceptEdits", "--workspace", str(workspace), "--json",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert policy.read_text() == rules
    assert (workspace / "ci" / "other").read_text() == "x\n"  # the rest stays writable
