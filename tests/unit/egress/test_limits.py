"""Egress limits: connections (held from their accept, and opened over the task's
life) and bytes are counted per task and cut at the cap, and the first limit crossed
is recorded."""

from __future__ import annotations

import pytest

from orchestrator.egress.limits import EgressLimits, Meter


def test_connection_cap_refuses_before_opening() -> None:
    meter = Meter(EgressLimits(max_connections=2))
    assert meter.admit() is None
    assert meter.admit() is None
    assert "connection limit (2)" in (meter.admit() or "")
    assert meter.connections == 2


def test_open_connection_cap_counts_from_the_accept_and_frees_on_close() -> None:
    meter = Meter(EgressLimits(max_open_connections=1))
    assert meter.hold() is None  # held before any byte, and before any request counts
    assert meter.connections == 0
    assert "limit of 1 open connections" in (meter.hold() or "")
    assert meter.refused_open == 1
    meter.closed()
    assert meter.hold() is None


def test_byte_cap_cuts_at_the_cap_and_is_recorded() -> None:
    meter = Meter(EgressLimits(max_bytes_down=100))
    dest = meter.destination("a.test", 443)
    assert meter.allow_down(dest, 60) == 60
    assert meter.allow_down(dest, 60) == 40
    assert meter.bytes_down == 100 and dest.bytes_down == 100
    assert meter.cut is not None and "100 bytes received" in meter.cut
    assert meter.admit() == meter.cut  # no new connection after a byte cap


def test_zero_turns_a_cap_off() -> None:
    meter = Meter(EgressLimits(max_bytes_up=0))
    dest = meter.destination("a.test", 80)
    assert meter.allow_up(dest, 10**12) == 10**12
    assert meter.cut is None


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_bytes_down"):
        EgressLimits(max_bytes_down=-1)
