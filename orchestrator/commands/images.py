"""`warden images build`: build warden's sandbox images offline."""

from __future__ import annotations

import time

import click


@click.group()
def images() -> None:
    """Build warden's sandbox images (no registry, no network inside builds)."""


@images.command("build")
@click.option(
    "--force", is_flag=True, help="Rebuild even when an image with the same inputs exists."
)
@click.option(
    "--no-pull",
    is_flag=True,
    help="Never ask a registry for the base image (go straight to local or bootstrapped).",
)
def build(force: bool, no_pull: bool) -> None:
    """Build the `agent` and restricted `bash` images, skipping any that are current.

    Base: WARDEN_BASE_IMAGE (default python:3.12-slim) when present locally and
    suitable, else a pull of it, else a Debian base bootstrapped with debootstrap
    (needs root). Tags are warden-<kind>:<content hash>.
    """
    from orchestrator.backend.connect import connect
    from orchestrator.config import Settings
    from orchestrator.images import build_images

    settings = Settings.from_env()
    client = connect()
    started = time.monotonic()
    tags = build_images(
        client, settings, force=force, log=lambda line: click.echo(line, err=True), pull=not no_pull
    )
    for kind, tag in tags.items():
        click.echo(f"{kind}\t{tag}")
    click.echo(f"images ready in {time.monotonic() - started:.1f} s", err=True)
