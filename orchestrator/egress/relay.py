"""The byte relay of one checked connection, in the kernel: `splice` through a pipe.

After the proxy has decided, connected and checked a connection (request head,
TLS ClientHello and ServerHello), nothing more is read from its bytes: they only
have to move, metered against the task's caps. Moving them through Python (an
asyncio read into a buffer, a write out of it) cost the proxy 3-4x a direct
download; `splice` moves them socket → pipe → socket inside the kernel, and one
thread per connection waits in `poll` (the GIL is released in both).

The meter is kept exact: before each splice the relay reserves room under the
byte cap for at most that many bytes (`Meter.reserve`) and settles what moved, so
concurrent relays of one task never cross a cap between them; a connection with
bytes waiting and no room left is cut, and the cut recorded. `stop()` (from any
thread) shuts both sockets down, which wakes the relay and ends it.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import os
import queue
import select
import socket
import threading
from collections.abc import Callable

from orchestrator.egress.limits import Destination, Meter

PIPE_BYTES = 1024 * 1024
"""Pipe capacity per direction (the largest an unprivileged process may ask for by
default, /proc/sys/fs/pipe-max-size); also the most one splice moves."""
IDLE_TIMEOUT_S = 300.0
"""A relay with no bytes either way for this long is closed."""
_SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK


class RelayEnd(enum.Enum):
    DONE = "done"
    CUT = "cut"
    IDLE = "idle"
    ERROR = "error"
    STOPPED = "stopped"


class _Cut(Exception):
    pass


class _Direction:
    """One way of the relay: `head`, then `first`, then `src` spliced into `dst`.

    `head` is the proxy's own (a request head it serialised) and is not metered;
    `first` is what the client or server sent before the relay took over, metered
    like every spliced byte: past the cap only the bytes under it go, then the cut."""

    def __init__(
        self,
        src: socket.socket,
        dst: socket.socket,
        head: bytes,
        first: bytes,
        length: int | None,
        meter: Meter,
        dest: Destination,
        up: bool,
    ) -> None:
        self.src, self.dst = src, dst
        granted = meter.reserve(dest, len(first), up=up)
        meter.settle(dest, granted, granted, up=up)
        self.pending = memoryview(head + first[:granted])
        self.over = granted < len(first)
        """`first` crossed the byte cap: the connection is cut once the rest is sent."""
        self.length = length
        """Bytes still to read from `src` (None: until EOF)."""
        self.meter, self.dest, self.up = meter, dest, up
        self._pipe: tuple[int, int] | None = None
        """(read end, write end), made when the first byte is spliced (a request
        with no body never needs one)."""
        self.in_pipe = 0
        self.reading = length != 0
        self.eof = False
        """`src` ended: `dst` is half-closed once everything is delivered."""
        self.finished = length == 0 and not self.pending

    def wants(self) -> tuple[int, int] | None:
        """(fd, poll events) this direction waits for, or None."""
        if self.pending or self.in_pipe:
            return self.dst.fileno(), select.POLLOUT
        if self.reading:
            return self.src.fileno(), select.POLLIN
        return None

    def step(self) -> None:
        """Move what can move now. Returns once `dst` is full or `src` looks drained
        (a splice came back short): the caller's `poll` then says when to go on,
        instead of one more splice that would only fail with EAGAIN."""
        while self._flush():
            if not self.reading:
                if not self.finished:
                    self.finished = True
                    if self.eof:
                        with contextlib.suppress(OSError):
                            self.dst.shutdown(socket.SHUT_WR)
                return
            if not self._read():
                self._flush()
                return

    def _flush(self) -> bool:
        """Deliver the first bytes, then the pipe, to `dst`; False when `dst` is full."""
        while self.pending:
            try:
                n = self.dst.send(self.pending)
            except BlockingIOError:
                return False
            self.pending = self.pending[n:]
        if self.over:
            self.meter.cross(up=self.up)
            raise _Cut
        while self.in_pipe:
            assert self._pipe is not None
            try:
                n = os.splice(self._pipe[0], self.dst.fileno(), self.in_pipe, flags=_SPLICE_FLAGS)
            except BlockingIOError:
                return False
            self.in_pipe -= n
        return True

    def _read(self) -> bool:
        """One metered splice from `src` into the pipe; False when `src` gave less
        than asked (nothing or a short read: wait for `poll` before the next)."""
        want = PIPE_BYTES if self.length is None else min(PIPE_BYTES, self.length)
        granted = self.meter.reserve(self.dest, want, up=self.up)
        if granted == 0:
            try:
                waiting = self.src.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                return False
            if waiting:
                self.meter.cross(up=self.up)
                raise _Cut
            self.reading, self.eof = False, True
            return True
        try:
            n = os.splice(self.src.fileno(), self.pipe()[1], granted, flags=_SPLICE_FLAGS)
        except BlockingIOError:
            self.meter.settle(self.dest, granted, 0, up=self.up)
            return False
        self.meter.settle(self.dest, granted, n, up=self.up)
        if n == 0:
            self.reading, self.eof = False, True
            return True
        self.in_pipe += n
        if self.length is not None:
            self.length -= n
            self.reading = self.length > 0
        return n == granted or not self.reading

    def pipe(self) -> tuple[int, int]:
        if self._pipe is None:
            self._pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            with contextlib.suppress(OSError):
                fcntl.fcntl(self._pipe[1], fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        return self._pipe

    def close(self) -> None:
        for fd in self._pipe or ():
            with contextlib.suppress(OSError):
                os.close(fd)


class KernelRelay:
    """Relays one connection both ways until both ends are done (or a cap, an error,
    `IDLE_TIMEOUT_S` of silence, or `stop()`). Owns both sockets and closes them."""

    def __init__(
        self,
        client: socket.socket,
        upstream: socket.socket,
        meter: Meter,
        dest: Destination,
        *,
        head: bytes = b"",
        to_upstream: bytes = b"",
        to_client: bytes = b"",
        up_length: int | None = None,
    ) -> None:
        """`head`: the proxy's request head, first upstream (not metered);
        `to_upstream` / `to_client`: checked bytes that go next, metered; `up_length`: how
        many bytes to take from the client (a plain http body), None: until EOF."""
        self.client, self.upstream = client, upstream
        for s in (client, upstream):
            s.setblocking(False)
        self.up = _Direction(client, upstream, head, to_upstream, up_length, meter, dest, up=True)
        self.down = _Direction(upstream, client, b"", to_client, None, meter, dest, up=False)
        self._stopped = threading.Event()

    def run(self) -> RelayEnd:
        """Relay until the end; blocking (run it on its own thread)."""
        try:
            return self._loop()
        except _Cut:
            return RelayEnd.CUT
        except OSError:
            return RelayEnd.STOPPED if self._stopped.is_set() else RelayEnd.ERROR
        finally:
            self.close()

    def close(self) -> None:
        """Close both sockets and the pipes (`run` does when it ends; call it instead
        for a relay that will not run)."""
        self.up.close()
        self.down.close()
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.close()

    def _loop(self) -> RelayEnd:
        directions = (self.up, self.down)
        poller = select.poll()
        while True:
            if self._stopped.is_set():
                return RelayEnd.STOPPED
            for d in directions:
                d.step()
            if self.up.finished and self.down.finished:
                return RelayEnd.DONE
            waits: dict[int, int] = {}
            for d in directions:
                wanted = d.wants()
                if wanted is not None:
                    waits[wanted[0]] = waits.get(wanted[0], 0) | wanted[1]
            if not waits:
                return RelayEnd.DONE
            for fd in (self.client.fileno(), self.upstream.fileno()):
                if fd in waits:
                    poller.register(fd, waits[fd])  # a new fd, or new events for it
                else:
                    with contextlib.suppress(KeyError):
                        poller.unregister(fd)
            if not poller.poll(IDLE_TIMEOUT_S * 1000):
                return RelayEnd.IDLE

    def stop(self) -> None:
        """End the relay from another thread (its sockets are shut down to wake it)."""
        self._stopped.set()
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class RelayThreads:
    """Reused daemon threads that run relays: starting a thread per connection would
    cost every small request a thread start (and a wait for it to run). A thread
    beyond `max_threads` is not started; its job waits for a free one. Daemon
    threads, so a proxy that is never closed cannot hold the process at exit."""

    def __init__(self, max_threads: int) -> None:
        self.max_threads = max_threads
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads: list[threading.Thread] = []

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
            elif len(self._threads) < self.max_threads:
                thread = threading.Thread(
                    target=self._work, name="warden-egress-relay", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        self._jobs.put(job)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()
            with self._lock:
                self._idle += 1

    def close(self, timeout: float) -> None:
        """Let every thread finish its job and end (waiting up to `timeout` each)."""
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join(timeout)
