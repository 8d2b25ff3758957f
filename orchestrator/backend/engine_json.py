"""The parts of the Docker engine's JSON answers that the backend reads.

The docker SDK's low-level client hands back the engine's JSON as plain dicts; these
TypedDicts name the fields warden relies on (optional where engines differ: an
absent field is read with `.get`).
"""

from __future__ import annotations

from typing import TypedDict


class ContainerState(TypedDict, total=False):
    """The fields of `State` in the engine's container inspect read here."""

    Status: str
    OOMKilled: bool
    Pid: int


class ContainerConfig(TypedDict, total=False):
    Labels: dict[str, str] | None


class ContainerInspect(TypedDict, total=False):
    """The fields of the engine's container inspect (`GET /containers/{id}/json`) read here."""

    Id: str
    Config: ContainerConfig
    State: ContainerState


class ContainerCreated(TypedDict):
    """The engine's answer to a container create."""

    Id: str


class ContainerRow(TypedDict, total=False):
    """One row of the engine's container list (`GET /containers/json`)."""

    Id: str
    Names: list[str] | None
    State: str
    Status: str
    Labels: dict[str, str] | None
