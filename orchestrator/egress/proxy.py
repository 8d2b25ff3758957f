"""The host side of one task's egress: an HTTP proxy on a Unix socket.

The in-container forwarder passes its listening socket over the socket once, and
the proxy accepts the sandbox's TCP connections on it itself, on a thread of its
own (`handover`); failing that, the forwarder relays each client over a Unix
connection, which is served as the client itself. Every socket the proxy reads and
writes is its own (a passed connection, whose blocking flag the sandbox shares, is
refused).

Every accepted connection is held against the task's open-connection cap from its
accept, on the accepting thread, before anything is read from it (`Meter.hold`): one
over the cap gets a one-line `429` and is closed there, and the first such refusal
is announced once (`egress_open_limit`), so a sandbox that opens thousands of
connections and sends nothing costs the host at most the cap in descriptors.

One request per connection, in three phases:
1. checks, on the event loop: the peer's uid and group (of the Unix connection that
   passed the connection or its listening socket), the connection caps, the request head
   (`http_head`: h11 plus the refusals that stop request smuggling), the decision
   (`verdict`), the connect to the checked address, and for `CONNECT` the TLS check
   (`tunnel`: every ClientHello the client sends in the clear names the CONNECT
   host; a rule `tcp://HOST:PORT` alone opens a raw tunnel);
2. plain http: upstream gets the head the proxy serialised and exactly the body
   its `Content-Length` announces; a request pipelined behind it never leaves;
3. the bytes, in the kernel (`relay.KernelRelay`, splice on a thread of its own),
   metered against the task's caps.
Anything refused before `200` gets a `403` (or 4xx) with one line naming the rule
or mode and what to do (also in `X-Warden-Egress`); a tunnel refused after `200`
gets a TLS `unrecognized_name` alert. Sockets are plain non-blocking sockets
driven by the loop's `sock_*` calls, so the proxy owns every byte it has read and
hands the rest, with the sockets, to the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from orchestrator.broker.listener import peer_groups, peer_uid, sandbox_group
from orchestrator.egress.dial import connect
from orchestrator.egress.handover import (
    ACCEPT_RETRY_S,
    MAX_PASSED_LISTENERS,
    TAKEN,
    ListenerAcceptor,
    PassedListener,
    received,
)
from orchestrator.egress.http_head import (
    MAX_HEAD_BYTES,
    HeadRefused,
    ProxyRequest,
    line_ends_refusal,
    parse_request_head,
)
from orchestrator.egress.limits import Destination, Meter
from orchestrator.egress.refusals import TLS_ALERT_UNRECOGNIZED_NAME, close_over_cap, refuse
from orchestrator.egress.relay import KernelRelay, RelayEnd, RelayThreads
from orchestrator.egress.tunnel import (
    BufferedSocket,
    Checked,
    TunnelEnded,
    TunnelRefused,
    first_hello,
    handshake,
)
from orchestrator.egress.verdict import ConnectionPolicy, Verdict

log = logging.getLogger(__name__)

SOCKET_NAME = "egress.sock"
"""The proxy's socket, beside the broker's in the task's socket directory."""
SOCKET_MODE = 0o660
LISTEN_BACKLOG = 128
HEAD_TIMEOUT_S = 30.0
"""A request head must arrive within this."""
RELAY_JOIN_TIMEOUT_S = 5.0
"""How long `close()` waits for each stopped relay's thread to let go of its sockets."""
MAX_RELAY_THREADS = 256
"""Relay threads one proxy keeps at most (a connection beyond waits for one); the
task's open-connection cap (64 by default) normally binds first. Threads are reused:
starting one per connection would cost every small request a thread start."""
Record = Callable[[Verdict, str], Awaitable[None]]
"""Called with every decision and the request method (audit and events)."""
RecordNow = Callable[[Verdict, str], None]
"""Writes an allowed plain-http connection's audit record, durably, blocking: called on
the connection's relay thread just before its first byte goes upstream, so the write
and the relay share one thread hop. An exception closes the connection unsent."""
Notice = Callable[[str, str], Awaitable[None]]
"""Called with (kind, message) when something should be reported once."""


class EgressProxy:
    """One task's proxy, listening at `socket_dir/egress.sock`."""

    def __init__(
        self,
        socket_dir: Path,
        connections: ConnectionPolicy,
        meter: Meter,
        *,
        allowed_uids: frozenset[int],
        record: Record,
        record_now: RecordNow,
        notice: Notice,
    ) -> None:
        self.path = socket_dir / SOCKET_NAME
        self.connections = connections
        self.meter = meter
        self.allowed_uids = allowed_uids
        self.record = record
        self.record_now = record_now
        self.notice = notice
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._relays: set[KernelRelay] = set()
        self._acceptors: list[ListenerAcceptor] = []
        """Forwarders' listening sockets, accepted on directly (`handover`)."""
        self._relay_threads = RelayThreads(MAX_RELAY_THREADS)
        self._cut_reported = False
        self._open_limit_reported = False
        self._notices: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        # Like the broker's: the directory's group is the sandbox's gid, and only the
        # sandbox (and this process) may connect; the peer check follows on accept.
        with contextlib.suppress(PermissionError):
            os.chown(self.path, -1, self.path.parent.stat().st_gid)
        os.chmod(self.path, SOCKET_MODE)
        listener.listen(LISTEN_BACKLOG)
        listener.setblocking(False)
        self._listener = listener
        self._accepting = asyncio.create_task(self._accept_loop())

    async def close(self) -> None:
        """Stop accepting, end every open connection and relay; quiet (a closing
        proxy with open tunnels is normal, not an error to print)."""
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
        acceptors, self._acceptors = self._acceptors, []
        if acceptors:
            await asyncio.gather(*(asyncio.to_thread(a.stop) for a in acceptors))
        for relay in list(self._relays):
            relay.stop()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        # Stopped relays end at once; wait for their threads to let go of the sockets.
        await asyncio.to_thread(self._relay_threads.close, RELAY_JOIN_TIMEOUT_S)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _accept_loop(self) -> None:
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._listener)
            except OSError as exc:  # e.g. EMFILE: keep serving the open connections
                log.warning("egress proxy: accept failed: %s", exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            why = self.meter.hold()
            if why is not None:
                close_over_cap(conn, why)
                self._open_limit(why)
                continue
            self._handle(conn, checked=False)

    def _handle(self, conn: socket.socket, *, checked: bool) -> None:
        """Serve a held connection (`Meter.hold` counted it; `_accepted` gives it back)."""
        task = asyncio.create_task(self._accepted(conn, checked))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    def _open_limit(self, why: str) -> None:
        """On the loop: announce the open-connection cap, once per proxy."""
        if self._open_limit_reported:
            return
        self._open_limit_reported = True
        message = (
            f"egress: {why} was reached; further connections are closed at accept until one ends"
        )

        async def say() -> None:
            await self.notice("egress_open_limit", message)

        task = asyncio.create_task(say())
        self._notices.add(task)
        task.add_done_callback(self._notices.discard)

    def _handle_checked(self, conn: socket.socket) -> None:
        self._handle(conn, checked=True)

    def _deliver_passed(self, loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
        """From an acceptor's thread: a connection accepted on a passed listener (made
        inside the sandbox that passed it: its peer checks were that socket's). Held
        here, on the acceptor's thread, so connections waiting for the loop count too."""
        why = self.meter.hold()
        if why is not None:
            close_over_cap(conn, why)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._open_limit, why)
            return
        try:
            loop.call_soon_threadsafe(self._handle_checked, conn)
        except RuntimeError:  # the loop is closed: the proxy is gone
            conn.close()
            self.meter.closed()

    async def _accepted(self, conn: socket.socket, checked: bool) -> None:
        owned = [conn]
        try:
            if checked:
                await self._admitted(BufferedSocket(conn), owned)
            else:
                await self._serve(conn, owned)
        except (OSError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass  # the proxy is closing: end quietly
        except Exception:  # a proxy bug must not take the run down
            log.exception("egress proxy: connection failed")
        finally:
            for sock in owned:
                sock.close()
            self.meter.closed()

    async def _serve(self, conn: socket.socket, owned: list[socket.socket]) -> None:
        uid = peer_uid(conn)
        if uid not in self.allowed_uids:
            await self.notice("egress_refused_peer", f"a process with uid {uid} was refused")
            return
        group = sandbox_group(self.path.parent)
        host_peer = uid == os.getuid() and len(self.allowed_uids) > 1  # not also the sandbox's
        if group is not None and not host_peer:
            groups = peer_groups(conn)
            if groups is None or group not in groups:
                await self.notice(
                    "egress_refused_peer",
                    f"a process with uid {uid} without group {group} (another sandbox's "
                    "socket) was refused",
                )
                return
        passed = await received(conn, HEAD_TIMEOUT_S)
        if isinstance(passed, PassedListener):
            owned.append(passed.sock)
            if len(self._acceptors) < MAX_PASSED_LISTENERS:
                owned.remove(passed.sock)
                loop = asyncio.get_running_loop()
                deliver = functools.partial(self._deliver_passed, loop)
                acceptor = ListenerAcceptor(passed.sock, deliver)
                self._acceptors.append(acceptor)
                acceptor.start()
                await loop.sock_sendall(conn, TAKEN)
            return
        owned.append(passed.sock)
        await self._admitted(passed, owned)

    async def _admitted(self, client: BufferedSocket, owned: list[socket.socket]) -> None:
        """One client connection (already held): the lifetime cap, then its request."""
        why = self.meter.admit()
        if why is not None:
            await refuse(client.sock, 429, f"refused: {why} is reached")
            return
        await self._request(client, owned)

    async def _request(self, client: BufferedSocket, owned: list[socket.socket]) -> None:
        try:
            request = parse_request_head(await _read_head(client))
        except HeadRefused as exc:
            await refuse(client.sock, exc.status, exc.reason)
            return
        verdict = await self.connections.verdict_for(request.host, request.port)
        dest = self.meter.destination(verdict.host, verdict.port)
        if verdict.behavior == "deny":
            dest.refused += 1
            await self.record(verdict, request.method)
            await refuse(client.sock, 403, f"warden egress: {verdict.reason}")
            return
        try:
            up = await connect(verdict)
        except OSError as exc:
            dest.refused += 1
            failed = _denied(
                verdict,
                f"could not connect to {verdict.host}:{verdict.port} ({exc.strerror or exc})",
                "proxy: connect",
            )
            await self.record(failed, request.method)
            await refuse(client.sock, 502, f"warden egress: {failed.reason}")
            return
        owned.append(up)
        if request.method == "CONNECT":
            checked = await self._tunnel(client, BufferedSocket(up), verdict, dest)
            if checked is None:
                return
            relay = KernelRelay(
                client.sock, up, self.meter, dest,
                to_upstream=checked.from_client, to_client=checked.from_server,
            )  # fmt: skip
            owned.clear()  # the relay owns (and closes) both sockets from here
            await self._relay(relay)
            return
        relay = self._plain(client, up, request, dest)
        owned.clear()

        def audited() -> None:  # on the relay's thread, before any byte moves
            self.record_now(verdict, request.method)
            self.meter.opened(dest)

        await self._relay(relay, before=audited)

    def _plain(
        self, client: BufferedSocket, up: socket.socket, request: ProxyRequest, dest: Destination
    ) -> KernelRelay:
        """Upstream: the serialised head, then only the announced body."""
        length = request.body_bytes or 0
        body_start = bytes(client.buffer[:length])
        return KernelRelay(
            client.sock, up, self.meter, dest,
            head=request.upstream_head,
            to_upstream=body_start,
            up_length=length - len(body_start),
        )  # fmt: skip

    async def _tunnel(
        self, client: BufferedSocket, server: BufferedSocket, verdict: Verdict, dest: Destination
    ) -> Checked | None:
        """`200`, then (unless a raw-TCP rule allowed it) the TLS check; None when
        the tunnel was refused or ended."""
        await client.send(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        if verdict.raw:
            await self.record(verdict, "CONNECT")
            self.meter.opened(dest)
            return Checked(bytes(client.buffer), b"")

        async def up(data: bytes) -> None:
            await self._forward(server, data, dest, up=True)

        async def down(data: bytes) -> None:
            await self._forward(client, data, dest, up=False)

        try:
            hello = await first_hello(client, verdict.host, verdict.port)
            await self.record(verdict, "CONNECT")
            self.meter.opened(dest)
            await up(hello)
            return await handshake(client, server, verdict.host, up, down)
        except TunnelRefused as exc:
            dest.refused += 1
            await self.record(_denied(verdict, str(exc), "proxy: TLS check"), "CONNECT")
            with contextlib.suppress(OSError):
                await client.send(TLS_ALERT_UNRECOGNIZED_NAME)
        except TunnelEnded:
            pass
        return None

    async def _forward(self, to: BufferedSocket, data: bytes, dest: Destination, up: bool) -> None:
        allowed = (
            self.meter.allow_up(dest, len(data)) if up else self.meter.allow_down(dest, len(data))
        )
        await to.send(data[:allowed])
        if allowed < len(data):
            await self._report_cut()
            raise TunnelEnded("a byte cap was crossed")

    async def _relay(self, relay: KernelRelay, before: Callable[[], None] | None = None) -> None:
        """Run `relay` on a relay thread, after `before` (on that thread too); an
        exception from `before` closes the connection before any byte moves."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[RelayEnd] = loop.create_future()

        def run() -> None:
            try:
                if before is not None:
                    before()
            except Exception:
                log.exception("egress proxy: connection closed unsent")
                relay.close()
                end = RelayEnd.ERROR
            else:
                try:
                    end = relay.run()
                except Exception:  # a relay bug ends its connection, not the proxy
                    log.exception("egress proxy: relay failed")
                    end = RelayEnd.ERROR
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(_settle, ended, end)

        self._relays.add(relay)
        self._relay_threads.submit(run)
        try:
            end = await ended
        except asyncio.CancelledError:
            relay.stop()
            raise
        finally:
            self._relays.discard(relay)
        if end is RelayEnd.CUT or self.meter.cut is not None:
            await self._report_cut()

    async def _report_cut(self) -> None:
        if self.meter.cut is not None and not self._cut_reported:
            self._cut_reported = True
            await self.notice("egress_limit", f"egress cut: {self.meter.cut} was crossed")


def _settle(future: asyncio.Future[RelayEnd], end: RelayEnd) -> None:
    if not future.done():
        future.set_result(end)


def _denied(verdict: Verdict, reason: str, decided_by: str) -> Verdict:
    return Verdict("deny", verdict.host, verdict.port, reason, decided_by, "proxy", verdict.policy)


async def _read_head(client: BufferedSocket) -> bytes:
    """The request head (through its blank line); HeadRefused when it is too large,
    slow, or has a bare CR or LF (refused as soon as one arrives)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(HEAD_TIMEOUT_S):
            while (end := client.buffer.find(b"\r\n\r\n")) < 0:
                bad = line_ends_refusal(client.buffer, complete=False)
                if bad is not None:
                    raise HeadRefused(400, f"warden egress: {bad}; send CRLF line ends")
                if len(client.buffer) > MAX_HEAD_BYTES:
                    raise HeadRefused(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
                chunk = await loop.sock_recv(client.sock, MAX_HEAD_BYTES)
                if not chunk:
                    raise ConnectionError("closed before the request head ended")
                client.buffer += chunk
    except TimeoutError:
        raise HeadRefused(400, f"no request head within {HEAD_TIMEOUT_S:g} s") from None
    return await client.take(end + 4)
