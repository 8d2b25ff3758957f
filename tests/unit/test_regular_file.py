"""`regular_file`: the one safe read of a file a sandbox may have written. Whatever a
sandbox leaves at the path (a link, a FIFO, a directory, a device, a file swapped
in after the caller's look, a file over the limit) is refused or bounded, never
followed, never waited on."""

from __future__ import annotations

import errno
import os
from functools import partial
from pathlib import Path

import pytest

from orchestrator.errors import WardenError
from orchestrator.regular_file import NotRegularFileError, open_regular, read_regular
from tests.conftest import without_waiting_on


def test_a_regular_file_is_read_up_to_one_byte_past_the_limit(tmp_path: Path) -> None:
    (tmp_path / "small").write_bytes(b"abc")
    (tmp_path / "big").write_bytes(b"x" * 100)
    assert read_regular(tmp_path / "small", 10) == b"abc"
    assert read_regular(tmp_path / "big", 10) == b"x" * 11  # over the limit, and says so


def test_a_link_is_refused_not_followed(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("host data")
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(NotRegularFileError) as caught:
        read_regular(tmp_path / "link", 100)
    assert caught.value.reason == "link" and caught.value.errno == errno.ELOOP
    assert isinstance(caught.value, WardenError) and isinstance(caught.value, OSError)
    # Worded as the OSError of the open always was: callers showing it say the same.
    assert str(caught.value) == f"[Errno {errno.ELOOP}] {os.strerror(errno.ELOOP)}: " + repr(
        str(tmp_path / "link")
    )
    # The person's own paths may follow links, and still get only a regular file.
    assert read_regular(tmp_path / "link", 100, follow_links=True) == b"host data"


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for follow in (False, True):
        outcome = without_waiting_on(fifo, partial(read_regular, fifo, 10, follow_links=follow))
        assert isinstance(outcome, NotRegularFileError) and outcome.reason == "not regular"
        assert outcome.strerror == "not a regular file"


def test_a_directory_and_a_device_are_refused(tmp_path: Path) -> None:
    # Worded as before: a directory as reading one always said, the rest as EINVAL.
    cases = (
        (tmp_path, errno.EISDIR, "Is a directory"),
        (Path("/dev/null"), errno.EINVAL, "not a regular file"),
    )
    for path, code, words in cases:
        with pytest.raises(NotRegularFileError) as caught:
            read_regular(path, 10)
        assert caught.value.reason == "not regular"
        assert (caught.value.errno, caught.value.strerror) == (code, words)


def test_a_missing_file_is_the_plain_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        read_regular(tmp_path / "gone", 10)
    assert not isinstance(caught.value, NotRegularFileError)


def test_a_file_swapped_after_the_callers_look_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("looked at")
    looked = os.stat(path)
    assert read_regular(path, 100, expected=looked) == b"looked at"
    os.rename(path, tmp_path / "kept")  # still there: its inode is not reused
    (tmp_path / "other").write_text("swapped in")
    os.replace(tmp_path / "other", path)
    with pytest.raises(NotRegularFileError) as caught:
        read_regular(path, 100, expected=looked)
    assert caught.value.reason == "changed" and caught.value.errno == errno.ESTALE


def test_a_file_is_opened_relative_to_a_directory_descriptor(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "file").write_text("inside")
    (tmp_path / "dir" / "link").symlink_to("file")
    dir_fd = os.open(tmp_path / "dir", os.O_PATH | os.O_DIRECTORY)
    try:
        os.rename(tmp_path / "dir", tmp_path / "moved")  # the descriptor, not the path
        assert read_regular("file", 100, dir_fd=dir_fd) == b"inside"
        with open_regular("file", dir_fd=dir_fd) as handle:
            assert handle.read() == b"inside"
        with pytest.raises(NotRegularFileError) as caught:
            read_regular("link", 100, dir_fd=dir_fd)
        assert caught.value.reason == "link"
    finally:
        os.close(dir_fd)


def test_no_descriptor_is_left_open_by_a_refusal(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(NotRegularFileError):
            read_regular(tmp_path, 10)
    assert len(os.listdir("/proc/self/fd")) == before
