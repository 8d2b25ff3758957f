"""The exceptions the in-container runner raises on purpose.

`sandbox_tools` never imports `orchestrator`, so it has its own root,
`SandboxError`. A `ToolError` is a failure the model should see (it becomes an
`is_error` tool result); any other exception inside a tool is a bug, logged
with its traceback and reported to the model as an internal tool error.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Root of every error the runner raises on purpose."""


class ToolError(SandboxError):
    """A tool call failed in a way the model can act on; the message is shown to it."""


class PathOutsideWorkspaceError(ToolError, PermissionError):
    """A tool was given a path that resolves outside the workspace."""


class BrokerUnavailableError(SandboxError, ConnectionError):
    """The broker socket does not answer; the runner cannot continue."""


class BrokerTimeoutError(BrokerUnavailableError, TimeoutError):
    """The broker did not answer a request in time."""


class BrokerRequestError(SandboxError, RuntimeError):
    """The broker answered a request with an error status."""

    def __init__(self, path: str, status: int, message: str) -> None:
        super().__init__(f"broker refused {path} with HTTP {status}: {message}")
        self.path = path
        self.status = status
        self.message = message
