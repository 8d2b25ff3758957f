"""Field docstrings as JSON Schema descriptions, read only when a schema is made.

A model's fields are documented by the docstring under each one. Only a JSON Schema
shows them: the published documents (`warden schema`, docs/schema/) and the tool
schemas the model reads (`runtime.parent_tools`). pydantic's `use_attribute_docstrings`
reads them while the class is created instead: it walks the stack and reads the
module's source with `inspect`, whose module lookup takes the real path of every
module already loaded. That cost 35-90 ms of CPU on every `warden run`'s start, for
a dozen models, before the parent's first model request. So these models say
`ConfigDict(json_schema_extra=documented)`, and the source is read when a schema is
first generated, once per class.

May import: nothing of warden's (like `errors` and `jsontypes`, any module may import it).
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap
from typing import Any

from pydantic import BaseModel


def documented(schema: dict[str, Any], model: type[Any]) -> None:
    """`json_schema_extra` of a model: each property without a description gets the
    docstring under its field (a subclass's docstring wins over its base's)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not issubclass(model, BaseModel):
        return
    docs = field_docstrings(model)
    for name, field in model.model_fields.items():
        prop = properties.get(field.alias or name)
        doc = docs.get(name)
        if doc and isinstance(prop, dict) and field.description is None:
            prop.setdefault("description", doc)


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the docstring under it, over the model's own classes."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if issubclass(cls, BaseModel) and cls is not BaseModel:
            docs.update(_own_docstrings(cls))
    return docs


@functools.cache
def _own_docstrings(cls: type) -> dict[str, str]:
    """The docstrings under the fields `cls` itself declares ({} without its source)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source: built in a REPL, or shipped without .py
        return {}
    tree = ast.parse(source)
    if not tree.body or not isinstance(tree.body[0], ast.ClassDef):
        return {}
    body = tree.body[0].body
    docs = {}
    for statement, after in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(after.value.value)
    return docs
