"""Container backends. Build the run's with `factory.make_backend` (the engine's,
disk-guarded); import the concrete ones from their modules
(`orchestrator.backend.docker`, `orchestrator.backend.fake`): the docker SDK is
only imported by code that needs it.

May import: `config`, `errors`, `labels`, `owner` (the owner labels every
container carries), `values`.
"""

from orchestrator.backend.contract import (
    ContainerBackend,
    ContainerInfo,
    Mount,
    ResourceLimits,
    SandboxResult,
    SandboxSpec,
    SandboxStatus,
)

__all__ = [
    "ContainerBackend",
    "ContainerInfo",
    "Mount",
    "ResourceLimits",
    "SandboxResult",
    "SandboxSpec",
    "SandboxStatus",
]
