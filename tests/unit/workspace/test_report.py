"""The end-of-run report lists every file a run created, changed or removed under
paths that git, CI, editors or build tools execute, and nothing else; its scan
is bounded and says when it stopped; each change becomes one audit record."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from orchestrator.permissions.always_allow import add_allow_rule
from orchestrator.workspace.report import (
    EXECUTED_PATHS,
    ExecutedPathsWatch,
    SensitiveReport,
    audit_records,
    compare,
    take_snapshot,
)
from tests.conftest import FIFO_PATIENCE_S
from tests.unit.workspace.racing import swap_when_touched


def write(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def changes(report: SensitiveReport) -> list[tuple[str, str]]:
    return [(c.change, c.path) for c in report.changes]


def test_created_modified_and_deleted_executed_paths_are_listed(tmp_path: Path) -> None:
    write(tmp_path / "Makefile", "all:\n\ttrue\n")
    write(tmp_path / "package.json", "{}")
    write(tmp_path / "src" / "app.py")
    watch = ExecutedPathsWatch(tmp_path)
    write(tmp_path / "Makefile", "all:\n\tevil\n")
    (tmp_path / "package.json").unlink()
    write(tmp_path / ".github" / "workflows" / "ci.yml")
    write(tmp_path / "node_modules" / ".bin" / "prettier")
    write(tmp_path / "sub" / ".git" / "config", "[core]\n\tfsmonitor = evil\n")
    write(tmp_path / "deep" / "er" / ".envrc")
    write(tmp_path / "src" / "app.py", "changed but not executed by tools")
    write(tmp_path / "notes.txt")
    assert sorted(changes(watch.report()), key=lambda c: c[1]) == [
        ("created", ".github/workflows"),
        ("created", ".github/workflows/ci.yml"),
        ("modified", "Makefile"),
        ("created", "deep/er/.envrc"),
        ("created", "node_modules/.bin"),
        ("created", "node_modules/.bin/prettier"),
        ("deleted", "package.json"),
        ("created", "sub/.git"),
        ("created", "sub/.git/config"),
    ]
    # in the table's order: git metadata first, CI last
    assert changes(watch.report())[0] == ("created", "sub/.git")
    assert changes(watch.report())[-1] == ("created", ".github/workflows/ci.yml")


def test_no_change_is_dropped_and_the_summary_says_how_many_it_does_not_print(
    tmp_path: Path,
) -> None:
    write(tmp_path / "Makefile", "all:\n\ttrue\n")
    watch = ExecutedPathsWatch(tmp_path)
    for i in range(600):
        write(tmp_path / "bin" / f"junk{i:03}")
    write(tmp_path / "Makefile", "all:\n\tcurl x | sh\n")
    write(tmp_path / ".vscode" / "tasks.json", "{}")
    report = watch.report()
    assert len(report.changes) == 604  # bin, 600 files, Makefile, .vscode, its tasks.json
    assert [r.tool_input["path"] for r in audit_records("r", report)].count("Makefile") == 1
    assert len(audit_records("r", report)) == 604
    lines = report.render()
    shown = "\n".join(lines)
    assert "Makefile" in shown and ".vscode/tasks.json" in shown
    assert "604 file(s)" in lines[0]
    assert lines[-1].strip().startswith(f"… and {604 - (len(lines) - 2)} more not printed")


def test_files_that_run_without_being_asked_are_watched(tmp_path: Path) -> None:
    write(tmp_path / ".git" / "config", '[core]\n\thooksPath = "tools/hooks"\n')
    (tmp_path / "tools" / "hooks").mkdir(parents=True)
    watch = ExecutedPathsWatch(tmp_path)
    planted = [
        ".husky/pre-commit",
        "tools/hooks/pre-commit",
        ".yarn/releases/yarn-4.0.cjs",
        "gradle/wrapper/gradle-wrapper.jar",
        ".mvn/wrapper/maven-wrapper.properties",
        "crates/x/build.rs",
        "native/CMakeLists.txt",
        "packages/web/.npmrc",
        "sub/.git",
        "lib/.gitmodules",
        "mod/.config/git/config",
        "pkg/lefthook.yml",
    ]
    for rel in planted:
        write(tmp_path / rel)
    listed = {c.path for c in watch.report().changes}
    assert set(planted) <= listed, set(planted) - listed


def test_a_rewrite_that_restores_size_and_mtime_is_still_seen(tmp_path: Path) -> None:
    target = tmp_path / "setup.py"
    write(target, "print('a')")
    before = take_snapshot(tmp_path, EXECUTED_PATHS)
    info = target.stat()
    write(target, "print('b')")
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert changes(compare(before, take_snapshot(tmp_path, EXECUTED_PATHS))) == [
        ("modified", "setup.py")
    ]


def test_a_swap_for_a_link_is_seen(tmp_path: Path) -> None:
    write(tmp_path / "conftest.py")
    before = take_snapshot(tmp_path, EXECUTED_PATHS)
    (tmp_path / "conftest.py").unlink()
    (tmp_path / "conftest.py").symlink_to("/etc/passwd")
    report = compare(before, take_snapshot(tmp_path, EXECUTED_PATHS))
    assert [(c.change, c.kind) for c in report.changes] == [("modified", "link")]


def test_node_modules_is_only_searched_for_bin(tmp_path: Path) -> None:
    for i in range(50):
        write(tmp_path / "node_modules" / f"pkg{i}" / "index.js")
    snap = take_snapshot(tmp_path, EXECUTED_PATHS)
    assert snap.visited < 60


def test_extra_protected_paths_are_reported_too(tmp_path: Path) -> None:
    watch = ExecutedPathsWatch(tmp_path, extra=("deploy/prod",))
    write(tmp_path / "deploy" / "prod" / "run")
    assert ("created", "deploy/prod/run") in changes(watch.report())


def test_the_scan_stops_at_its_limit_and_says_so(tmp_path: Path) -> None:
    for i in range(30):
        write(tmp_path / f"f{i:02d}")
    snap = take_snapshot(tmp_path, EXECUTED_PATHS, limit=10)
    assert snap.truncated and snap.visited == 10
    report = compare(snap, snap)
    assert report.scan_truncated
    assert any("stopped at" in line for line in report.render())


def test_rendering_is_plain_text_and_the_audit_gets_one_record_per_file(tmp_path: Path) -> None:
    watch = ExecutedPathsWatch(tmp_path)
    write(tmp_path / ".vscode" / "tasks\x1b[31m.json")
    report = watch.report()
    lines = report.render()
    assert "review before trusting" in lines[0]
    assert all("\x1b" not in line for line in lines)
    records = audit_records("run_x", report)
    assert [r.tool_input["path"] for r in records] == [".vscode", ".vscode/tasks\x1b[31m.json"]
    assert {r.decision for r in records} == {"ask"}
    assert ExecutedPathsWatch(tmp_path).report().render() == []


def test_an_empty_placeholder_coming_and_going_is_no_change(tmp_path: Path) -> None:
    """Another run on the workspace creates and removes its empty `.git` placeholder:
    not this run's change. A real repository's `.git` going is still one."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub" / ".git").mkdir(parents=True)
    write(tmp_path / "sub" / ".git" / "HEAD", "ref: refs/heads/main\n")
    watch = ExecutedPathsWatch(tmp_path)
    (tmp_path / ".git").rmdir()
    for name in ("HEAD",):
        (tmp_path / "sub" / ".git" / name).unlink()
    (tmp_path / "sub" / ".git").rmdir()
    found = changes(watch.report())
    assert ("deleted", ".git") not in found
    assert ("deleted", "sub/.git/HEAD") in found


def test_a_directory_swapped_for_a_link_mid_scan_lists_no_host_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, host = tmp_path / "ws", tmp_path / "host"
    write(ws / ".vscode" / "settings.json", "{}")
    write(host / "id_rsa", "host secret")
    watch = ExecutedPathsWatch(ws)

    def to_link() -> None:  # a sandbox, between the listing of ws and that of .vscode
        (ws / ".vscode").rename(tmp_path / "moved")
        (ws / ".vscode").symlink_to(host)

    swap_when_touched(monkeypatch, ".vscode", to_link)
    report = watch.report()
    assert not any("id_rsa" in c.path for c in report.changes), report.changes
    assert ("deleted", ".vscode/settings.json") in changes(report)


def test_a_file_swapped_for_a_fifo_mid_scan_is_reported_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "Makefile", "all:\n")
    watch = ExecutedPathsWatch(tmp_path)
    writers: list[int] = []

    def to_fifo() -> None:  # a sandbox keeps a writer open, writing nothing
        (tmp_path / "Makefile").unlink()
        os.mkfifo(tmp_path / "Makefile")
        writers.append(os.open(tmp_path / "Makefile", os.O_RDWR | os.O_NONBLOCK))

    swap_when_touched(monkeypatch, "Makefile", to_fifo)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(watch.report()), daemon=True)
    worker.start()
    worker.join(FIFO_PATIENCE_S)
    stuck = worker.is_alive()
    for fd in writers:
        os.write(fd, b"released")  # unblock a reader stuck on the FIFO, then fail
        os.close(fd)
    assert not stuck, "the report waited on a FIFO"
    assert outcome and isinstance(outcome[0], SensitiveReport), "the report failed"
    assert ("modified", "Makefile") in changes(outcome[0])


def test_warden_s_own_always_allow_write_is_not_reported_as_a_sandbox_s(tmp_path: Path) -> None:
    """A person's "always allow" makes warden write `.claude/settings.local.json`; the
    end of the run must not ask that person to review it as a sandbox's change. The
    same file changed again afterwards (by anyone else) is listed."""
    write(tmp_path / ".claude" / "settings.json", "{}")
    watch = ExecutedPathsWatch(tmp_path)
    add_allow_rule(tmp_path, "Bash(make test)")
    report = watch.report()
    assert ".claude/settings.local.json" not in [c.path for c in report.changes]
    assert ".claude/settings.local.json" not in report.trust_review

    target = tmp_path / ".claude" / "settings.local.json"
    target.write_text(target.read_text().replace("make test", "make deploy"))
    report = watch.report()
    assert ".claude/settings.local.json" in [c.path for c in report.changes]
    assert ".claude/settings.local.json" in report.trust_review


def test_every_section_says_how_many_it_did_not_print() -> None:
    """held, not_held, the trust review and the changes all print the first
    MAX_PRINTED and count the rest (not_held used to drop them unsaid)."""
    from orchestrator.workspace.held_changes import HeldChange, NotHeld
    from orchestrator.workspace.report import MAX_PRINTED, SensitiveChange, SensitiveReport

    extra = 5
    many = range(MAX_PRINTED + extra)
    report = SensitiveReport(
        changes=[
            SensitiveChange(path=f".vscode/c{i}", change="created", kind="file", size=1)
            for i in many
        ],
        held=[HeldChange(path=f".vscode/h{i}", change="created") for i in many],
        held_dir="/state/runs/run-x/held",
        not_held=[NotHeld(path=f".vscode/n{i}", why="too large") for i in many],
        trust_review=[f".claude/agents/a{i}.md" for i in many],
    )
    text = report.render()
    assert sum(line.startswith(f"  … and {extra} more") for line in text) == 4
    assert not any(f"n{MAX_PRINTED}" in line for line in text)
    assert any("warden held run-x" in line for line in text)
