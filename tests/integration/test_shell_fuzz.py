"""The differential fuzzer against a real oracle: bash runs each case in a hardened
warden sandbox under strace, in a workspace with the fuzz policy's walls (its
denied files masked, its protected directory read-only), and a fixed-seed slice of generated cases finds no
command the analyser allows while bash runs an unallowed program, writes a file
or opens a socket. Every saved bypass still does something in bash and is not
allowed by the analyser."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator import labels as wl
from orchestrator.backend.connect import connect
from tests.fuzz.image import ensure_oracle_image
from tests.fuzz.judge import decide, violations
from tests.fuzz.oracle import Oracle, OracleError
from tests.fuzz.session import REGRESSIONS, run
from tests.fuzz.walls import SECRET

pytestmark = pytest.mark.integration

SLICE_SEED = 20261123
SLICE_CASES = 400
"""Sized to finish in well under 60 s on a 2-core machine (only allowed cases reach
the oracle)."""
SLICE_DEADLINE_S = 50.0


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    c = connect()
    yield c
    c.close()


@pytest.fixture(scope="module")
def oracle(client: Any) -> Iterator[Oracle]:
    image = ensure_oracle_image(client)
    with Oracle(client, image) as running:
        yield running
    left = client.api.containers(all=True, filters={"label": f"{wl.SESSION}={running.session}"})
    assert not left, f"oracle containers left behind: {left}"


def _container(client: Any, oracle: Oracle) -> dict[str, Any]:
    rows = client.api.containers(filters={"label": f"{wl.SESSION}={oracle.session}"})
    assert len(rows) == 1
    info: dict[str, Any] = client.api.inspect_container(rows[0]["Id"])
    return info


def test_the_oracle_runs_in_a_hardened_sandbox(client: Any, oracle: Oracle) -> None:
    info = _container(client, oracle)
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert host["ReadonlyRootfs"] is True
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] and host["Memory"]
    assert info["Config"]["User"] == "1000:1000"
    assert info["Config"]["NetworkDisabled"] is True
    assert info["Config"]["Labels"][wl.SESSION] == oracle.session
    # From inside: only the loopback interface, no route.
    exec_id = client.api.exec_create(info["Id"], ["cat", "/proc/net/dev", "/proc/net/route"])
    text = client.api.exec_start(exec_id).decode()
    interfaces = {line.split(":")[0].strip() for line in text.splitlines() if ":" in line}
    assert interfaces == {"lo"}
    route_lines = [ln for ln in text.splitlines() if ln.startswith(("Iface", "lo\t"))]
    assert route_lines == [next(ln for ln in text.splitlines() if ln.startswith("Iface"))]


def test_the_oracle_sees_execs_writes_and_connects(oracle: Oracle) -> None:
    seen = oracle.observe(
        "touch made; echo hi > out; rm out; cat < /dev/tcp/127.0.0.1/1; "
        "cat <<EOF >/dev/null\n$(seq 1 3000)\nEOF\n"
        "echo x > /dev/null | cat"
    )
    shown = [str(v) for v in violations(seen)]
    assert any(s.startswith("exec: /usr/bin/touch") for s in shown)
    assert any(s.startswith("exec: /usr/bin/rm") for s in shown)
    assert any("/workspace/out O_WRONLY|O_CREAT|O_TRUNC" in s for s in shown)
    assert any(s.startswith("write: unlinkat /workspace/out") for s in shown)
    assert any("inet_addr('127.0.0.1')" in s and "ECONNREFUSED" in s for s in shown)
    # bash's own heredoc temp file, /dev/null and the pipe are not findings
    assert not any("sh-thd" in s or "/dev/null" in s for s in shown)
    assert not any("seq" in s or "cat" in s for s in shown if s.startswith("exec"))


def test_the_oracle_runs_cases_behind_the_policys_walls(oracle: Oracle) -> None:
    # The fuzz policy's Read denies are masked and its Edit deny is read-only, so the
    # routes the analyser once missed read nothing and write nothing: a real read or
    # write, not a disagreement with a model, is what makes a bypass.
    seen = oracle.observe(
        "cat .env /proc/self/cwd/.env ~+/secrets/key; git diff --no-index /dev/null .env; "
        "wc --files0-from=.env; ln -s secrets l && cat l/key; exec 3<.; cat /dev/fd/3/.env; "
        "sort -o protected/p x.txt; cat protected/p"
    )
    assert SECRET not in seen.output and "original" in seen.output
    assert not [v for v in violations(seen) if v.kind == "read"]
    assert any("protected/p" in str(v) and "EROFS" in str(v) for v in violations(seen))
    # The judge does see a secret that reaches the output.
    leaked = oracle.observe(f"echo {SECRET}")
    assert [v.kind for v in violations(leaked)] == ["read"]


def test_the_oracle_stops_a_case_at_its_timeout_and_runs_the_next(oracle: Oracle) -> None:
    slow = oracle.observe("setsid sleep 60 & sleep 60")
    assert slow.timed_out
    assert slow.seconds < oracle.case_timeout_s + 15  # stopped, not left to run its 60 s
    after = oracle.observe("true")
    assert not after.timed_out and violations(after) == []


def test_a_fixed_seed_slice_finds_no_bypass(oracle: Oracle) -> None:
    report = run(
        oracle, seed=SLICE_SEED, cases=SLICE_CASES, max_minimise=3, deadline_s=SLICE_DEADLINE_S
    )
    assert report.cases == SLICE_CASES, f"the slice ran out of time: {report.summary()}"
    assert report.decisions["allow"] > 20, "the slice must exercise allowed commands"
    details = "\n".join(f"  {f.command!r}: {'; '.join(f.saw)}" for f in report.findings)
    assert report.bypasses == 0, f"{report.summary()}\nminimised:\n{details}"


def _saved() -> list[dict[str, Any]]:
    return [json.loads(line) for line in REGRESSIONS.read_text().splitlines() if line.strip()]


def test_every_saved_bypass_still_does_what_the_oracle_saw(oracle: Oracle) -> None:
    """A saved case stays meaningful: bash still runs, writes or connects as recorded,
    and the analyser does not allow it (open cases aside, see the unit replay)."""
    records = _saved()
    silent = [r["command"] for r in records if not violations(oracle.observe(r["command"]))]
    assert not silent, f"saved cases where bash no longer does anything unallowed: {silent}"
    allowed = [
        r["command"] for r in records if not r.get("open") and decide(r["command"])[0] == "allow"
    ]
    assert not allowed, f"fixed bypasses the analyser allows again: {allowed}"


def test_a_case_that_kills_the_driver_fails_alone_and_the_oracle_recovers(oracle: Oracle) -> None:
    with pytest.raises(OracleError):
        oracle.observe("kill -9 -1")
    assert oracle.restarts >= 1
    after = oracle.observe("echo hi > made")
    assert [v.kind for v in violations(after)] == ["write"]


def test_the_new_families_are_seen_by_the_oracle_and_never_allowed_when_they_write(
    oracle: Oracle,
) -> None:
    """Descriptor reopening, nested dialects and digit descriptors (issue 19): every case
    of a fixed seed runs in the oracle, allowed or not; the ones where bash wrote a file
    or ran an unallowed program are never allowed, and the family does reach writes."""
    import random

    from tests.fuzz.generate import digit_descriptor, nested_dialect, reopen

    rnd = random.Random(SLICE_SEED)
    cases = [f(rnd) for f in (reopen, nested_dialect, digit_descriptor) for _ in range(12)]
    harmful = [c for c in cases if violations(oracle.observe(c))]
    assert any("/dev/" in c or "/proc/" in c for c in harmful), "no reopen case wrote a file"
    allowed = [c for c in harmful if decide(c)[0] == "allow"]
    assert not allowed, allowed
