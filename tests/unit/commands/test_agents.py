"""Locks in `warden agents list|show|validate` as a CI job uses them: what a run would
load and from where, aliases shown with their model ids, one pass over every problem,
a non-zero exit only when a file cannot be loaded, and agent-file text printed inert."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import warden_argv, warden_env

GOOD = "---\nname: reviewer\ndescription: Reviews code\nmodel: opus\ntools: Read, Grep, AskUserQuestion\n---\nReview.\n"
BROKEN = "---\nname: broken\ndescription: d\nmaxTurns: lots\n---\nx\n"
HOSTILE = '---\nname: shady\ndescription: "[link=http://127.0.0.1/]x[/link] \\x1b]8;;"\n---\nx\n'


def _cli(tmp_path: Path, *args: str, trusted: bool = True) -> subprocess.CompletedProcess[str]:
    """`warden agents ARGS`; `list` and `show` as in a trusted workspace unless not
    `trusted` (an untrusted workspace's own agent files do not load, as in a run)."""
    if trusted and args[0] in ("list", "show"):
        args = (*args, "--trust-workspace")
    return subprocess.run(
        warden_argv("agents", *args),
        capture_output=True,
        text=True,
        env=warden_env(WARDEN_CONFIG_DIR=str(tmp_path / "config")),
        check=False,
    )


def _workspace(tmp_path: Path, **files: str) -> Path:
    agents = tmp_path / "ws" / ".claude" / "agents"
    agents.mkdir(parents=True)
    for name, text in files.items():
        (agents / f"{name}.md").write_text(text)
    return tmp_path / "ws"


def test_list_shows_sources_models_and_dropped_tools(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, reviewer=GOOD, README="# notes\n")
    proc = _cli(tmp_path, "list", "--workspace", str(ws), "--json")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    by_name = {a["name"]: a for a in listed["agents"]}
    assert set(by_name) == {"Explore", "Plan", "bash", "general-purpose", "reviewer"}
    reviewer = by_name["reviewer"]
    assert (reviewer["model"], reviewer["model_alias"]) == ("claude-opus-4-8", "opus")
    assert reviewer["tools"] == ["Read", "Grep"] and reviewer["dropped_tools"] == ["AskUserQuestion"]
    assert reviewer["source"].endswith("reviewer.md")
    assert by_name["bash"]["source"] == "built-in"
    assert listed["problems"] == []
    assert any("dropped tool 'AskUserQuestion'" in w for w in listed["warnings"])


def test_show_prints_one_agent_and_unknown_names_fail_clearly(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, reviewer=GOOD)
    proc = _cli(tmp_path, "show", "reviewer", "--workspace", str(ws))
    assert proc.returncode == 0, proc.stderr
    assert "claude-opus-4-8 (opus)" in proc.stdout and "Review." in proc.stdout
    missing = _cli(tmp_path, "show", "reviwer", "--workspace", str(ws))
    assert missing.returncode == 2
    assert "Did you mean 'reviewer'?" in missing.stderr


def test_validate_reports_every_problem_and_fails(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, reviewer=GOOD, broken=BROKEN, README="# notes\n")
    directory = ws / ".claude" / "agents"
    proc = _cli(tmp_path, "validate", str(directory), "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    [result] = report["directories"]
    assert report["ok"] is False
    assert result["agents"] == ["reviewer"]
    assert [Path(p).name for p in result["skipped"]] == ["README.md"]
    assert (
        len(result["problems"]) == 1
        and "`maxTurns` must be a whole number" in result["problems"][0]
    )
    (directory / "broken.md").unlink()
    assert _cli(tmp_path, "validate", str(directory)).returncode == 0


def test_agent_file_text_is_printed_inert(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, shady=HOSTILE)
    proc = _cli(tmp_path, "show", "shady", "--workspace", str(ws))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout
    assert "\\x1b]8;;" in proc.stdout and "[link=http://127.0.0.1/]x[/link]" in proc.stdout


LONG_NAME = "a-reviewer-whose-name-is-longer-than-forty-characters-by-far"


def test_list_prints_whole_names_and_each_warning_once(tmp_path: Path) -> None:
    """Piped, a name must be whole to be fed to `show`; a warning is said once."""
    odd = f"---\nname: {LONG_NAME}\ndescription: d\ntools: Read, AskUserQuestion\n---\nx\n"
    ws = _workspace(tmp_path, long=odd)
    proc = _cli(tmp_path, "list", "--workspace", str(ws))
    assert proc.returncode == 0, proc.stderr
    names = [line.split("\t")[0] for line in proc.stdout.splitlines()]
    assert LONG_NAME in names
    shown = _cli(tmp_path, "show", names[names.index(LONG_NAME)], "--workspace", str(ws))
    assert shown.returncode == 0, shown.stderr
    assert sum("dropped tool 'AskUserQuestion'" in line for line in proc.stderr.splitlines()) == 1, (
        proc.stderr
    )


def test_list_shows_task_only_where_the_run_depth_offers_it(tmp_path: Path) -> None:
    def tools_of(*env: str) -> list[str]:
        extra = dict(e.split("=", 1) for e in env)
        proc = subprocess.run(
            warden_argv("agents", "list", "--workspace", str(tmp_path), "--json"),
            capture_output=True, text=True, check=True,
            env=warden_env(WARDEN_CONFIG_DIR=str(tmp_path / "config"), **extra),
        )  # fmt: skip
        agents = {a["name"]: a for a in json.loads(proc.stdout)["agents"]}
        return list(agents["general-purpose"]["tools"])

    assert "Task" not in tools_of()  # default depth 1: subagents may not delegate
    assert "Task" in tools_of("WARDEN_MAX_DEPTH=2")

PINNED = "---\nname: pinned\ndescription: d\nimage: pinned-tools:1\n---\nx\n"


def _images(tmp_path: Path, *flags: str, **env: str) -> dict[str, tuple[str, str]]:
    proc = subprocess.run(
        warden_argv(
            "agents", "list", "--json", "--trust-workspace", "--workspace", str(tmp_path / "ws"),
            *flags,
        ),
        capture_output=True,
        text=True,
        env=warden_env(WARDEN_CONFIG_DIR=str(tmp_path / "config"), **env),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return {a["name"]: (a["image"], a["image_from"]) for a in json.loads(proc.stdout)["agents"]}


def test_list_shows_each_type_s_image_by_the_written_precedence(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, pinned=PINNED)
    (ws / ".devcontainer.json").write_text('// dev\n{"image": "dev-tools:1",}\n')
    found = _images(tmp_path)
    assert found["pinned"][0] == "pinned-tools:1"  # the agent file wins
    assert found["general-purpose"] == ("dev-tools:1", "the dev container (.devcontainer.json)")
    assert found["bash"][0] == "bash"  # restricted unless --bash-image
    assert _images(tmp_path, "--image", "cli:1")["general-purpose"] == ("cli:1", "--image")
    assert _images(tmp_path, "--no-devcontainer")["general-purpose"][0] == "agent"
    assert _images(tmp_path, WARDEN_DEVCONTAINER="0")["general-purpose"][0] == "agent"
    off_then_on = _images(tmp_path, "--devcontainer", WARDEN_DEVCONTAINER="0")
    assert off_then_on["general-purpose"][0] == "dev-tools:1"
    bash = _images(tmp_path, "--bash-image", "cli:1")["bash"]
    assert bash[0] == "cli:1" and "instead of the restricted bash image" in bash[1]


def test_list_and_doctor_decide_with_the_trust_a_run_starts_from(tmp_path: Path) -> None:
    """An untrusted workspace's own agent files and dev container are not what a run
    would use: `agents list` and `doctor` say so, and show them only as if trusted."""
    ws = _workspace(tmp_path, pinned=PINNED)
    (ws / ".devcontainer.json").write_text('{"image": "dev-tools:1"}\n')
    untrusted = _cli(tmp_path, "list", "--workspace", str(ws), "--json", trusted=False)
    assert untrusted.returncode == 0, untrusted.stderr
    listed = json.loads(untrusted.stdout)
    by_name = {a["name"]: a for a in listed["agents"]}
    assert listed["trusted"] is False and "pinned" not in by_name
    assert by_name["general-purpose"]["image"] == "agent"
    assert any("is not trusted" in w and "--trust-workspace" in w for w in listed["warnings"])

    trusted = json.loads(_cli(tmp_path, "list", "--workspace", str(ws), "--json").stdout)
    by_name = {a["name"]: a for a in trusted["agents"]}
    assert trusted["trusted"] is True and "pinned" in by_name
    assert by_name["general-purpose"]["image"] == "dev-tools:1"

    doctor = subprocess.run(
        warden_argv("doctor", "--json", "--workspace", str(ws)),
        capture_output=True, text=True, check=False,
        env=warden_env(WARDEN_CONFIG_DIR=str(tmp_path / "config"), DOCKER_HOST="unix:///nonexistent"),
    )  # fmt: skip
    report = json.loads(doctor.stdout)
    rows = {row["agent"]: row["image"] for row in report["agents"]}
    assert rows["general-purpose"] == "agent" and "pinned" not in rows
    assert any("is not trusted" in note for note in report["notes"])
