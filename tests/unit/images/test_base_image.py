"""Which base each image is built FROM, and why: a suitable configured base wins;
otherwise an existing bootstrapped base is reused without asking a registry;
only when neither exists is a pull tried (bounded), then debootstrap."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from orchestrator.images import base_image as base_module
from orchestrator.images.base_image import BaseProbe, BaseResolver, bootstrap_tag
from orchestrator.images.hashing import KINDS

FULL = BaseProbe((3, 11), "x86_64", ("glibc", "2.36"), frozenset(base_module.PROBE_TOOLS))
SLIM = BaseProbe((3, 12), "x86_64", ("glibc", "2.36"), frozenset({"bash", "find", "xargs",
                 "grep", "sed", "awk", "diff", "ls", "cat"}))  # fmt: skip
BOOT_ID = "sha256:boot"
SLIM_ID = "sha256:slim"


class Host:
    """The images present, and a record of what the resolver did."""

    def __init__(self, present: dict[str, str], pull_gives: str | None = None) -> None:
        self.present = dict(present)
        self.pull_gives = pull_gives
        self.pulls: list[str] = []
        self.bootstraps: list[str] = []
        self.api = self

    def pull(self, repository: str, tag: str) -> None:
        self.pulls.append(f"{repository}:{tag}")
        if self.pull_gives is None:
            raise RuntimeError("no registry")
        self.present[f"{repository}:{tag}"] = self.pull_gives


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base_module, "image_id", lambda client, ref: client.present.get(ref))
    probes = {SLIM_ID: SLIM, BOOT_ID: FULL}
    monkeypatch.setattr(
        base_module,
        "probe_image",
        lambda client, ref, owner_labels=None: probes[client.present[ref]],
    )

    def fake_bootstrap(client: Host, tag: str, log: Any, **_: Any) -> str:
        client.bootstraps.append(tag)
        client.present[tag] = BOOT_ID
        return BOOT_ID

    monkeypatch.setattr(base_module, "bootstrap_base", fake_bootstrap)


def resolve(host: Host, *, pull: bool = True) -> tuple[dict[str, str], list[str]]:
    lines: list[str] = []
    resolver = BaseResolver(host, "python:3.12-slim", lines.append, pull=pull)
    chosen = resolver.for_kinds([KINDS["agent"], KINDS["bash"]])
    return {kind: base.origin for kind, base in chosen.items()}, lines


def test_a_configured_base_with_everything_is_used_for_both(patched: None) -> None:
    host = Host({"python:3.12-slim": BOOT_ID})
    origins, _ = resolve(host)
    assert origins == {"agent": "configured", "bash": "configured"}
    assert host.pulls == [] and host.bootstraps == []


def test_a_slim_base_serves_bash_and_the_agent_falls_back_saying_why(patched: None) -> None:
    host = Host({"python:3.12-slim": SLIM_ID})
    origins, lines = resolve(host)
    assert origins == {"agent": "bootstrapped", "bash": "configured"}
    assert any("lacks git, ps for agent" in line for line in lines), lines
    assert host.pulls == [], "a base that is present locally is never pulled"
    assert host.bootstraps == [bootstrap_tag()]


def test_an_existing_bootstrapped_base_is_reused_without_a_pull(patched: None) -> None:
    host = Host({bootstrap_tag(): BOOT_ID})
    origins, lines = resolve(host)
    assert origins == {"agent": "bootstrapped", "bash": "bootstrapped"}
    assert host.pulls == [] and host.bootstraps == []
    assert any("reusing bootstrapped" in line for line in lines)


def test_nothing_local_tries_one_pull_then_bootstraps(patched: None) -> None:
    host = Host({})
    origins, lines = resolve(host)
    assert host.pulls == ["python:3.12-slim"]
    assert host.bootstraps == [bootstrap_tag()]
    assert origins == {"agent": "bootstrapped", "bash": "bootstrapped"}
    assert any("pulling python:3.12-slim failed" in line for line in lines)


def test_no_pull_goes_straight_to_bootstrap(patched: None) -> None:
    host = Host({})
    resolve(host, pull=False)
    assert host.pulls == []
    assert host.bootstraps == [bootstrap_tag()]


def test_a_pulled_base_is_used_when_suitable(patched: None) -> None:
    host = Host({}, pull_gives=SLIM_ID)
    origins, _ = resolve(host)
    assert origins == {"agent": "bootstrapped", "bash": "pulled"}


def test_a_pull_that_hangs_is_abandoned_in_bounded_time(
    patched: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    class Hanging(Host):
        def pull(self, repository: str, tag: str) -> None:
            release.wait(10)

    monkeypatch.setattr(base_module, "PULL_TIMEOUT_S", 0.2)
    host = Hanging({})
    try:
        origins, lines = resolve(host)
    finally:
        release.set()
    assert origins["agent"] == "bootstrapped"
    assert any("gave no answer" in line for line in lines)
