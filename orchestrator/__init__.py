"""warden: subagents in locked-down containers, decided on the host."""

__version__ = "0.1.0"


def start_up_done() -> None:
    """A command's start-up imports are over: let the cyclic garbage collector run again.

    `cli.main` turns the collector off while `warden run`, `resume` and `exec` import
    their modules: the tens of thousands of objects the imports create (the anthropic
    SDK's pydantic models above all) otherwise trigger full collections again and
    again, over a third of `import anthropic` here (1.36 s of CPU, 0.86 s without).
    `gc.freeze()` moves what is alive now into the permanent generation, so later
    collections skip it. Nothing happens when the collector is on (tests, the library
    API): there it was never turned off.
    """
    import gc

    if not gc.isenabled():
        gc.freeze()
        gc.enable()
