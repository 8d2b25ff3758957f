"""`warden doctor [--fix] [--json]`: is the engine up, which runtimes, does it apply
warden's seccomp profile (a probe container of the bash image), are the images
current, which image each agent type of the workspace runs in, how is the warm pool
sized."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from orchestrator.backend.connect import GVISOR_NOTE, EngineInfo, engine_info
from orchestrator.commands._common import TRUST_FLAG_HELP, described_trust, untrusted_note
from orchestrator.errors import EngineUnavailableError
from orchestrator.provision.engine import FixPlan, apply_fix, host_facts, plan_fix
from orchestrator.untrusted_text import printable


@click.command()
@click.option("--fix", is_flag=True, help="Install and start the engine if needed (root, Debian).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="Workspace whose agent types and dev container decide the images shown.",
)
@click.option("--trust-workspace", "trust_workspace", is_flag=True, help=TRUST_FLAG_HELP)
def doctor(fix: bool, as_json: bool, workspace: Path, trust_workspace: bool) -> None:
    """Report the engine, its runtimes and warden's images; --fix starts the engine.

    --fix (root on Debian) installs docker.io and debootstrap when missing, starts
    dockerd in the background and waits for it. It does not build images: run
    `warden images build` for that. Exit status 1 when something is wrong and was
    not fixed (with --fix: the engine; without: the engine or the images).
    """
    say = _sayer(as_json)
    report: dict[str, Any] = {"actions": [], "problems": [], "notes": []}
    if fix:
        facts = host_facts()
        plan = plan_fix(facts)
        report["actions"] = _run_fix(plan, say, report)
    info, client = engine_info()
    report["engine"] = _engine_report(info)
    report["pool"] = _pool_report()
    if not info.reachable:
        if not report["problems"]:  # a failed --fix has already said what to do
            report["problems"].append(info.error or "the engine does not answer")
    else:
        report["notes"].append(GVISOR_NOTE)
        report["images"] = _images_report(client, report, count_as_problem=not fix)
        report["seccomp"] = _seccomp_report(client, report, report["images"])
    report["agents"] = _agents_report(workspace, trust_workspace, report)
    report["ok"] = not report["problems"]
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print(report)
    click.get_current_context().exit(0 if report["ok"] else 1)


def _run_fix(plan: FixPlan, say: Callable[[str], None], report: dict[str, Any]) -> list[str]:
    if plan.nothing_to_do:
        report["notes"].append("--fix: nothing to do (the engine answers, debootstrap is there)")
        return []
    try:
        return apply_fix(plan, say)
    except EngineUnavailableError as exc:
        report["problems"].append(f"--fix could not start the engine: {exc}")
        return []


def _engine_report(info: EngineInfo) -> dict[str, Any]:
    return {
        "reachable": info.reachable,
        "version": info.version,
        "api_version": info.api_version,
        "runtimes": list(info.runtimes),
        "default_runtime": info.default_runtime,
        "gvisor": "runsc" in info.runtimes,
        "error": info.error,
    }


def _pool_report() -> dict[str, Any]:
    """The warm pool's sizing, as the settings (and their variables) give it."""
    from orchestrator.backend.contract import DEFAULT_MEMORY_BYTES
    from orchestrator.config import Settings

    pool = Settings.from_env().pool_config()
    return {**asdict(pool), "summary": pool.describe(DEFAULT_MEMORY_BYTES)}


def _images_report(client: Any, report: dict[str, Any], *, count_as_problem: bool) -> list[Any]:
    from orchestrator.images import image_status

    rows = []
    for state in image_status(client):
        rows.append({"kind": state.kind, "state": state.state, "tag": state.tag,
                     "detail": state.detail})  # fmt: skip
        if state.state != "current":
            message = f"image {state.kind}: {state.detail}"
            (report["problems"] if count_as_problem else report["notes"]).append(message)
    return rows


def _seccomp_report(client: Any, report: dict[str, Any], images: list[Any]) -> str:
    """What the engine does with warden's seccomp profile, tried in a probe container
    of warden's bash image (when it is built and current)."""
    from orchestrator.backend.seccomp import probe

    tags = [row["tag"] for row in images if row["kind"] == "bash" and row["state"] == "current"]
    if not tags or not tags[0]:
        return "not checked (warden's bash image is not built: warden images build)"
    problem = probe(client, tags[0])
    if problem is not None:
        report["problems"].append(f"seccomp: {problem}")
        return f"NOT applied: {problem}"
    return "warden's profile applied (a probe ran under a filter; io_uring_setup refused)"


def _agents_report(
    workspace: Path, trust_flag: bool, report: dict[str, Any]
) -> list[dict[str, str]]:
    """Which image each agent type of a run in `workspace` would use, and why, with
    the trust `warden run` would start from."""
    from orchestrator.agents.images import choose_image
    from orchestrator.agents.registry import AgentRegistry
    from orchestrator.errors import WardenError
    from orchestrator.runtime.run_images import describe_run_images

    try:
        settings, trusted, why = described_trust(workspace, trust_flag)
        if not trusted:
            report["notes"].append(untrusted_note(workspace, why))
        run = describe_run_images(settings, workspace, trusted=trusted)
        registry = AgentRegistry.load(settings, workspace.resolve(), trusted=trusted)
    except WardenError as exc:
        report["problems"].append(f"agent images: {exc}")
        return []
    rows = []
    for agent in registry:
        choice = choose_image(agent, run)
        rows.append({"agent": agent.name, "image": choice.name, "from": choice.origin})
    return rows


def _sayer(as_json: bool) -> Callable[[str], None]:
    """Progress lines of --fix go to stderr, and nowhere under --json."""

    def say(line: str) -> None:
        if not as_json:
            click.echo(f"fix: {line}", err=True)

    return say


def _print(report: dict[str, Any]) -> None:
    engine = report["engine"]
    for action in report["actions"]:
        click.echo(f"done: {action}")
    if engine["reachable"]:
        click.echo(f"engine:   ok, Docker {engine['version']} (API {engine['api_version']})")
        runtimes = ", ".join(engine["runtimes"]) or "none reported"
        default = engine["default_runtime"] or "?"
        gvisor = "registered" if engine["gvisor"] else "not registered (optional)"
        click.echo(f"runtimes: {runtimes} (default {default}); gVisor runsc: {gvisor}")
    else:
        click.echo("engine:   NOT reachable")
    click.echo(f"pool:     {report['pool']['summary']}")
    if "seccomp" in report:
        click.echo(f"seccomp:  {report['seccomp']}")
    for row in report.get("images", []):
        tag = row["tag"] or "-"
        click.echo(f"image {row['kind']:<6} {row['state']:<8} {tag}  {row['detail']}")
    for row in report.get("agents", []):
        click.echo(
            f"agent {printable(row['agent'], 40)}: image {printable(row['image'], 80)} "
            f"({printable(row['from'], None)})"
        )
    for note in report["notes"]:
        click.echo(f"note: {note}")
    for problem in report["problems"]:
        click.echo(f"problem: {problem}", err=True)
    click.echo("ok" if report["ok"] else "not ok: see the problems above", err=not report["ok"])
