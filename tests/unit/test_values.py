"""`values.value` behaves as a frozen, keyword-only stdlib dataclass does: compared here
against one, method by method, on the same fields."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from orchestrator.values import value


@value
class Made:
    name: str
    sizes: tuple[int, ...] = ()
    hidden: str = dataclasses.field(default="x", repr=False)
    ignored: int = dataclasses.field(default=0, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(self.sizes))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stdlib:
    name: str
    sizes: tuple[int, ...] = ()
    hidden: str = dataclasses.field(default="x", repr=False)
    ignored: int = dataclasses.field(default=0, compare=False)


@value
class Holder:
    items: list[str]


def test_repr_equality_and_hash_are_the_stdlib_s() -> None:
    made, stdlib = Made(name="a", sizes=(1, 2)), Stdlib(name="a", sizes=(1, 2))
    assert repr(made).removeprefix("Made") == repr(stdlib).removeprefix("Stdlib")
    assert made == Made(name="a", sizes=[1, 2], ignored=5)  # type: ignore[arg-type]
    assert made != Made(name="b") and made != stdlib  # type: ignore[comparison-overlap]
    assert hash(made) == hash(Made(name="a", sizes=(1, 2), ignored=9))
    assert hash(made) == hash(stdlib)  # the same fields, hashed the same way
    with pytest.raises(TypeError):
        hash(Holder(items=["unhashable"]))  # as the stdlib's frozen dataclass


def test_fields_are_set_once() -> None:
    made = Made(name="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "b"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.new = 1  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del made.name
    assert made.name == "a"
    with pytest.raises(TypeError):
        Made("a")  # type: ignore[call-arg]  # keyword-only


def test_the_dataclass_tools_work() -> None:
    made = Made(name="a", sizes=(1,))
    assert [f.name for f in dataclasses.fields(made)] == ["name", "sizes", "hidden", "ignored"]
    assert dataclasses.replace(made, name="b") == Made(name="b", sizes=(1,))
    assert dataclasses.asdict(made)["sizes"] == (1,)
    assert pickle.loads(pickle.dumps(made)) == made and copy.deepcopy(made) == made
