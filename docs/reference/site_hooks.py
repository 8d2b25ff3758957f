"""mkdocs hooks of warden's documentation site.

Two pages are not kept as Markdown in `docs/`: the shipped policies' page is
`policies/README.md` itself (one text, read beside the policies and on the site), and
the schema reference is made from warden's own models (`warden schema`), so neither can
drift from what it describes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DOCUMENTS = {
    "events": "Each line of `events.jsonl`, of `warden run --json` before the last, and of "
    "`warden logs --json`.",
    "result": "The last line of `warden run --json` (and `--output-format json`).",
    "webhook-question": "What the webhook approver posts to a receiver.",
    "webhook-answer": "What a receiver posts back.",
    "webhook-withdrawn": "What the webhook approver posts when a question is no longer open.",
    "webhook-review": "What the webhook approver posts to offer a subagent's change set.",
}


def _schema(document: str) -> dict[str, Any]:
    if document.startswith("webhook-"):
        from orchestrator.permissions import webhook_protocol

        return webhook_protocol.json_schema(document)
    from orchestrator.results.models import json_schema

    return json_schema(document)  # type: ignore[arg-type]


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in spec:
        return " or ".join(_type(s) for s in spec["anyOf"])
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return " / ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"array of {_type(spec.get('items', {}))}"
    return str(kind)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(spec: dict[str, Any]) -> list[str]:
    properties = spec.get("properties", {})
    if not properties:
        return []
    required = set(spec.get("required", []))
    rows = ["| field | type | required | meaning |", "|---|---|---|---|"]
    for name, field in properties.items():
        yes = "yes" if name in required else ""
        rows.append(f"| `{name}` | {_type(field)} | {yes} | {_cell(field.get('description', ''))} |")
    return rows


def schema_page() -> str:
    out = [
        "# Event and result schemas",
        "",
        "Made from warden's own models when the site is built; `warden schema DOCUMENT` "
        "prints each as JSON Schema (2020-12).",
        "",
    ]
    for document, what in SCHEMA_DOCUMENTS.items():
        spec = _schema(document)
        out += [f"## {document}", "", what, ""]
        if spec.get("description"):
            out += [_cell(spec["description"]), ""]
        out += [*_table(spec), ""]
        for name, sub in sorted(spec.get("$defs", {}).items()):
            out += [f"### {name}", "", _cell(sub.get("description", "")), ""]
            out += [*_table(sub), ""]
    return "\n".join(out) + "\n"


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages (their Markdown is made here, not read from docs/)."""
    policies = (ROOT / "policies" / "README.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "policies.md", content=policies))
    files.append(File.generated(config, "reference/schemas.md", content=schema_page()))
    return files
