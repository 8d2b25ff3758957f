"""A minimal Docker Engine API client over the local Unix socket, standard library only.

It implements exactly the `docker.APIClient` methods `DockerBackend` calls, with the
same names, arguments and return shapes, so `warden exec` does not pay ~160 ms for
importing the docker SDK (and `requests`) on every run. The HTTP exchange itself,
the errors and the stream framing are in `engine_wire`.

The API version is negotiated once, from the `API-Version` header of `/_ping`: the
engine's own version, capped at `MAX_API_VERSION`; engines older than
`MIN_API_VERSION` are refused. Errors are this module's own: `NotFound` (404),
`Conflict` (409), `ServerError` (5xx), `EngineAPIError` (any other error status),
`EngineConnectionError` (cannot connect, or the connection broke) and
`EngineReadTimeout` (no answer in time).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from orchestrator.backend.engine_wire import (
    AttachStream,
    Conflict,
    EngineAPIError,
    EngineConnectionError,
    EngineReadTimeout,
    NotFound,
    ServerError,
    iter_frames,
    raise_for_status,
    read_body,
    read_head,
    transport_errors,
)
from orchestrator.backend.engine_wire import Connection as _Connection

__all__ = [
    "AttachStream",
    "Conflict",
    "EngineAPIError",
    "EngineClient",
    "EngineConnectionError",
    "EngineReadTimeout",
    "NotFound",
    "ServerError",
    "iter_frames",
    "socket_path_from_env",
]

DEFAULT_SOCKET = "/var/run/docker.sock"
DEFAULT_TIMEOUT_S = 10.0
"""Per-request timeout, as `docker.from_env(timeout=10)` uses."""
MIN_API_VERSION = (1, 25)
"""Oldest engine API with every field sent here (`Init`, `NanoCpus`, `Runtime`)."""
MAX_API_VERSION = (1, 45)
"""Newest API version asked for (the docker SDK 7.1's default); tested on 1.41."""


def socket_path_from_env(environ: Mapping[str, str]) -> str | None:
    """The engine's Unix socket path when DOCKER_HOST is unset or `unix://…`, else None."""
    host = environ.get("DOCKER_HOST", "")
    if not host:
        return DEFAULT_SOCKET
    if host.startswith("unix://"):
        return host.removeprefix("unix://") or DEFAULT_SOCKET
    return None


class EngineClient:
    """The subset of `docker.APIClient` that `DockerBackend` uses, over a Unix socket.

    `.api` is the client itself, so it stands where a `docker.DockerClient` would.
    Thread-safe: every request opens its own connection.
    """

    def __init__(
        self, socket_path: str = DEFAULT_SOCKET, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self.api_version: str | None = None
        """Negotiated on the first call (`ping`), e.g. "1.41"."""

    @property
    def api(self) -> EngineClient:
        return self

    def with_timeout(self, timeout_s: float) -> EngineClient:
        """The same client with another per-request timeout (a cheap copy)."""
        other = EngineClient(self.socket_path, timeout_s)
        other.api_version = self.api_version
        return other

    def close(self) -> None:
        """Nothing to release: no connection outlives its request."""

    # -- engine ------------------------------------------------------------------

    def ping(self) -> bool:
        """GET /_ping; also fixes the API version used from then on."""
        status, headers, _ = self._request("GET", "/_ping", versioned=False)
        if self.api_version is None:
            self.api_version = _negotiate(headers.get("api-version", ""))
        return status == 200

    def version(self) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", "/version")
        return result

    # -- containers ----------------------------------------------------------------

    def create_host_config(
        self,
        *,
        binds: list[str] | None = None,
        cap_drop: list[str] | None = None,
        security_opt: list[str] | None = None,
        read_only: bool | None = None,
        tmpfs: Mapping[str, str] | None = None,
        shm_size: int | None = None,
        init: bool | None = None,
        mem_limit: int | None = None,
        memswap_limit: int | None = None,
        nano_cpus: int | None = None,
        pids_limit: int | None = None,
        log_config: Mapping[str, Any] | None = None,
        runtime: str | None = None,
        ulimits: list[Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The engine's HostConfig for these settings, as the SDK builds it."""
        config: dict[str, Any] = {"NetworkMode": "default"}
        pairs: dict[str, Any] = {
            "Binds": binds, "CapDrop": cap_drop, "SecurityOpt": security_opt,
            "ReadonlyRootfs": read_only, "Tmpfs": dict(tmpfs) if tmpfs else None,
            "ShmSize": shm_size, "Init": init, "Memory": mem_limit,
            "MemorySwap": memswap_limit, "NanoCpus": nano_cpus, "PidsLimit": pids_limit,
            "Runtime": runtime,
        }  # fmt: skip
        config.update({key: value for key, value in pairs.items() if value is not None})
        if ulimits:
            config["Ulimits"] = [
                {"Name": u["Name"], "Soft": u["Soft"], "Hard": u["Hard"]} for u in ulimits
            ]
        if log_config is not None:
            config["LogConfig"] = {
                "Type": log_config.get("type", ""),
                "Config": dict(log_config.get("config") or {}),
            }
        return config

    def create_container(
        self,
        image: str,
        command: list[str] | None = None,
        *,
        user: str | None = None,
        environment: Mapping[str, str] | list[str] | None = None,
        labels: Mapping[str, str] | None = None,
        working_dir: str | None = None,
        network_disabled: bool = False,
        host_config: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """POST /containers/create[?name=…]; returns {"Id": …, "Warnings": […]}."""
        if isinstance(environment, Mapping):
            environment = [f"{key}={value}" for key, value in environment.items()]
        body: dict[str, Any] = {
            "Image": image, "Cmd": command, "User": user, "Env": environment,
            "Labels": dict(labels) if labels is not None else None,
            "WorkingDir": working_dir, "NetworkDisabled": network_disabled,
            "HostConfig": dict(host_config) if host_config is not None else None,
            "Tty": False, "OpenStdin": False, "StdinOnce": False,
            "AttachStdin": False, "AttachStdout": True, "AttachStderr": True,
        }  # fmt: skip
        payload = {key: value for key, value in body.items() if value is not None}
        query = {"name": name} if name is not None else None
        result: dict[str, Any] = self._json("POST", "/containers/create", query=query, body=payload)
        return result

    def attach_socket(
        self, container: str | Mapping[str, Any], params: Mapping[str, Any] | None = None
    ) -> AttachStream:
        """POST /containers/{id}/attach with an upgrade; the raw multiplexed stream."""
        query = dict(params) if params is not None else {"stdout": 1, "stderr": 1, "stream": 1}
        path = self._path(f"/containers/{_id(container)}/attach", query)
        connection = self._send(
            "POST", path, None, self.timeout_s, {"Connection": "Upgrade", "Upgrade": "tcp"}
        )
        try:
            with transport_errors(connection.path):
                status, headers = read_head(connection)
                body = b"" if status in (101, 200) else read_body(connection, status, headers)
            raise_for_status(status, body, "POST", path)
        except BaseException:
            connection.close()
            raise
        return AttachStream(connection)

    def start(self, container: str | Mapping[str, Any]) -> None:
        self._request("POST", f"/containers/{_id(container)}/start")

    def wait(
        self,
        container: str | Mapping[str, Any],
        timeout: float | None = None,
        condition: str | None = None,
    ) -> dict[str, Any]:
        """POST /containers/{id}/wait; `timeout` None waits for ever (as the SDK does).

        Raises EngineReadTimeout when the container is still running at `timeout`.
        """
        query = {"condition": condition} if condition else None
        result: dict[str, Any] = self._json(
            "POST", f"/containers/{_id(container)}/wait", query=query, timeout_s=timeout
        )
        return result

    def inspect_container(self, container: str | Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/containers/{_id(container)}/json")
        return result

    def kill(self, container: str | Mapping[str, Any], signal: str | int | None = None) -> None:
        query = {"signal": signal} if signal is not None else None
        self._request("POST", f"/containers/{_id(container)}/kill", query=query)

    def remove_container(
        self, container: str | Mapping[str, Any], v: bool = False, force: bool = False
    ) -> None:
        self._request("DELETE", f"/containers/{_id(container)}", query={"v": v, "force": force})

    def images(self, filters: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """GET /images/json (what `resolve_image` needs; same shape as the SDK's)."""
        query = {"filters": _filters_json(filters)} if filters else None
        result: list[dict[str, Any]] = self._json("GET", "/images/json", query=query)
        return result

    def inspect_image(self, image: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/images/{image}/json")
        return result

    def containers(
        self, all: bool = False, filters: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """GET /containers/json. Filter values may be a string or a list of strings."""
        query: dict[str, Any] = {"all": all}
        if filters:
            query["filters"] = _filters_json(filters)
        result: list[dict[str, Any]] = self._json("GET", "/containers/json", query=query)
        return result

    def logs(
        self,
        container: str | Mapping[str, Any],
        stdout: bool = True,
        stderr: bool = True,
        tail: int | str = "all",
    ) -> bytes:
        """GET /containers/{id}/logs: the payloads of the frames, joined in order."""
        query = {"stdout": stdout, "stderr": stderr, "tail": tail}
        _, _, body = self._request("GET", f"/containers/{_id(container)}/logs", query=query)
        view = memoryview(body)
        offset = 0

        def recv(size: int) -> bytes:
            nonlocal offset
            chunk = bytes(view[offset : offset + size])
            offset += len(chunk)
            return chunk

        return b"".join(payload for _, payload in iter_frames(recv))

    # -- HTTP ------------------------------------------------------------------------

    def _path(self, path: str, query: Mapping[str, Any] | None, versioned: bool = True) -> str:
        if versioned:
            if self.api_version is None:
                self.ping()
            path = f"/v{self.api_version}{path}"
        if query:
            encoded = {k: _query_value(v) for k, v in query.items() if v is not None}
            path += "?" + urlencode(encoded)
        return path

    def _send(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeout_s: float | None,
        headers: Mapping[str, str] | None = None,
    ) -> _Connection:
        lines = [f"{method} {path} HTTP/1.1", "Host: docker", "User-Agent: warden"]
        lines += [f"{key}: {value}" for key, value in (headers or {"Connection": "close"}).items()]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        connection = _Connection(self.socket_path, timeout_s)
        try:
            with transport_errors(connection.path):
                connection.sock.sendall(request)
        except BaseException:
            connection.close()
            raise
        return connection

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout_s: float | str | None = "default",
        versioned: bool = True,
    ) -> tuple[int, dict[str, str], bytes]:
        full_path = self._path(path, query, versioned)
        data = json.dumps(body).encode() if body is not None else None
        timeout = self.timeout_s if timeout_s == "default" else timeout_s
        assert not isinstance(timeout, str)
        connection = self._send(method, full_path, data, timeout)
        try:
            with transport_errors(connection.path):
                status, headers = read_head(connection)
                payload = read_body(connection, status, headers)
        finally:
            connection.close()
        raise_for_status(status, payload, method, full_path)
        return status, headers, payload

    def _json(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout_s: float | str | None = "default",
    ) -> Any:
        _, _, payload = self._request(method, path, query=query, body=body, timeout_s=timeout_s)
        try:
            return json.loads(payload)
        except ValueError as exc:
            raise EngineConnectionError(
                f"the engine answered {method} {path} with malformed JSON: {exc}"
            ) from exc


def _negotiate(advertised: str) -> str:
    try:
        major, minor = (int(part) for part in advertised.split("."))
    except ValueError:
        return "{}.{}".format(*MIN_API_VERSION)  # an engine that does not say: be modest
    if (major, minor) < MIN_API_VERSION:
        raise EngineAPIError(
            f"the Docker engine speaks API {advertised}, older than the "
            "{}.{} warden needs; upgrade the engine".format(*MIN_API_VERSION),
            None,
            "API version too old",
        )
    return "{}.{}".format(*min((major, minor), MAX_API_VERSION))


def _id(container: str | Mapping[str, Any]) -> str:
    ident = container if isinstance(container, str) else str(container["Id"])
    return quote(ident, safe="")


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _filters_json(filters: Mapping[str, Any]) -> str:
    """The engine's filter encoding; a value may be a string or a list of strings."""
    return json.dumps(
        {key: [value] if isinstance(value, str) else list(value) for key, value in filters.items()}
    )
