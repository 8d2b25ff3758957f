"""The exceptions warden raises. Every one says what happened and what to do.
Also the Messages API's own error types, which the broker and the scripted server
both put in Anthropic-shaped error bodies."""

from __future__ import annotations

API_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic's error type for each HTTP status."""


def api_error_type(status: int) -> str:
    """The error type an Anthropic error body carries for `status`."""
    return API_ERROR_TYPES.get(status, "api_error")


class WardenError(Exception):
    """Root of every error warden raises on purpose."""


class ConfigError(WardenError, ValueError):
    """A configuration file, flag or environment variable is invalid."""


class EngineUnavailableError(WardenError, ConnectionError):
    """The Docker engine does not answer."""


class EngineSlowError(EngineUnavailableError, TimeoutError):
    """The Docker engine is up but answered too late, even after retries."""


class ImageNotFoundError(WardenError, LookupError):
    """A warden image is not built (or a named image does not exist)."""


class ImageBuildError(WardenError, RuntimeError):
    """Building an image failed."""


class ShippedFilesMissingError(WardenError, FileNotFoundError):
    """An installation without warden's shipped files (image build inputs, policies)."""


class UnsupportedImageError(WardenError, ValueError):
    """An image warden cannot run a subagent in (another architecture or OS, no
    bash); found before any sandbox starts."""


class ContainerStartError(WardenError, RuntimeError):
    """A sandbox container could not be created or started."""


class UnknownAgentError(WardenError, LookupError):
    """A subagent type that no registry knows."""


class UnknownToolError(WardenError, LookupError):
    """A tool name that warden does not provide."""


class AgentDefinitionError(WardenError, ValueError):
    """A subagent definition file is malformed."""


class PolicyError(WardenError, ValueError):
    """A permission policy, rule or hook configuration is invalid."""


class StoreError(WardenError, RuntimeError):
    """The state store is unusable (corrupt, locked, wrong version)."""


class TaskNotFoundError(WardenError, LookupError):
    """A task or session id that the store does not know."""


class SessionBusyError(WardenError, RuntimeError):
    """A subagent session is already being continued by a live orchestrator."""


class UnsafeMountError(ConfigError):
    """A mount source is a symbolic link, has one on its way, or lies outside the
    workspace: mounting it could expose host files to a sandbox."""


class TaskRefusedError(WardenError, ValueError):
    """A Task call warden refused before any task existed (invalid input, an unknown
    subagent type, a cap, an unknown session): the message says why and what to do.
    It is recorded as a `task_refused` event and a denial, as the parent's refusals are."""
