"""`warden completion bash|zsh|fish`: the shell's completion script, from click's own
shell completion (subcommands, options and choices; agent types are not completed).

Install: `warden completion bash > /etc/bash_completion.d/warden` (or
`eval "$(warden completion bash)"` in `~/.bashrc`); zsh: put
`eval "$(warden completion zsh)"` in `~/.zshrc`; fish: `warden completion fish >
~/.config/fish/completions/warden.fish`."""

from __future__ import annotations

import click

PROG = "warden"
COMPLETE_VAR = "_WARDEN_COMPLETE"
"""The variable click's completion scripts set when they ask `warden` for candidates
(`cli.main` answers it under this name however warden was started)."""


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL (see `warden completion --help`)."""
    from click.shell_completion import get_completion_class

    root = click.get_current_context().find_root().command
    cls = get_completion_class(shell)
    assert cls is not None  # click ships all three
    click.echo(cls(root, {}, PROG, COMPLETE_VAR).source())
