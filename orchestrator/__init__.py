"""warden: subagents in locked-down containers, decided on the host."""

from __future__ import annotations

import threading
from collections.abc import Callable

__version__ = "0.1.0"

START_UP_WITHOUT_GC = frozenset({"exec", "run", "demo", "resume", "mcp"})
"""Commands that import with the cyclic garbage collector off (from the entry point,
`launch`, before click loads) and turn it back on themselves (`start_up_done`), once
their heavy imports are done."""

_gc_state = threading.Lock()
_background = 0
"""Imports running in background threads (`background_import`)."""
_gc_wanted = False
"""`start_up_done` was called while some of them still ran."""


def start_up_done() -> None:
    """A command's start-up imports are over: let the cyclic garbage collector run again.

    `launch.main` (and `cli.main`) turn the collector off while `warden run`, `resume` and `exec` import
    their modules: the tens of thousands of objects the imports create (the anthropic
    SDK's pydantic models above all) otherwise trigger full collections again and
    again, over a third of `import anthropic` here (1.36 s of CPU, 0.86 s without).
    `gc.freeze()` moves what is alive now into the permanent generation, so later
    collections skip it. While an import still runs in the background
    (`background_import`: the model SDK's), this happens when the last one ends.
    Nothing happens when the collector is on (tests, the library API): there it was
    never turned off.
    """
    global _gc_wanted
    with _gc_state:
        if _background:
            _gc_wanted = True
            return
    _resume_gc()


def background_import() -> Callable[[], None]:
    """Count an import that is about to run in a background thread: `start_up_done`
    waits for it. Call this before starting the thread (so a `start_up_done` right
    after cannot miss it), and the function it returns, once, when the import ends."""
    global _background
    with _gc_state:
        _background += 1
    ended = threading.Event()

    def end() -> None:
        global _background, _gc_wanted
        if ended.is_set():
            return
        ended.set()
        with _gc_state:
            _background -= 1
            resume = _background == 0 and _gc_wanted
            if resume:
                _gc_wanted = False
        if resume:
            _resume_gc()

    return end


def _resume_gc() -> None:
    import gc

    if not gc.isenabled():
        gc.freeze()
        gc.enable()
