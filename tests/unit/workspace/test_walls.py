"""Which workspace paths a policy's deny rules wall off at a sandbox's start: Read
denies are masked (empty file or directory), Edit denies mounted read-only, other
names of a walled file too, nothing inside a masked directory, and past the bounds
the sandbox does not start with an error naming the rule."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.permissions.rules import parse_rule
from orchestrator.workspace import WorkspaceGuard
from orchestrator.workspace import walls as walls_module
from orchestrator.workspace.walls import WallError, find_walled, mask_sources, walls_of


def policy(*deny: str) -> EffectivePolicy:
    return EffectivePolicy(rules=tuple(parse_rule(r, "deny", "test", r) for r in deny))


def plant(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("secret\n")


def test_only_read_and_edit_denies_inside_the_workspace_become_walls() -> None:
    walls = walls_of(
        policy("Read(./.env)", "Edit(./src/**)", "Read(~/.ssh/**)", "Bash(curl:*)", "Read")
    )
    assert [(w.pattern, w.mask) for w in walls] == [
        ("/workspace/**/.env", True),
        ("/workspace/src/**", False),
    ]


def test_read_denies_are_masked_and_edit_denies_read_only(tmp_path: Path) -> None:
    plant(tmp_path, ".env", "sub/deep/.env", "secrets/a", "secrets/b/c", "src/x.py", "ok.txt")
    found = find_walled(
        tmp_path, walls_of(policy("Read(./.env)", "Read(./secrets/**)", "Edit(./src/**)"))
    )
    assert sorted(found.masked) == [".env", "secrets", "sub/deep/.env"]
    assert sorted(found.read_only) == ["src"]


def test_a_glob_covers_files_at_any_depth_but_nothing_inside_a_masked_directory(
    tmp_path: Path,
) -> None:
    plant(tmp_path, "a.pem", "x/b.pem", "secrets/c.pem")
    found = find_walled(tmp_path, walls_of(policy("Read(**/*.pem)", "Read(./secrets/**)")))
    assert sorted(found.masked) == ["a.pem", "secrets", "x/b.pem"]


def test_other_names_of_a_walled_file_are_walled_too(tmp_path: Path) -> None:
    plant(tmp_path, ".env", "src/p.txt")
    os.link(tmp_path / ".env", tmp_path / "innocent.txt")
    os.link(tmp_path / "src" / "p.txt", tmp_path / "writable.txt")
    found = find_walled(tmp_path, walls_of(policy("Read(/.env)", "Edit(./src/p.txt)")))
    assert sorted(found.masked) == [".env", "innocent.txt"]
    assert sorted(found.read_only) == ["src/p.txt", "writable.txt"]


def test_a_link_a_rule_matches_has_its_workspace_target_masked(tmp_path: Path) -> None:
    plant(tmp_path, "real-secret")
    os.symlink("real-secret", tmp_path / ".env")
    os.symlink("/etc/passwd", tmp_path / "sub.env")
    found = find_walled(tmp_path, walls_of(policy("Read(./.env)", "Read(./sub.env)")))
    assert sorted(found.masked) == ["real-secret"]


def test_more_matches_than_mounts_allowed_fail_closed_naming_the_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walls_module, "MAX_WALL_MOUNTS", 3)
    plant(tmp_path, *(f"k{i}.pem" for i in range(4)))
    with pytest.raises(WallError, match=r"Read\(\*\*/\*\.pem\).*matches 4 paths"):
        find_walled(tmp_path, walls_of(policy("Read(**/*.pem)")))


def test_past_the_bound_the_deepest_directory_of_the_matches_is_walled_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sandbox made ten `.env` files (the bound is 4 here) to stop the next sandbox.
    monkeypatch.setattr(walls_module, "MAX_WALL_MOUNTS", 4)
    plant(tmp_path, ".env", "config/.env", "config/app.yml", "x/ok.txt")
    plant(tmp_path, *(f"x/junk/a{i}/.env" for i in range(10)))
    found = find_walled(tmp_path, walls_of(policy("Read(./.env)")))
    assert sorted(found.masked) == [".env", "config/.env", "x/junk"]  # not `x`, nor `config`
    assert "walled as the directory of 10 matches" in found.masked["x/junk"]
    assert found.read_only == {}


def test_edit_denies_past_the_bound_make_their_directory_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walls_module, "MAX_WALL_MOUNTS", 2)
    plant(tmp_path, "a.lock", *(f"deps/p{i}.lock" for i in range(5)), "deps/secret/.env")
    found = find_walled(tmp_path, walls_of(policy("Edit(**/*.lock)", "Read(./.env)")))
    # A directory holding a masked path is masked: it hides more, never less.
    assert list(found.masked) == ["deps"] and list(found.read_only) == ["a.lock"]
    found = find_walled(tmp_path, walls_of(policy("Edit(**/*.lock)")))
    assert sorted(found.read_only) == ["a.lock", "deps"] and found.masked == {}


def test_matches_that_no_directory_below_the_workspace_covers_fail_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walls_module, "MAX_WALL_MOUNTS", 3)
    plant(tmp_path, *(f"d{i}/.env" for i in range(4)), *(f".claude/a{i}/.env" for i in range(4)))
    with pytest.raises(WallError, match=r"Read\(\./\.env\).*deny their directory"):
        find_walled(tmp_path, walls_of(policy("Read(./.env)")))
    # Nor is a directory that holds another mount walled whole (`.claude` is mounted).
    for i in range(4):
        os.remove(tmp_path / f"d{i}/.env")
    with pytest.raises(WallError):
        find_walled(tmp_path, walls_of(policy("Read(./.env)")), keep=(".claude",))
    assert sorted(find_walled(tmp_path, walls_of(policy("Read(./.env)"))).masked) == [".claude"]


def test_a_workspace_too_large_to_look_through_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walls_module, "MAX_SCAN_ENTRIES", 5)
    plant(tmp_path, *(f"f{i}" for i in range(6)))
    with pytest.raises(WallError, match=r"more than 5 files.*Read\(\./\.env\)"):
        find_walled(tmp_path, walls_of(policy("Read(./.env)")))


def test_an_anchored_rule_looks_only_where_it_could_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walls_module, "MAX_SCAN_ENTRIES", 5)
    plant(tmp_path, "conf/.env", *(f"big/f{i}" for i in range(50)))
    found = find_walled(tmp_path, walls_of(policy("Read(/conf/.env)")))
    assert list(found.masked) == ["conf/.env"]


def test_masks_are_empty_and_refused_when_changed(tmp_path: Path) -> None:
    empty_file, empty_dir = mask_sources(tmp_path / "masks")
    assert empty_file.stat().st_size == 0 and os.listdir(empty_dir) == []
    assert mask_sources(tmp_path / "masks") == (empty_file, empty_dir)
    os.chmod(empty_file, 0o644)
    empty_file.write_text("x")
    with pytest.raises(WallError, match="remove it"):
        mask_sources(tmp_path / "masks")


def test_the_guard_mounts_masks_over_denied_paths_and_keeps_one_mount_per_target(
    tmp_path: Path,
) -> None:
    plant(tmp_path, ".env", "src/a.py")
    guard = WorkspaceGuard.prepare(
        tmp_path, walls=walls_of(policy("Read(./.env)", "Edit(./src/**)", "Edit(./.git/**)"))
    )
    try:
        mounts = {m.target: m for m in guard.mounts()}
        assert sorted(mounts) == [
            "/workspace/.claude", "/workspace/.devcontainer", "/workspace/.env",
            "/workspace/.git", "/workspace/src",
        ]  # fmt: skip
        env = mounts["/workspace/.env"]
        assert env.read_only and env.confined_to is None and env.source.name == "empty-file"
        assert env.source.stat().st_size == 0
        assert mounts["/workspace/src"].confined_to == tmp_path
        # A file made after the guard is matched at the next sandbox's start.
        plant(tmp_path, "late/.env")
        assert "/workspace/late/.env" in {m.target for m in guard.mounts()}
    finally:
        guard.release()
