"""warden: subagents in locked-down containers, decided on the host."""

__version__ = "0.1.0"
