"""`value`: warden's frozen, keyword-only dataclasses, made without compiling code for
each class beyond its `__init__`.

A frozen stdlib dataclass gets six methods generated as source text and compiled when
its module is imported (`__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`,
`__delattr__`): about 1 ms per class on these machines, paid by every `warden exec`
for each class its start-up defines (issue 39: its budget over the docker SDK's own
floor is a few tens of ms). `value` lets `dataclasses` generate `__init__` only and
gives every class the same five other methods, written once here with the stdlib's
behaviour:

- assigning or deleting an attribute raises `dataclasses.FrozenInstanceError`; a field
  is set once, by `__init__` (`__post_init__` normalises with `object.__setattr__`, as
  it must in a frozen dataclass);
- equality compares the compared fields of two instances of the same class; the hash
  is those fields' (a field holding a list or dict makes it unhashable, as in the
  stdlib);
- the repr is the stdlib's `Name(field=value, …)`.

`dataclasses.fields`, `replace` and `asdict` work as for any dataclass; type checkers
see a frozen, keyword-only dataclass (`dataclass_transform`). Why not a library: the
well-kept ones (attrs, msgspec, pydantic) either generate the same code per class or
are a new dependency on the path whose import costs more than this saves.

May import: nothing of warden's.
"""

from __future__ import annotations

from dataclasses import Field, FrozenInstanceError, dataclass, fields
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(kw_only_default=True, frozen_default=True)
def value(cls: type[T]) -> type[T]:
    """The class as a frozen, keyword-only dataclass (see the module docstring)."""
    made = dataclass(kw_only=True, eq=False, repr=False)(cls)
    for name, method in _METHODS.items():
        setattr(made, name, method)
    return made


def _set_once(self: Any, name: str, new: object) -> None:
    if name not in type(self).__dataclass_fields__ or name in self.__dict__:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, new)


def _never_delete(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
    return f"{type(self).__qualname__}({shown})"


def _compared(self: Any, chosen: tuple[Field[Any], ...]) -> tuple[Any, ...]:
    return tuple(getattr(self, f.name) for f in chosen)


def _eq(self: Any, other: Any) -> object:
    if other.__class__ is not self.__class__:
        return NotImplemented
    chosen = tuple(f for f in fields(self) if f.compare)
    return bool(_compared(self, chosen) == _compared(other, chosen))


def _hash(self: Any) -> int:
    chosen = tuple(f for f in fields(self) if (f.compare if f.hash is None else f.hash))
    return hash(_compared(self, chosen))


_METHODS = {
    "__setattr__": _set_once,
    "__delattr__": _never_delete,
    "__repr__": _repr,
    "__eq__": _eq,
    "__hash__": _hash,
}
"""What every `value` class gets instead of the methods `dataclass` would compile for it."""
