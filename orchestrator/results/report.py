"""The end of `warden run`: the result document (exactly once, on success, error or
stop), the exit code, and the files CI asks for (`--junit`, `--audit-out`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.errors import StoreError
from orchestrator.exit_codes import FAIL_ON_OUTCOMES, ExitCode, Outcome
from orchestrator.jsontypes import JSONObject
from orchestrator.results.build import build_result
from orchestrator.results.models import RunResult, RunStatus, TokenUsage
from orchestrator.results.output_files import OutputFile, at_start, write_output
from orchestrator.untrusted_text import printable

MAX_ERROR_CHARS = 2_000
"""Longest error line kept in the result document."""

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.store import Store


@dataclass
class RunState:
    """What the run left behind for its report; filled in as the run goes."""

    run_id: str | None = None
    status: RunStatus = "failed"
    text: str = ""
    error: str | None = None
    sensitive: JSONObject | None = None
    events_path: Path | None = None
    started: float = field(default_factory=time.time)


@dataclass(frozen=True)
class RunOutputs:
    """Where the result goes: `--json`, `--fail-on`, `--junit`, `--audit-out` (files
    whose directories were looked at before any sandbox ran: `results.output_files`)."""

    json_mode: bool = False
    fail_on: tuple[Outcome, ...] = ()
    junit: OutputFile | None = None
    audit: OutputFile | None = None


def parse_fail_on(value: str | None) -> tuple[Outcome, ...]:
    """`--fail-on failed,denied` → ("failed", "denied"); unknown names are a usage error."""
    if not value:
        return ()
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in FAIL_ON_OUTCOMES]
    if unknown:
        raise click.BadParameter(
            f"unknown outcome(s) {', '.join(unknown)}; choose from {', '.join(FAIL_ON_OUTCOMES)}",
            param_hint="--fail-on",
        )
    return tuple(dict.fromkeys(names))  # type: ignore[arg-type]


def one_line(exc: BaseException) -> str:
    """An error as one line of at most MAX_ERROR_CHARS."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:MAX_ERROR_CHARS]


def finish_run(settings: Settings, state: RunState, code: int, outputs: RunOutputs) -> int:
    """Build the result, write it where asked, and return the process's exit code."""
    result = write_outcome(settings, state, code, outputs)
    if outputs.json_mode:
        print(result.model_dump_json(), flush=True)
    else:
        _print_human(result, state)
    if settings.github_annotations:
        from orchestrator.results.github import publish

        publish(result, settings.github_step_summary)
    return result.exit_code


def write_outcome(
    settings: Settings,
    state: RunState,
    code: int,
    outputs: RunOutputs,
    result_file: OutputFile | None = None,
) -> RunResult:
    """Build the run's result document and write the files asked for (`--audit-out`,
    `--junit`, and `result_file`: the document itself), printing nothing: the
    library API and `warden mcp` (whose stdout is the protocol) end runs with it."""
    from orchestrator.lifecycle.recovery import open_store

    store_cm: Store | None = None
    if state.run_id is not None:
        try:
            store_cm = open_store(settings)
        except StoreError as exc:
            # The state disk failed (full, read-only): the result is built from what
            # this process knows, and the run still ends with one error and its document.
            state.error = state.error or one_line(exc)
            code = code or int(ExitCode.RUN_ERROR)
    if store_cm is not None:
        with store_cm as store:
            result = _result(store, state, code, outputs, settings.state_dir)
            audit = [r.model_dump(mode="json") for r in store.audit(state.run_id)]
    else:
        result, audit = _result(None, state, code, outputs), []
    if outputs.audit is not None:
        write_output(outputs.audit, (json.dumps(audit, indent=2) + "\n").encode())
    if outputs.junit is not None:
        from orchestrator.results.junit import junit_xml

        write_output(outputs.junit, junit_xml(result))
    if result_file is not None:  # whole or not at all: a reader may be waiting for it
        write_output(result_file, (result.model_dump_json(indent=2) + "\n").encode())
    return result


def write_error_outcome(message: str, code: int, *, json_mode: bool, junit: Path | None) -> None:
    """The result document (and JUnit report) of a run refused before it began."""
    state = RunState(error=" ".join(message.split())[:MAX_ERROR_CHARS])
    junit_file = at_start(junit)  # nothing has run: no sandbox touched its directory
    result = _result(None, state, code, RunOutputs(json_mode=json_mode, junit=junit_file))
    if junit_file is not None:
        from orchestrator.results.junit import junit_xml

        try:
            write_output(junit_file, junit_xml(result))
        except OSError as exc:
            click.echo(f"warden: {exc}", err=True)
    if json_mode:
        print(result.model_dump_json(), flush=True)


def _result(
    store: Store | None,
    state: RunState,
    code: int,
    outputs: RunOutputs,
    state_dir: Path | None = None,
) -> RunResult:
    parent_tokens = 0
    parent_usage = TokenUsage()
    if state_dir is not None and state.run_id is not None:
        from orchestrator.results.parent_transcript import load_parent_transcript

        try:
            transcript = load_parent_transcript(state_dir, state.run_id)
        except (OSError, ValueError):
            transcript = None
        value = (transcript or {}).get("tokens")
        parent_tokens = value if isinstance(value, int) and value >= 0 else 0
        parent_usage = TokenUsage.of((transcript or {}).get("usage"))
    return build_result(
        store,
        state.run_id,
        base_code=code,
        status=state.status,
        text=state.text,
        error=state.error,
        started=state.started,
        fail_on=outputs.fail_on,
        sensitive=state.sensitive,
        parent_tokens=parent_tokens,
        parent_usage=parent_usage,
    )


def _print_human(result: RunResult, state: RunState) -> None:
    from orchestrator.results.summary import print_summary

    if result.status == "completed":
        print(printable(result.result, limit=None, multiline=True), flush=True)
    if state.run_id is None:
        return
    print_summary(result)
    if result.failed_on:
        click.echo(
            f"warden: --fail-on matched: {', '.join(result.failed_on)} (exit {result.exit_code})",
            err=True,
        )
    click.echo(f"run {state.run_id}; events: {state.events_path}", err=True)
