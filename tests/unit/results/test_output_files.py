"""Locks in how a run writes the files the person asked for: whole (never half a
file), over a link or FIFO a sandbox left at the name instead of through it, and
only into the directory the path named when the run began (one swapped for a link
meanwhile is refused, naming the file)."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from orchestrator.results.output_files import OutputFile, OutputFileError, at_start, write_output


def test_a_link_at_the_name_is_replaced_and_its_target_left_alone(tmp_path: Path) -> None:
    host = tmp_path / "host-file"
    host.write_text("host\n")
    out = tmp_path / "ws" / "junit.xml"
    out.parent.mkdir()
    target = OutputFile.at_start(out)
    out.symlink_to(host)  # a sandbox, during the run
    write_output(target, b"<testsuites/>")
    assert host.read_text() == "host\n"
    assert not out.is_symlink() and out.read_bytes() == b"<testsuites/>"
    assert os.listdir(out.parent) == ["junit.xml"]


def test_a_directory_swapped_for_a_link_during_the_run_is_refused(tmp_path: Path) -> None:
    ws, host_dir = tmp_path / "ws", tmp_path / "host-dir"
    (ws / "reports").mkdir(parents=True)
    host_dir.mkdir()
    target = OutputFile.at_start(ws / "reports" / "audit.json")
    (ws / "reports").rename(tmp_path / "moved")  # a sandbox, during the run
    (ws / "reports").symlink_to(host_dir)
    with pytest.raises(OutputFileError, match=r"audit\.json: its directory was replaced"):
        write_output(target, b"[]")
    assert os.listdir(host_dir) == []


def test_a_directory_that_did_not_exist_when_the_run_began_is_refused(tmp_path: Path) -> None:
    target = OutputFile.at_start(tmp_path / "later" / "junit.xml")
    (tmp_path / "later").mkdir()
    with pytest.raises(OutputFileError, match="did not exist when the run began"):
        write_output(target, b"x")


def test_a_missing_directory_is_made_before_the_run_and_written_into_at_the_end(
    tmp_path: Path,
) -> None:
    target = at_start(tmp_path / "reports" / "ci" / "junit.xml", "--junit")
    assert target is not None and (tmp_path / "reports" / "ci").is_dir()
    write_output(target, b"<testsuites/>")
    assert (tmp_path / "reports" / "ci" / "junit.xml").read_bytes() == b"<testsuites/>"
    assert at_start(None, "--junit") is None


def test_a_directory_that_cannot_be_made_is_a_usage_error_before_the_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(click.BadParameter, match="cannot make the directory"):
        at_start(tmp_path / "file" / "junit.xml", "--junit")
