"""`warden schema DOCUMENT`: the JSON Schema of a published document."""

from __future__ import annotations

import json
from typing import Literal, cast

import click

DOCUMENTS = ("events", "result")
WEBHOOK_DOCUMENTS = ("webhook-question", "webhook-answer", "webhook-withdrawn", "webhook-review")
"""Named here, not imported: `warden --help` stays light."""


@click.command("schema")
@click.argument("document", type=click.Choice([*DOCUMENTS, *WEBHOOK_DOCUMENTS]))
def schema(document: str) -> None:
    """Print the JSON Schema of DOCUMENT: `events` (each line of events.jsonl, of
    `warden run --json` before the last, and of `warden logs --json`), `result`
    (the last line of `warden run --json`), or a webhook approver's document
    (`webhook-question`, `webhook-answer`, `webhook-withdrawn`, `webhook-review`;
    docs/webhook.md)."""
    if document in WEBHOOK_DOCUMENTS:
        from orchestrator.permissions import webhook_protocol

        published = webhook_protocol.json_schema(document)
    else:
        from orchestrator.results.models import json_schema

        published = json_schema(cast(Literal["events", "result"], document))
    click.echo(json.dumps(published, indent=2, sort_keys=True))
