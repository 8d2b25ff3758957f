"""Locks in the run's published outputs without Docker: the result document built
from stored tasks, events and audit (tree, tokens, tool calls, denials, files),
--fail-on and the exit-code precedence, JUnit XML that hostile text cannot break,
the summary tree, and the JSON Schemas in docs/ equal to the generated ones."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from io import BytesIO, StringIO
from pathlib import Path
from typing import Literal

import click
import pytest

from orchestrator.errors import (
    ConfigError,
    EngineUnavailableError,
    ImageNotFoundError,
    PolicyError,
    UnsupportedImageError,
)
from orchestrator.exit_codes import ExitCode, exit_code_for
from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.results.build import build_result, final_exit_code, stored_event
from orchestrator.results.junit import junit_xml
from orchestrator.results.models import Event, RunResult, TaskSummary, json_schema
from orchestrator.results.report import parse_fail_on
from orchestrator.results.summary import print_summary, tree_order
from orchestrator.store import AuditRecord, Store, TaskRecord
from tests.conftest import REPO_ROOT, warden_argv, warden_env

HOSTILE = "evil\x1b[31m</failure>]]><![CDATA[\x00\ufffe [bold]x[/bold]"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "warden.db")
    s.create_run("run_1", prompt="p", workspace="/w", model="m", pid=1)
    return s


def _task(store: Store, task_id: str, parent: str | None, status: str, **extra: object) -> None:
    store.create_task(
        TaskRecord(
            task_id=task_id,
            run_id="run_1",
            parent_id=parent,
            agent_type="bash",
            description=HOSTILE if task_id == "sa_b" else "describe",
            prompt="p",
            depth=2 if parent else 1,
        )
    )
    store.update_task(task_id, status=status, ended_at=store.get_task(task_id).created_at + 2)


def _event(store: Store, task_id: str, kind: str, **data: JSONValue) -> None:
    event = Event(kind=kind, run_id="run_1", task_id=task_id, data=data)
    store.append_event("run_1", task_id, kind, json.loads(event.model_dump_json()))


def _audit(
    store: Store, task_id: str, tool: str, final: Literal["allow", "deny"], **tool_input: JSONValue
) -> None:
    store.record_audit(
        AuditRecord(
            run_id="run_1",
            task_id=task_id,
            agent_type="bash",
            tool_name=tool,
            input_hash="h",
            tool_input=dict(tool_input),
            decision="ask" if final == "deny" else "allow",
            final=final,
            decided_by="rule: Bash(rm:*)" if final == "deny" else "mode",
            source="cli",
            reason=HOSTILE if final == "deny" else "",
        )
    )


@pytest.fixture
def populated(store: Store) -> Store:
    _task(store, "sa_a", None, "completed")
    _task(store, "sa_b", "sa_a", "failed")
    _task(store, "sa_c", None, "timed_out")
    _event(store, "sa_a", "task_running", event="tool_started", tool_name="Write")
    _event(store, "sa_a", "task_running", event="tool_finished", tool_name="Write")
    _event(store, "sa_a", "task_running", event="tool_started", tool_name="Bash")
    usage_a: JSONObject = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 20,
        "cache_read_input_tokens": 70,
        "output_tokens": 20,
    }
    _event(
        store, "sa_a", "task_completed", status="completed", tokens=120, turns=3, duration_s=1.5,
        usage=usage_a,
    )  # fmt: skip
    usage_b: JSONObject = {"input_tokens": 20, "output_tokens": 10}
    _event(
        store, "sa_b", "task_failed", status="failed", tokens=30, turns=1, duration_s=0.5,
        usage=usage_b,
    )  # fmt: skip
    _audit(store, "sa_a", "Write", "allow", file_path="/workspace/a.txt")
    _audit(store, "sa_a", "Edit", "allow", file_path="/workspace/a.txt")
    _audit(store, "sa_b", "Bash", "deny", command="rm -rf /")
    return store


def _result(store: Store, code: int = 0, fail_on: tuple[str, ...] = ()) -> object:
    return build_result(
        store,
        "run_1",
        base_code=code,
        status="completed",
        text="answer",
        error=None,
        started=0.0,
        fail_on=fail_on,  # type: ignore[arg-type]
    )


def test_the_result_holds_the_task_tree_tokens_tool_calls_denials_and_files(
    populated: Store,
) -> None:
    result = build_result(
        populated, "run_1", base_code=0, status="completed", text="answer", error=None, started=0
    )
    by_id = {t.task_id: t for t in result.tasks}
    assert [t.task_id for t in result.tasks] == ["sa_a", "sa_b", "sa_c"]
    assert by_id["sa_b"].parent_id == "sa_a" and by_id["sa_b"].depth == 2
    assert (by_id["sa_a"].tokens, by_id["sa_a"].turns, by_id["sa_a"].tool_calls) == (120, 3, 2)
    assert by_id["sa_a"].files_written == ["/workspace/a.txt"]
    assert by_id["sa_a"].duration_s == 1.5 and by_id["sa_c"].duration_s == 2
    assert (by_id["sa_b"].denials, by_id["sa_b"].asks) == (1, 1)
    assert result.tokens == 150 and result.exit_code == 0 and result.failed_on == []
    assert [(d.task_id, d.tool_name) for d in result.denials] == [("sa_b", "Bash")]


def test_usage_fields_are_counted_apart_with_the_cache_hit_share(populated: Store) -> None:
    """Uncached input, cache writes, cache reads and output are billed at different
    rates: each task and the run report them apart, with the share of input read from
    the prompt cache (also a column of the summary table)."""
    result = _result(populated)
    by_id = {t.task_id: t for t in result.tasks}  # type: ignore[attr-defined]
    a = by_id["sa_a"].usage
    assert (a.input_tokens, a.cache_creation_input_tokens, a.cache_read_input_tokens) == (
        10,
        20,
        70,
    )
    assert a.output_tokens == 20 and a.cache_hit_share == 0.7
    assert by_id["sa_b"].usage.cache_hit_share == 0 and by_id["sa_c"].usage.cache_hit_share is None
    run = result.usage  # type: ignore[attr-defined]
    assert (run.input_tokens, run.cache_read_input_tokens, run.output_tokens) == (30, 70, 30)
    assert run.cache_hit_share == round(70 / 120, 4)
    out = StringIO()
    print_summary(result, out)  # type: ignore[arg-type]
    rows = out.getvalue().splitlines()
    assert any("cached" in r for r in rows)
    assert "70%" in next(r for r in rows if "sa_a" in r)
    assert "58%" in next(r for r in rows if "run (parent" in r)


@pytest.mark.parametrize(
    ("fail_on", "base", "failed_on", "code"),
    [
        (("denied",), 0, ["denied"], 3),
        (("failed", "timed_out", "asked"), 0, ["failed", "timed_out", "asked"], 3),
        (("denied",), 1, ["denied"], 1),  # a run error outranks an outcome
        (("denied",), 143, ["denied"], 143),  # so does a stop signal
        ((), 0, [], 0),  # outcomes alone never fail a run
    ],
)
def test_fail_on_turns_outcomes_into_exit_3_below_errors_and_signals(
    populated: Store, fail_on: tuple[str, ...], base: int, failed_on: list[str], code: int
) -> None:
    result = _result(populated, base, fail_on)
    assert (result.failed_on, result.exit_code) == (failed_on, code)  # type: ignore[attr-defined]


def test_fail_on_parses_a_comma_list_and_rejects_unknown_outcomes() -> None:
    assert parse_fail_on("failed, denied,failed") == ("failed", "denied")
    assert parse_fail_on(None) == ()
    with pytest.raises(click.BadParameter, match=r"unknown outcome.*errored"):
        parse_fail_on("failed,errored")
    assert final_exit_code(0, ["asked"]) == ExitCode.OUTCOME


def test_errors_map_to_usage_or_run_error() -> None:
    assert exit_code_for(ConfigError("x")) == exit_code_for(PolicyError("x")) == 2
    assert exit_code_for(click.UsageError("x")) == 2
    assert exit_code_for(EngineUnavailableError("x")) == 1
    # An image that is missing or cannot run a subagent: refused before anything ran.
    assert exit_code_for(ImageNotFoundError("x")) == exit_code_for(UnsupportedImageError("x")) == 2


def test_junit_has_a_case_per_task_failures_for_failed_timed_out_denied_and_escapes_text(
    populated: Store,
) -> None:
    raw = junit_xml(_result(populated))  # type: ignore[arg-type]
    suite = ET.fromstring(raw).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "0")
    ids = {
        p.get("value"): p.get("name", "").removeprefix("task_id: ")
        for p in suite.iter("property")
        if p.get("name", "").startswith("task_id: ")
    }
    by_name = {c.get("name"): c for c in suite.iter("testcase")}
    cases = {task_id: by_name[name] for task_id, name in ids.items()}
    assert cases["sa_a"].find("failure") is None
    failure_b, failure_c = cases["sa_b"].find("failure"), cases["sa_c"].find("failure")
    assert failure_b is not None and failure_c is not None
    assert failure_c.get("type") == "timed_out"
    # The hostile reason is data: markup stays text, controls are visible escapes.
    assert "</failure>]]>" in (failure_b.text or "") and "\x1b" not in raw.decode()
    assert "\\x1b" in (failure_b.text or "")


def test_the_summary_is_a_tree_in_plain_text(populated: Store) -> None:
    result = _result(populated)
    assert [(lvl, t.task_id) for lvl, t in tree_order(result.tasks)] == [  # type: ignore[attr-defined]
        (0, "sa_a"), (1, "sa_b"), (0, "sa_c"),
    ]  # fmt: skip
    out = StringIO()
    print_summary(result, out)  # type: ignore[arg-type]
    text = out.getvalue()
    assert "\x1b" not in text and "evil\\x1b[31m</failure>" in text
    assert max(len(line) for line in text.splitlines()) > 80  # not wrapped when piped
    lines = text.splitlines()
    assert lines.index(next(x for x in lines if "sa_b" in x)) == 1 + lines.index(
        next(x for x in lines if "sa_a" in x)
    )


def test_a_clipped_stored_event_keeps_the_published_shape(store: Store) -> None:
    store.append_event("run_1", None, "huge", {"kind": "huge", "data": "x" * 100_000})
    (record,) = store.events(run_id="run_1")
    event = stored_event(record)
    assert event.kind == "huge" and event.run_id == "run_1"


@pytest.mark.parametrize("name", ["events", "result"])
def test_the_published_schemas_match_the_models(name: str) -> None:
    published = json.loads((REPO_ROOT / "docs" / "schema" / f"{name}.schema.json").read_text())
    assert published == json_schema(name)  # type: ignore[arg-type]
    proc = subprocess.run(
        warden_argv("schema", name), env=warden_env(), capture_output=True, text=True, check=True
    )
    assert json.loads(proc.stdout) == published


def test_an_error_before_the_run_still_ends_json_with_one_result(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        "conversations:\n  - {name: p, match: {}, turns: [{content: [{type: text, text: hi}]}]}\n"
    )
    argv = warden_argv(
        "run", "go", "--json", "--replay", str(script),
        "--workspace", str(tmp_path / "missing"), "--junit", str(tmp_path / "j.xml"),
    )  # fmt: skip
    proc = subprocess.run(
        argv,
        env=warden_env(WARDEN_STATE_DIR=str(tmp_path / "state"), CI="true"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == ExitCode.USAGE
    assert proc.stderr.count("warden: error:") == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stdout.splitlines()
    result = json.loads(line)
    assert (result["type"], result["status"], result["run_id"]) == ("result", "failed", None)
    assert "is not a directory" in result["error"] and result["exit_code"] == 2
    assert ET.parse(tmp_path / "j.xml").getroot().find("testsuite/testcase/failure") is not None


def test_run_user_is_validated_like_exec_and_never_root(tmp_path: Path) -> None:
    proc = subprocess.run(
        warden_argv("run", "go", "--user", "0:1000", "--workspace", str(tmp_path)),
        env=warden_env(WARDEN_STATE_DIR=str(tmp_path / "state"), CI="true"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == ExitCode.USAGE
    assert "never run as root" in proc.stderr


def test_a_run_user_overrides_the_workspace_owner(tmp_path: Path) -> None:
    from orchestrator.runtime.sandbox import sandbox_identity

    identity = sandbox_identity(tmp_path, 1000, "4321:99")
    assert (identity.uid, identity.gid) == (4321, 99)
    with pytest.raises(ValueError, match="root"):
        sandbox_identity(tmp_path, 1000, "0")


def _summary(task_id: str, parent: str | None, description: str) -> TaskSummary:
    return TaskSummary(
        task_id=task_id,
        parent_id=parent,
        depth=2 if parent else 1,
        agent_type="bash",
        description=description,
        status="completed",
        duration_s=1.0,
        tokens=1,
        turns=1,
        tool_calls=0,
        denials=0,
        asks=0,
        files_written=[],
        error=None,
    )


def _run_of(run_id: str, ids: list[str]) -> RunResult:
    a, b, c, d = ids
    tasks = [
        _summary(a, None, "Build the project"),
        _summary(b, a, "run tests"),
        _summary(c, a, "run tests"),
        _summary(d, None, HOSTILE),
    ]
    return RunResult(
        run_id=run_id, status="completed", exit_code=0, result="", duration_s=3.0,
        tokens=4, tasks=tasks, denials=[], fail_on=[], failed_on=[],
    )  # fmt: skip


def test_junit_case_names_are_stable_across_runs_and_carry_the_task_id_as_a_property() -> None:
    first = ET.fromstring(junit_xml(_run_of("run_1", ["sa_1", "sa_2", "sa_3", "sa_4"])))
    second = ET.fromstring(junit_xml(_run_of("run_9", ["sa_a", "sa_b", "sa_c", "sa_d"])))

    def names(root: ET.Element) -> list[str | None]:
        return [c.get("name") for c in root.iter("testcase")] + [
            s.get("name") for s in root.iter("testsuite")
        ]

    assert names(first) == names(second)
    assert names(first)[:4] == [
        "parent agent",
        "Build the project",
        "Build the project > run tests",
        "Build the project > run tests [2]",
    ]
    assert not any("sa_" in (n or "") or "run_" in (n or "") for n in names(first))
    props = {p.get("name"): p.get("value") for p in second.iter("property")}
    assert props["run_id"] == "run_9"
    assert props["task_id: Build the project > run tests [2]"] == "sa_c"


def test_junit_reports_validate_against_a_junit_schema(populated: Store) -> None:
    import xmlschema

    schema = xmlschema.XMLSchema(REPO_ROOT / "tests" / "schemas" / "junit.xsd")
    for result in (_result(populated), _run_of("r", ["a", "b", "c", "d"])):
        schema.validate(BytesIO(junit_xml(result)))  # type: ignore[arg-type]
