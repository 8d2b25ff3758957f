"""Locks in that warden's documentation says what warden does: the site builds with
warnings as errors (every page in the navigation, every link and anchor resolving), and
every `warden ...` command line in it names a real subcommand with real options."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from orchestrator.cli import cli
from tests.docs_blocks import REPO_ROOT, ShellLine, documents, shell_lines, warden_argvs

ALL_LINES = [line for path in documents() for line in shell_lines(path)]
WARDEN_LINES = [line for line in ALL_LINES if any(True for _ in warden_argvs(line))]


def _parse(argv: list[str]) -> None:
    """Parse as the CLI would, down to the last subcommand. An unknown command or option
    fails; a value that does not convert (a placeholder such as SIZE stands for one) or
    a missing argument does not."""
    command: click.Command = cli
    ctx: click.Context | None = None
    name, args = "warden", list(argv)
    while True:
        try:
            ctx = command.make_context(name, list(args), parent=ctx)
        except click.BadParameter:  # a placeholder value, or an argument left out
            return
        except click.exceptions.Exit:  # --help, --version
            return
        except click.BadOptionUsage as exc:
            if args and exc.option_name == args[-1]:  # a flag named on its own, in prose
                return
            raise
        if not isinstance(command, click.Group):
            return
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            return
        if rest[0].isupper():  # a placeholder: `warden COMMAND --help`
            return
        found_name, found, args = command.resolve_command(ctx, rest)
        assert found is not None and found_name is not None
        name, command = found_name, found


def test_the_documentation_has_warden_commands_to_check() -> None:
    assert len(WARDEN_LINES) > 30
    assert any(line.run for line in WARDEN_LINES)


@pytest.mark.parametrize("line", WARDEN_LINES, ids=ShellLine.where)
def test_every_documented_warden_command_parses(line: ShellLine) -> None:
    for argv in warden_argvs(line):
        try:
            _parse(argv)
        except click.UsageError as exc:
            pytest.fail(f"{line.where()}: `warden {' '.join(argv)}`: {exc.format_message()}")


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "reference" / "cli" / "index.html").is_file()
    cli_page = (tmp_path / "reference" / "cli" / "index.html").read_text()
    for command in ("warden exec", "warden run", "warden demo", "warden doctor"):
        assert command in cli_page, command
    schemas = (tmp_path / "reference" / "schemas" / "index.html").read_text()
    assert "task_id" in schemas and "exit_code" in schemas
    assert (tmp_path / "policies" / "index.html").is_file()
