"""In-container egress forwarder: 127.0.0.1:PORT → the host's egress proxy socket.

The sandbox has no network interface but `lo`. When the host offers egress it
mounts a second Unix socket beside the broker's (`EGRESS_SOCKET`); this module
listens on a loopback port and passes that listening socket to the host proxy over
it (`SCM_RIGHTS`, one marker byte `LISTENER`): the proxy then accepts the sandbox's
connections itself, and nothing runs here (no byte is copied in the container, and
the host can move them in the kernel). If the proxy does not take it, a forwarder
relays each accepted client over a Unix connection of its own to the socket, which
the proxy serves as the client. (It never passes a connection: a passed socket
shares its blocking flag with the process that passed it, so the proxy takes none.)
Every decision (which host, which port,
how many bytes) is made by the proxy on the host; the forwarder knows nothing and
decides nothing. It sets the proxy variables (`proxy_env`) so HTTP clients, pip,
npm and git send their traffic through it. Without the socket nothing starts and
no variable is set.

Standard library only (it runs in every image, before anything else is imported).

- runner: `offer(socket_dir)` at start-up (a daemon thread; variables go into
  `os.environ`, which the Bash tool's commands inherit)
- `warden exec`: `python3 -m sandbox_tools.egress_forward [--socket PATH] -- CMD...`
  passes the listening socket (or forks the forwarder) and execs CMD with the
  variables set
"""

from __future__ import annotations

import array
import contextlib
import os
import socket
import sys
import threading

EGRESS_SOCKET_NAME = "egress.sock"
EGRESS_SOCKET = f"/run/warden/{EGRESS_SOCKET_NAME}"
"""The host proxy's socket inside the container (beside `wire.BROKER_SOCKET`)."""
LISTEN_HOST = "127.0.0.1"
LISTEN_BACKLOG = 64
LISTENER = b"L"
"""The byte that carries the listening socket itself (the host proxy's `LISTENER`)."""
TAKEN = b"+"
"""The proxy's answer when it took the listening socket (`handover.TAKEN`)."""
RELAY_CHUNK_BYTES = 65536
"""What the fallback relay moves per read."""
PASS_TIMEOUT_S = 10.0
"""Longest the forwarder waits for the proxy's answer to a passed listening socket."""
NO_PROXY = "localhost,127.0.0.1,::1"


def proxy_env(port: int) -> dict[str, str]:
    """The variables that send HTTP(S) clients, pip, npm and git through the forwarder."""
    url = f"http://{LISTEN_HOST}:{port}"
    env = {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": NO_PROXY,
        "no_proxy": NO_PROXY,
        "PIP_PROXY": url,
        "npm_config_proxy": url,
        "npm_config_https_proxy": url,
        "npm_config_noproxy": NO_PROXY,
        "YARN_HTTP_PROXY": url,
        "YARN_HTTPS_PROXY": url,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.proxy",
        "GIT_CONFIG_VALUE_0": url,
    }
    return env


def listen() -> socket.socket:
    """A listening socket on a free loopback port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((LISTEN_HOST, 0))
    server.listen(LISTEN_BACKLOG)
    return server


def pass_listener(server: socket.socket, socket_path: str) -> bool:
    """Give the proxy the listening socket itself; True when it took it: the proxy
    then accepts every connection on it directly (no hand-over per connection, and
    nothing here needs to run). False: serve it here (`serve`)."""
    fds = array.array("i", [server.fileno()])
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(PASS_TIMEOUT_S)
            conn.connect(socket_path)
            conn.sendmsg([LISTENER], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            return conn.recv(1) == TAKEN
    except OSError:
        return False


def serve(server: socket.socket, socket_path: str) -> None:
    """Accept forever; relay each client to the host proxy on a thread of its own."""
    while True:
        try:
            client, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=relay, args=(client, socket_path), daemon=True).start()


def relay(client: socket.socket, socket_path: str) -> None:
    """Copy `client`'s bytes to a new connection to the proxy's socket and back until
    both sides are done (a 502 to the client when the proxy is not reachable)."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            upstream.connect(socket_path)
        except OSError as exc:
            _answer_unavailable(client, exc)
            return
        back = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
        back.start()
        _copy(client, upstream)
        back.join()
    finally:
        upstream.close()
        client.close()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    """Bytes from `source` to `sink` until `source` ends; then `sink`'s writing half."""
    try:
        while chunk := source.recv(RELAY_CHUNK_BYTES):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _answer_unavailable(client: socket.socket, exc: OSError) -> None:
    reason = f"warden egress: the host's egress proxy is not reachable ({exc.strerror or exc})"
    body = (reason + "\n").encode()
    head = (
        f"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nX-Warden-Egress: {reason}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        client.sendall(head.encode() + body)


def offer(socket_dir: str) -> int | None:
    """Start the forwarder when the host offered egress in `socket_dir`; set the proxy
    variables in this process's environment. Returns the port, or None (no egress)."""
    path = os.path.join(socket_dir, EGRESS_SOCKET_NAME)
    if not os.path.exists(path):
        return None
    server = listen()
    port = int(server.getsockname()[1])
    if pass_listener(server, path):
        server.close()  # the proxy holds it now
    else:
        threading.Thread(target=serve, args=(server, path), daemon=True).start()
    os.environ.update(proxy_env(port))
    return port


def main(argv: list[str] | None = None) -> int:
    """`--socket PATH -- CMD...`: pass the listening socket to the proxy (or fork the
    forwarder when it does not take it), exec CMD with the variables set."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = EGRESS_SOCKET
    if args[:1] == ["--socket"] and len(args) > 1:
        path, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print(
            "usage: python3 -m sandbox_tools.egress_forward [--socket PATH] -- CMD...",
            file=sys.stderr,
        )
        return 2
    server = listen()
    port = int(server.getsockname()[1])
    if not pass_listener(server, path) and os.fork() == 0:
        # the forwarder, when the proxy did not take the listening socket (no threads
        # exist yet, so forking is safe)
        os.setsid()
        try:
            serve(server, path)
        finally:
            os._exit(0)
    server.close()
    env = {**os.environ, **proxy_env(port)}
    try:
        os.execvpe(args[0], args, env)
    except OSError as exc:
        print(f"warden: cannot run {args[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main())
