"""The output of one container, read from its attach stream into two bounded captures.

The stream is opened before the container starts (so no output is missed) and read
in a thread until the container exits; `OutputCapture` keeps head and tail of each.

Why not the SDK's `attach(stream=True)` or `attach_socket()`: the stream they hand
back cannot be released from the outside without reaching into private attributes
(the response is hung on the socket), and a dropped one leaves its descriptor to the
garbage collector. So the request goes through the SDK client's own session
(`api.post`, its transport and error types), without an `Upgrade` header (the engine
then answers 200 and hands over the raw connection), and the reader owns a duplicate
of the connection's descriptor: no read timeout (a quiet sandbox is not an error),
`shutdown` wakes it from another thread, and closing the response releases the rest.
The frames are parsed by the SDK's `docker.utils.socket.frames_iter_no_tty`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import TYPE_CHECKING
from urllib.parse import quote

from docker.errors import create_api_error_from_http_exception
from docker.utils.socket import frames_iter_no_tty
from requests.exceptions import HTTPError

from orchestrator.backend.capture import OutputCapture

if TYPE_CHECKING:
    from docker import APIClient

STDOUT, STDERR = 1, 2
"""Stream ids of the engine's multiplexed stream."""


class OutputReader:
    """Reads the attach stream of one (created, not yet started) container."""

    def __init__(self, api: APIClient, container_id: str, limit: int) -> None:
        self.stdout = OutputCapture("stdout", limit)
        self.stderr = OutputCapture("stderr", limit)
        url = f"{api.base_url}/v{api.api_version}/containers/{quote(container_id, safe='')}/attach"
        response = api.post(
            url, params={"stdout": 1, "stderr": 1, "stream": 1}, stream=True, timeout=api.timeout
        )
        try:
            try:
                response.raise_for_status()
            except HTTPError as exc:
                create_api_error_from_http_exception(exc)  # raises docker.errors.APIError
            self._sock = socket.socket(fileno=os.dup(response.raw.fileno()))
        finally:
            response.close()
        self._sock.settimeout(None)
        self._thread = threading.Thread(
            target=self._run, name=f"warden-output-{container_id[:12]}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for stream, data in frames_iter_no_tty(self._sock):
                if not isinstance(data, bytes):
                    continue  # never: frames are bytes (the SDK's type hints say str too)
                if stream == STDOUT:
                    self.stdout.feed(data)
                elif stream == STDERR:
                    self.stderr.feed(data)

    def finish(self, timeout_s: float) -> None:
        """Wait until the stream ends (the container exited), at most `timeout_s`."""
        self._thread.join(timeout_s)
        self.close()

    def close(self) -> None:
        # shutdown first: it wakes a reader blocked in recv, close alone does not.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
