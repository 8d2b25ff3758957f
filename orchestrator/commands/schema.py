"""`warden schema events|result`: the JSON Schema of a published document."""

from __future__ import annotations

import json
from typing import Literal

import click


@click.command("schema")
@click.argument("document", type=click.Choice(["events", "result"]))
def schema(document: Literal["events", "result"]) -> None:
    """Print the JSON Schema of DOCUMENT: `events` (each line of events.jsonl, of
    `warden run --json` before the last, and of `warden logs --json`) or `result`
    (the last line of `warden run --json`)."""
    from orchestrator.results.models import json_schema

    click.echo(json.dumps(json_schema(document), indent=2, sort_keys=True))
