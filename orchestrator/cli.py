"""The `warden` command. Subcommands live in `orchestrator.commands.*` and are
imported only when invoked, so `warden exec` does not pay for `warden run`.

May import: everything (it is the top: `commands`, `ui`, …).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from orchestrator import START_UP_WITHOUT_GC, __version__

# name -> "module:attribute" of a click command, each in its own module.
COMMANDS: dict[str, str] = {
    "demo": "orchestrator.commands.demo:demo",
    "doctor": "orchestrator.commands.doctor:doctor",
    "images": "orchestrator.commands.images:images",
    "exec": "orchestrator.commands.exec:exec_command",
    "cleanup": "orchestrator.commands.cleanup:cleanup",
    "run": "orchestrator.commands.run:run",
    "policy": "orchestrator.commands.policy:policy",
    "audit": "orchestrator.commands.audit:audit",
    "ps": "orchestrator.commands.ps:ps",
    "logs": "orchestrator.commands.logs:logs",
    "stop": "orchestrator.commands.stop:stop",
    "resume": "orchestrator.commands.resume:resume",
    "agents": "orchestrator.commands.agents:agents",
    "schema": "orchestrator.commands.schema:schema",
    "completion": "orchestrator.commands.completion:completion",
    "mcp": "orchestrator.commands.mcp:mcp",
    "ui": "orchestrator.commands.ui:ui",
    "trust": "orchestrator.commands.trust:trust",
    "apply": "orchestrator.commands.apply:apply_command",
    "discard": "orchestrator.commands.apply:discard_command",
    "held": "orchestrator.commands.held:held",
}

HELP: dict[str, str] = {
    "demo": "Run the offline demo (no network, no API key) in a fresh sample project.",
    "doctor": "Check (and with --fix, set up) the Docker engine and images.",
    "images": "Build warden's sandbox images offline.",
    "exec": "Run one command in a fresh hardened container.",
    "cleanup": "Remove containers left behind by warden.",
    "run": "Run a parent agent that delegates to sandboxed subagents.",
    "policy": "Inspect permission policies.",
    "audit": "List the permission decisions of a run.",
    "ps": "Show runs and their tasks.",
    "logs": "Show a task's events and transcript.",
    "stop": "Stop a running task and its descendants.",
    "resume": "Continue a subagent session with a new instruction.",
    "agents": "List, show and validate subagent types (agent files).",
    "schema": "Print the JSON Schema of the events or the run result.",
    "completion": "Print the shell completion script (bash, zsh, fish).",
    "mcp": "Serve warden's Task tools to an MCP client (Claude Code, …).",
    "ui": "Serve the web page of the runs in the state dir (task trees, questions, audit).",
    "trust": "Review what changed in a workspace's settings and trust it as it is now.",
    "apply": "Apply an isolated subagent's waiting change set to its workspace.",
    "discard": "Remove an isolated subagent's waiting change set.",
    "held": "Review, apply or discard the changes a run made to files editors and shells run.",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self._available(name))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None
            raise
        command = getattr(module, attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, HELP.get(name, "")) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    @staticmethod
    def _available(name: str) -> bool:
        module_name = COMMANDS[name].split(":")[0]
        return importlib.util.find_spec(module_name) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="warden")
def cli() -> None:
    """warden: subagents in locked-down containers, every tool call decided on the host."""


FAST_EXIT_COMMANDS = frozenset({"exec"})
"""Commands that release everything they hold (container removed, threads joined,
output written) before they return. Their process ends with `os._exit` once stdout
and stderr are flushed: the interpreter's own teardown (freeing a few thousand
modules of the docker SDK, requests and pydantic) costs 20-50 ms of a `warden exec`
that the command has no use for."""




ASYNCIO_ONLY = frozenset({"run", "demo", "resume", "mcp"})
"""Commands whose process runs asyncio loops only (`lifecycle.interrupts.run_stoppable`).
The model SDK's HTTP stack (httpcore2) imports trio whenever it is installed, only to
serve trio loops too: about 40 ms of CPU before a run's first model request. In these
processes that import is refused (`_RefuseTrio`), and httpcore2 takes trio as not
installed. Refused by a finder, not by `sys.modules["trio"] = None`: libraries that
ask whether trio is running check `"trio" in sys.modules` first (tenacity's async
sleep does), and a None entry there made them import it and fail."""


class _RefuseTrio:
    """A meta-path finder that answers "no such module" for trio and its submodules."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "trio" or name.startswith("trio."):
            raise ModuleNotFoundError(f"No module named {name!r} (not used by warden)", name=name)


def main() -> None:
    """Console-script entry point: warden errors become one clear line, not a traceback."""
    if sys.argv[1:2] and sys.argv[1] in START_UP_WITHOUT_GC:
        import gc

        gc.disable()
    if sys.argv[1:2] and sys.argv[1] in ASYNCIO_ONLY and "trio" not in sys.modules:
        sys.meta_path.insert(0, _RefuseTrio())
    try:
        _main()
    except SystemExit as exc:
        if sys.argv[1:2] and sys.argv[1] in FAST_EXIT_COMMANDS:
            _exit_now(exc.code)
        raise


def _exit_now(code: object) -> None:
    """End the process as `sys.exit(code)` would, without the interpreter's teardown."""
    import logging
    import os

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message") prints it and exits 1
        click.echo(str(code), err=True)
        status = 1
    logging.shutdown()  # flush any handler a command added
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe (`warden exec ... | head -1`): nothing left to say
        status = status or 120
    os._exit(status)


def _main() -> None:
    from orchestrator.errors import WardenError

    try:
        # In non-standalone mode click returns ctx.exit()'s code instead of exiting.
        code = cli(standalone_mode=False, prog_name="warden", complete_var="_WARDEN_COMPLETE")
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        if isinstance(exc, click.UsageError):
            _result_document_for(sys.argv[1:], exc)
        sys.exit(exc.exit_code)
    except WardenError as exc:
        from orchestrator.untrusted_text import printable

        # Messages may quote container or workspace text (agent names, paths).
        click.echo(f"warden: error: {printable(exc, None, multiline=True)}", err=True)
        for note in getattr(exc, "__notes__", []):
            click.echo(printable(note, None, multiline=True), err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


RUN_COMMANDS = ("run", "resume")
"""Commands that promise one result document (`--json`), also on a usage error."""


def _result_document_for(argv: list[str], exc: click.UsageError) -> None:
    """A usage error click found before `warden run`/`resume` began (a bad flag, a
    missing --replay file) still ends with the one result document `--json` promises,
    and the `--junit` report when one was asked for."""
    args = argv[: argv.index("--")] if "--" in argv else argv
    if not args or args[0] not in RUN_COMMANDS:
        return
    fmt = _option_value(args, "--output-format")
    json_mode = "--json" in args or fmt in ("json", "stream-json")
    junit = _option_value(args, "--junit")
    if not json_mode and junit is None:
        return
    from pathlib import Path

    from orchestrator.results.report import write_error_outcome

    write_error_outcome(exc.format_message(), exc.exit_code, json_mode=json_mode,
                        junit=Path(junit) if junit else None)  # fmt: skip


def _option_value(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None
