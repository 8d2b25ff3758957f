"""Every audit record is made by `store.audit_record`: its input hash is the one
approvals are bound to (`jsontypes.input_hash`) whoever writes it, what is noted
beside the input is not hashed, and no module builds an `AuditRecord` by hand."""

from __future__ import annotations

import ast
from pathlib import Path

from orchestrator.jsontypes import input_hash
from orchestrator.store import audit_record
from orchestrator.workspace.report import AUDIT_TOOL_NAME, audit_records

ROOT = Path(__file__).resolve().parents[3] / "orchestrator"


def test_an_audit_record_is_bound_to_the_canonical_hash_of_its_input() -> None:
    record = audit_record(
        run_id="run_x",
        task_id="sa_1",
        agent_type="bash",
        tool_name="Network",
        tool_input={"host": "example.test", "port": 443},
        noted={"method": "CONNECT"},
        decision="ask",
        final="deny",
        decided_by="terminal:alice",
        source="egress",
        tool_use_id="",
    )
    assert record.input_hash == input_hash("Network", {"port": 443, "host": "example.test"})
    assert record.tool_input == {"host": "example.test", "port": 443, "method": "CONNECT"}
    assert record.tool_use_id is None  # empty means unknown


def test_the_end_of_run_report_hashes_its_records_like_every_other() -> None:
    from orchestrator.workspace.report import SensitiveChange, SensitiveReport

    change = SensitiveChange(path="Makefile", change="modified", kind="file", size=12)
    (record,) = audit_records("run_x", SensitiveReport(changes=[change]))
    assert record.input_hash == input_hash(AUDIT_TOOL_NAME, change.model_dump())


def test_no_module_builds_an_audit_record_by_hand() -> None:
    builders = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name | ast.Attribute)
                and (getattr(node.func, "id", None) or getattr(node.func, "attr", None))
                == "AuditRecord"
            ):
                builders.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert len(builders) == 1 and builders[0].startswith("orchestrator/store/records.py:")
