"""`warden demo`: the offline demo, from any installation (a wheel or a checkout).

It lays out a fresh copy of the sample project the package ships, then runs it as
`warden run --replay <the shipped script> --workspace DIR --trust-workspace` would:
warden's scripted model server answers the model calls, so no network and no API key
are needed. The copy is made anew each time (an earlier run's output is moved aside,
never deleted); as root it is handed to the uid sandboxes fall back to, since a
sandbox never runs as root and the sample's subagents write into it.
"""

from __future__ import annotations

import os
import shutil
import time
from importlib import resources
from pathlib import Path

import click

DEMO_PROMPT = "Survey the sample project"
"""The prompt the shipped replay script answers."""


def _shipped_demo() -> tuple[Path, Path]:
    """(the replay script, the sample workspace) inside the installed package."""
    root = resources.files("orchestrator").joinpath("demo")
    script, workspace = root.joinpath("demo.yaml"), root.joinpath("workspace")
    if not (isinstance(script, Path) and isinstance(workspace, Path) and script.is_file()):
        raise click.ClickException(
            "the demo files are missing from this installation of warden (orchestrator/demo); "
            "reinstall warden from its wheel or a source checkout"
        )
    return script, workspace


def _lay_out(sample: Path, workspace: Path, uid: int) -> Path | None:
    """A fresh copy of `sample` at `workspace`; what was there is moved aside (returned)."""
    kept = None
    if workspace.exists() or workspace.is_symlink():
        kept = workspace.with_name(f"{workspace.name}.{time.strftime('%Y%m%d-%H%M%S')}")
        workspace.rename(kept)
    shutil.copytree(sample, workspace, symlinks=False)
    if os.geteuid() == 0:
        for path in (workspace, *workspace.rglob("*")):
            os.lchown(path, uid, uid)
    return kept


@click.command("demo")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("warden-demo"),
    show_default=True,
    help="Where the sample project is laid out (an existing one is moved aside, not deleted).",
)
@click.pass_context
def demo(ctx: click.Context, workspace: Path) -> None:
    """Run the offline demo: a parent agent delegates two tasks to sandboxed subagents.

    No network and no API key: warden's scripted model server answers the model calls.
    A general-purpose subagent writes SUMMARY.md; a bash subagent (restricted image)
    finds it cannot write outside /workspace and is denied `rm -rf /workspace/*` by the
    sample project's settings. Afterwards: `warden ps`, `warden audit`, `warden logs`.
    """
    from orchestrator.commands.run import run
    from orchestrator.config import Settings

    script, sample = _shipped_demo()
    kept = _lay_out(sample, workspace, Settings.from_env().fallback_uid)
    if kept is not None:
        click.echo(f"demo: the previous demo workspace was moved to {kept}", err=True)
    click.echo(f"demo: sample project laid out in {workspace}", err=True)
    argv = ["--replay", str(script), "--workspace", str(workspace), "--trust-workspace"]
    with run.make_context("run", [*argv, DEMO_PROMPT], parent=ctx) as run_ctx:
        run.invoke(run_ctx)
