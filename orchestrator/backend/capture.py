"""Bounded capture of one output stream: keep the head and the tail, count the rest.

A sandbox may write gigabytes; the host keeps at most `limit` bytes per stream, so
its memory stays bounded, and the text it hands back says how much was omitted.
"""

from __future__ import annotations

from collections import deque

_UTF8_CONTINUATION_MAX = 3


class OutputCapture:
    """Keeps the first `limit // 2` and the last `limit - limit // 2` bytes fed to it."""

    def __init__(self, name: str, limit: int) -> None:
        if limit <= 0:
            raise ValueError("limit must be positive")
        self.name = name
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self.total = 0
        """Bytes fed so far."""

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        if len(data) >= self._tail_limit:
            self._tail.clear()
            self._tail.append(bytes(data[-self._tail_limit :]))
            self._tail_size = self._tail_limit
            return
        self._tail.append(bytes(data))
        self._tail_size += len(data)
        excess = self._tail_size - self._tail_limit
        while excess > 0:
            first = self._tail[0]
            if len(first) <= excess:
                self._tail.popleft()
                self._tail_size -= len(first)
                excess -= len(first)
            else:
                self._tail[0] = first[excess:]
                self._tail_size -= excess
                excess = 0

    @property
    def dropped(self) -> int:
        """Bytes that were neither kept in the head nor in the tail."""
        return self.total - len(self._head) - self._tail_size

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        """Head + announcement + tail, decoded as UTF-8 with replacement."""
        tail = b"".join(self._tail)
        if not self.truncated:
            return (bytes(self._head) + tail).decode("utf-8", errors="replace")
        # The cut may split a character: drop the orphaned continuation bytes.
        skip = 0
        while skip < min(len(tail), _UTF8_CONTINUATION_MAX) and 0x80 <= tail[skip] < 0xC0:
            skip += 1
        head_text = bytes(self._head).decode("utf-8", errors="replace")
        return (
            head_text
            + f"\n[... warden: {human_bytes(self.dropped)} of {self.name} omitted ...]\n"
            + tail[skip:].decode("utf-8", errors="replace")
        )


def human_bytes(count: int) -> str:
    """`98.2 MB`-style size (decimal units, as `ls -h --si` prints them)."""
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")
