"""Locks in the bounded output capture: head and tail kept, the middle counted and
announced, memory bounded whatever is fed, and UTF-8 cut cleanly."""

from __future__ import annotations

import pytest

from orchestrator.backend.capture import OutputCapture, human_bytes


def test_small_output_is_kept_whole() -> None:
    capture = OutputCapture("stdout", 100)
    capture.feed(b"hello ")
    capture.feed(b"world")
    assert capture.text() == "hello world"
    assert not capture.truncated and capture.dropped == 0


def test_head_and_tail_kept_and_middle_announced() -> None:
    capture = OutputCapture("stderr", 10)
    for chunk in (b"abc", b"defgh", b"ij" * 1000, b"KLMNO"):
        capture.feed(chunk)
    assert capture.total == 3 + 5 + 2000 + 5
    assert capture.dropped == capture.total - 10
    assert capture.text() == "abcde\n[... warden: 2.0 kB of stderr omitted ...]\nKLMNO"


def test_memory_stays_bounded_under_a_flood() -> None:
    capture = OutputCapture("stdout", 1000)
    chunk = b"x" * 4096
    for _ in range(25_000):  # 100 MB
        capture.feed(chunk)
    kept = len(capture._head) + sum(len(part) for part in capture._tail)
    assert kept == 1000
    assert "[... warden: 102.4 MB of stdout omitted ...]" in capture.text()


def test_tail_many_small_chunks() -> None:
    capture = OutputCapture("stdout", 4)
    for index in range(100):
        capture.feed(str(index % 10).encode())
    assert capture.text() == "01\n[... warden: 96 B of stdout omitted ...]\n89"


def test_utf8_cut_does_not_leave_garbage_at_the_tail() -> None:
    capture = OutputCapture("stdout", 9)
    capture.feed(("ab" + "é" * 50).encode())  # 102 bytes; the tail cut lands mid-character
    text = capture.text()
    assert "\ufffd" not in text
    assert text == "abé\n[... warden: 93 B of stdout omitted ...]\néé"


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (98_951_424, "99.0 MB"),
        (5 * 10**12, "5000.0 GB"),
    ],
)
def test_human_bytes(count: int, text: str) -> None:
    assert human_bytes(count) == text


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        OutputCapture("stdout", 0)
