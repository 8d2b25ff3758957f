"""The differential fuzzer's own parts: same seed same cases, loopback-only cases,
the trace parser, and what the judge counts as a bypass (and what it excludes)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from tests.fuzz.generate import generate
from tests.fuzz.judge import NetworkRuleError, covered, violations
from tests.fuzz.mutate import evolve, mutate
from tests.fuzz.netrule import net_safe
from tests.fuzz.oracle import Observation
from tests.fuzz.oracle_image import driver
from tests.fuzz.session import MINIMISE_BUDGET, minimise, skeleton


def test_same_seed_gives_the_same_cases_and_another_seed_others() -> None:
    first = [generate(5, i, []) for i in range(200)]
    assert first == [generate(5, i, []) for i in range(200)]
    assert first != [generate(6, i, []) for i in range(200)]
    assert len(set(first)) > 150


def test_cases_only_name_loopback_addresses() -> None:
    cases = [generate(11, i, []) for i in range(3000)]
    assert all(net_safe(c) for c in cases)
    assert any("/dev/tcp/127.0.0.1/" in c or "/dev/udp/localhost/" in c for c in cases)


@pytest.mark.parametrize(
    "command",
    [
        "echo > /dev/tcp/10.0.0.1/80",
        "echo > /dev/tcp/127.0.0.1.5/1",
        "cat < /dev/udp/localhos/53",
        "cat < /dev/t'c'p/example/1",
        "cat < /dev/$'\\x74'cp/2130706433/1",
        "exec 3<>/dev/tcp/::1/1",
        "ping 8.8.8.8",
    ],
)
def test_net_safe_rejects_every_other_address(command: str) -> None:
    assert not net_safe(command)


def test_mutation_is_deterministic_for_a_seeded_random() -> None:
    import random

    one = mutate(random.Random(3), "echo hi > /dev/null", ["cat x"])
    assert one == mutate(random.Random(3), "echo hi > /dev/null", ["cat x"])


def _hex(text: str) -> str:
    return "".join(f"\\x{b:02x}" for b in text.encode())


def test_the_driver_parses_strace_lines_into_events() -> None:
    lines = [
        f'execve("{_hex("/usr/bin/touch")}", ["{_hex("touch")}", "{_hex("a b")}"], 0x7ffd /* 3 vars */) = 0',
        f'openat(AT_FDCWD<{_hex("/tmp/w")}>, "{_hex("out")}", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3<{_hex("/tmp/w/out")}>',
        f'openat(AT_FDCWD<{_hex("/tmp/w")}>, "{_hex("/etc/x")}", O_RDONLY) = 3<{_hex("/etc/x")}>',
        f'unlinkat(AT_FDCWD<{_hex("/tmp/w")}>, "{_hex("gone")}", 0) = -1 ENOENT (No such file or directory)',
        "clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x7f) = 42",
    ]
    events: dict[str, list[dict[str, object]]] = {"execs": [], "writes": [], "connects": []}
    assert driver.parse_process(7, lines, events) == [42]
    assert events["execs"] == [
        {
            "pid": 7,
            "image": None,
            "filename": "/usr/bin/touch",
            "argv": ["touch", "a b"],
            "ok": True,
            "error": "",
        }
    ]
    writes = [(w["syscall"], w["path"], w["ok"], w["opened"]) for w in events["writes"]]
    assert writes == [
        ("openat", "/tmp/w/out", True, "/tmp/w/out"),
        ("unlinkat", "/tmp/w/gone", False, None),
    ]


def _obs(**events: object) -> Observation:
    base: dict[str, Any] = {
        "root": 1,
        "parents": {"2": 1},
        "execs": [
            {
                "pid": 1,
                "image": None,
                "filename": "/usr/bin/bash",
                "argv": ["/usr/bin/bash", "-c", "x"],
                "ok": True,
            }
        ],
    }
    for kind, items in events.items():
        base[kind] = [*base.get(kind, []), *cast(list[object], items)]
    return Observation.model_validate(base)


def test_covered_follows_the_allow_rule_forms() -> None:
    assert covered(["echo", "a", "b"])
    assert covered(["git", "status"])
    assert not covered(["git", "status", "--porcelain"])
    assert not covered(["git", "log"])
    assert not covered(["touch", "x"])


def test_an_uncovered_exec_is_a_violation_even_under_an_allowed_argv0() -> None:
    obs = _obs(
        execs=[
            {"pid": 2, "image": None, "filename": "/usr/bin/rm", "argv": ["echo", "x"], "ok": True},
            {
                "pid": 2,
                "image": None,
                "filename": "/usr/bin/echo",
                "argv": ["echo", "x"],
                "ok": True,
            },
            {
                "pid": 2,
                "image": None,
                "filename": "/usr/bin/timeout",
                "argv": ["timeout", "1"],
                "ok": True,
            },
            {"pid": 2, "image": None, "filename": "/tmp/w/echo", "argv": ["echo"], "ok": True},
        ]
    )
    assert [v.kind for v in violations(obs)] == ["exec", "exec"]
    assert "/usr/bin/rm" in str(violations(obs)[0])
    assert "/tmp/w/echo" in str(violations(obs)[1])


def test_bash_heredoc_files_dev_null_and_pipes_are_not_writes_but_the_rest_is() -> None:
    heredoc = "/tmp/sh-thd.ab12CD"
    obs = _obs(
        writes=[
            {
                "pid": 1,
                "image": "/usr/bin/bash",
                "syscall": "openat",
                "path": heredoc,
                "flags": "O_RDWR|O_CREAT|O_EXCL",
                "ok": True,
                "opened": heredoc,
            },
            {"pid": 1, "image": "/usr/bin/bash", "syscall": "unlink", "path": heredoc, "ok": True},
            {
                "pid": 1,
                "image": "/usr/bin/bash",
                "syscall": "openat",
                "path": "/dev/stdout",
                "flags": "O_WRONLY|O_CREAT|O_TRUNC",
                "ok": True,
                "opened": "/dev/null",
            },
            {
                "pid": 1,
                "image": "/usr/bin/bash",
                "syscall": "openat",
                "path": "/dev/fd/63",
                "flags": "O_WRONLY|O_CREAT|O_TRUNC",
                "ok": True,
                "opened": "pipe:[123]",
            },
            {
                "pid": 1,
                "image": "/usr/bin/bash",
                "syscall": "openat",
                "path": "/dev/tty",
                "flags": "O_RDWR|O_NONBLOCK",
                "ok": False,
                "error": "ENXIO",
            },
            {
                "pid": 2,
                "image": "/usr/bin/touch",
                "syscall": "openat",
                "path": heredoc,
                "flags": "O_WRONLY|O_CREAT",
                "ok": True,
                "opened": heredoc,
            },
            {
                "pid": 1,
                "image": "/usr/bin/bash",
                "syscall": "openat",
                "path": "/etc/passwd",
                "flags": "O_WRONLY|O_CREAT|O_TRUNC",
                "ok": False,
                "error": "EROFS",
            },
        ]
    )
    found = [str(v) for v in violations(obs)]
    assert len(found) == 2
    assert heredoc in found[0] and "/etc/passwd" in found[1]


def test_connects_count_except_the_nscd_probe_and_other_addresses_stop_the_run() -> None:
    nscd = '{sa_family=AF_UNIX, sun_path="' + _hex("/var/run/nscd/socket") + '"}'
    local = '{sa_family=AF_INET, sin_port=htons(1), sin_addr=inet_addr("127.0.0.1")}'
    obs = _obs(
        connects=[
            {"pid": 1, "image": "/usr/bin/bash", "address": nscd, "ok": False, "error": "ENOENT"},
            {
                "pid": 1,
                "image": "/usr/bin/bash",
                "address": local,
                "ok": False,
                "error": "ECONNREFUSED",
            },
        ]
    )
    assert [v.kind for v in violations(obs)] == ["connect"]
    far = '{sa_family=AF_INET, sin_port=htons(1), sin_addr=inet_addr("10.1.2.3")}'
    with pytest.raises(NetworkRuleError):
        violations(_obs(connects=[{"pid": 1, "image": None, "address": far, "ok": False}]))


class _FakeOracle:
    """Stands in for bash: a case 'runs touch' when its text contains `touch`."""

    def __init__(self) -> None:
        self.calls = 0

    def observe(self, command: str) -> Observation:
        self.calls += 1
        execs = []
        if "touch" in command:
            execs = [
                {
                    "pid": 2,
                    "image": None,
                    "filename": "/usr/bin/touch",
                    "argv": ["touch"],
                    "ok": True,
                }
            ]
        return _obs(execs=execs)


def test_minimise_keeps_the_bypass_and_drops_the_rest_within_its_budget() -> None:
    oracle = _FakeOracle()
    small = minimise(
        "echo hi; printf -v 'a[$(touch q)]' %s 1",
        oracle,
        frozenset({"exec"}),
        decider=lambda _c: ("allow", "test"),
    )
    assert small == "touch"
    assert oracle.calls <= MINIMISE_BUDGET
    never = minimise(
        "echo touch", _FakeOracle(), frozenset({"exec"}), decider=lambda _c: ("ask", "test")
    )
    assert never == "echo touch"


def test_a_skeleton_names_one_hole_whatever_program_goes_through_it() -> None:
    saw_sed = ["exec: /usr/bin/sed argv=sed (ran)"]
    saw_git = ["exec: /usr/bin/git argv=git (ran)"]
    assert skeleton('echo "$\\\n(sed)"', saw_sed) == skeleton('echo "$\\\n(git)"', saw_git)
    assert skeleton("printf -v 'a[$(sed)]' x", saw_sed) != skeleton('echo "$\\\n(git)"', saw_git)


def test_evolved_cases_are_edits_of_the_pool_and_repeatable() -> None:
    pool = ["echo hi", "cat x.txt | wc -l", "ls -la"]
    cases = [evolve(3, i, pool) for i in range(300)]
    assert cases == [evolve(3, i, pool) for i in range(300)]
    assert all(net_safe(c) for c in cases)
    assert sum(c not in pool for c in cases) > 250
