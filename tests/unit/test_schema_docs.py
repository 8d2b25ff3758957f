"""The docstring under a model field is its JSON Schema description (what the model
reads in a tool schema, what a webhook receiver reads in docs/schema/), and starting a
run or `warden exec` reads no Python source to get it: the source is read only when a
schema is made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

import orchestrator
from orchestrator.runtime.parent_tools import input_schema
from orchestrator.runtime.tasks import TaskInput
from orchestrator.schema_docs import documented
from tests.json_shapes import obj
from tests.unit.broker.test_client import RUN_START_MODULES

START_MODULES = (
    *RUN_START_MODULES,  # `warden run` / `resume` / `mcp` ...
    "orchestrator.permissions.webhook",
    # ... and `warden exec`.
    "orchestrator.commands.exec",
    "orchestrator.backend.docker",
    "orchestrator.images.choice",
    "orchestrator.runtime.run_images",
)

# Reports each of warden's .py files opened other than by the import system (which
# reads a module's source only to compile it when its .pyc is missing or stale).
# (Third-party code may read its own: anyio's lazy importer parses its __init__.)
SOURCE_READS = """
import sys
WARDEN = {warden!r}  # warden's own packages: a checkout's .venv/ is not warden's source

def is_import(frame):
    while frame is not None:
        if frame.f_code.co_name == "get_data" and "importlib" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False

def hook(event, args):
    path = str(args[0]) if event == "open" else ""
    if path.startswith(WARDEN) and path.endswith(".py") and not is_import(sys._getframe(1)):
        print(path)

sys.addaudithook(hook)
"""


def test_starting_a_run_or_an_exec_reads_none_of_wardens_source() -> None:
    root = Path(orchestrator.__file__).parent.parent
    warden = tuple(str(root / package) + "/" for package in ("orchestrator", "sandbox_tools"))
    code = SOURCE_READS.format(warden=warden) + "".join(f"import {m}\n" for m in START_MODULES)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == []


class Base(BaseModel):
    model_config = ConfigDict(json_schema_extra=documented)

    name: str
    """Base's words."""
    size: int = 0
    """How big."""


class Child(Base):
    name: str = "x"
    """The child's own words."""
    pinned: str = Field(default="", description="said in Field")
    """Not this."""
    aliased: int = Field(default=0, alias="otherName")
    """Under its alias."""
    bare: bool = False


def test_each_field_is_described_by_the_docstring_under_it() -> None:
    properties = Child.model_json_schema()["properties"]
    assert properties["name"]["description"] == "The child's own words."
    assert properties["size"]["description"] == "How big."
    assert properties["pinned"]["description"] == "said in Field"
    assert properties["otherName"]["description"] == "Under its alias."
    assert "description" not in properties["bare"]
    assert Base.model_json_schema()["properties"]["name"]["description"] == "Base's words."


def test_the_task_tool_schema_the_model_reads_has_the_descriptions() -> None:
    schema = input_schema(TaskInput)
    properties = obj(schema["properties"]).items()
    described = {name: obj(prop).get("description") for name, prop in properties}
    assert described["description"] == "A short (3-5 word) description of the task."
    assert described["prompt"] == "The task for the subagent: all it will know."
    assert all(described.values()), json.dumps(described)
