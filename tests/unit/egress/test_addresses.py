"""Address classification: loopback, link-local (metadata), private, CGNAT, this-network,
multicast and IPv6 forms embedding them are refused; public addresses are not."""

from __future__ import annotations

import ipaddress

import pytest

from orchestrator.egress.addresses import parse_ip, refusal


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "127.8.8.8", "::1", "169.254.169.254", "fe80::1", "10.0.0.1",
        "172.16.5.4", "192.168.1.1", "fc00::1", "fd12::1", "100.64.0.1", "100.127.255.254",
        "0.0.0.0", "0.1.2.3", "224.0.0.251", "ff02::1", "::", "255.255.255.255",
        "::ffff:169.254.169.254", "::ffff:127.0.0.1", "2002:7f00:1::", "64:ff9b::a9fe:a9fe",
    ],
)  # fmt: skip
def test_non_public_addresses_are_refused(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "151.101.0.223", "2606:4700::6810:84e5"])
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def test_metadata_address_says_why() -> None:
    assert "metadata" in (refusal(ipaddress.ip_address("169.254.169.254")) or "")


@pytest.mark.parametrize("text", ["[::1]", "fe80::1%eth0", " 10.0.0.1 "])
def test_ip_literals_in_their_forms_are_recognised(text: str) -> None:
    assert parse_ip(text) is not None


@pytest.mark.parametrize("text", ["pypi.org", "1.2.3", "0x7f.1", "localhost"])
def test_names_are_not_ip_literals(text: str) -> None:
    assert parse_ip(text) is None
