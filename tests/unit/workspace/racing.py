"""A sandbox's swap, made to happen at the worst moment of a host's walk: after the
walk looked at an entry, the first time it opens, lists or stats it by name."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest


def swap_when_touched(monkeypatch: pytest.MonkeyPatch, name: str, swap: Callable[[], None]) -> None:
    """Run `swap` once, just before the first `os.open`, `os.scandir` or `os.stat` of a
    path whose last component is `name` (a path, or a name under a `dir_fd`)."""
    done = False

    def racing(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal done
            named = isinstance(path, (str, os.PathLike)) and os.path.basename(path) == name
            if named and not done:
                done = True
                swap()
            return real(path, *args, **kwargs)

        return call

    for attr in ("open", "scandir", "stat"):
        monkeypatch.setattr(os, attr, racing(getattr(os, attr)))
